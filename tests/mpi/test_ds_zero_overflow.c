/*
 * test_ds_zero_overflow.c — DeepSpeed's tests/unit/runtime/half_precision/
 * test_zero_optim_overflow.py ported to the engine, same configs, same
 * gradient values, same assertions (run at -n 2, DeepSpeed's world size,
 * and -n 4).
 *
 * DeepSpeed's SimpleModel(hidden_dim=10) is one Linear(10, 10): a weight
 * [10, 10] and a bias [10], here one module. Its run_model_step sets every
 * parameter's full (reduced) gradient to one value and steps; here every
 * rank adds value * loss_scale into each grad buffer, so that the
 * engine's grad_mul 1 / (scale * world * accum) leaves exactly `value`
 * (inf, -inf and nan stay what they are). For every ZeRO stage 1 and 2,
 * with and without offload_optimizer cpu, and Adam lr 0.00015:
 *   fp16 test_no_overflow  2^8, window 2, ten clean steps: after step i the
 *       scale is the expected one and the scaler's cur_iter is i + 1; the
 *       expected scale doubles whenever cur_iter is a multiple of 2.
 *   fp16 test_all_overflow 2^8, hysteresis 1, inf, -inf, six nan: each step
 *       halves (floored at 1), cur_iter == i + 1.
 *   fp16 test_some_overflow 2^8, hysteresis 1: inf, nan -> /4 at iteration
 *       2; window + 1 clean -> x2 at 5; inf -> /2 at 6.
 *   bf16 test_no_overflow  ten clean steps: no step skipped, every param finite.
 *   bf16 test_detect_grad_overflow (check_grad_overflow true): step i leaves
 *       i + 1 skipped; every param finite.
 *   bf16 test_ignore_grad_overflow (check_grad_overflow false): nothing
 *       skipped and every param has an inf or nan. zrt stops such a run by
 *       default (zrt.stop_on_nonfinite), so the DeepSpeed assertions run with
 *       it false, and a second run checks the default stops at step 1 with
 *       ZRT_ERR_OVERFLOW and a message naming the key.
 * Then zrt's own rule: a NaN loss stops the run (metrics line with null).
 * Exact: scales are powers of two, counts are integers.
 */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dtype.h"
#include "zt_engine.h"
#include "zt_mpi.h"
#include "ztest.h"

#define HIDDEN 10
#define NOVF 8

static int rank_;
static float loss_ = 0.5f; /* the micro-batch loss each step reports */
static const float overflow_grads[NOVF] = {INFINITY, -INFINITY, NAN, NAN, NAN, NAN, NAN, NAN};

typedef struct model {
  zrt_engine *eng;
  int mod, pid[2];
} model;

static void build(model *m, int stage, int offload, const char *prec, const char *const *extra) {
  zrt_config *cfg;
  ZT_OK(zrt_config_create(&cfg));
  char v[16];
  snprintf(v, sizeof v, "%d", stage);
  ZT_OK(zrt_config_set(cfg, "train_micro_batch_size_per_gpu", "1", "test"));
  ZT_OK(zrt_config_set(cfg, "steps_per_print", "1000", "test"));
  ZT_OK(zrt_config_set(cfg, "optimizer.type", "Adam", "test"));
  ZT_OK(zrt_config_set(cfg, "optimizer.params.lr", "0.00015", "test"));
  ZT_OK(zrt_config_set(cfg, "zero_optimization.stage", v, "test"));
  ZT_OK(zrt_config_set(cfg, "zrt.comm", "mpi", "test"));
  if (offload)
    ZT_OK(zrt_config_set(cfg, "zero_optimization.offload_optimizer.device", "cpu", "test"));
  if (!strcmp(prec, "fp16")) {
    ZT_OK(zrt_config_set(cfg, "fp16.enabled", "true", "test"));
    ZT_OK(zrt_config_set(cfg, "fp16.loss_scale", "0", "test"));
    ZT_OK(zrt_config_set(cfg, "fp16.initial_scale_power", "8", "test"));
    ZT_OK(zrt_config_set(cfg, "fp16.loss_scale_window", "2", "test"));
  } else {
    ZT_OK(zrt_config_set(cfg, "bf16.enabled", "true", "test"));
  }
  for (int i = 0; extra && extra[i]; i += 2)
    ZT_OK(zrt_config_set(cfg, extra[i], extra[i + 1], "test"));
  ZT_OK(zrt_engine_create(cfg, &m->eng));
  zrt_config_destroy(cfg);
  ZT_OK(zrt_module_add(m->eng, "linears.0", &m->mod));
  int64_t ws[2] = {HIDDEN, HIDDEN}, bs[1] = {HIDDEN};
  zrt_init init = {ZRT_INIT_NORMAL, 0.02f};
  ZT_OK(zrt_param_add(m->eng, m->mod, "linears.0.weight", 2, ws, init, 0, &m->pid[0]));
  ZT_OK(
      zrt_param_add(m->eng, m->mod, "linears.0.bias", 1, bs, init, ZRT_PARAM_NO_DECAY, &m->pid[1]));
  ZT_OK(zrt_engine_build(m->eng));
}

/* run_model_step: the full gradient of every parameter is `value`. */
static zrt_status step(model *m, float value, zrt_step_info *info) {
  zrt_engine *eng = m->eng;
  float scale;
  ZT_OK(zrt_engine_loss_scale(eng, &scale));
  ZT_OK(zrt_module_fetch(eng, m->mod));
  ZT_OK(zrt_module_release(eng, m->mod));
  for (int k = 0; k < 2; k++) {
    int64_t n;
    void *g;
    ZT_OK(zrt_param_numel(eng, m->pid[k], &n));
    ZT_OK(zrt_param_grad(eng, m->pid[k], &g));
    size_t bytes = (size_t)n * zrt_dtype_size(zt_view(eng).dtype);
    unsigned char *h = malloc(bytes);
    for (int64_t i = 0; i < n; i++) zrt_store_f(h, zt_view(eng).dtype, (size_t)i, value * scale);
    ZT_OK(zrt_engine_memcpy(eng, g, h, bytes, ZRT_COPY_H2D));
    free(h);
  }
  ZT_OK(zrt_module_grads_ready(eng, m->mod));
  return zrt_engine_step(eng, loss_, info);
}

/* has_inf_or_nan per parameter: how many of the 2 params hold a non-finite
 * element. */
static int params_nonfinite(model *m) {
  zrt_engine *eng = m->eng;
  int bad = 0;
  ZT_OK(zrt_module_fetch(eng, m->mod));
  for (int k = 0; k < 2; k++) {
    int64_t n;
    void *w;
    ZT_OK(zrt_param_numel(eng, m->pid[k], &n));
    ZT_OK(zrt_param_data(eng, m->pid[k], &w));
    size_t bytes = (size_t)n * zrt_dtype_size(zt_view(eng).dtype);
    unsigned char *h = malloc(bytes);
    ZT_OK(zrt_engine_memcpy(eng, h, w, bytes, ZRT_COPY_D2H));
    int any = 0;
    for (int64_t i = 0; i < n; i++) any |= !isfinite(zrt_load_f(h, zt_view(eng).dtype, (size_t)i));
    bad += any;
    free(h);
  }
  ZT_OK(zrt_module_release(eng, m->mod));
  return bad;
}

/* np.random.uniform(-0.1, 0.1): the same sequence on every rank */
static float uniform(unsigned *s) {
  *s = *s * 1664525u + 1013904223u;
  return -0.1f + 0.2f * (float)(*s >> 8) / (float)(1u << 24);
}

static void expect(int ok, const char *test, int stage, int off, int i, double got, double want) {
  if (ok) return;
  if (rank_ == 0)
    fprintf(stderr, "FAIL %s stage %d offload %d step %d: got %g want %g\n", test, stage, off, i,
            got, want);
  zt_failures++;
}

static void fp16_no_overflow(int stage, int off) {
  model m;
  build(&m, stage, off, "fp16", NULL);
  double expected = 256;
  ZT_CHECK(zt_scaler(m.eng).dynamic && zt_scaler(m.eng).cur_scale == expected &&
           zt_scaler(m.eng).window == 2);
  unsigned seed = 1;
  for (int i = 0; i < 10; i++) {
    zrt_step_info info;
    ZT_OK(step(&m, uniform(&seed), &info));
    expect(zt_scaler(m.eng).cur_scale == expected, "fp16 no_overflow scale", stage, off, i,
           zt_scaler(m.eng).cur_scale, expected);
    expect(zt_scaler(m.eng).cur_iter == i + 1 && info.step == i + 1, "fp16 no_overflow cur_iter",
           stage, off, i, (double)zt_scaler(m.eng).cur_iter, i + 1);
    if (zt_scaler(m.eng).cur_iter % 2 == 0) expected *= 2;
  }
  zrt_engine_destroy(m.eng);
}

static void fp16_all_overflow(int stage, int off) {
  const char *extra[] = {"fp16.hysteresis", "1", "fp16.initial_scale_power", "8", NULL};
  model m;
  build(&m, stage, off, "fp16", extra);
  double expected = 256; /* 2^len(overflow_gradients) */
  for (int i = 0; i < NOVF; i++) {
    zrt_step_info info;
    ZT_OK(step(&m, overflow_grads[i], &info));
    expected = expected / 2 > 1 ? expected / 2 : 1;
    expect(zt_scaler(m.eng).cur_scale == expected, "fp16 all_overflow scale", stage, off, i,
           zt_scaler(m.eng).cur_scale, expected);
    expect(zt_scaler(m.eng).cur_iter == i + 1 && info.skipped, "fp16 all_overflow cur_iter", stage,
           off, i, (double)zt_scaler(m.eng).cur_iter, i + 1);
  }
  zrt_engine_destroy(m.eng);
}

static void fp16_some_overflow(int stage, int off) {
  const char *extra[] = {"fp16.hysteresis", "1", NULL};
  model m;
  build(&m, stage, off, "fp16", extra);
  zrt_step_info info;
  double expected = 256;
  int64_t it = 0;
  ZT_OK(step(&m, INFINITY, &info));
  ZT_OK(step(&m, NAN, &info));
  it += 2;
  expected /= 4;
  expect(zt_scaler(m.eng).cur_scale == expected && zt_scaler(m.eng).cur_iter == it,
         "fp16 some_overflow (2 overflows)", stage, off, 2, zt_scaler(m.eng).cur_scale, expected);
  unsigned seed = 7;
  for (int i = 0; i < 3; i++) ZT_OK(step(&m, uniform(&seed), &info));
  it += 3;
  expected *= 2;
  expect(zt_scaler(m.eng).cur_scale == expected && zt_scaler(m.eng).cur_iter == it,
         "fp16 some_overflow (window + 1 clean)", stage, off, 5, zt_scaler(m.eng).cur_scale,
         expected);
  ZT_OK(step(&m, INFINITY, &info));
  it += 1;
  expected /= 2;
  expect(zt_scaler(m.eng).cur_scale == expected && zt_scaler(m.eng).cur_iter == it,
         "fp16 some_overflow (1 overflow)", stage, off, 6, zt_scaler(m.eng).cur_scale, expected);
  zrt_engine_destroy(m.eng);
}

static void bf16_no_overflow(int stage, int off) {
  model m;
  build(&m, stage, off, "bf16", NULL);
  unsigned seed = 3;
  zrt_step_info info;
  for (int i = 0; i < 10; i++) ZT_OK(step(&m, uniform(&seed), &info));
  expect(info.skipped_total == 0, "bf16 no_overflow skipped", stage, off, 10,
         (double)info.skipped_total, 0);
  int bad = params_nonfinite(&m);
  expect(bad == 0, "bf16 no_overflow non-finite params", stage, off, 10, bad, 0);
  zrt_engine_destroy(m.eng);
}

static void bf16_detect(int stage, int off) {
  const char *extra[] = {"bf16.check_grad_overflow", "true", NULL};
  model m;
  build(&m, stage, off, "bf16", extra);
  for (int i = 0; i < NOVF; i++) {
    zrt_step_info info;
    ZT_OK(step(&m, overflow_grads[i], &info));
    expect(info.skipped_total == i + 1, "bf16 detect_grad_overflow skipped", stage, off, i,
           (double)info.skipped_total, i + 1);
  }
  int bad = params_nonfinite(&m);
  expect(bad == 0, "bf16 detect_grad_overflow non-finite params", stage, off, NOVF, bad, 0);
  zrt_engine_destroy(m.eng);
}

static void bf16_ignore(int stage, int off) {
  const char *extra[] = {"bf16.check_grad_overflow", "false", "zrt.stop_on_nonfinite", "false",
                         NULL};
  model m;
  build(&m, stage, off, "bf16", extra);
  zrt_step_info info;
  for (int i = 0; i < NOVF; i++) ZT_OK(step(&m, overflow_grads[i], &info));
  expect(info.skipped_total == 0, "bf16 ignore_grad_overflow skipped", stage, off, NOVF,
         (double)info.skipped_total, 0);
  int bad = params_nonfinite(&m);
  expect(bad == 2, "bf16 ignore_grad_overflow params with inf/nan", stage, off, NOVF, bad, 2);
  zrt_engine_destroy(m.eng);

  /* zrt's default: the first applied non-finite step stops the run */
  const char *dflt[] = {"bf16.check_grad_overflow", "false", NULL};
  build(&m, stage, off, "bf16", dflt);
  zrt_status st = step(&m, INFINITY, &info);
  expect(st == ZRT_ERR_OVERFLOW, "bf16 applied non-finite stops", stage, off, 1, st,
         ZRT_ERR_OVERFLOW);
  ZT_CONTAINS(zrt_last_error(), "step 1: non-finite gradients were applied");
  ZT_CONTAINS(zrt_last_error(), "zrt.stop_on_nonfinite=false");
  zrt_engine_destroy(m.eng);
}

/* not DeepSpeed's: a NaN loss (finite grads) is logged with its step and
 * stops the run unless zrt.stop_on_nonfinite is false; the metrics line of
 * that step stays valid JSON (null, not a bare nan). */
static void nan_loss(void) {
  char mpath[128] = "";
  if (rank_ == 0) snprintf(mpath, sizeof mpath, "/tmp/zrt_ds_overflow_%d.jsonl", (int)getpid());
  MPI_Bcast(mpath, sizeof mpath, MPI_CHAR, 0, MPI_COMM_WORLD);
  const char *extra[] = {"zrt.metrics_path", mpath, NULL};
  model m;
  build(&m, 2, 0, "bf16", extra);
  zrt_step_info info;
  ZT_OK(step(&m, 0.01f, &info));
  loss_ = NAN;
  zrt_status st = step(&m, 0.01f, &info);
  ZT_CHECK(st == ZRT_ERR_OVERFLOW);
  ZT_CONTAINS(zrt_last_error(), "step 2: the loss is nan");
  zrt_engine_destroy(m.eng);
  if (rank_ == 0) {
    FILE *f = fopen(mpath, "r");
    char line[8192];
    int n = 0, nulls = 0, bare = 0;
    while (f && fgets(line, sizeof line, f)) {
      n++;
      nulls += strstr(line, "\"loss\":null") != NULL;
      bare += strstr(line, "nan") != NULL || strstr(line, "inf") != NULL;
    }
    if (f) fclose(f);
    printf("nan loss: %d metrics lines, %d with loss null, %d with a bare nan/inf\n", n, nulls,
           bare);
    ZT_CHECK(n == 2 && nulls == 1 && bare == 0);
    unlink(mpath);
  }
  const char *go_on[] = {"zrt.stop_on_nonfinite", "false", NULL};
  build(&m, 2, 0, "bf16", go_on);
  ZT_OK(step(&m, 0.01f, &info));
  ZT_OK(step(&m, 0.01f, &info));
  ZT_CHECK(info.step == 2);
  zrt_engine_destroy(m.eng);
  loss_ = 0.5f;
}

int main(int argc, char **argv) {
  ZT_MPI_INIT(&argc, &argv);
  int world;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  for (int stage = 1; stage <= 2; stage++)
    for (int off = 0; off <= 1; off++) {
      int before = zt_failures;
      fp16_no_overflow(stage, off);
      fp16_all_overflow(stage, off);
      fp16_some_overflow(stage, off);
      bf16_no_overflow(stage, off);
      bf16_detect(stage, off);
      bf16_ignore(stage, off);
      if (rank_ == 0)
        printf("stage %d offload_optimizer %s world %d: %s\n", stage, off ? "cpu" : "none", world,
               zt_failures == before ? "all DeepSpeed assertions hold" : "FAILED");
    }
  nan_loss();
  ZT_MPI_DONE();
}
