/*
 * test_config_ds.c — the config against DeepSpeed's own config tests, with
 * their inputs and their verdicts (accepted or rejected, and the words of
 * the rejection where DeepSpeed asserts them):
 *   tests/unit/runtime/test_precision_config_dynamic_scale.py
 *     loss_scale_window and min_loss_scale reject 0, -1, inf, nan, true;
 *     accept 1, 1000, "2"; [] and {} fail with "must be a number".
 *   tests/unit/runtime/test_precision_config_loss_scale.py
 *     loss_scale rejects -1, inf, nan, true; accepts 0, 1, 2.0, "3" (finite,
 *     >= 0); [] and {} fail with "must be a number".
 * JSON has no inf / nan literals: Python's json reads Infinity / NaN, which
 * zrt's JSON reader refuses as malformed (a rejection either way), and the
 * quoted "inf" / "nan" pydantic would coerce are rejected by zrt as numbers.
 * DeepSpeed's spellings and ranges (deepspeed/runtime/zero/config.py,
 * offload_config.py): pydantic field names beside their aliases
 * (max_live_parameters = stage3_max_live_parameters, ...), ge=0 ranges
 * (sub_group_size 0 is valid), cpu_offload: true read as offload_optimizer
 * cpu; DeepSpeed ignores unknown top-level keys (zrt warns, naming it, and
 * keeps a did-you-mean error for a near miss); a feature zrt lacks fails
 * with "is not supported by zrt" and what to use; "bfp16" stays rejected.
 * tests/unit/runtime/test_ds_config_dict.py TestBatchConfig (world size 2;
 * batch, micro, accumulation, success): (32,16,1,T) (32,8,2,T) (33,17,2,F)
 * (32,18,1,F), each with all three given, train+micro, and for the good
 * ones train+accum, micro+accum and (accum 1) micro alone and train alone;
 * for the bad ones accumulation alone and (accum != 1) train+accum must
 * fail: the values DeepSpeed's _set_batch_related_parameters derives.
 * Then zrt's own integer edges (a value past int64 is "out of range", never
 * wrapped) and a key given twice under two spellings.
 * accelerate's launch-file rules (accelerate 1.x, commands/config/
 * config_args.py and launch.py): tests/test_configs/invalid_keys.yaml
 * (its test_cli.py test_invalid_keys) fails with "The config file at ...
 * had unknown keys ('another_invalid_key', 'invalid_key')", while the same
 * keys in a DeepSpeed file warn; an unknown key under deepspeed_config:
 * warns (accelerate copies the section onto its arguments and ignores what
 * it does not know); distributed_type NO never opens the
 * deepspeed_config_file (a missing one loads) nor applies the section;
 * parallelism_config tp/cp/sp sizes above 1 are refused naming the key,
 * sizes of 1 load.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "internal.h"
#include "ztest.h"

/* Loads `json` into a fresh config; returns the status, the error text in
 * *msg (static). */
static zrt_status load(const char *json, const char **msg) {
  zrt_config *c;
  ZT_OK(zrt_config_create(&c));
  zrt_status st = zrt_config_load_buffer(c, json, strlen(json), "t.json", NULL);
  *msg = st == ZRT_OK ? "" : zrt_last_error();
  zrt_config_destroy(c);
  return st;
}

static void verdict(const char *field, const char *value, int accept, const char *needle) {
  char json[256];
  snprintf(json, sizeof json, "{\"fp16\": {\"enabled\": true, \"%s\": %s}}", field, value);
  const char *msg;
  zrt_status st = load(json, &msg);
  int ok = accept ? st == ZRT_OK : st != ZRT_OK;
  if (ok && needle && !strstr(msg, needle)) ok = 0;
  printf("  fp16.%s = %-10s %s%s%s\n", field, value, st == ZRT_OK ? "accepted" : "rejected: ", msg,
         ok ? "" : "   <-- WRONG");
  if (!ok) zt_failures++;
}

static void precision_config(void) {
  static const char *const dyn[] = {"loss_scale_window", "min_loss_scale"};
  static const char *const bad[] = {"0", "-1", "Infinity", "NaN", "\"inf\"", "\"nan\"", "true"};
  static const char *const good[] = {"1", "1000", "\"2\""};
  for (int f = 0; f < 2; f++) {
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) verdict(dyn[f], bad[i], 0, NULL);
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) verdict(dyn[f], good[i], 1, NULL);
    verdict(dyn[f], "[]", 0, "a number");
    verdict(dyn[f], "{}", 0, "a number");
  }
  static const char *const lbad[] = {"-1", "Infinity", "NaN", "\"inf\"", "true"};
  static const char *const lgood[] = {"0", "1", "2.0", "\"3\""};
  for (size_t i = 0; i < sizeof lbad / sizeof lbad[0]; i++) verdict("loss_scale", lbad[i], 0, NULL);
  for (size_t i = 0; i < sizeof lgood / sizeof lgood[0]; i++)
    verdict("loss_scale", lgood[i], 1, NULL);
  verdict("loss_scale", "[]", 0, "a number");
  verdict("loss_scale", "{}", 0, "a number");
}

/* Loads `json` and returns the config (caller destroys), failing the test
 * when it does not load. */
static zrt_config *loaded(const char *json) {
  zrt_config *c;
  ZT_OK(zrt_config_create(&c));
  ZT_OK(zrt_config_load_buffer(c, json, strlen(json), "t.json", NULL));
  return c;
}

static int warned(const zrt_config *c, const char *needle) {
  for (size_t i = 0; i < zrt_config_warning_count(c); i++)
    if (strstr(zrt_config_warning(c, i), needle)) return 1;
  return 0;
}

static void spellings(void) {
  zrt_config *c = loaded("{\"zero_optimization\": {\"stage\": 3, \"max_live_parameters\": 5, "
                         "\"max_reuse_distance\": 6, \"prefetch_bucket_size\": 7, "
                         "\"param_persistence_threshold\": 8, \"sub_group_size\": 0, "
                         "\"reduce_bucket_size\": 0, \"allgather_bucket_size\": 0, "
                         "\"gather_16bit_weights_on_model_save\": true, "
                         "\"offload_param\": {\"device\": \"cpu\", \"buffer_count\": 0, "
                         "\"buffer_size\": 0}}}");
  const zrt_cfg *v = zrt_config_values(c);
  ZT_CHECK(v->stage3_max_live_parameters == 5 && v->stage3_max_reuse_distance == 6 &&
           v->stage3_prefetch_bucket_size == 7 && v->stage3_param_persistence_threshold == 8);
  ZT_CHECK(v->sub_group_size == 0 && v->reduce_bucket_size == 0 && v->allgather_bucket_size == 0);
  ZT_CHECK(v->offload_param.buffer_count == 0 && v->offload_param.buffer_size == 0);
  ZT_CHECK(warned(c, "gather_16bit_weights_on_model_save: accepted but not used"));
  zrt_config_destroy(c);
  /* ...but not below DeepSpeed's ge=0 */
  const char *msg;
  ZT_CHECK(load("{\"zero_optimization\": {\"sub_group_size\": -1}}", &msg) == ZRT_ERR_CONFIG);
  ZT_CONTAINS(msg, "-1 is out of range");
  /* deprecated cpu_offload: DeepSpeed maps true to offload_optimizer cpu */
  c = loaded("{\"zero_optimization\": {\"stage\": 2, \"cpu_offload\": true}}");
  ZT_CHECK(zrt_config_values(c)->offload_optimizer.device == ZRT_OFFLOAD_CPU);
  ZT_CHECK(warned(c, "cpu_offload is deprecated in DeepSpeed; read as "
                     "zero_optimization.offload_optimizer.device: cpu"));
  zrt_config_destroy(c);
  /* unknown top-level keys: a warning naming the key; a near miss: an error */
  c = loaded("{\"cuda_visible_devices\": \"0,1\", \"train_micro_batch_size_per_gpu\": 2}");
  ZT_CHECK(warned(c, "unknown top-level key 'cuda_visible_devices' ignored"));
  zrt_config_destroy(c);
  ZT_CHECK(load("{\"zero_optimisation\": {\"stage\": 2}}", &msg) == ZRT_ERR_CONFIG);
  ZT_CONTAINS(msg, "did you mean 'zero_optimization'?");
  /* inside a section DeepSpeed's models forbid extra keys: still an error */
  ZT_CHECK(load("{\"zero_optimization\": {\"frobnicate\": 1}}", &msg) == ZRT_ERR_CONFIG);
  ZT_CONTAINS(msg, "unknown key 'zero_optimization.frobnicate'");
  /* features zrt lacks: named, with what to use; switched off: accepted */
  ZT_CHECK(load("{\"tensor_parallel\": {\"autotp_size\": 2}}", &msg) == ZRT_ERR_CONFIG);
  ZT_CONTAINS(msg, "`tensor_parallel` is not supported by zrt: ");
  ZT_CHECK(load("{\"zero_optimization\": {\"zero_quantized_weights\": true}}", &msg) ==
           ZRT_ERR_CONFIG);
  ZT_CONTAINS(msg, "`zero_optimization.zero_quantized_weights` is not supported by zrt");
  /* bf16 master weights / optimizer states: DeepSpeed's rules (ZeRO 1-3;
   * states only with masters; fp32 states only with ZeRO-Offload's CPU
   * Adam) and zrt's (the CPU optimizer: offload_optimizer cpu) */
  ZT_CHECK(load("{\"bf16\": {\"enabled\": true, \"bf16_master_weights_and_grads\": true}}", &msg) ==
           ZRT_ERR_CONFIG);
  ZT_CONTAINS(msg, "bf16.bf16_master_weights_and_grads needs zero_optimization.stage 1, 2 or 3 "
                   "(stage is 0), as in DeepSpeed");
  ZT_CHECK(load("{\"bf16\": {\"enabled\": true, \"bf16_master_weights_and_grads\": true}, "
                "\"zero_optimization\": {\"stage\": 2}}",
                &msg) == ZRT_ERR_CONFIG);
  ZT_CONTAINS(msg,
              "with fp32 optimizer states needs zero_optimization.offload_optimizer.device cpu");
  ZT_CHECK(load("{\"bf16\": {\"enabled\": true, \"bf16_optimizer_states\": true}, "
                "\"zero_optimization\": {\"stage\": 2}}",
                &msg) == ZRT_ERR_CONFIG);
  ZT_CONTAINS(msg, "bf16.bf16_optimizer_states needs bf16.bf16_master_weights_and_grads true");
  ZT_CHECK(load("{\"bf16\": {\"enabled\": true, \"bf16_master_weights_and_grads\": true}, "
                "\"zero_optimization\": {\"stage\": 3, \"offload_optimizer\": {\"device\": "
                "\"nvme\", \"nvme_path\": \"/tmp\"}}}",
                &msg) == ZRT_ERR_CONFIG);
  ZT_CONTAINS(msg, "with zero_optimization.offload_optimizer.device nvme is not supported by zrt");
  c = loaded("{\"bf16\": {\"enabled\": true, \"bf16_master_weights_and_grads\": true, "
             "\"bf16_optimizer_states\": true}, \"zero_optimization\": {\"stage\": 2, "
             "\"offload_optimizer\": {\"device\": \"cpu\"}}}");
  ZT_CHECK(zrt_config_values(c)->bf16_master_weights_and_grads &&
           zrt_config_values(c)->bf16_optimizer_states);
  zrt_config_destroy(c);
  c = loaded("{\"bf16\": {\"enabled\": true, \"bf16_master_weights_and_grads\": false}}");
  zrt_config_destroy(c);
  /* bf16.enabled "auto" follows the launch's mixed_precision in `zrt config
   * check` (resolve_pending) and in the run alike: "no" refuses bf16 masters
   * in both, bf16 runs them */
  c = loaded("{\"bf16\": {\"enabled\": \"auto\", \"bf16_master_weights_and_grads\": true}, "
             "\"zero_optimization\": {\"stage\": 2, \"offload_optimizer\": {\"device\": "
             "\"cpu\"}}, \"train_micro_batch_size_per_gpu\": 2}");
  ZT_CHECK(zrt_config_resolve_pending(c, 1) == ZRT_ERR_CONFIG);
  ZT_CONTAINS(zrt_last_error(), "but bf16.enabled is false");
  ZT_CHECK(zrt_config_resolve(c, 1) == ZRT_ERR_CONFIG);
  ZT_CONTAINS(zrt_last_error(), "but bf16.enabled is false");
  ZT_OK(zrt_config_set(c, "mixed_precision", "bf16", "test"));
  ZT_OK(zrt_config_resolve_pending(c, 1));
  ZT_OK(zrt_config_resolve(c, 1));
  zrt_config_destroy(c);
  c = loaded("{\"hybrid_engine\": {\"enabled\": false}, \"zero_optimization\": "
             "{\"zero_quantized_weights\": false, \"zero_hpz_partition_size\": 1}}");
  ZT_CHECK(warned(c, "hybrid_engine: accepted but not used"));
  zrt_config_destroy(c);
  /* DeepSpeed rejects it too */
  ZT_CHECK(load("{\"communication_data_type\": \"bfp16\"}", &msg) == ZRT_ERR_CONFIG);
  ZT_CONTAINS(msg, "\"bfp16\" is not one of fp32|fp16|bf16");
}

/* One TestBatchConfig call: sets the given values (NULL = not given),
 * resolves for world 2, checks success and the triple. */
static void batch_case(const char *t, const char *m, const char *g, int success, int64_t bt,
                       int64_t bm, int64_t bg) {
  zrt_config *c;
  ZT_OK(zrt_config_create(&c));
  if (t) ZT_OK(zrt_config_set(c, "train_batch_size", t, "test"));
  if (m) ZT_OK(zrt_config_set(c, "train_micro_batch_size_per_gpu", m, "test"));
  if (g) ZT_OK(zrt_config_set(c, "gradient_accumulation_steps", g, "test"));
  zrt_status st = zrt_config_resolve(c, 2);
  const zrt_cfg *v = zrt_config_values(c);
  int ok = success
               ? st == ZRT_OK && v->train_batch_size == bt &&
                     v->train_micro_batch_size_per_gpu == bm && v->gradient_accumulation_steps == bg
               : st != ZRT_OK;
  printf("  batch %s micro %s accum %s: %s (DeepSpeed: %s)\n", t ? t : "-", m ? m : "-",
         g ? g : "-", st == ZRT_OK ? "ok" : "rejected", success ? "ok" : "rejected");
  if (!ok) {
    fprintf(stderr, "FAIL batch case: got %lld %lld %lld status %d: %s\n",
            (long long)v->train_batch_size, (long long)v->train_micro_batch_size_per_gpu,
            (long long)v->gradient_accumulation_steps, st, st ? zrt_last_error() : "");
    zt_failures++;
  }
  zrt_config_destroy(c);
}

static void batch_config(void) {
  static const struct {
    const char *t, *m, *g;
    int success;
  } cases[] = {
      {"32", "16", "1", 1}, {"32", "8", "2", 1}, {"33", "17", "2", 0}, {"32", "18", "1", 0}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const char *t = cases[i].t, *m = cases[i].m, *g = cases[i].g;
    int ok = cases[i].success;
    int64_t bt = atoll(t), bm = atoll(m), bg = atoll(g);
    batch_case(t, m, g, ok, bt, bm, bg);
    batch_case(t, m, NULL, ok, bt, bm, bg);
    if (ok) {
      batch_case(t, NULL, g, 1, bt, bm, bg);
      batch_case(NULL, m, g, 1, bt, bm, bg);
      if (bg == 1) {
        batch_case(NULL, m, NULL, 1, bt, bm, bg);
        batch_case(t, NULL, NULL, 1, bt, bm, bg);
      }
    } else {
      batch_case(NULL, NULL, g, 0, 0, 0, 0);
      if (bg != 1) batch_case(t, NULL, g, 0, 0, 0, 0);
    }
  }
}

static void integer_edges(void) {
  const char *msg;
  /* 2^63: past int64; the message shows the value as written, not wrapped */
  ZT_CHECK(load("{\"steps_per_print\": 9223372036854775808}", &msg) == ZRT_ERR_CONFIG);
  ZT_CONTAINS(msg, "9223372036854775808 is out of range: it does not fit a 64-bit integer");
  ZT_CHECK(strstr(msg, "-9223372036854775808") == NULL);
  ZT_CHECK(load("{\"steps_per_print\": 1e30}", &msg) == ZRT_ERR_CONFIG);
  ZT_CONTAINS(msg, "does not fit a 64-bit integer");
  /* INT64_MAX fits int64 but not zrt's bound: the message names the bound */
  ZT_CHECK(load("{\"steps_per_print\": 9223372036854775807}", &msg) == ZRT_ERR_CONFIG);
  ZT_CONTAINS(msg, "9223372036854775807 is out of range: expected at most 9200000000000000000");
  ZT_CHECK(load("{\"steps_per_print\": -9223372036854775809}", &msg) == ZRT_ERR_CONFIG);
  ZT_CONTAINS(msg, "-9223372036854775809 is out of range");
  ZT_OK(load("{\"steps_per_print\": 9200000000000000000}", &msg));
}

static void duplicate_spellings(void) {
  const char *msg;
  ZT_CHECK(load("{\"zero_optimization.stage\": 2, \"zero_optimization\": {\"stage\": 3}}", &msg) ==
           ZRT_ERR_CONFIG);
  ZT_CONTAINS(msg, "zero_optimization.stage: duplicate key (first given at line 1");
  ZT_CHECK(load("{\"zero_optimization\": {\"stage\": 3}, \"zero_optimization.stage\": 3}", &msg) ==
           ZRT_ERR_CONFIG);
  ZT_CONTAINS(msg, "as 'stage'); keep one");
  /* one spelling alone is fine either way */
  ZT_OK(load("{\"zero_optimization.stage\": 2}", &msg));
}

/* Every top-level key DeepSpeed's config reads (runtime/config.py: the
 * get_* helpers of DeepSpeedConfig._initialize_params, the sections handed
 * to sub-configs — comms_logger, the monitors, flops_profiler, autotuning,
 * nebula, aio, checkpoint, elasticity — and the keys read elsewhere),
 * each with a value of the kind DeepSpeed expects, is known to zrt: used,
 * accepted and ignored with a note, or refused as a feature zrt lacks with
 * what to do; never the unknown-key warning meant for keys DeepSpeed
 * itself ignores. */
static void deepspeed_top_level(void) {
  static const char *const keys[][2] = {
      {"train_batch_size", "8"},
      {"train_micro_batch_size_per_gpu", "2"},
      {"gradient_accumulation_steps", "2"},
      {"steps_per_print", "10"},
      {"dump_state", "false"},
      {"disable_allgather", "false"},
      {"communication_data_type", "\"fp32\""},
      {"seq_parallel_communication_data_type", "\"fp32\""},
      {"prescale_gradients", "false"},
      {"gradient_predivide_factor", "1.0"},
      {"sparse_gradients", "false"},
      {"zero_optimization", "{\"stage\": 1}"},
      {"activation_checkpointing", "{}"},
      {"comms_logger", "{\"enabled\": false}"},
      {"tensorboard", "{\"enabled\": false}"},
      {"wandb", "{\"enabled\": false}"},
      {"csv_monitor", "{\"enabled\": false}"},
      {"comet", "{\"enabled\": false}"},
      {"gradient_clipping", "1.0"},
      {"fp16", "{\"enabled\": false}"},
      {"bf16", "{\"enabled\": false}"},
      {"bfloat16", "{\"enabled\": false}"},
      {"amp", "{\"enabled\": true}"},
      {"compression_training", "{\"weight_quantization\": {}}"},
      {"optimizer", "{\"type\": \"AdamW\", \"params\": {\"lr\": 0.001}}"},
      {"zero_allow_untested_optimizer", "true"},
      {"zero_force_ds_cpu_optimizer", "false"},
      {"scheduler", "{\"type\": \"WarmupLR\", \"params\": {}}"},
      {"flops_profiler", "{\"enabled\": false}"},
      {"wall_clock_breakdown", "false"},
      {"memory_breakdown", "false"},
      {"autotuning", "{\"enabled\": false}"},
      {"eigenvalue", "{\"enabled\": false}"},
      {"quantize_training", "{\"enabled\": true}"},
      {"hybrid_engine", "{\"enabled\": true}"},
      {"sparse_attention", "{\"mode\": \"fixed\"}"},
      {"pipeline", "{\"stages\": 2}"},
      {"progressive_layer_drop", "{\"enabled\": true}"},
      {"curriculum_learning", "{\"enabled\": true}"},
      {"data_efficiency", "{\"enabled\": true}"},
      {"checkpoint", "{\"tag_validation\": \"Warn\"}"},
      {"data_types", "{}"},
      {"aio", "{\"block_size\": 1048576}"},
      {"dataloader_drop_last", "false"},
      {"nebula", "{\"enabled\": false}"},
      {"weight_quantization", "{}"},
      {"elasticity", "{\"enabled\": false}"},
      {"vocabulary_size", "50257"},
      {"compile", "{\"deepcompile\": false}"},
      {"timers", "{}"},
      {"graph_harvesting", "false"},
      {"tensor_parallel", "{\"autotp_size\": 2}"},
      {"torch_autocast", "{\"enabled\": true}"},
      {"use_data_before_expert_parallelism", "false"},
  };
  int bad = 0;
  for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
    char json[512];
    snprintf(json, sizeof json, "{\"%s\": %s}", keys[i][0], keys[i][1]);
    zrt_config *c;
    ZT_OK(zrt_config_create(&c));
    zrt_status st = zrt_config_load_buffer(c, json, strlen(json), "t.json", NULL);
    const char *how = "used";
    int ok = 1;
    if (st != ZRT_OK) {
      how = strstr(zrt_last_error(), "is not supported by zrt: ") ? "refused, naming what to do"
                                                                  : zrt_last_error();
      ok = how[0] == 'r';
    } else if (warned(c, "unknown top-level key")) {
      how = "WARNED AS UNKNOWN";
      ok = 0;
    } else if (zrt_config_warning_count(c) > 0) {
      how = "accepted, noted as not used";
    }
    if (!ok) {
      bad++;
      printf("  %-40s %s   <-- WRONG\n", keys[i][0], how);
    }
    zrt_config_destroy(c);
  }
  printf("  %zu DeepSpeed top-level keys: %d unknown to zrt\n", sizeof keys / sizeof keys[0], bad);
  ZT_CHECK(bad == 0);
}

static zrt_config *loaded_yaml(const char *yaml, zrt_status want, const char **msg) {
  zrt_config *c;
  ZT_OK(zrt_config_create(&c));
  zrt_status st = zrt_config_load_buffer(c, yaml, strlen(yaml), "t.yaml", NULL);
  *msg = st == ZRT_OK ? "" : zrt_last_error();
  if (st != want) {
    fprintf(stderr, "FAIL: status %s, want %s (%s) for:\n%s\n", zrt_status_string(st),
            zrt_status_string(want), *msg, yaml);
    zt_failures++;
  }
  return c;
}

static void accelerate_rules(void) {
  const char *msg;
  /* accelerate's tests/test_configs/invalid_keys.yaml, byte for byte */
  static const char invalid_keys[] =
      "compute_environment: LOCAL_MACHINE\ndeepspeed_config: {}\ndistributed_type: 'NO'\n"
      "downcast_bf16: 'no'\nfsdp_config: {}\nmachine_rank: 0\nmain_process_ip: null\n"
      "main_process_port: null\nmain_training_function: main\nmixed_precision: 'no'\n"
      "num_machines: 1\nnum_processes: 1\nuse_cpu: false\ninvalid_key: \"invalid_value\"\n"
      "another_invalid_key: \"another_invalid_value\"";
  zrt_config *c = loaded_yaml(invalid_keys, ZRT_ERR_CONFIG, &msg);
  printf("accelerate invalid_keys.yaml: %s\n", msg);
  ZT_CONTAINS(msg, "t.yaml:14:1: The config file at t.yaml had unknown keys "
                   "('another_invalid_key', 'invalid_key')");
  zrt_config_destroy(c);
  /* the same two keys in a DeepSpeed file: warnings, it loads */
  c = loaded_yaml("train_micro_batch_size_per_gpu: 2\ninvalid_key: 1\nanother_invalid_key: 2\n",
                  ZRT_OK, &msg);
  ZT_CHECK(warned(c, "unknown top-level key 'invalid_key' ignored"));
  ZT_CHECK(warned(c, "unknown top-level key 'another_invalid_key' ignored"));
  zrt_config_destroy(c);
  /* unknown deepspeed_config key: a warning with the near miss */
  c = loaded_yaml("distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stag: 2\n"
                  "  seq_parallel_communication_data_type: bf16\n",
                  ZRT_OK, &msg);
  ZT_CHECK(warned(c, "t.yaml:3:3: unknown key 'deepspeed_config.zero_stag' ignored"));
  ZT_CHECK(warned(c, "did you mean 'deepspeed_config.zero_stage'?"));
  ZT_CHECK(warned(c, "'deepspeed_config.seq_parallel_communication_data_type' ignored"));
  zrt_config_destroy(c);
  /* distributed_type NO: the section is not used, its file never opened */
  c = loaded_yaml("compute_environment: LOCAL_MACHINE\ndeepspeed_config:\n"
                  "  deepspeed_config_file: /nonexistent/ds_config.json\n  zero_stage: 3\n"
                  "distributed_type: 'NO'\nnum_processes: 1\n",
                  ZRT_OK, &msg);
  ZT_CHECK(warned(c, "deepspeed_config (distributed_type NO: accelerate uses it only with "
                     "DEEPSPEED)"));
  ZT_CHECK(zrt_config_values(c)->zero_stage != 3);
  zrt_config_destroy(c);
  /* ... while DEEPSPEED opens it (and fails naming it) */
  c = loaded_yaml("deepspeed_config:\n  deepspeed_config_file: /nonexistent/ds_config.json\n"
                  "distributed_type: DEEPSPEED\n",
                  ZRT_ERR_CONFIG, &msg);
  ZT_CONTAINS(msg, "/nonexistent/ds_config.json");
  zrt_config_destroy(c);
  /* parallelism_config: split sizes refused by name, sizes of 1 accepted */
  static const char *const split[] = {"tp", "cp", "sp"};
  for (int i = 0; i < 3; i++) {
    char y[400];
    snprintf(y, sizeof y,
             "distributed_type: MULTI_GPU\nnum_processes: 2\nparallelism_config:\n"
             "  parallelism_config_dp_shard_size: 1\n  parallelism_config_%s_size: 2\n",
             split[i]);
    c = loaded_yaml(y, ZRT_ERR_CONFIG, &msg);
    char want[96];
    snprintf(want, sizeof want, "t.yaml:5:3: parallelism_config.parallelism_config_%s_size 2",
             split[i]);
    ZT_CONTAINS(msg, want);
    zrt_config_destroy(c);
  }
  c = loaded_yaml("distributed_type: MULTI_GPU\nnum_processes: 2\nparallelism_config:\n"
                  "  parallelism_config_tp_size: 1\n  parallelism_config_cp_size: 1\n",
                  ZRT_OK, &msg);
  zrt_config_destroy(c);
}

/* The offload rules `zrt config check` applies are the engine's
 * (zrt_config_offload_rule): offload_param alone at stage 3 loads, the
 * refusals name the key. */
static void offload_rules(void) {
  const char *msg;
  ZT_CHECK(load("{\"zero_optimization\": {\"stage\": 3, \"offload_param\": {\"device\": "
                "\"cpu\"}}}",
                &msg) == ZRT_OK);
  ZT_CHECK(load("{\"zero_optimization\": {\"stage\": 2, \"offload_param\": {\"device\": "
                "\"cpu\"}}}",
                &msg) == ZRT_ERR_CONFIG);
  ZT_CONTAINS(msg, "zero_optimization.offload_param needs zero_optimization.stage 3 (stage is 2)");
  ZT_CHECK(load("{\"zero_optimization\": {\"stage\": 3, \"offload_optimizer\": {\"device\": "
                "\"cpu\", \"ratio\": 0.5}, \"offload_param\": {\"device\": \"cpu\"}}}",
                &msg) == ZRT_ERR_CONFIG);
  ZT_CONTAINS(msg, "zero_optimization.offload_optimizer.ratio 0.5 with offload_param.device cpu "
                   "is not supported");
  ZT_CHECK(load("{\"zero_optimization\": {\"stage\": 0, \"offload_optimizer\": {\"device\": "
                "\"cpu\"}}}",
                &msg) == ZRT_ERR_CONFIG);
  ZT_CONTAINS(msg, "offload_optimizer needs zero_optimization.stage 1, 2 or 3");
  /* ratio below stage 3 is ignored (a warning at build), not refused */
  ZT_CHECK(load("{\"zero_optimization\": {\"stage\": 2, \"offload_optimizer\": {\"device\": "
                "\"nvme\", \"nvme_path\": \"/tmp\", \"ratio\": 0.5}}}",
                &msg) == ZRT_OK);
}

int main(void) {
  offload_rules();
  accelerate_rules();
  precision_config();
  spellings();
  batch_config();
  integer_edges();
  duplicate_spellings();
  deepspeed_top_level();
  ZT_DONE();
}
