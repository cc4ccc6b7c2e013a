/*
 * bench_offload_step.c — `zrt-perf offload_step`: the stages of
 * ZeRO-Offload's optimizer step on this machine, one rank (CPU backend,
 * self comm), bf16 working dtype, AdamW, a shard of --elements fp32
 * (default 16 Mi; 4 Mi with `all`):
 *
 *  1. gradients to the host: the gradient buckets with a host accumulator
 *     (sharding/bucket.h) — each reduced bucket copied device-to-host into
 *     pinned staging and added into the fp32 host shard by the buckets' host
 *     thread. Bytes per element: the copy moves 2 (bf16), the accumulation
 *     reads 2 and reads + writes 8 of fp32 (d2h_bytes_per_s counts the copy,
 *     accumulate_bytes_per_s the 10 B of the add, both over the stage's time);
 *  2. hidden fraction of stage 1 behind compute: a stand-in for the
 *     backward (a compute-bound FMA loop on a cache-resident buffer, sized to
 *     take about as long as stage 1) interleaved with the buckets, one
 *     module-sized slice of each per bucket round; hidden = (compute alone +
 *     stage 1 alone - interleaved) / stage 1 alone, clamped to [0, 1];
 *  3. the CPU optimizer reading the host shard in place
 *     (zrt_offload_pipe_step_host_grad): 4 grad + 24 master/m/v read+write +
 *     2 bf16 param = 30 B per element, and
 *  4. the new 16-bit parameters host-to-device inside the same pipe (its
 *     copy thread): 2 B per element, with the pipe's own hidden_fraction
 *     (copy time overlapped by the update).
 * Each bytes/s is set against the STREAM triad of the same run (24 B per
 * element as STREAM counts it, same OpenMP threads). On the CPU backend
 * "device" memory is host memory, so the copies are memcpys: the figures
 * bound what the host side of a GPU run costs, not PCIe. Best of several
 * repetitions; the machine is shared. Never asserts a timing.
 */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bucket.h"
#include "comm.h"
#include "cpu_optim.h"
#include "dtype.h"
#include "hostpool.h"
#include "offload.h"
#include "perf.h"

/* STREAM triad a = b + s c over n floats: best bytes/s (24 B per element). */
static double zrt_os_triad(size_t n) {
  float *a = malloc(n * 4), *b = malloc(n * 4), *c = malloc(n * 4);
  double best = 0;
  if (!a || !b || !c) goto done;
#pragma omp parallel for schedule(static)
  for (long i = 0; i < (long)n; i++) a[i] = 1.0f, b[i] = 2.0f, c[i] = 0.5f;
  for (int rep = 0; rep < 6; rep++) {
    double t0 = zrt_now_s();
#pragma omp parallel for schedule(static)
    for (long i = 0; i < (long)n; i++) a[i] = b[i] + 3.0f * c[i];
    best = ZRT_MAX(best, 24.0 * (double)n / (zrt_now_s() - t0));
  }
done:
  free(a);
  free(b);
  free(c);
  return best;
}

/* Compute-bound stand-in for a slice of the backward: iters FMA sweeps
 * over a 16 KiB buffer (stays in L1). The sink keeps it from vanishing. */
static volatile float zrt_os_sink;
static void zrt_os_compute(long iters) {
  float x[4096];
  for (int i = 0; i < 4096; i++) x[i] = (float)i * 1e-6f;
  for (long k = 0; k < iters; k++)
    for (int i = 0; i < 4096; i++) x[i] = x[i] * 0.999f + 1e-7f;
  zrt_os_sink = x[7];
}

typedef struct zrt_os_ctx {
  zrt_buckets *b;
  void *g16;
  float *acc;
  int64_t n, slice; /* elements, elements per module slice */
} zrt_os_ctx;

/* Stage 1 over the whole shard: module slices reduced into the host shard
 * (async, drained at the end); compute_iters of stand-in compute after each
 * slice (0 = none). Returns seconds. */
static double zrt_os_grads(zrt_os_ctx *c, long compute_iters, zrt_status *st) {
  double t0 = zrt_now_s();
  size_t ws = 2;
  for (int64_t o = 0; o < c->n && *st == ZRT_OK; o += c->slice) {
    int64_t len = ZRT_MIN(c->slice, c->n - o);
    *st = zrt_buckets_reduce(c->b, (char *)c->g16 + (size_t)o * ws, len, len, c->acc + o, 1, 0, 1);
    if (compute_iters) zrt_os_compute(compute_iters);
  }
  if (*st == ZRT_OK) *st = zrt_buckets_drain(c->b);
  return zrt_now_s() - t0;
}

static int zrt_bench_offload_step(const zrt_perf_args *a, cJSON *r) {
  const char *el = zrt_perf_opt(a, "elements");
  int64_t n = el ? (int64_t)atof(el) : (a->quick ? (int64_t)1 << 22 : (int64_t)1 << 24);
  n = ZRT_ALIGN_UP(ZRT_MAX(n, (int64_t)4096), (int64_t)4096);
  int64_t slice = ZRT_MIN(n, (int64_t)1 << 20), chunk = 1 << 18;
  zrt_backend *be = NULL;
  zrt_comm *comm = NULL;
  zrt_hostpool *hp = NULL;
  zrt_buckets *b = NULL;
  zrt_offload_pipe *pipe = NULL;
  void *g16 = NULL, *p16 = NULL;
  float *acc = NULL, *m = NULL, *s1 = NULL, *s2 = NULL;
  zrt_status st = ZRT_OK;
  zrt_hostpool_opts ho = {.numa_node = -1, .pin = 0, .allow_fallback = 1};
  if (zrt_backend_create("cpu", 0, 0, &be) || zrt_comm_create("self", be, 0, &comm) ||
      zrt_hostpool_create(&ho, be, &hp)) {
    zrt_perf_note("offload_step: %s", zrt_last_error());
    return 1;
  }
  zrt_pool *pool = zrt_hostpool_pool(hp);
  zrt_offload_opts oo = {.tile_elems = 1 << 20};
  ZRT_CHECK_GOTO(zrt_backend_alloc(be, (size_t)n * 2, ZRT_MEM_GRADS, &g16), st, done);
  ZRT_CHECK_GOTO(zrt_backend_alloc(be, (size_t)n * 2, ZRT_MEM_PARAMS16, &p16), st, done);
  ZRT_CHECK_GOTO(zrt_pool_alloc(pool, (size_t)n * 4, ZRT_MEM_GRADS, (void **)&acc), st, done);
  ZRT_CHECK_GOTO(zrt_pool_alloc(pool, (size_t)n * 4, ZRT_MEM_MASTER32, (void **)&m), st, done);
  ZRT_CHECK_GOTO(zrt_pool_alloc(pool, (size_t)n * 4, ZRT_MEM_OPTIM_STATE, (void **)&s1), st, done);
  ZRT_CHECK_GOTO(zrt_pool_alloc(pool, (size_t)n * 4, ZRT_MEM_OPTIM_STATE, (void **)&s2), st, done);
  for (int64_t i = 0; i < n; i++) {
    ((uint16_t *)g16)[i] = zrt_f32_to_bf16(1e-3f * (float)(i % 97 - 48));
    acc[i] = 0;
    m[i] = 0.01f * (float)(i % 13);
    s1[i] = s2[i] = 0;
  }
  ZRT_CHECK_GOTO(zrt_buckets_create(be, comm, ZRT_BF16, ZRT_BF16, chunk, &b), st, done);
  ZRT_CHECK_GOTO(zrt_buckets_set_host(b, pool, zrt_hostpool_pinned(hp), chunk), st, done);
  ZRT_CHECK_GOTO(zrt_offload_pipe_create(be, hp, &oo, &pipe), st, done);
  zrt_os_ctx c = {b, g16, acc, n, slice};

  int threads = omp_get_max_threads();
  double triad = zrt_os_triad((size_t)3 << 25);
  /* 1: gradients to the host, alone */
  double t_grads = 1e30;
  for (int rep = 0; rep < 4 && st == ZRT_OK; rep++)
    t_grads = ZRT_MIN(t_grads, zrt_os_grads(&c, 0, &st));
  /* 2: compute sized to about stage 1's time, alone and interleaved */
  long iters = 1;
  double t_one = 0;
  while (st == ZRT_OK) {
    double t0 = zrt_now_s();
    zrt_os_compute(iters);
    t_one = zrt_now_s() - t0;
    if (t_one * (double)ZRT_DIV_UP(n, slice) >= t_grads || iters > (1L << 24)) break;
    iters *= 2;
  }
  double t_comp = 1e30, t_both = 1e30;
  for (int rep = 0; rep < 3 && st == ZRT_OK; rep++) {
    double t0 = zrt_now_s();
    for (int64_t o = 0; o < n; o += slice) zrt_os_compute(iters);
    t_comp = ZRT_MIN(t_comp, zrt_now_s() - t0);
    t_both = ZRT_MIN(t_both, zrt_os_grads(&c, iters, &st));
  }
  double hidden = t_grads > 0 ? (t_comp + t_grads - t_both) / t_grads : 0;
  hidden = ZRT_MAX(0.0, ZRT_MIN(1.0, hidden));
  /* 3 + 4: the CPU optimizer on the host shard, the 16-bit params back */
  zrt_optim_hparams hpar = {.type = ZRT_OPTIM_ADAMW,
                            .lr = 1e-4f,
                            .beta1 = 0.9f,
                            .beta2 = 0.999f,
                            .eps = 1e-8f,
                            .weight_decay = 0.01f,
                            .bias_correction = 1,
                            .grad_mul = 1.0f};
  double t_opt = 1e30;
  zrt_offload_timing tm = {0}, best_tm = {0};
  for (int rep = 0; rep < 4 && st == ZRT_OK; rep++) {
    hpar.step = rep + 1;
    double t0 = zrt_now_s();
    st = zrt_offload_pipe_step_host_grad(pipe, &hpar, m, s1, s2, acc, ZRT_F32, p16, ZRT_BF16,
                                         (size_t)n);
    double dt = zrt_now_s() - t0;
    zrt_offload_pipe_timing(pipe, &tm);
    if (dt < t_opt) {
      t_opt = dt;
      best_tm = tm;
    }
  }
  if (st != ZRT_OK) goto done;
  double N = (double)n;
  cJSON_AddNumberToObject(r, "elements", N);
  cJSON_AddNumberToObject(r, "threads", threads);
  cJSON_AddStringToObject(r, "isa", zrt_isa_name(zrt_isa_best()));
  cJSON_AddNumberToObject(r, "stream_triad_bytes_per_s", triad);
  cJSON_AddNumberToObject(r, "grads_to_host_s", t_grads);
  cJSON_AddNumberToObject(r, "d2h_bytes_per_s", 2 * N / t_grads);
  cJSON_AddNumberToObject(r, "accumulate_bytes_per_s", 10 * N / t_grads);
  cJSON_AddNumberToObject(r, "grads_to_host_fraction_of_triad", 12 * N / t_grads / triad);
  cJSON_AddNumberToObject(r, "compute_standin_s", t_comp);
  cJSON_AddNumberToObject(r, "grads_with_compute_s", t_both);
  cJSON_AddNumberToObject(r, "grads_hidden_fraction", hidden);
  cJSON_AddNumberToObject(r, "optimizer_step_s", t_opt);
  cJSON_AddNumberToObject(r, "optimizer_bytes_per_s", 30 * N / t_opt);
  cJSON_AddNumberToObject(r, "optimizer_fraction_of_triad", 30 * N / t_opt / triad);
  cJSON_AddNumberToObject(r, "h2d_params_bytes_per_s",
                          best_tm.copy_s > 0 ? 2 * N / best_tm.copy_s : 0);
  cJSON_AddNumberToObject(r, "h2d_hidden_fraction", best_tm.hidden_fraction);
  if (!a->json)
    printf("offload step, %lld elements, %d threads, %s; STREAM triad %.2f GB/s\n"
           "  1 grads to host (D2H + fp32 accumulate): %.4f s, copy %.2f GB/s, accumulate %.2f "
           "GB/s, %.0f%% of triad\n"
           "  2 hidden behind compute: %.0f%% (compute %.4f s + grads %.4f s -> together %.4f "
           "s)\n"
           "  3 CPU optimizer on the host shard: %.4f s, %.2f GB/s, %.0f%% of triad\n"
           "  4 params to device: %.2f GB/s, %.0f%% of the copies hidden behind the update\n",
           (long long)n, threads, zrt_isa_name(zrt_isa_best()), triad / 1e9, t_grads,
           2 * N / t_grads / 1e9, 10 * N / t_grads / 1e9, 100 * 12 * N / t_grads / triad,
           100 * hidden, t_comp, t_grads, t_both, t_opt, 30 * N / t_opt / 1e9,
           100 * 30 * N / t_opt / triad, best_tm.copy_s > 0 ? 2 * N / best_tm.copy_s / 1e9 : 0,
           100 * best_tm.hidden_fraction);
done:
  if (st != ZRT_OK) zrt_perf_note("offload_step: %s", zrt_last_error());
  zrt_offload_pipe_destroy(pipe);
  zrt_buckets_destroy(b);
  zrt_backend_free(be, g16);
  zrt_backend_free(be, p16);
  zrt_pool_free(pool, acc);
  zrt_pool_free(pool, m);
  zrt_pool_free(pool, s1);
  zrt_pool_free(pool, s2);
  zrt_hostpool_destroy(hp);
  zrt_comm_destroy(comm);
  zrt_backend_destroy(be);
  return st == ZRT_OK ? 0 : 1;
}

ZRT_PERF_BENCH(offload_step,
               "ZeRO-Offload step stages: grads to host (buckets' D2H + fp32 accumulate), hidden "
               "fraction behind compute, CPU optimizer on the host shard, params back; bytes/s "
               "vs STREAM triad [--elements N]",
               zrt_bench_offload_step)
