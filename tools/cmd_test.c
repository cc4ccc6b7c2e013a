/*
 * cmd_test.c — `zrt test`, as `accelerate test` does: with the user's own
 * launch config (the same options as `zrt launch`), start the ranks, check
 * each collective of the comm the engine picked against a closed-form
 * reference, train a tiny model a few steps at the configured stage,
 * precision and offload, and print one PASS / FAIL line per check with
 * what to fix.
 *
 * The launcher side is `zrt launch [options] <this zrt> test __rank`: the
 * ranks are started, watched and torn down exactly as a training program
 * would be. On the rank, every check is agreed over all ranks (one
 * all-reduce of the failure flags) so rank 0's lines speak for all of them.
 * The model is a quadratic bowl, loss = mean((w - 0.5)^2) / 2 over one
 * module, whose exact gradient the rank computes itself: a working engine
 * lowers it every applied step, so "loss fell by 5% in 8 steps" (Adam, lr
 * 0.05, no schedule: the test's own, at program priority) separates a
 * working configuration from a broken one whatever the user's lr.
 */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dtype.h"
#include "engine_state.h"
#include "tools.h"
#include "zrt.h"

#define TEST_N 4096     /* elements of the model and of each collective */
#define TEST_STEPS 8    /* optimizer steps of the training check */
#define TEST_TARGET 0.5 /* the bowl's minimum */

static int rank_ = 0, world_ = 1, nfail_ = 0;

/* Agrees a check over all ranks (any failing rank fails it) and prints
 * rank 0's line. */
static void report(zrt_engine *eng, const char *name, int ok, const char *detail, const char *fix) {
  float bad = ok ? 0.f : 1.f;
  zrt_engine_view v = {0};
  if (eng) zrt_engine_view_get(eng, &v);
  if (v.comm && zrt_comm_all_reduce(v.comm, &bad, &bad, 1, ZRT_F32, ZRT_RED_SUM, NULL) != ZRT_OK)
    bad = 1.f;
  if (bad > 0) nfail_++;
  if (rank_ == 0) {
    printf("zrt test: %s %-22s %s", bad > 0 ? "FAIL" : "PASS", name, detail);
    if (bad > 0) printf(" -- %s", fix);
    printf("\n");
    fflush(stdout);
  }
}

/* A device buffer of TEST_N * world floats filled by f(rank, i), for the
 * backend the engine runs on (NCCL needs device memory). */
static float *dev_fill(zrt_engine *eng, size_t n, float (*f)(int, size_t), float **host) {
  void *d = NULL;
  float *h = malloc(n * sizeof *h);
  if (!h || zrt_engine_alloc(eng, n * sizeof(float), ZRT_MEM_COMM, &d) != ZRT_OK) {
    free(h);
    return NULL;
  }
  for (size_t i = 0; i < n; i++) h[i] = f ? f(rank_, i) : 0.f;
  zrt_engine_memcpy(eng, d, h, n * sizeof(float), ZRT_COPY_H2D);
  *host = h;
  return d;
}

static float val_rank_i(int r, size_t i) { return (float)(r + 1) + (float)(i % 7); }

static void check_collectives(zrt_engine *eng) {
  const char *fix = "the ranks cannot talk: run `zrt env` on every machine, check mpiexec "
                    "reaches them (hostfile, ssh, firewall) and, on GPUs, NCCL_DEBUG=INFO";
  char detail[256];
  zrt_engine_view v;
  zrt_engine_view_get(eng, &v);
  size_t n = TEST_N, all = (size_t)world_ * n;
  size_t *counts = calloc((size_t)world_, sizeof *counts);
  for (int r = 0; r < world_; r++) counts[r] = n;
  float *h = NULL, *g = NULL;
  float *d = dev_fill(eng, n, val_rank_i, &h);
  float *big = dev_fill(eng, all, NULL, &g);
  if (!d || !big || !counts) {
    report(eng, "buffers", 0, "cannot allocate the test buffers", "free device memory");
    goto out;
  }
  /* all-reduce: sum over ranks of (r+1) + i%7 = W(W+1)/2 + W*(i%7) */
  int ok = zrt_comm_all_reduce(v.comm, d, d, n, ZRT_F32, ZRT_RED_SUM, NULL) == ZRT_OK;
  zrt_engine_memcpy(eng, h, d, n * sizeof(float), ZRT_COPY_D2H);
  double err = 0;
  for (size_t i = 0; ok && i < n; i++)
    err = fmax(err, fabs(h[i] - (world_ * (world_ + 1) / 2.0 + world_ * (double)(i % 7))));
  ok = ok && err == 0;
  snprintf(detail, sizeof detail, "(%s, %d ranks, %zu floats): max |diff| %g (exact expected)",
           v.comm_name, world_, n, err);
  report(eng, "all-reduce", ok, detail, fix);

  /* all-gather: rank r's block is (r+1) + i%7 */
  for (size_t i = 0; i < n; i++) h[i] = val_rank_i(rank_, i);
  zrt_engine_memcpy(eng, d, h, n * sizeof(float), ZRT_COPY_H2D);
  ok = zrt_comm_all_gather(v.comm, d, big, counts, ZRT_F32, NULL) == ZRT_OK;
  zrt_engine_memcpy(eng, g, big, all * sizeof(float), ZRT_COPY_D2H);
  err = 0;
  for (size_t i = 0; ok && i < all; i++)
    err = fmax(err, fabs(g[i] - val_rank_i((int)(i / n), i % n)));
  ok = ok && err == 0;
  snprintf(detail, sizeof detail, "(%zu floats per rank): max |diff| %g", n, err);
  report(eng, "all-gather", ok, detail, fix);

  /* reduce-scatter: every rank sends (r+1) + j%7 over the whole vector;
   * rank r keeps block r of the sum */
  for (size_t j = 0; j < all; j++) g[j] = val_rank_i(rank_, j);
  zrt_engine_memcpy(eng, big, g, all * sizeof(float), ZRT_COPY_H2D);
  ok = zrt_comm_reduce_scatter(v.comm, big, d, counts, ZRT_F32, ZRT_RED_SUM, NULL) == ZRT_OK;
  zrt_engine_memcpy(eng, h, d, n * sizeof(float), ZRT_COPY_D2H);
  err = 0;
  for (size_t i = 0; ok && i < n; i++) {
    size_t j = (size_t)rank_ * n + i;
    err = fmax(err, fabs(h[i] - (world_ * (world_ + 1) / 2.0 + world_ * (double)(j % 7))));
  }
  ok = ok && err == 0;
  snprintf(detail, sizeof detail, "(%zu floats per rank): max |diff| %g", n, err);
  report(eng, "reduce-scatter", ok, detail, fix);

  /* broadcast from rank 0 */
  for (size_t i = 0; i < n; i++) h[i] = rank_ == 0 ? (float)i : -1.f;
  zrt_engine_memcpy(eng, d, h, n * sizeof(float), ZRT_COPY_H2D);
  ok = zrt_comm_broadcast(v.comm, d, n, ZRT_F32, 0, NULL) == ZRT_OK;
  zrt_engine_memcpy(eng, h, d, n * sizeof(float), ZRT_COPY_D2H);
  err = 0;
  for (size_t i = 0; ok && i < n; i++) err = fmax(err, fabs(h[i] - (double)i));
  ok = ok && err == 0;
  snprintf(detail, sizeof detail, "(from rank 0): max |diff| %g", err);
  report(eng, "broadcast", ok, detail, fix);
out:
  if (d) zrt_engine_free(eng, d);
  if (big) zrt_engine_free(eng, big);
  free(h);
  free(g);
  free(counts);
}

/* One step of the bowl: fetch, exact gradient (scaled, this rank's share
 * of the mean over ranks), grads_ready, step. Returns the loss. */
static zrt_status bowl_step(zrt_engine *eng, int mod, int pid, unsigned char *hw, float *loss,
                            zrt_step_info *info) {
  zrt_engine_view v;
  zrt_engine_view_get(eng, &v);
  size_t ws = zrt_dtype_size(v.dtype);
  void *w, *gp;
  float scale;
  ZRT_CHECK(zrt_engine_loss_scale(eng, &scale));
  ZRT_CHECK(zrt_module_fetch(eng, mod));
  ZRT_CHECK(zrt_param_data(eng, pid, &w));
  ZRT_CHECK(zrt_engine_memcpy(eng, hw, w, TEST_N * ws, ZRT_COPY_D2H));
  ZRT_CHECK(zrt_module_release(eng, mod));
  double l = 0;
  unsigned char *hg = malloc(TEST_N * ws);
  if (!hg) return zrt_error(ZRT_ERR_OOM, "zrt test: out of host memory");
  for (size_t i = 0; i < TEST_N; i++) {
    double d = zrt_load_f(hw, v.dtype, i) - TEST_TARGET;
    l += 0.5 * d * d / TEST_N;
    zrt_store_f(hg, v.dtype, i, (float)(d / TEST_N * scale));
  }
  ZRT_CHECK(zrt_param_grad(eng, pid, &gp));
  zrt_status st = zrt_engine_memcpy(eng, gp, hg, TEST_N * ws, ZRT_COPY_H2D);
  free(hg);
  ZRT_CHECK(st);
  ZRT_CHECK(zrt_module_grads_ready(eng, mod));
  *loss = (float)l;
  return zrt_engine_step(eng, (float)l, info);
}

static void check_training(zrt_engine *eng, const zrt_engine_info *in) {
  char detail[400];
  const char *fix = "the configured stage / precision / offload does not train here: run "
                    "`zrt config explain` on the same files, try the stage or offload one step "
                    "lower to find the part that fails, and report it with `zrt env`";
  int mod = -1, pid = -1;
  int64_t shape[1] = {TEST_N};
  zrt_init init = {ZRT_INIT_NORMAL, 0.02f};
  zrt_status st = zrt_module_add(eng, "bowl", &mod);
  if (st == ZRT_OK)
    st = zrt_param_add(eng, mod, "bowl.w", 1, shape, init, ZRT_PARAM_NO_DECAY, &pid);
  if (st == ZRT_OK) st = zrt_engine_build(eng);
  if (st != ZRT_OK) {
    snprintf(detail, sizeof detail, "build failed: %s", zrt_last_error());
    report(eng, "engine build", 0, detail, fix);
    return;
  }
  zrt_engine_view v; /* after build: the stage "auto" resolved */
  zrt_engine_view_get(eng, &v);
  const char *off = v.cfg->offload_optimizer.device == ZRT_OFFLOAD_CPU    ? "cpu"
                    : v.cfg->offload_optimizer.device == ZRT_OFFLOAD_NVME ? "nvme"
                                                                          : "none";
  unsigned char *hw = malloc(TEST_N * zrt_dtype_size(v.dtype));
  float first = NAN, last = NAN, loss = 0;
  zrt_step_info info = {0};
  int steps = 0;
  for (; st == ZRT_OK && hw && steps < TEST_STEPS; steps++) {
    st = bowl_step(eng, mod, pid, hw, &loss, &info);
    if (steps == 0) first = loss;
    last = loss;
  }
  free(hw);
  int ok = st == ZRT_OK && isfinite(first) && isfinite(last) && last < 0.95f * first;
  snprintf(detail, sizeof detail,
           "(stage %d, %s, offload_optimizer %s, %d ranks): loss %.6g -> %.6g in %d steps, "
           "%lld skipped%s%s",
           v.stage, zrt_dtype_name(in->dtype), off, world_, (double)first, (double)last, steps,
           (long long)info.skipped_total, st != ZRT_OK ? "; error: " : "",
           st != ZRT_OK ? zrt_last_error() : "");
  report(eng, "training", ok, detail, fix);
}

static int test_rank_main(void) {
  zrt_config *cfg = NULL;
  zrt_engine *eng = NULL;
  zrt_status st = zrt_config_from_env(&cfg);
  /* the test's own model needs its own batch, lr and schedule */
  if (st == ZRT_OK)
    st = zrt_config_set(cfg, "train_micro_batch_size_per_gpu", "1", "program default (zrt test)");
  if (st == ZRT_OK) st = zrt_config_set(cfg, "optimizer.params.lr", "0.05", "program (zrt test)");
  if (st == ZRT_OK) st = zrt_config_set(cfg, "scheduler.type", "none", "program (zrt test)");
  if (st == ZRT_OK) st = zrt_engine_create(cfg, &eng);
  zrt_config_destroy(cfg);
  if (st != ZRT_OK) {
    printf("zrt test: FAIL %-22s %s -- fix the config or the machine as the message says\n",
           "engine create", zrt_last_error());
    return 1;
  }
  zrt_engine_info in;
  zrt_engine_get_info(eng, &in);
  rank_ = in.rank;
  world_ = in.world_size;
  char stage[32] = "auto (picked at build)";
  if (in.zero_stage >= 0) snprintf(stage, sizeof stage, "%d", in.zero_stage);
  if (rank_ == 0)
    printf("zrt test: %d rank(s), backend %s, comm %s, dtype %s, ZeRO stage %s\n", world_,
           in.backend, in.comm, zrt_dtype_name(in.dtype), stage);
  check_collectives(eng);
  check_training(eng, &in);
  if (rank_ == 0)
    printf("zrt test: %s\n", nfail_ ? "some checks FAILED (see the lines above)"
                                    : "all checks passed: this launch config works here");
  zrt_engine_destroy(eng);
  return nfail_ ? 1 : 0;
}

int zrt_cmd_test(int argc, char **argv) {
  if (argc >= 2 && !strcmp(argv[1], "__rank")) return test_rank_main();
  if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
    printf("usage: zrt test [zrt launch options]\n\n"
           "Starts the ranks the launch config describes (--config_file, --num_processes, ... as\n"
           "for `zrt launch`), checks all-reduce, all-gather, reduce-scatter and broadcast\n"
           "against exact references, trains a tiny model %d steps at the configured stage,\n"
           "precision and offload, and prints one PASS/FAIL line per check.\n",
           TEST_STEPS);
    return 0;
  }
  char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) {
    fprintf(stderr, "zrt test: cannot find the zrt executable (/proc/self/exe)\n");
    return 2;
  }
  self[n] = 0;
  char **av = calloc((size_t)argc + 4, sizeof *av);
  if (!av) return 2;
  int k = 0;
  av[k++] = "launch";
  for (int i = 1; i < argc; i++) av[k++] = argv[i];
  av[k++] = self;
  av[k++] = "test";
  av[k++] = "__rank";
  av[k] = NULL;
  int rc = zrt_cmd_launch(k, av);
  free(av);
  return rc;
}
