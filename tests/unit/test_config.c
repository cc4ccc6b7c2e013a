/*
 * test_config.c — the config system against DeepSpeed's documented defaults,
 * real DeepSpeed / accelerate files (tests/data/configs), precedence of
 * file / env / program / flag, "auto" and batch-triple resolution, the JSON
 * and YAML writers (round trip of values and sources), and every error case
 * (each message must name the file, line and key path and leave the config
 * unchanged). Reals are compared exactly (they are parsed from the same
 * decimal text): tolerance 0, max difference printed.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "internal.h"
#include "ztest.h"

#ifndef ZRT_TEST_SOURCE_DIR
#define ZRT_TEST_SOURCE_DIR "."
#endif

static char datadir[4096];
static char tmpdir[256];

static const char *data(const char *name) {
  static char p[8][4352];
  static int k;
  k = (k + 1) % 8;
  snprintf(p[k], sizeof p[k], "%s/%s", datadir, name);
  return p[k];
}

static zrt_config *fresh(void) {
  zrt_config *c;
  ZT_OK(zrt_config_create(&c));
  return c;
}

static void check_src(zrt_config *c, const char *key, zrt_cfg_source_kind kind, const char *where) {
  zrt_cfg_source s;
  ZT_OK(zrt_config_source(c, key, &s));
  if (s.kind != kind || (where && !strstr(s.where, where))) {
    fprintf(stderr, "FAIL source of %s: %s \"%s\", want %s \"%s\"\n", key,
            zrt_config_source_kind_name(s.kind), s.where, zrt_config_source_kind_name(kind),
            where ? where : "");
    zt_failures++;
  }
}

static void check_text(zrt_config *c, const char *key, const char *want) {
  char buf[600];
  ZT_OK(zrt_config_get(c, key, buf, sizeof buf));
  if (strcmp(buf, want)) {
    fprintf(stderr, "FAIL %s = \"%s\", want \"%s\"\n", key, buf, want);
    zt_failures++;
  }
}

static void close_reals(const char *what, const double *got, const double *want, size_t n) {
  ZT_CLOSE_ARRAY(what, got, want, n, 0.0);
}

static void test_defaults(void) {
  zrt_config *c = fresh();
  const zrt_cfg *v = zrt_config_values(c);
  ZT_CHECK(v->fp16_initial_scale_power == 16 && v->fp16_loss_scale_window == 1000);
  ZT_CHECK(v->fp16_hysteresis == 2 && v->fp16_min_loss_scale == 1.0 && v->fp16_loss_scale == 0);
  ZT_CHECK(v->reduce_bucket_size == 500000000 && v->allgather_bucket_size == 500000000);
  ZT_CHECK(v->stage3_prefetch_bucket_size == 50000000);
  ZT_CHECK(v->stage3_param_persistence_threshold == 100000);
  ZT_CHECK(v->stage3_max_live_parameters == 1000000000 &&
           v->stage3_max_reuse_distance == 1000000000);
  ZT_CHECK(v->sub_group_size == 1000000000 && v->steps_per_print == 10);
  ZT_CHECK(v->offload_optimizer.buffer_count == 4 && v->offload_param.buffer_count == 5);
  ZT_CHECK(v->offload_param.buffer_size == 100000000 && v->offload_param.max_in_cpu == 1000000000);
  ZT_CHECK(v->offload_optimizer.device == ZRT_OFFLOAD_NONE && v->zero_stage == 0);
  ZT_CHECK(v->optimizer_type == ZRT_OPTIM_ADAM && v->bias_correction == 1);
  ZT_CHECK(v->warmup_num_steps == 1000 && v->warmup_type_log == 1);
  ZT_CHECK(v->communication_data_type == -1 && v->contiguous_gradients == 1);
  ZT_CHECK(v->train_batch_size == -1 && v->train_micro_batch_size_per_gpu == -1);
  ZT_CHECK(!strcmp(v->backend, "auto") && !strcmp(v->comm, "auto") && v->numa_node == -1);
  ZT_CHECK(v->num_processes == 1 && v->main_process_port == 29500);
  ZT_CHECK(zrt_config_dtype(c) == ZRT_F32);
  double got[6] = {v->gradient_clipping, v->lr, v->beta1, v->beta2, v->eps, v->warmup_max_lr};
  double want[6] = {0.0, 1e-3, 0.9, 0.999, 1e-8, 1e-3};
  close_reals("defaults (clip, lr, betas, eps, warmup_max_lr)", got, want, 6);
  check_src(c, "zero_optimization.stage", ZRT_SRC_DEFAULT, "");
  ZT_CHECK(zrt_config_schema_count() > 60);
  ZT_CHECK(zrt_config_schema_find("bfloat16.enabled") == zrt_config_schema_find("bf16.enabled"));
  zrt_config_destroy(c);
  zrt_config_destroy(NULL);
}

static void test_deepspeed_json(void) {
  zrt_config *c = fresh();
  ZT_OK(zrt_config_load_file(c, data("ds_zero2.json")));
  const zrt_cfg *v = zrt_config_values(c);
  ZT_CHECK(v->zero_stage == 2 && v->fp16_enabled && !v->bf16_enabled);
  ZT_CHECK(v->reduce_bucket_size == 200000000 && v->allgather_bucket_size == 200000000);
  ZT_CHECK(v->fp16_loss_scale_window == 500 && v->steps_per_print == 100);
  ZT_CHECK(v->optimizer_type == ZRT_OPTIM_ADAMW && v->scheduler_type == ZRT_SCHED_WARMUP_DECAY_LR);
  ZT_CHECK(v->total_num_steps == 10000 && v->warmup_num_steps == 200);
  double got[4] = {v->lr, v->beta2, v->weight_decay, v->gradient_clipping};
  double want[4] = {3e-4, 0.95, 0.1, 1.0};
  close_reals("ds_zero2 reals", got, want, 4);
  check_src(c, "zero_optimization.stage", ZRT_SRC_FILE, "ds_zero2.json:17:5");
  check_src(c, "optimizer.params.betas", ZRT_SRC_FILE, "ds_zero2.json:29:");
  ZT_CHECK(zrt_config_dtype(c) == ZRT_F16);
  /* allgather_partitions is DeepSpeed's, not zrt's: accepted with a warning */
  int found = 0;
  for (size_t i = 0; i < zrt_config_warning_count(c); i++)
    found |= strstr(zrt_config_warning(c, i), "zero_optimization.allgather_partitions") != NULL;
  ZT_CHECK(found);
  ZT_OK(zrt_config_resolve(c, 2));
  ZT_CHECK(v->train_batch_size == 64 && v->gradient_accumulation_steps == 4);
  ZT_OK(zrt_config_resolve(c, 2));                      /* idempotent */
  ZT_CHECK(zrt_config_resolve(c, 4) == ZRT_ERR_CONFIG); /* 64 != 8*4*4 */
  ZT_CONTAINS(zrt_last_error(), "train_batch_size 64");
  ZT_CONTAINS(zrt_last_error(), "world size 4");
  zrt_config_destroy(c);
}

static int has_warning(zrt_config *c, const char *s);

static void test_hf_auto(void) {
  zrt_config *c = fresh();
  ZT_OK(zrt_config_load_file(c, data("ds_zero3_offload.json")));
  ZT_CHECK(zrt_config_is_auto(c, "optimizer.params.lr"));
  /* before the program ran (zrt launch, zrt config check): each auto is a
   * note saying who resolves it and what it falls back to */
  zrt_config *p;
  ZT_OK(zrt_config_copy(c, &p));
  ZT_OK(zrt_config_resolve_pending(p, 4));
  ZT_CHECK(has_warning(p, "train_micro_batch_size_per_gpu is \"auto\": resolved at run time by "
                          "the program, else an error on the rank"));
  ZT_CHECK(has_warning(p, "optimizer.params.lr is \"auto\": resolved at run time by the program, "
                          "else DeepSpeed's default 1e-3"));
  zrt_config_destroy(p);
  /* on the rank: an auto the program did not fill takes DeepSpeed's default
   * (its config models drop "auto"); only the batch size and a schedule
   * length without a default are errors, and the advice names real flags */
  ZT_CHECK(zrt_config_resolve(c, 4) == ZRT_ERR_CONFIG);
  const char *m = zrt_last_error();
  ZT_CONTAINS(m, "batch size is \"auto\"");
  ZT_CONTAINS(m, "scheduler.params.total_num_steps is \"auto\"");
  ZT_CONTAINS(m, "--set scheduler.params.total_num_steps=VALUE");
  ZT_CHECK(strstr(m, "optimizer.params.lr") == NULL && strstr(m, "gradient_clipping") == NULL);
  ZT_OK(zrt_config_copy(c, &p));
  ZT_OK(zrt_config_set(p, "train_micro_batch_size_per_gpu", "4", "program default"));
  ZT_OK(zrt_config_set(p, "scheduler.params.total_num_steps", "100", "program default"));
  ZT_OK(zrt_config_resolve(p, 4));
  const zrt_cfg *pv = zrt_config_values(p);
  double pg[2] = {pv->lr, pv->gradient_clipping}, pw[2] = {1e-3, 0};
  close_reals("auto left unfilled: DeepSpeed defaults", pg, pw, 2);
  check_src(p, "optimizer.params.lr", ZRT_SRC_DERIVED, "DeepSpeed's default");
  zrt_config_destroy(p);
  /* the program fills what "auto" leaves open (accelerate / HF style) */
  ZT_OK(zrt_config_set(c, "train_micro_batch_size_per_gpu", "4", "program"));
  ZT_OK(zrt_config_set(c, "optimizer.params.lr", "2e-5", "program"));
  ZT_OK(zrt_config_set(c, "optimizer.params.betas", "[0.9, 0.98]", "program"));
  ZT_OK(zrt_config_set(c, "optimizer.params.eps", "1e-6", "program"));
  ZT_OK(zrt_config_set(c, "optimizer.params.weight_decay", "0.01", "program"));
  ZT_OK(zrt_config_set(c, "gradient_clipping", "1.0", "program"));
  ZT_OK(zrt_config_set(c, "scheduler.params.total_num_steps", "5000", "program"));
  ZT_OK(zrt_config_set(c, "scheduler.params.warmup_num_steps", "100", "program"));
  ZT_OK(zrt_config_resolve(c, 4));
  const zrt_cfg *v = zrt_config_values(c);
  ZT_CHECK(v->train_batch_size == 16 && v->gradient_accumulation_steps == 1);
  ZT_CHECK(v->zero_stage == 3 && v->offload_param.device == ZRT_OFFLOAD_CPU);
  ZT_CHECK(v->offload_optimizer.pin_memory == 1 && v->warmup_type_log == 0);
  ZT_CHECK(v->reduce_bucket_size == 500000000 && v->stage3_param_persistence_threshold == 100000);
  ZT_CHECK(!v->bf16_enabled && !zrt_config_is_auto(c, "bf16.enabled"));
  check_src(c, "train_batch_size", ZRT_SRC_DERIVED, "world 4");
  check_src(c, "optimizer.params.lr", ZRT_SRC_PROGRAM, "program");
  check_src(c, "zero_optimization.reduce_bucket_size", ZRT_SRC_DERIVED, "auto");
  double got[3] = {v->lr, v->beta2, v->cos_min_ratio}, want[3] = {2e-5, 0.98, 0.1};
  close_reals("auto filled by program", got, want, 3);
  zrt_config_destroy(c);
}

static int has_warning(zrt_config *c, const char *s) {
  for (size_t i = 0; i < zrt_config_warning_count(c); i++)
    if (strstr(zrt_config_warning(c, i), s)) return 1;
  return 0;
}

static void test_accelerate(void) {
  zrt_config *c = fresh();
  ZT_OK(zrt_config_load_file(c, data("accelerate_deepspeed.yaml")));
  const zrt_cfg *v = zrt_config_values(c);
  ZT_CHECK(v->zero_stage == 2 && v->offload_optimizer.device == ZRT_OFFLOAD_CPU);
  ZT_CHECK(v->offload_param.device == ZRT_OFFLOAD_NONE && v->gradient_accumulation_steps == 4);
  ZT_CHECK(v->bf16_enabled && !v->fp16_enabled && v->num_processes == 4 && v->num_machines == 1);
  ZT_CHECK(!strcmp(v->distributed_type, "DEEPSPEED") && !strcmp(v->mixed_precision, "bf16"));
  check_src(c, "zero_optimization.stage", ZRT_SRC_FILE, "accelerate_deepspeed.yaml:9:3");
  check_src(c, "bf16.enabled", ZRT_SRC_FILE, "accelerate_deepspeed.yaml:15");
  ZT_CHECK(has_warning(c, "downcast_bf16") && has_warning(c, "deepspeed_config.zero3_init_flag"));
  ZT_CHECK(has_warning(c, "tpu_use_sudo"));
  double clip = v->gradient_clipping, one = 1.0;
  close_reals("accelerate gradient_clipping", &clip, &one, 1);
  /* accelerate takes the micro-batch from the program's dataloader: with
   * accumulation alone and no program value it is an error (as DeepSpeed's
   * batch rules), with the program's it derives the train batch */
  ZT_CHECK(zrt_config_resolve(c, 4) == ZRT_ERR_CONFIG);
  ZT_CONTAINS(zrt_last_error(), "neither train_batch_size nor train_micro_batch_size_per_gpu");
  ZT_OK(zrt_config_set(c, "train_micro_batch_size_per_gpu", "1", "program default"));
  ZT_OK(zrt_config_resolve(c, 4));
  ZT_CHECK(v->train_micro_batch_size_per_gpu == 1 && v->train_batch_size == 16);
  zrt_config_destroy(c);
}

static void test_launch_with_file(void) {
  zrt_config *c = fresh();
  ZT_OK(zrt_config_load_file(c, data("launch_with_file.yaml")));
  const zrt_cfg *v = zrt_config_values(c);
  /* launch YAML > its deepspeed_config_file > default */
  ZT_CHECK(v->zero_stage == 3);
  check_src(c, "zero_optimization.stage", ZRT_SRC_FILE, "launch_with_file.yaml:11:3");
  ZT_CHECK(v->offload_param.device == ZRT_OFFLOAD_CPU);
  ZT_CHECK(v->train_micro_batch_size_per_gpu == 8 && v->reduce_bucket_size == 1000000);
  check_src(c, "train_micro_batch_size_per_gpu", ZRT_SRC_FILE, "launch_ds.json:2:3");
  /* mixed_precision 'no' defers to the DeepSpeed file beneath */
  ZT_CHECK(v->fp16_enabled && v->fp16_initial_scale_power == 12);
  ZT_CHECK(v->optimizer_type == ZRT_OPTIM_ADAM && v->device_memory_limit == 24ull << 20);
  ZT_CHECK(v->seed == 1234 && v->num_processes == 2);
  ZT_OK(zrt_config_resolve(c, 2));
  ZT_CHECK(v->train_batch_size == 32);
  zrt_config_destroy(c);
}

/* Every error case: status, message naming file, line:col and key path,
 * what was expected, and the config left untouched. */
static void expect_error(const char *file, zrt_status want, const char *const *needles) {
  zrt_config *c = fresh();
  ZT_OK(zrt_config_set(c, "zrt.seed", "77", "--seed"));
  zrt_cfg before = *zrt_config_values(c);
  zrt_status st = zrt_config_load_file(c, data(file));
  if (st != want) {
    fprintf(stderr, "FAIL %s: status %s, want %s (%s)\n", file, zrt_status_string(st),
            zrt_status_string(want), zrt_last_error());
    zt_failures++;
  }
  const char *m = zrt_last_error();
  printf("%s -> %s\n", file, m);
  ZT_CONTAINS(m, file);
  for (size_t i = 0; needles[i]; i++) ZT_CONTAINS(m, needles[i]);
  ZT_CHECK(!memcmp(&before, zrt_config_values(c), sizeof before));
  zrt_config_destroy(c);
}

#define ERR(file, st, ...)                                                                         \
  do {                                                                                             \
    const char *const n_[] = {__VA_ARGS__, NULL};                                                  \
    expect_error(file, st, n_);                                                                    \
  } while (0)

static void test_errors(void) {
  ERR("bad_unknown_key.yaml", ZRT_ERR_CONFIG,
      "bad_unknown_key.yaml:3:3:", "zero_optimization.stgae",
      "did you mean 'zero_optimization.stage'?");
  ERR("bad_type.json", ZRT_ERR_CONFIG, "bad_type.json:3:5:", "fp16.enabled",
      "expected true or false", "yes please");
  ERR("bad_range.yaml", ZRT_ERR_CONFIG, "bad_range.yaml:2:3:", "zero_optimization.stage",
      "out of range", "0..3");
  ERR("bad_enum.json", ZRT_ERR_CONFIG, "bad_enum.json:4:", "offload_optimizer.device", "gpu",
      "none|cpu|nvme");
  ERR("bad_fp16_bf16.json", ZRT_ERR_CONFIG, "bad_fp16_bf16.json:2:", "fp16.enabled", "bf16.enabled",
      "bad_fp16_bf16.json:3:");
  ERR("bad_batch.json", ZRT_ERR_CONFIG, "bad_batch.json:2:", "train_batch_size 30",
      "train_micro_batch_size_per_gpu 4", "gradient_accumulation_steps 2");
  ERR("bad_offload_param_stage2.yaml", ZRT_ERR_CONFIG,
      "bad_offload_param_stage2.yaml:4:", "zero_optimization.offload_param", "stage 3",
      "bad_offload_param_stage2.yaml:2:");
  ERR("bad_offload_stage0.yaml", ZRT_ERR_CONFIG,
      "bad_offload_stage0.yaml:4:", "zero_optimization.offload_optimizer", "stage is 0");
  ERR("bad_nvme_nopath.json", ZRT_ERR_CONFIG,
      "bad_nvme_nopath.json:4:", "zero_optimization.offload_optimizer.nvme_path");
  ERR("bad_dup.yaml", ZRT_ERR_CONFIG, "bad_dup.yaml:4:1:", "fp16", "duplicate key",
      "first given at line 1");
  ERR("bad_dup.json", ZRT_ERR_CONFIG, "bad_dup.json:4:5:", "zero_optimization.stage",
      "duplicate key", "line 3");
  ERR("bad_malformed.yaml", ZRT_ERR_CONFIG, "bad_malformed.yaml:3:", "malformed YAML");
  ERR("bad_malformed.json", ZRT_ERR_CONFIG, "bad_malformed.json:4:", "malformed JSON");
  ERR("bad_empty.yaml", ZRT_ERR_CONFIG, "empty");
  ERR("bad_multi.yaml", ZRT_ERR_CONFIG, "4 config errors",
      "bad_multi.yaml:1:1:", "train_micro_batch_size_per_gpu",
      "bad_multi.yaml:3:3: zero_optimization.stage",
      "did you mean 'zero_optimization.overlap_comm'?", "bad_multi.yaml:6:3: optimizer.type",
      "Adam|AdamW|SGD|Lion");
  ERR("bad_mixed.yaml", ZRT_ERR_CONFIG, "bad_mixed.yaml:2:", "mixed_precision", "fp8",
      "no|fp16|bf16");
  ERR("bad_missing_ds_file.yaml", ZRT_ERR_CONFIG,
      "bad_missing_ds_file.yaml:2:3:", "deepspeed_config_file", "no_such_ds.json", "No such file");
  ERR("no_such_file.yaml", ZRT_ERR_IO, "cannot open", "No such file");

  /* a directory, a binary file */
  zrt_config *c = fresh();
  ZT_CHECK(zrt_config_load_file(c, datadir) == ZRT_ERR_IO);
  ZT_CONTAINS(zrt_last_error(), "is a directory");
  char bin[512];
  snprintf(bin, sizeof bin, "%s/binary.json", tmpdir);
  FILE *f = fopen(bin, "wb");
  fwrite("{\"a\":\0\1\2\3", 1, 10, f);
  fclose(f);
  ZT_CHECK(zrt_config_load_file(c, bin) == ZRT_ERR_CONFIG);
  ZT_CONTAINS(zrt_last_error(), "binary");
  ZT_CONTAINS(zrt_last_error(), "binary.json");
  /* "auto" nobody resolves */
  ZT_OK(zrt_config_load_file(c, data("bad_auto.json")));
  ZT_CHECK(zrt_config_resolve(c, 2) == ZRT_ERR_CONFIG);
  ZT_CONTAINS(zrt_last_error(), "bad_auto.json:2:");
  ZT_CONTAINS(zrt_last_error(), "train_micro_batch_size_per_gpu");
  zrt_config_destroy(c);
}

static void test_precedence_env(void) {
  char yaml[512];
  snprintf(yaml, sizeof yaml, "%s/prec.yaml", tmpdir);
  FILE *f = fopen(yaml, "w");
  fputs("zero_optimization:\n  stage: 2\nzrt:\n  seed: 5\n  device_memory_limit: 1GiB\n"
        "train_micro_batch_size_per_gpu: 2\n",
        f);
  fclose(f);
  zrt_config *c = fresh();
  /* flags set before the file still win over it */
  ZT_OK(zrt_config_set(c, "zero_stage", "3", "--zero_stage"));
  ZT_OK(zrt_config_load_file(c, yaml));
  const zrt_cfg *v = zrt_config_values(c);
  ZT_CHECK(v->zero_stage == 3 && v->seed == 5);
  check_src(c, "zero_optimization.stage", ZRT_SRC_FLAG, "--zero_stage");
  /* env overrides files, whatever the order */
  setenv("ZRT_SEED", "7", 1);
  setenv("ZRT_DEVICE_MEMORY_LIMIT", "24MiB", 1);
  ZT_OK(zrt_config_load_env(c));
  ZT_CHECK(v->seed == 7 && v->device_memory_limit == 25165824ull);
  check_src(c, "zrt.device_memory_limit", ZRT_SRC_ENV, "ZRT_DEVICE_MEMORY_LIMIT");
  ZT_OK(zrt_config_load_file(c, yaml));
  ZT_CHECK(v->seed == 7 && v->device_memory_limit == 25165824ull);
  /* one truth for the batch: a program value contradicting the file's
   * explicit micro-batch is an error naming both; agreeing is fine; a
   * "program default" gives way to the file */
  ZT_CHECK(zrt_config_set(c, "train_micro_batch_size_per_gpu", "6", "program") == ZRT_ERR_CONFIG);
  ZT_CONTAINS(zrt_last_error(),
              "the program (program) trains with 6 but the config gives 2 (file ");
  ZT_CONTAINS(zrt_last_error(), "prec.yaml:6:1");
  ZT_CHECK(v->train_micro_batch_size_per_gpu == 2);
  ZT_OK(zrt_config_set(c, "train_micro_batch_size_per_gpu", "2", "program"));
  ZT_OK(zrt_config_set(c, "train_micro_batch_size_per_gpu", "6", "program default"));
  ZT_CHECK(v->train_micro_batch_size_per_gpu == 2);
  /* program beats file (a key outside the batch), flag beats program and env */
  ZT_OK(zrt_config_set(c, "zrt.seed", "11", "program"));
  ZT_OK(zrt_config_set(c, "seed", "9", "--seed"));
  ZT_OK(zrt_config_load_env(c));
  ZT_CHECK(v->seed == 9);
  ZT_OK(zrt_config_set(c, "train_micro_batch_size_per_gpu", "5", "--micro"));
  ZT_CHECK(zrt_config_set(c, "train_micro_batch_size_per_gpu", "4", "program") == ZRT_ERR_CONFIG);
  ZT_CONTAINS(zrt_last_error(), "the config gives 5 (flag --micro)");
  ZT_CHECK(v->train_micro_batch_size_per_gpu == 5);
  /* env errors name the variable and change nothing */
  setenv("ZRT_NUMA_NODE", "banana", 1);
  ZT_CHECK(zrt_config_load_env(c) == ZRT_ERR_CONFIG);
  ZT_CONTAINS(zrt_last_error(), "ZRT_NUMA_NODE");
  ZT_CONTAINS(zrt_last_error(), "expected an integer");
  unsetenv("ZRT_NUMA_NODE");
  setenv("ZRT_DEVICE_MEMORY_LIMIT", "24 parsecs", 1);
  ZT_CHECK(zrt_config_load_env(c) == ZRT_ERR_CONFIG);
  ZT_CONTAINS(zrt_last_error(), "ZRT_DEVICE_MEMORY_LIMIT");
  ZT_CHECK(v->device_memory_limit == 25165824ull);
  /* from_env: defaults -> $ZRT_CONFIG_FILE -> env */
  setenv("ZRT_DEVICE_MEMORY_LIMIT", "2KiB", 1);
  setenv("ZRT_CONFIG_FILE", yaml, 1);
  zrt_config *e;
  ZT_OK(zrt_config_from_env(&e));
  ZT_CHECK(zrt_config_values(e)->zero_stage == 2 && zrt_config_values(e)->seed == 7);
  ZT_CHECK(zrt_config_values(e)->device_memory_limit == 2048);
  zrt_config_destroy(e);
  unsetenv("ZRT_CONFIG_FILE");
  unsetenv("ZRT_SEED");
  unsetenv("ZRT_DEVICE_MEMORY_LIMIT");
  zrt_config_destroy(c);
}

static void test_sizes_and_set(void) {
  zrt_config *c = fresh();
  const zrt_cfg *v = zrt_config_values(c);
  ZT_OK(zrt_config_set(c, "zrt.device_memory_limit", "1.5GB", "--device_memory_limit"));
  ZT_CHECK(v->device_memory_limit == 1500000000ull);
  ZT_OK(zrt_config_set(c, "device_memory_limit", "2KiB", "--device_memory_limit"));
  ZT_CHECK(v->device_memory_limit == 2048);
  ZT_OK(zrt_config_set(c, "device_memory_limit", "4096", "--device_memory_limit"));
  ZT_CHECK(v->device_memory_limit == 4096);
  ZT_CHECK(zrt_config_set(c, "device_memory_limit", "12XB", "--device_memory_limit") ==
           ZRT_ERR_CONFIG);
  ZT_CONTAINS(zrt_last_error(), "--device_memory_limit");
  ZT_CONTAINS(zrt_last_error(), "expected a size");
  ZT_CHECK(v->device_memory_limit == 4096);
  ZT_OK(zrt_config_set(c, "zero_optimization.reduce_bucket_size", "5e7", "program"));
  ZT_CHECK(v->reduce_bucket_size == 50000000);
  ZT_CHECK(zrt_config_set(c, "zero_optimization.reduce_bucket_size", "2.5", "program") ==
           ZRT_ERR_CONFIG);
  ZT_CONTAINS(zrt_last_error(), "not a whole number");
  ZT_OK(zrt_config_set(c, "optimizer.type", "lion", "program"));
  ZT_CHECK(v->optimizer_type == ZRT_OPTIM_LION);
  check_text(c, "optimizer.type", "Lion");
  ZT_OK(zrt_config_set(c, "communication_data_type", "bf16", "program"));
  ZT_CHECK(v->communication_data_type == ZRT_BF16);
  ZT_OK(zrt_config_set(c, "zero_optimization.stage", "auto", "--zero_stage"));
  ZT_CHECK(v->zero_stage == -1);
  ZT_OK(zrt_config_resolve(c, 1));
  ZT_CHECK(v->zero_stage == -1); /* the engine picks */
  ZT_OK(zrt_config_set(c, "mixed_precision", "bf16", "--mixed_precision"));
  ZT_CHECK(v->bf16_enabled && !v->fp16_enabled && zrt_config_dtype(c) == ZRT_BF16);
  ZT_OK(zrt_config_set(c, "bfloat16.check_grad_overflow", "true", "program"));
  ZT_CHECK(v->bf16_check_grad_overflow == 1);
  /* did-you-mean */
  ZT_CHECK(zrt_config_set(c, "zero_optimization.stgae", "1", "--set") == ZRT_ERR_CONFIG);
  ZT_CONTAINS(zrt_last_error(), "unknown config key 'zero_optimization.stgae'");
  ZT_CONTAINS(zrt_last_error(), "did you mean 'zero_optimization.stage'?");
  char sug[256];
  ZT_CONTAINS(zrt_config_suggest("optimzer.params.lr", sug, sizeof sug), "optimizer.params.lr");
  ZT_CONTAINS(zrt_config_suggest("gradient_acumulation_steps", sug, sizeof sug),
              "gradient_accumulation_steps");
  ZT_CHECK(!strcmp(zrt_config_suggest("completely_unrelated_thing", sug, sizeof sug), ""));
  ZT_CHECK(zrt_config_get(c, "nope.key", sug, sizeof sug) == ZRT_ERR_CONFIG);
  zrt_config_destroy(c);
}

static void test_batch_triple(void) {
  struct {
    const char *t, *m, *a;
    int w;
    int64_t et, em, ea;
  } ok[] = {{NULL, "4", "2", 4, 32, 4, 2},  {"32", "4", NULL, 2, 32, 4, 4},
            {"32", NULL, "2", 4, 32, 4, 2}, {"32", NULL, NULL, 4, 32, 8, 1},
            {NULL, "3", NULL, 2, 6, 3, 1},  {"24", "3", "2", 4, 24, 3, 2},
            {NULL, NULL, NULL, 3, 3, 1, 1}};
  for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
    zrt_config *c = fresh();
    if (ok[i].t) ZT_OK(zrt_config_set(c, "train_batch_size", ok[i].t, "program"));
    if (ok[i].m) ZT_OK(zrt_config_set(c, "train_micro_batch_size_per_gpu", ok[i].m, "program"));
    if (ok[i].a) ZT_OK(zrt_config_set(c, "gradient_accumulation_steps", ok[i].a, "program"));
    ZT_OK(zrt_config_resolve(c, ok[i].w));
    const zrt_cfg *v = zrt_config_values(c);
    if (v->train_batch_size != ok[i].et || v->train_micro_batch_size_per_gpu != ok[i].em ||
        v->gradient_accumulation_steps != ok[i].ea) {
      fprintf(stderr, "FAIL batch case %zu: got %lld %lld %lld\n", i,
              (long long)v->train_batch_size, (long long)v->train_micro_batch_size_per_gpu,
              (long long)v->gradient_accumulation_steps);
      zt_failures++;
    }
    zrt_config_destroy(c);
  }
  zrt_config *c = fresh();
  ZT_OK(zrt_config_set(c, "train_batch_size", "64", "program"));
  ZT_OK(zrt_config_set(c, "train_micro_batch_size_per_gpu", "4", "program"));
  ZT_OK(zrt_config_set(c, "gradient_accumulation_steps", "2", "program"));
  ZT_CHECK(zrt_config_resolve(c, 4) == ZRT_ERR_CONFIG);
  const char *m = zrt_last_error();
  ZT_CONTAINS(m, "train_batch_size 64");
  ZT_CONTAINS(m, "train_micro_batch_size_per_gpu 4");
  ZT_CONTAINS(m, "gradient_accumulation_steps 2");
  ZT_CONTAINS(m, "world size 4");
  ZT_OK(zrt_config_resolve(c, 8));
  ZT_OK(zrt_config_set(c, "gradient_accumulation_steps", "auto", "--accum"));
  ZT_CHECK(zrt_config_resolve(c, 3) == ZRT_ERR_CONFIG);
  ZT_CONTAINS(zrt_last_error(), "not divisible");
  ZT_OK(zrt_config_resolve(c, 2));
  ZT_CHECK(zrt_config_values(c)->gradient_accumulation_steps == 8);
  zrt_config_destroy(c);
}

static void same_entries(zrt_config *a, zrt_config *b, const char *what) {
  int bad = 0;
  for (size_t i = 0; i < zrt_config_schema_count(); i++) {
    const char *k;
    char va[600], vb[600];
    zrt_cfg_source sa, sb;
    ZT_OK(zrt_config_entry(a, i, &k, va, sizeof va, &sa));
    ZT_OK(zrt_config_entry(b, i, NULL, vb, sizeof vb, &sb));
    if (strcmp(va, vb) || sa.kind != sb.kind || strcmp(sa.where, sb.where)) {
      fprintf(stderr, "FAIL %s: %s: \"%s\" (%s %s) vs \"%s\" (%s %s)\n", what, k, va,
              zrt_config_source_kind_name(sa.kind), sa.where, vb,
              zrt_config_source_kind_name(sb.kind), sb.where);
      bad++;
    }
  }
  zt_failures += bad;
  printf("%s: %d of %zu entries differ\n", what, bad, zrt_config_schema_count());
}

static void test_write_round_trip(void) {
  zrt_config *c = fresh();
  ZT_OK(zrt_config_load_file(c, data("launch_with_file.yaml")));
  ZT_OK(zrt_config_set(c, "zero_optimization.offload_optimizer.device", "cpu", "--offload"));
  ZT_OK(zrt_config_set(c, "optimizer.params.betas", "[0.8, 0.9]", "program"));
  ZT_OK(zrt_config_set(c, "zrt.metrics_path", "/tmp/m \"q\".jsonl", "program"));
  ZT_OK(zrt_config_resolve(c, 2));
  char js[512], ym[512];
  snprintf(js, sizeof js, "%s/rt.json", tmpdir);
  snprintf(ym, sizeof ym, "%s/rt.yaml", tmpdir);
  ZT_OK(zrt_config_write_json(c, js));
  zrt_config *d = fresh();
  ZT_OK(zrt_config_load_file(d, js));
  same_entries(c, d, "write_json round trip");
  ZT_OK(zrt_config_resolve(d, 2));
  same_entries(c, d, "write_json round trip, resolved again");
  /* YAML writer: values round trip (sources become the YAML file's) */
  ZT_OK(zrt_config_write_yaml(c, ym, 1));
  zrt_config *y = fresh();
  ZT_OK(zrt_config_load_file(y, ym));
  for (size_t i = 0; i < zrt_config_schema_count(); i++) {
    const char *k;
    char va[600], vb[600];
    ZT_OK(zrt_config_entry(c, i, &k, va, sizeof va, NULL));
    ZT_OK(zrt_config_entry(y, i, NULL, vb, sizeof vb, NULL));
    if (strcmp(va, vb)) {
      fprintf(stderr, "FAIL write_yaml: %s \"%s\" vs \"%s\"\n", k, va, vb);
      zt_failures++;
    }
  }
  zrt_config_destroy(c);
  zrt_config_destroy(d);
  zrt_config_destroy(y);
}

static void test_reference(void) {
  char p[512];
  snprintf(p, sizeof p, "%s/ref.md", tmpdir);
  FILE *f = fopen(p, "w+");
  ZT_OK(zrt_config_write_reference(f));
  long n = ftell(f);
  rewind(f);
  char *buf = calloc(1, (size_t)n + 1);
  ZT_CHECK(fread(buf, 1, (size_t)n, f) == (size_t)n);
  fclose(f);
  ZT_CONTAINS(buf, "| `zero_optimization.stage` | integer | `0` | 0 .. 3, `auto` |");
  ZT_CONTAINS(buf, "ZRT_DEVICE_MEMORY_LIMIT");
  ZT_CONTAINS(buf, "## `zero_optimization.offload_param`");
  ZT_CONTAINS(buf, "none\\|cpu\\|nvme");
  ZT_CONTAINS(buf, "activation_checkpointing");
  free(buf);
}

/* DeepSpeed: "type": "Adam" runs AdamW unless adam_w_mode is false
 * (ADAM_W_MODE_DEFAULT = True); AdamW stays AdamW whatever the flag. */
static void test_adam_w_mode(void) {
  static const struct {
    const char *type, *wmode; /* NULL: leave unset */
    zrt_optim_type want;
  } cases[] = {
      {NULL, NULL, ZRT_OPTIM_ADAMW},       {"Adam", NULL, ZRT_OPTIM_ADAMW},
      {"adam", "true", ZRT_OPTIM_ADAMW},   {"Adam", "false", ZRT_OPTIM_ADAM},
      {"AdamW", "false", ZRT_OPTIM_ADAMW}, {"SGD", NULL, ZRT_OPTIM_SGD},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    zrt_config *c = fresh();
    if (cases[i].type) ZT_OK(zrt_config_set(c, "optimizer.type", cases[i].type, "program"));
    if (cases[i].wmode)
      ZT_OK(zrt_config_set(c, "optimizer.params.adam_w_mode", cases[i].wmode, "program"));
    ZT_OK(zrt_config_resolve(c, 2));
    const zrt_cfg *v = zrt_config_values(c);
    if (v->optimizer_type != cases[i].want) {
      fprintf(stderr, "FAIL type %s adam_w_mode %s: optimizer %d, want %d\n",
              cases[i].type ? cases[i].type : "(unset)",
              cases[i].wmode ? cases[i].wmode : "(unset)", (int)v->optimizer_type,
              (int)cases[i].want);
      zt_failures++;
    }
    zrt_config_destroy(c);
  }
  /* the derivation says why, and a re-resolve after adam_w_mode turned false undoes it */
  zrt_config *c = fresh();
  ZT_OK(zrt_config_set(c, "optimizer.type", "Adam", "program"));
  ZT_OK(zrt_config_resolve(c, 1));
  check_text(c, "optimizer.type", "AdamW");
  check_src(c, "optimizer.type", ZRT_SRC_DERIVED, "adam_w_mode true");
  ZT_OK(zrt_config_set(c, "optimizer.params.adam_w_mode", "false", "program"));
  ZT_OK(zrt_config_resolve(c, 1));
  ZT_CHECK(zrt_config_values(c)->optimizer_type == ZRT_OPTIM_ADAM);
  zrt_config_destroy(c);
}

int main(void) {
  const char *src = getenv("ZRT_SOURCE_DIR");
  snprintf(datadir, sizeof datadir, "%s/tests/data/configs", src ? src : ZRT_TEST_SOURCE_DIR);
  snprintf(tmpdir, sizeof tmpdir, "/tmp/zrt_test_config_XXXXXX");
  if (!mkdtemp(tmpdir)) ZT_SKIP("cannot create a temporary directory");
  test_defaults();
  test_deepspeed_json();
  test_hf_auto();
  test_accelerate();
  test_launch_with_file();
  test_errors();
  test_precedence_env();
  test_sizes_and_set();
  test_batch_triple();
  test_write_round_trip();
  test_reference();
  test_adam_w_mode();
  char cmd[512];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
  if (system(cmd)) fprintf(stderr, "note: could not remove %s\n", tmpdir);
  ZT_DONE();
}
