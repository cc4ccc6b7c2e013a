/*
 * cmd_estimate.c — `zrt estimate-memory`: per-rank device and host bytes of
 * every ZeRO stage x offload choice x world size, from engine/memest.c (the
 * same model stage "auto" and the OOM hint use, checked against measured
 * pool peaks by tests/mpi/test_engine_memory.c). A model is either a GPT
 * preset of examples/gpt2 (--model: its activations, and its token
 * buffers in the host pool, zrt_model_gpt_host_bytes, included) or a bare
 * parameter count (--params, one module of --largest_module elements
 * bounds the stage-2/3 transient terms; activations only with
 * --activation_bytes). With --offload_device nvme the optimizer-offload
 * rows keep master + states in NVMe swap files: host = the pipe's staging
 * only, and the swap files' bytes per rank are reported (nvme column /
 * "nvme_bytes"). With --offload_param_device nvme the optimizer+param rows
 * keep the 16-bit shards in a swap file too (host: its staging buffer;
 * the file's bytes join nvme_bytes). --hf_config reads a Hugging Face
 * GPT-2 config.json (n_layer, n_embd, n_head, vocab_size, n_positions, or
 * their GPT2Config aliases) into the same GPT layout the presets use, or a
 * Llama, Mistral or Qwen2 config.json into its parameter count per module
 * (the largest module one layer or the embedding, as --params N
 * --largest_module M would give); these layouts are model_layouts.c's. Each
 * row also carries DeepSpeed's own estimator figure for that stage. With
 * --offload_ratio R < 1 (offload_optimizer.ratio, Twin-Flow) the stage-3
 * optimizer-offload rows keep the first int((1 - R) G) of the G sub-groups
 * (modules grouped by --sub_group_size) on the device, as the engine does;
 * the split is printed per world size; the stage-3 optimizer+param rows are
 * left out (the engine refuses that combination), stages 1-2 ignore R.
 * Pure arithmetic: no MPI, no device.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "layout.h"
#include "memest.h"
#include "model_layouts.h"
#include "tools.h"

static void est_usage(FILE *f) {
  fprintf(
      f,
      "usage: zrt estimate-memory (--model NAME | --hf_config config.json | --params N) "
      "[options]\n"
      "  --model NAME           GPT preset of examples/gpt2: tiny, gpt2, gpt2-medium, "
      "gpt2-large, gpt2-xl\n"
      "  --backend cpu|cuda     whose activations a --model run allocates (default cpu;\n"
      "                         cuda: the CUDA kernels' arena, logsumexp-only attention\n"
      "                         rows, 16-bit GEMM-only activations, the GEMM scratch)\n"
      "  --hf_config FILE       a Hugging Face config.json: GPT-2 (n_layer, n_embd, n_head,\n"
      "                         vocab_size, n_positions): the GPT layout of examples/gpt2;\n"
      "                         llama, mistral or qwen2 (hidden_size, intermediate_size,\n"
      "                         heads, key-value heads, vocab_size, tie_word_embeddings):\n"
      "                         parameters counted per module, no activations\n"
      "  --params N             parameter count (e.g. 1.5e9)\n"
      "  --largest_module N     with --params: elements of the largest module (default N)\n"
      "  --activation_bytes S   with --params: per-rank activation bytes (default 0)\n"
      "  --activation_checkpointing all|N   with --model: train_gpt2 --activation_checkpointing\n"
      "                         (all blocks, or activation_checkpointing.number_checkpoints N)\n"
      "  --cpu_checkpointing true|false   the checkpoints in pinned host memory\n"
      "  --batch_size B         micro batch per rank (default 1)\n"
      "  --seq_len T            sequence length (default: the preset's)\n"
      "  --world_sizes LIST     comma-separated ranks, default 1,2,4,8\n"
      "  --dtype fp32|fp16|bf16 working precision (default fp16)\n"
      "  --optimizer adam|sgd|lion  (default adam: 2 fp32 states)\n"
      "  --bf16_master_weights_and_grads true|false  master weights and gradient partitions\n"
      "                         in bf16 (needs --dtype bf16, adam; only the optimizer-offload\n"
      "                         rows, as the engine runs it)\n"
      "  --bf16_optimizer_states true|false  the Adam moments in bf16 as well\n"
      "  --reduce_bucket_size N (default 5e8)  --prefetch N (stage3_prefetch_bucket_size, "
      "default 5e7)\n"
      "  --persistence N        stage3_param_persistence_threshold (default 1e5)\n"
      "  --max_reuse N          stage3_max_reuse_distance (default 1e9; 0 = gather every "
      "use)\n"
      "  --grad_accum N         gradient_accumulation_steps (default 1): the micro-batches "
      "of the\n"
      "                         fetch order replayed for the stage-3 gathered copies\n"
      "  --offload_device cpu|nvme  where offloaded optimizer state lives (default cpu; "
      "nvme: host holds staging only, swap file bytes reported)\n"
      "  --offload_param_device cpu|nvme  where offloaded 16-bit parameter shards live "
      "(stage 3 rows with param offload; default cpu)\n"
      "  --param_buffer_count N offload_param.buffer_count: host staging slots of the "
      "param-nvme reads (default 5, the config's default)\n"
      "  --offload_ratio R      offload_optimizer.ratio (Twin-Flow, stage 3, cpu; default 1: "
      "all offloaded, 0: none)\n"
      "  --sub_group_size N     zero_optimization.sub_group_size: groups modules for the "
      "ratio (default 1e9)\n"
      "  --device_memory SIZE   mark configurations whose device total fits (e.g. 16GiB)\n"
      "  --json                 one JSON document instead of the table\n");
}

static int est_num(const char *opt, const char *v, int64_t *out) {
  char *end;
  double d = strtod(v, &end);
  if (end == v || *end || d < 0 || d > 9.2e18) {
    fprintf(stderr, "zrt estimate-memory: %s '%s' is not a non-negative number (e.g. 1.5e9)\n", opt,
            v);
    return -1;
  }
  *out = (int64_t)d;
  return 0;
}

typedef struct est_row {
  int world, stage, oo, op;
  zrt_memest_result r;
  int fits;
  int64_t reuse;           /* stage3_max_reuse_distance the engine would use */
  int64_t prefetch;        /* stage3_prefetch_bucket_size the engine keeps from step 2 on */
  int groups, dev_groups;  /* Twin-Flow rows: sub-groups, those on the device (groups 0: none) */
  int ds;                  /* DeepSpeed has an estimator for this row */
  uint64_t ds_cpu, ds_gpu; /* its figures (one node of `world` GPUs) */
} est_row;

/* The --params model's one module (elements per rank) for the Twin-Flow rule. */
static int64_t est_one_unit(const void *arg, int i) {
  (void)i;
  return *(const int64_t *)arg;
}

/* DeepSpeed's largest_layer_params: the most parameters any one nn.Module
 * holds itself. For the GPT presets that is the largest of HF GPT-2's
 * leaves (zrt_model_gpt_largest_leaf); for --params the --largest_module
 * given (else every parameter in one layer). */
static int64_t ds_largest(const zrt_model_gpt *g, int64_t params, int64_t largest) {
  if (!g) return largest > 0 && largest < params ? largest : params;
  return zrt_model_gpt_largest_leaf(g);
}

int zrt_cmd_estimate_memory(int argc, char **argv) {
  const char *model = NULL, *hf_path = NULL, *worlds = "1,2,4,8", *dtype = "fp16", *optim = "adam";
  int64_t params = -1, largest = -1, act_bytes = 0, batch = 1, seq = -1;
  int64_t bucket = 500000000, prefetch = 50000000, persist = 100000, reuse = 1000000000;
  uint64_t devmem = 0;
  int json = 0, nvme = 0, pnvme = 0, cuda = 0;
  const char *backend = "cpu";
  int64_t pbufs = 5, accum = 1, sgs = 1000000000, ackn = 0;
  int ackcpu = 0;
  int bf16m = 0, bf16s = 0; /* bf16.bf16_master_weights_and_grads, bf16.bf16_optimizer_states */
  double ratio = 1.0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      est_usage(stdout);
      return 0;
    }
    if (!strcmp(a, "--json")) {
      json = 1;
      continue;
    }
    if (i + 1 >= argc) {
      fprintf(stderr, "zrt estimate-memory: %s needs a value (see --help)\n", a);
      return 2;
    }
    const char *v = argv[++i];
    int bad = 0;
    if (!strcmp(a, "--model"))
      model = v;
    else if (!strcmp(a, "--backend"))
      backend = v;
    else if (!strcmp(a, "--hf_config"))
      hf_path = v;
    else if (!strcmp(a, "--activation_checkpointing")) {
      if (!strcmp(v, "all"))
        ackn = INT64_MAX;
      else
        bad = est_num(a, v, &ackn);
    } else if (!strcmp(a, "--cpu_checkpointing")) {
      if (strcmp(v, "true") && strcmp(v, "false")) {
        fprintf(stderr,
                "zrt estimate-memory: --cpu_checkpointing expects true or false, got '%s'\n", v);
        return 2;
      }
      ackcpu = !strcmp(v, "true");
    } else if (!strcmp(a, "--bf16_master_weights_and_grads") ||
               !strcmp(a, "--bf16_optimizer_states")) {
      if (strcmp(v, "true") && strcmp(v, "false")) {
        fprintf(stderr, "zrt estimate-memory: %s expects true or false, got '%s'\n", a, v);
        return 2;
      }
      *(a[7] == 'm' ? &bf16m : &bf16s) = !strcmp(v, "true");
    } else if (!strcmp(a, "--params"))
      bad = est_num(a, v, &params);
    else if (!strcmp(a, "--largest_module"))
      bad = est_num(a, v, &largest);
    else if (!strcmp(a, "--activation_bytes")) {
      uint64_t u;
      if (!zrt_parse_size(v, &u)) {
        fprintf(stderr, "zrt estimate-memory: --activation_bytes '%s' is not a size\n", v);
        return 2;
      }
      act_bytes = (int64_t)u;
    } else if (!strcmp(a, "--batch_size"))
      bad = est_num(a, v, &batch);
    else if (!strcmp(a, "--seq_len"))
      bad = est_num(a, v, &seq);
    else if (!strcmp(a, "--world_sizes"))
      worlds = v;
    else if (!strcmp(a, "--dtype"))
      dtype = v;
    else if (!strcmp(a, "--optimizer"))
      optim = v;
    else if (!strcmp(a, "--reduce_bucket_size"))
      bad = est_num(a, v, &bucket);
    else if (!strcmp(a, "--prefetch"))
      bad = est_num(a, v, &prefetch);
    else if (!strcmp(a, "--persistence"))
      bad = est_num(a, v, &persist);
    else if (!strcmp(a, "--max_reuse"))
      bad = est_num(a, v, &reuse);
    else if (!strcmp(a, "--grad_accum")) {
      bad = est_num(a, v, &accum);
      if (!bad && (accum < 1 || accum > 1 << 16)) {
        fprintf(stderr, "zrt estimate-memory: --grad_accum '%s' must be from 1 to 65536\n", v);
        return 2;
      }
    } else if (!strcmp(a, "--offload_device")) {
      if (strcmp(v, "cpu") && strcmp(v, "nvme")) {
        fprintf(stderr, "zrt estimate-memory: --offload_device '%s' is not cpu or nvme\n", v);
        return 2;
      }
      nvme = !strcmp(v, "nvme");
    } else if (!strcmp(a, "--offload_param_device")) {
      if (strcmp(v, "cpu") && strcmp(v, "nvme")) {
        fprintf(stderr, "zrt estimate-memory: --offload_param_device '%s' is not cpu or nvme\n", v);
        return 2;
      }
      pnvme = !strcmp(v, "nvme");
    } else if (!strcmp(a, "--param_buffer_count")) {
      bad = est_num(a, v, &pbufs);
      if (!bad && pbufs < 1) {
        fprintf(stderr, "zrt estimate-memory: --param_buffer_count '%s' must be at least 1\n", v);
        return 2;
      }
    } else if (!strcmp(a, "--offload_ratio")) {
      char *end;
      ratio = strtod(v, &end);
      if (end == v || *end || !(ratio >= 0 && ratio <= 1)) {
        fprintf(stderr,
                "zrt estimate-memory: --offload_ratio '%s' is not a number in 0..1 "
                "(offload_optimizer.ratio)\n",
                v);
        return 2;
      }
    } else if (!strcmp(a, "--sub_group_size"))
      bad = est_num(a, v, &sgs);
    else if (!strcmp(a, "--device_memory")) {
      if (!zrt_parse_size(v, &devmem) || devmem == 0) {
        fprintf(stderr,
                "zrt estimate-memory: --device_memory '%s' is not a size (e.g. 16GiB, 8e9)\n", v);
        return 2;
      }
    } else {
      fprintf(stderr, "zrt estimate-memory: unknown option '%s' (see --help)\n", a);
      return 2;
    }
    if (bad) return 2;
  }
  if (ratio < 1 && nvme) {
    fprintf(stderr,
            "zrt estimate-memory: --offload_ratio %g with --offload_device nvme: the "
            "engine refuses offload_optimizer.ratio < 1 with device nvme (Twin-Flow splits "
            "between the device and host memory); use --offload_device cpu or drop "
            "--offload_ratio\n",
            ratio);
    return 2;
  }
  if ((model != NULL) + (hf_path != NULL) + (params >= 0) != 1) {
    fprintf(stderr, "zrt estimate-memory: give exactly one of --model NAME, --hf_config "
                    "config.json or --params N\n");
    return 2;
  }
  const zrt_model_gpt *g = NULL;
  zrt_model_gpt hfg;
  zrt_model_decoder dec = {0};
  if (hf_path) {
    int rc = zrt_model_hf_load(hf_path, &hfg, &dec);
    if (rc) return rc;
    if (dec.total) {
      /* a decoder: its parameter count, the largest module one layer or the
       * embedding (the unit of a stage-3 gather); no activations */
      params = dec.total;
      largest = ZRT_MAX(dec.layer, ZRT_MAX(dec.embed, dec.head));
      if (!json)
        printf("hf_config %s: embed_tokens %lld + %lld layers x %lld + norm %lld + lm_head %lld%s "
               "= %lld parameters\n",
               hf_path, (long long)dec.embed, (long long)dec.layers, (long long)dec.layer,
               (long long)dec.norm, (long long)dec.head, dec.head ? "" : " (tied)",
               (long long)dec.total);
    } else {
      g = &hfg;
    }
  }
  if (model && !(g = zrt_model_gpt_find(model))) {
    fprintf(stderr,
            "zrt estimate-memory: unknown --model '%s' (tiny, gpt2, gpt2-medium, gpt2-large, "
            "gpt2-xl)\n",
            model);
    return 2;
  }
  int w;
  if (!strcmp(dtype, "fp32"))
    w = 4;
  else if (!strcmp(dtype, "fp16") || !strcmp(dtype, "bf16"))
    w = 2;
  else {
    fprintf(stderr, "zrt estimate-memory: --dtype '%s': expected fp32, fp16 or bf16\n", dtype);
    return 2;
  }
  if (!strcmp(backend, "cuda"))
    cuda = 1;
  else if (strcmp(backend, "cpu")) {
    fprintf(stderr, "zrt estimate-memory: --backend '%s': expected cpu or cuda\n", backend);
    return 2;
  }
  int nstates;
  if (!strcmp(optim, "adam") || !strcmp(optim, "adamw"))
    nstates = 2;
  else if (!strcmp(optim, "sgd") || !strcmp(optim, "lion"))
    nstates = 1;
  else {
    fprintf(stderr, "zrt estimate-memory: --optimizer '%s': expected adam, adamw, sgd or lion\n",
            optim);
    return 2;
  }
  if (batch < 1) {
    fprintf(stderr, "zrt estimate-memory: --batch_size must be >= 1\n");
    return 2;
  }
  /* the engine's rule (config/zrt_config_bf16_master_rule): bf16 masters
   * only in bf16 training, on the CPU Adam of offload_optimizer device cpu
   * at stages 1-3; the rows without optimizer offload are left out */
  const char *bf16_bad = NULL;
  if (bf16s && !bf16m)
    bf16_bad = "--bf16_optimizer_states true needs --bf16_master_weights_and_grads true";
  else if (bf16m && strcmp(dtype, "bf16"))
    bf16_bad = "--bf16_master_weights_and_grads true needs --dtype bf16";
  else if (bf16m && nstates != 2)
    bf16_bad = "--bf16_master_weights_and_grads true runs on the CPU Adam: --optimizer adam or "
               "adamw";
  else if (bf16m && nvme)
    bf16_bad = "--bf16_master_weights_and_grads true with --offload_device nvme: the engine "
               "refuses it (the swap files hold fp32); use --offload_device cpu";
  else if (bf16m && ratio < 1)
    bf16_bad = "--bf16_master_weights_and_grads true with --offload_ratio below 1: the engine "
               "refuses it (the device-side sub-groups would keep fp32); drop --offload_ratio";
  if (bf16_bad) {
    fprintf(stderr, "zrt estimate-memory: %s\n", bf16_bad);
    return 2;
  }
  if (g) {
    if (seq < 0) seq = g->default_seq;
    if (seq < 1 || seq > g->max_seq) {
      fprintf(stderr, "zrt estimate-memory: --seq_len %lld outside 1..%lld for --model %s\n",
              (long long)seq, (long long)g->max_seq, g->name);
      return 2;
    }
  } else if (params < 1) {
    fprintf(stderr, "zrt estimate-memory: --params must be >= 1\n");
    return 2;
  }
  int wl[64], nw = 0;
  for (const char *p = worlds; *p;) {
    char *end;
    long n = strtol(p, &end, 10);
    if (end == p || n < 1 || n > 1 << 20 || nw == 64 || (*end && *end != ',')) {
      fprintf(stderr,
              "zrt estimate-memory: --world_sizes '%s': expected comma-separated positive "
              "integers, e.g. 1,2,4\n",
              worlds);
      return 2;
    }
    wl[nw++] = (int)n;
    p = *end ? end + 1 : end;
  }
  if (nw == 0) {
    fprintf(stderr, "zrt estimate-memory: --world_sizes is empty\n");
    return 2;
  }

  static const struct {
    int stage, oo, op;
  } cand[] = {{0, 0, 0}, {1, 0, 0}, {1, 1, 0}, {2, 0, 0},
              {2, 1, 0}, {3, 0, 0}, {3, 1, 0}, {3, 1, 1}};
  enum { NC = sizeof cand / sizeof cand[0] };
  est_row *rows = calloc((size_t)nw * NC, sizeof *rows);
  if (!rows) return 1;
  int64_t nparams = params;
  if (ackn && !g) {
    fprintf(stderr, "zrt estimate-memory: --activation_checkpointing needs --model (the GPT "
                    "example's blocks); with --params give --activation_bytes instead\n");
    free(rows);
    return 2;
  }
  if (g && ackn > g->layers) ackn = g->layers;
  uint64_t acts =
      g ? zrt_model_gpt_activations(g, batch, seq, w, ackn, accum, cuda) : (uint64_t)act_bytes;
  /* the GPT example's modules and fetch order, for the layout, Twin-Flow and the replay */
  zrt_model_program prog = {0};
  if (g && zrt_model_gpt_program(g, (int)accum, &prog) != 0) {
    free(rows);
    fprintf(stderr, "zrt estimate-memory: out of host memory\n");
    return 1;
  }
  int nrows = 0;
  for (int i = 0; i < nw; i++)
    for (int k = 0; k < NC; k++) {
      /* Twin-Flow: the engine refuses ratio < 1 with param offload */
      if (ratio < 1 && cand[k].stage == 3 && cand[k].op) continue;
      /* bf16 masters: only the optimizer-offload rows (stages 1-3) */
      if (bf16m && !cand[k].oo) continue;
      zrt_memest_layout lay;
      memset(&lay, 0, sizeof lay);
      lay.stage = cand[k].stage;
      if (g) {
        zrt_memest_program_layout(&prog.p, wl[i], persist, &lay);
        nparams = zrt_model_params(&prog.p);
      } else {
        int64_t unit = (int64_t)wl[i] * 32;
        int64_t big = largest > 0 && largest < params ? largest : params;
        lay.world = wl[i];
        lay.padded_total = ZRT_ALIGN_UP(params, unit);
        lay.max_module_padded = ZRT_ALIGN_UP(big, unit);
        lay.persistent_padded = 0;
      }
      lay.stage = cand[k].stage;
      lay.dtype_bytes = lay.comm_bytes = w;
      lay.optim_states = nstates;
      lay.master_bytes = bf16m ? 2 : 4;
      lay.state_bytes = bf16s ? 2 : 4;
      lay.reduce_bucket_size = bucket;
      lay.prefetch_elems = prefetch;
      lay.reuse_elems = reuse;
      lay.max_live_elems = 1000000000;
      lay.sub_group_size = sgs;
      lay.offload_optimizer = cand[k].oo;
      lay.offload_param = cand[k].op;
      lay.offload_nvme = nvme;
      lay.offload_param_nvme = pnvme && cand[k].op;
      lay.param_buffer_count = pbufs;
      lay.activation_bytes = acts;
      if (g) lay.program_host_bytes = zrt_model_gpt_host_bytes(batch, seq, accum);
      if (ackn) {
        lay.actckpt_blocks = ackn;
        lay.actckpt_bytes = 4 * (uint64_t)batch * (uint64_t)seq * (uint64_t)g->d_model;
        lay.actckpt_cpu = ackcpu;
      }
      lay.device_capacity = devmem;
      int groups = 0, dev_groups = 0;
      if (ratio < 1 && cand[k].stage == 3 && cand[k].oo) {
        if (g) {
          lay.twin_device_padded =
              zrt_memest_program_twin_device(&prog.p, wl[i], sgs, ratio, &groups, &dev_groups);
        } else { /* one module: one sub-group (on the device only at ratio 0) */
          int64_t part = lay.padded_total / wl[i];
          int split =
              zrt_layout_twin_split(1, est_one_unit, &part, sgs, ratio, &groups, &dev_groups);
          lay.twin_device_padded = split ? lay.padded_total : 0;
        }
        /* every sub-group on the device: the engine offloads nothing */
        if (dev_groups == groups) lay.offload_optimizer = 0;
      }
      /* stage 3 under a capacity: the reuse distance the engine fits at build */
      lay.reuse_elems = zrt_memest_fit_reuse(&lay, devmem, reuse);
      if (g && lay.stage == 3) {
        /* the gathered copies the coordinator holds over the example's fetch
         * order, with the prefetch and reuse the engine's memory plan keeps
         * from its second step on under the device (engine_memplan.c) */
        if (zrt_memest_program_plan(&prog.p, &lay, persist, devmem) != 0) {
          zrt_model_program_free(&prog);
          free(rows);
          fprintf(stderr, "zrt estimate-memory: out of host memory\n");
          return 1;
        }
      }
      est_row *r = &rows[nrows++];
      r->groups = groups;
      r->dev_groups = dev_groups;
      r->world = wl[i];
      r->stage = cand[k].stage;
      r->oo = cand[k].oo;
      r->op = cand[k].op;
      zrt_memest_predict(&lay, &r->r);
      r->reuse = lay.reuse_elems;
      r->prefetch = lay.prefetch_elems;
      r->fits = devmem ? r->r.device_total <= zrt_memest_plan_bytes(devmem) : -1;
      r->ds =
          zrt_memest_deepspeed(r->stage, (double)nparams, (double)ds_largest(g, params, largest),
                               wl[i], 1, r->oo, r->op, &r->ds_cpu, &r->ds_gpu);
    }

  static const char *off_name[3] = {"none", "optimizer", "optimizer+param"};
  if (json) {
    printf("{\"model\":\"%s\",\"backend\":\"%s\",\"params\":%lld,\"dtype\":\"%s\","
           "\"batch_size\":%lld,"
           "\"seq_len\":%lld,\"activation_bytes\":%llu,\"device_memory\":%llu,"
           "\"master_dtype\":\"%s\",\"optimizer_state_dtype\":\"%s\",\"configs\":[",
           g         ? g->name
           : hf_path ? "hf_config"
                     : "params",
           backend, (long long)nparams, dtype, (long long)batch, (long long)(g ? seq : 0),
           (unsigned long long)acts, (unsigned long long)devmem, bf16m ? "bf16" : "fp32",
           bf16s ? "bf16" : "fp32");
    for (int i = 0; i < nrows; i++) {
      const est_row *r = &rows[i];
      printf("%s{\"world_size\":%d,\"stage\":%d,\"offload\":\"%s\",\"device_bytes\":%llu,"
             "\"device_model_state_bytes\":%llu,\"host_bytes\":%llu,\"device\":{",
             i ? "," : "", r->world, r->stage, off_name[r->oo + r->op],
             (unsigned long long)r->r.device_total, (unsigned long long)r->r.model_states,
             (unsigned long long)r->r.host_total);
      for (int c = 0; c < ZRT_MEM_OTHER; c++)
        printf("%s\"%s\":%llu", c ? "," : "", zrt_mem_category_name((zrt_mem_category)c),
               (unsigned long long)r->r.device[c]);
      printf("},\"host\":{");
      for (int c = 0; c < ZRT_MEM_OTHER; c++)
        printf("%s\"%s\":%llu", c ? "," : "", zrt_mem_category_name((zrt_mem_category)c),
               (unsigned long long)r->r.host[c]);
      printf("}");
      if (r->oo)
        printf(",\"optimizer_device\":\"%s\",\"nvme_bytes\":%llu", nvme ? "nvme" : "cpu",
               (unsigned long long)r->r.nvme_bytes);
      if (r->op) printf(",\"param_device\":\"%s\"", pnvme ? "nvme" : "cpu");
      if (devmem) printf(",\"fits\":%s", r->fits ? "true" : "false");
      if (r->stage == 3)
        printf(",\"reuse_elems\":%lld,\"prefetch_elems\":%lld", (long long)r->reuse,
               (long long)r->prefetch);
      if (r->groups)
        printf(",\"offload_ratio\":%g,\"sub_groups\":%d,\"device_sub_groups\":%d", ratio, r->groups,
               r->dev_groups);
      if (r->ds)
        printf(",\"deepspeed\":{\"gpu_bytes\":%llu,\"cpu_bytes\":%llu}",
               (unsigned long long)r->ds_gpu, (unsigned long long)r->ds_cpu);
      printf("}");
    }
    printf("]}\n");
  } else {
    char a[32], b[32], c[32], d[32];
    printf("model %s: %lld parameters, dtype %s, %d optimizer state(s)",
           g         ? g->name
           : hf_path ? "hf_config"
                     : "(--params)",
           (long long)nparams, dtype, nstates);
    if (bf16m)
      printf(", bf16 master weights and gradient partitions%s (optimizer-offload rows only)",
             bf16s ? " and optimizer states" : "");
    if (g)
      printf(", micro batch %lld x seq %lld: activations %s per rank (%s kernels)",
             (long long)batch, (long long)seq, zrt_format_size(acts, a, sizeof a), backend);
    printf("\n");
    if (devmem) printf("device memory per rank: %s\n", zrt_format_size(devmem, a, sizeof a));
    printf("%-6s %-6s %-16s %14s %14s %14s%s%s  %s\n", "world", "stage", "offload", "model states",
           "device total", "host", nvme || pnvme ? "  nvme (disk)" : "", devmem ? "  fits" : "",
           "DeepSpeed gpu / cpu");
    for (int i = 0; i < nrows; i++) {
      const est_row *r = &rows[i];
      char e[32] = "";
      if (nvme || pnvme)
        snprintf(e, sizeof e, "  %12s",
                 r->r.nvme_bytes ? zrt_format_size(r->r.nvme_bytes, a, sizeof a) : "-");
      char f[80] = "  -";
      if (r->ds) {
        char x[32], y[32];
        snprintf(f, sizeof f, "  %s / %s", zrt_format_size(r->ds_gpu, x, sizeof x),
                 zrt_format_size(r->ds_cpu, y, sizeof y));
      }
      printf("%-6d %-6d %-16s %14s %14s %14s%s%s%s\n", r->world, r->stage, off_name[r->oo + r->op],
             zrt_format_size(r->r.model_states, b, sizeof b),
             zrt_format_size(r->r.device_total, c, sizeof c),
             zrt_format_size(r->r.host_total, d, sizeof d), e,
             devmem ? (r->fits ? "  yes" : "  no") : "", f);
    }
    for (int i = 0; i < nrows; i++) {
      const est_row *r = &rows[i];
      if (!r->groups) continue;
      const uint64_t *dv = r->r.device, *hs = r->r.host;
      char m1[32], m2[32], m3[32], h1[32], h2[32], h3[32];
      printf("Twin-Flow ratio %g (sub_group_size %lld), world %d stage 3 optimizer: %d of %d "
             "sub-groups on the device; device master32 %s optim_state %s grads %s | host "
             "master32 %s optim_state %s grads %s\n",
             ratio, (long long)sgs, r->world, r->dev_groups, r->groups,
             zrt_format_size(dv[ZRT_MEM_MASTER32], m1, sizeof m1),
             zrt_format_size(dv[ZRT_MEM_OPTIM_STATE], m2, sizeof m2),
             zrt_format_size(dv[ZRT_MEM_GRADS], m3, sizeof m3),
             zrt_format_size(hs[ZRT_MEM_MASTER32], h1, sizeof h1),
             zrt_format_size(hs[ZRT_MEM_OPTIM_STATE], h2, sizeof h2),
             zrt_format_size(hs[ZRT_MEM_GRADS], h3, sizeof h3));
    }
    if (ratio < 1)
      printf("(--offload_ratio %g: applied to the stage-3 optimizer rows only; stages 1-2 ignore "
             "it, as DeepSpeed does; stage-3 optimizer+param rows left out: the engine refuses "
             "offload_param with ratio < 1)\n",
             ratio);
    if (devmem)
      printf("(fits = device total within %d/%d of the device, what the engine plans in; at "
             "stage 3 the reuse distance is the one the engine fits at build%s)\n",
             ZRT_MEMEST_PLAN_NUM, ZRT_MEMEST_PLAN_DEN,
             g ? ", then with the prefetch and reuse its memory plan keeps from the second step "
                 "on (--json: prefetch_elems, reuse_elems)"
               : "");
    printf("(DeepSpeed: its estimate_zero2/zero3_model_states_mem_needs figures, one node of "
           "`world` GPUs, zero_init, buffer factor 1.5, largest layer %lld params: model states "
           "only — no activations or buckets; its offload gpu figure is 4 x the largest layer "
           "(zrt: the 16-bit gathered modules, prefetch/reuse window and one module's 16-bit "
           "grads), its cpu figure is per node with a 1.5 buffer factor (zrt: exact bytes per "
           "rank))\n",
           (long long)ds_largest(g, params, largest));
    printf("(stage 3: the gathered 16-bit copies are %s)\n",
           g ? "the stage-3 coordinator's peak over train_gpt2's fetch order, replayed with these "
               "prefetch, reuse and persistence settings: what the pools measure"
             : "a figure from the settings alone (the largest module + the prefetch and reuse "
               "windows): the program's fetch order decides the real peak; a program that holds "
               "several modules at once can exceed it");
    printf("(per rank; device total = model states + reduction buckets + activations; host = "
           "offloaded states + offload staging%s%s)\n",
           nvme ? "; with nvme the optimizer state is on disk (both generations of the swap "
                  "files) and the host holds only staging"
                : "",
           pnvme ? "; with param nvme the 16-bit shards of the optimizer+param rows are on disk "
                   "too (two generations)"
                 : "");
  }
  zrt_model_program_free(&prog);
  free(rows);
  return 0;
}
