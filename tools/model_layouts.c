/*
 * model_layouts.c — the models estimate-memory knows (model_layouts.h):
 * the GPT example's presets, modules, fetch order and activations, and the
 * Hugging Face config.json readers (GPT-2 as that layout, the Llama-family
 * decoders counted per module). Pure arithmetic and parsing: no MPI, no
 * device. Invariant: the GPT layout is what examples/gpt2 registers and
 * allocates (train_gpt2.c, gpt2_model.c, gpt2_acts_layout_init); change
 * them together (cli.test_memest_exact compares the estimate with the
 * pools to the byte).
 */
#include "model_layouts.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"
#include "safe_file.h"

/* ------------------------------------------------------------ GPT example */

static const zrt_model_gpt zrt_model_gpt_presets[] = {
    {"tiny", 2, 64, 2, 256, 64, 64},
    {"gpt2", 12, 768, 12, 256, 1024, 1024},
    {"gpt2-medium", 24, 1024, 16, 256, 1024, 1024},
    {"gpt2-large", 36, 1280, 20, 256, 1024, 1024},
    {"gpt2-xl", 48, 1600, 25, 256, 1024, 1024},
};

const zrt_model_gpt *zrt_model_gpt_find(const char *name) {
  for (size_t i = 0; i < sizeof zrt_model_gpt_presets / sizeof zrt_model_gpt_presets[0]; i++)
    if (!strcmp(zrt_model_gpt_presets[i].name, name)) return &zrt_model_gpt_presets[i];
  return NULL;
}

/* Elements of the GPT layout's three module kinds as the example registers
 * them. */
static void zrt_model_gpt_sizes(const zrt_model_gpt *g, int64_t sizes[3]) {
  int64_t d = g->d_model;
  sizes[0] = g->vocab * d + g->max_seq * d; /* wte (tied lm head) + wpe */
  sizes[1] = 12 * d * d + 13 * d;           /* ln1, qkv, proj, ln2, fc, fc proj */
  sizes[2] = 2 * d;                         /* final layer norm */
}

void zrt_model_program_free(zrt_model_program *m) {
  if (!m) return;
  free(m->numel);
  free(m->events);
  memset(m, 0, sizeof *m);
}

int64_t zrt_model_params(const zrt_memest_program *p) {
  int64_t n = 0;
  for (int m = 0; m < p->nmodules; m++) n += p->numel[m];
  return n;
}

int zrt_model_gpt_program(const zrt_model_gpt *g, int grad_accum, zrt_model_program *out) {
  memset(out, 0, sizeof *out);
  int nl = (int)g->layers, nmod = nl + 2, last = nl + 1;
  int per = 2 * (nl + 1) + 6 + 4 * nl + 2, ga = ZRT_MAX(grad_accum, 1);
  int64_t sizes[3];
  zrt_model_gpt_sizes(g, sizes);
  int64_t *numel = malloc((size_t)nmod * sizeof(int64_t));
  zrt_sim_event *ev = malloc((size_t)per * (size_t)ga * sizeof *ev);
  if (!numel || !ev) {
    free(numel);
    free(ev);
    return -1;
  }
  for (int m = 0; m < nmod; m++) numel[m] = sizes[m == 0 ? 0 : m == last ? 2 : 1];
  int n = 0;
#define EV(k, m)                                                                                   \
  ev[n++] = (zrt_sim_event) { (k), (m) }
  for (int a = 0; a < ga; a++) {
    for (int m = 0; m <= nl; m++) {
      EV(ZRT_SIM_FETCH, m);
      EV(ZRT_SIM_RELEASE, m);
    }
    EV(ZRT_SIM_FETCH, last);
    EV(ZRT_SIM_FETCH, 0);
    EV(ZRT_SIM_GRAD, last);
    EV(ZRT_SIM_GRAD_DONE, last);
    EV(ZRT_SIM_RELEASE, 0);
    EV(ZRT_SIM_RELEASE, last);
    for (int m = nl; m >= 1; m--) {
      EV(ZRT_SIM_FETCH, m);
      EV(ZRT_SIM_GRAD, m);
      EV(ZRT_SIM_GRAD_DONE, m);
      EV(ZRT_SIM_RELEASE, m);
    }
    EV(ZRT_SIM_GRAD, 0);
    EV(ZRT_SIM_GRAD_DONE, 0);
  }
#undef EV
  out->numel = numel;
  out->events = ev;
  out->p = (zrt_memest_program){.nmodules = nmod, .numel = numel, .events = ev, .nevents = n};
  return 0;
}

/* gpt2_acts_layout_init's buffers, in its order (floats): lse, the
 * attention's logsumexp rows only; h16, the 16-bit slots at half size and
 * every buffer on 64 floats */
static uint64_t gpt_arena(uint64_t B, uint64_t T, uint64_t C, uint64_t H, uint64_t V,
                          uint64_t slots, int lse, int h16) {
  uint64_t N = B * T, off = 0;
#define GA_ALIGN(x) (h16 ? ((x) + 63) & ~(uint64_t)63 : (x))
#define GA_TAKE(n) (off = GA_ALIGN(off) + (n))
#define GA_16(n) (h16 ? GA_ALIGN(((n) + 1) / 2) : (n))
  GA_TAKE(N * C); /* encoded */
  uint64_t layer0 = GA_ALIGN(off);
  off = 0; /* one layer slot: ln1, its mean and rstd, qkv, att, atty, res2, ln2 (+2), fch,
              fch_gelu, res3 */
  GA_TAKE(GA_16(N * C)), GA_TAKE(N), GA_TAKE(N), GA_TAKE(3 * N * C);
  GA_TAKE(B * H * T * (lse ? 1 : T)), GA_TAKE(GA_16(N * C)), GA_TAKE(N * C);
  GA_TAKE(GA_16(N * C)), GA_TAKE(N), GA_TAKE(N), GA_TAKE(GA_16(4 * N * C));
  GA_TAKE(GA_16(4 * N * C));
  GA_TAKE(N * C);
  uint64_t stride = GA_ALIGN(off);
  off = layer0 + stride * slots;
  /* lnf, its mean and rstd, logits (16-bit too; rows of V rounded up to 64), losses, dres, dC
     and d4C (16-bit too) */
  GA_TAKE(GA_16(N * C)), GA_TAKE(N), GA_TAKE(N), GA_TAKE(GA_16(N * ((V + 63) & ~(uint64_t)63)));
  GA_TAKE(N), GA_TAKE(N * C);
  GA_TAKE(GA_16(N * C)), GA_TAKE(GA_16(4 * N * C));
#undef GA_ALIGN
#undef GA_TAKE
#undef GA_16
  return off;
}

/* The CUDA column reductions' partials in bytes (examples/gpt2/gpt2_rows.h:
 * rw_col_plan and rw_ln_plan, 256 blocks aimed at, chunks of 128 and 32
 * rows; none with one chunk): a bias's over N x OC, a LayerNorm's over N x
 * C ([S, 2C]). */
static uint64_t gpt_col_part(uint64_t N, uint64_t OC) {
  uint64_t G = (OC + 31) / 32, s = G ? (256 + G - 1) / G : 1, smax = (N + 127) / 128;
  s = ZRT_MAX(ZRT_MIN(s, smax), 1);
  uint64_t R = ((N + s - 1) / s + 127) / 128 * 128, S = R ? (N + R - 1) / R : 1;
  return S > 1 ? S * OC * 4 : 0;
}
static uint64_t gpt_ln_part(uint64_t N, uint64_t C) {
  uint64_t r = (N + 255) / 256, R = r < 32 ? 32 : (r + 31) / 32 * 32, S = N ? (N + R - 1) / R : 1;
  return S > 1 ? S * 2 * C * 4 : 0;
}

uint64_t zrt_model_gpt_activations(const zrt_model_gpt *g, int64_t B, int64_t T, int w,
                                   int64_t nckpt, int64_t grad_accum, int cuda) {
  uint64_t N = (uint64_t)B * (uint64_t)T, C = (uint64_t)g->d_model, V = (uint64_t)g->vocab;
  uint64_t H = (uint64_t)g->heads, L = (uint64_t)g->layers;
  /* gpt2_acts_layer_slots: checkpointed blocks share one slot */
  uint64_t slots = L - (uint64_t)nckpt + (nckpt > 0);
  uint64_t floats = gpt_arena((uint64_t)B, (uint64_t)T, C, H, V, slots, cuda, cuda && w != 4);
  uint64_t wte = V * C;
  floats += wte;                                          /* dwte */
  if (grad_accum > 1) floats += (uint64_t)grad_accum * N; /* the window's losses */
  if (w != 4) { /* the staging of the largest module's weights (on CUDA the ops read the
                   blocks' weight matrices and the embedding as 16-bit tensors: a block's
                   biases and LayerNorms), of its gradients but the tied wte's (dwte is that
                   staging; on CUDA the weight matrices' dW GEMMs add into the engine's 16-bit
                   gradients), and wte's weights for the head (not on CUDA) */
    uint64_t blk = 12 * C * C + 13 * C, wpe = (uint64_t)g->max_seq * C;
    floats += (cuda ? 13 * C : ZRT_MAX(wte + wpe, blk)) + ZRT_MAX(wpe, cuda ? 13 * C : blk) +
              (cuda ? 0 : wte);
  }
  uint64_t bytes = 4 * floats + 8 * N;
  if (cuda) { /* gpt2_cuda_scratch_bytes: the attention's D rows, the column reductions'
                 partials, the GEMMs' 16-bit operands */
    uint64_t up = 255, att = (uint64_t)B * H * (uint64_t)T * 4;
    uint64_t s = ZRT_MAX(ZRT_MAX(gpt_ln_part(N, C), gpt_col_part(N, C)), att);
    s = ZRT_MAX(s, ZRT_MAX(gpt_col_part(N, 3 * C), gpt_col_part(N, 4 * C)));
    if (w != 4) /* every GEMM operand a 16-bit weight or slot but dres (N x C) */
      s = ZRT_MAX((N * C * 2 + up) & ~up, s);
    bytes += s;
  }
  return bytes;
}

uint64_t zrt_model_gpt_host_bytes(int64_t B, int64_t T, int64_t grad_accum) {
  uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
  uint64_t bytes = (uint64_t)ZRT_MAX(grad_accum, (int64_t)1) * 2 * (uint64_t)B * (uint64_t)T * 4;
  return (bytes + page - 1) / page * page;
}

int64_t zrt_model_gpt_largest_leaf(const zrt_model_gpt *g) {
  int64_t C = g->d_model, v = ZRT_MAX(g->vocab * C, g->max_seq * C);
  return ZRT_MAX(v, ZRT_MAX(3 * C * C + 3 * C, 4 * C * C + 4 * C));
}

/* ------------------------------------------------- Hugging Face config.json */

/* The first of `keys` present in object o as a positive integer into
 * *out; 0 when none is present, -1 (message printed) when one is not a
 * positive integer. */
static int hf_int(const cJSON *o, const char *path, const char *const *keys, int64_t *out) {
  for (int k = 0; keys[k]; k++) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, keys[k]);
    if (!v) continue;
    if (!cJSON_IsNumber(v) || v->valuedouble < 1 ||
        v->valuedouble != (double)(int64_t)v->valuedouble) {
      fprintf(stderr, "zrt estimate-memory: --hf_config %s: \"%s\" must be a positive integer\n",
              path, keys[k]);
      return -1;
    }
    *out = (int64_t)v->valuedouble;
    return 1;
  }
  return 0;
}

static int hf_bool(const cJSON *o, const char *key, int dflt) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  return cJSON_IsBool(v) ? cJSON_IsTrue(v) : dflt;
}

/* Returns 0, or 2 after a message. */
static int hf_decoder_count(const cJSON *o, const char *path, const char *type,
                            zrt_model_decoder *d) {
  static const char *const names[] = {"hidden_size", "intermediate_size", "num_attention_heads",
                                      "num_hidden_layers", "vocab_size"};
  int64_t v[5];
  for (int i = 0; i < 5; i++) {
    const char *const keys[2] = {names[i], NULL};
    int r = hf_int(o, path, keys, &v[i]);
    if (r < 0) return 2;
    if (r == 0) {
      fprintf(stderr,
              "zrt estimate-memory: --hf_config %s: \"%s\" is missing (a %s config has "
              "hidden_size, intermediate_size, num_attention_heads, num_hidden_layers and "
              "vocab_size)\n",
              path, names[i], type);
      return 2;
    }
  }
  int64_t H = v[0], I = v[1], heads = v[2], L = v[3], V = v[4], kv = heads, hd = 0;
  static const char *const k_kv[] = {"num_key_value_heads", NULL};
  static const char *const k_hd[] = {"head_dim", NULL};
  if (hf_int(o, path, k_kv, &kv) < 0 || hf_int(o, path, k_hd, &hd) < 0) return 2;
  if (!hd) {
    if (H % heads) {
      fprintf(stderr,
              "zrt estimate-memory: --hf_config %s: num_attention_heads %lld does not divide "
              "hidden_size %lld (and there is no head_dim)\n",
              path, (long long)heads, (long long)H);
      return 2;
    }
    hd = H / heads;
  }
  if (heads % kv) {
    fprintf(stderr,
            "zrt estimate-memory: --hf_config %s: num_key_value_heads %lld does not divide "
            "num_attention_heads %lld\n",
            path, (long long)kv, (long long)heads);
    return 2;
  }
  int qwen2 = !strcmp(type, "qwen2");
  int attn_bias = !qwen2 && hf_bool(o, "attention_bias", 0);
  int qkv_bias = qwen2 || attn_bias, mlp_bias = hf_bool(o, "mlp_bias", 0);
  int64_t q = H * heads * hd + (qkv_bias ? heads * hd : 0);
  int64_t k = H * kv * hd + (qkv_bias ? kv * hd : 0);
  int64_t out = heads * hd * H + (attn_bias ? H : 0);
  int64_t mlp = 3 * H * I + (mlp_bias ? 2 * I + H : 0);
  d->embed = V * H;
  d->layer = q + 2 * k + out + mlp + 2 * H;
  d->layers = L;
  d->norm = H;
  d->head = hf_bool(o, "tie_word_embeddings", 0) ? 0 : V * H;
  d->total = d->embed + L * d->layer + d->norm + d->head;
  return 0;
}

/* The Llama-family decoder's counts (hf_decoder_count), else the GPT-2
 * layout: examples/gpt2's modules (embeddings, one per block, final norm;
 * wte tied to the head). */
int zrt_model_hf_load(const char *path, zrt_model_gpt *g, zrt_model_decoder *dec) {
  FILE *f = zrt_safe_fopen_read(path, "Hugging Face config"); /* a FIFO: an error, not a hang */
  if (!f) {
    fprintf(stderr, "zrt estimate-memory: --hf_config: %s\n", zrt_last_error());
    return 2;
  }
  char *text = NULL;
  size_t len = 0, cap = 0;
  for (;;) {
    if (len + 4096 + 1 > cap) {
      cap = cap ? 2 * cap : 8192;
      char *t = realloc(text, cap);
      if (!t) {
        free(text);
        fclose(f);
        fprintf(stderr, "zrt estimate-memory: out of memory reading %s\n", path);
        return 2;
      }
      text = t;
    }
    size_t n = fread(text + len, 1, 4096, f);
    len += n;
    if (n < 4096) break;
  }
  fclose(f);
  text[len] = 0;
  cJSON *o = cJSON_Parse(text);
  free(text);
  if (!o || !cJSON_IsObject(o)) {
    fprintf(stderr,
            "zrt estimate-memory: --hf_config %s: not a JSON object (a Hugging Face config.json "
            "is expected)\n",
            path);
    cJSON_Delete(o);
    return 2;
  }
  const cJSON *mt = cJSON_GetObjectItemCaseSensitive(o, "model_type");
  const char *type = cJSON_IsString(mt) ? mt->valuestring : NULL;
  memset(dec, 0, sizeof *dec);
  if (type && (!strcmp(type, "llama") || !strcmp(type, "mistral") || !strcmp(type, "qwen2"))) {
    int rc = hf_decoder_count(o, path, type, dec);
    cJSON_Delete(o);
    return rc;
  }
  if (mt && (!type || strcmp(type, "gpt2"))) {
    fprintf(stderr,
            "zrt estimate-memory: --hf_config %s: model_type \"%s\" — the layouts here are "
            "gpt2 (the modules examples/gpt2 registers) and the llama, mistral and qwen2 "
            "decoders (counted per module); for another architecture pass --params N "
            "--largest_module M\n",
            path, type ? type : "?");
    cJSON_Delete(o);
    return 2;
  }
  static const char *const k_layer[] = {"n_layer", "num_hidden_layers", NULL};
  static const char *const k_embd[] = {"n_embd", "hidden_size", NULL};
  static const char *const k_head[] = {"n_head", "num_attention_heads", NULL};
  static const char *const k_vocab[] = {"vocab_size", NULL};
  static const char *const k_pos[] = {"n_positions", "max_position_embeddings", "n_ctx", NULL};
  const char *const *keys[5] = {k_layer, k_embd, k_head, k_vocab, k_pos};
  int64_t v[5] = {0};
  for (int i = 0; i < 5; i++) {
    int r = hf_int(o, path, keys[i], &v[i]);
    if (r < 0) {
      cJSON_Delete(o);
      return 2;
    }
    if (r == 0) {
      fprintf(stderr,
              "zrt estimate-memory: --hf_config %s: \"%s\" is missing (a GPT2Config "
              "has n_layer, n_embd, n_head, vocab_size and n_positions)\n",
              path, keys[i][0]);
      cJSON_Delete(o);
      return 2;
    }
  }
  cJSON_Delete(o);
  if (v[1] % v[2]) {
    fprintf(stderr,
            "zrt estimate-memory: --hf_config %s: n_head %lld does not divide n_embd %lld\n", path,
            (long long)v[2], (long long)v[1]);
    return 2;
  }
  *g = (zrt_model_gpt){.name = "hf_config",
                       .layers = v[0],
                       .d_model = v[1],
                       .heads = v[2],
                       .vocab = v[3],
                       .max_seq = v[4],
                       .default_seq = v[4]};
  return 0;
}
