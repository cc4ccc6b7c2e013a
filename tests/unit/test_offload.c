/*
 * test_offload.c — the offload pipe on the CPU backend: for every optimizer
 * × grad dtype × param dtype, over three steps and a shard that is not a
 * multiple of the tile (so the last tile is partial), the pipe's master,
 * states and 16-bit params equal zrt_cpu_optim_step on the same data
 * bitwise (tolerance 0; the pipe runs the same kernel on the same bytes,
 * only tiled and overlapped with copies), and so do those of
 * zrt_offload_pipe_step_host_grad reading the gradients in place from host
 * memory (ZeRO-Offload's host gradient shard). Also: timing is reported with
 * hidden_fraction in [0, 1] (no timing asserted), bad arguments give clear
 * errors, the staging is accounted in the host pool.
 *
 * All of it again on the twin with jitter and slowed side streams, in both
 * of the pipe's modes: stream mode (every tile's copies, update and
 * write-back ordered by events, tiles of 4096 so most cases run several),
 * where the host's waits are counted too (queueing a step costs none,
 * zrt_offload_pipe_sync exactly one), and the blocking copy-thread mode
 * (opts.blocking: what the CUDA backend runs, its stream joins and
 * synchronizes under the twin's rules).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dtype.h"
#include "offload.h"
#include "zt_optim.h"
#include "ztest.h"

static uint64_t rng = 12345;
static float frand(void) {
  rng = rng * 6364136223846793005ull + 1442695040888963407ull;
  return (float)((int64_t)(rng >> 11) - (1ll << 52)) / (float)(1ll << 52);
}

static void run_case(zrt_backend *be, zrt_offload_pipe *pipe, zrt_optim_hparams hp, zrt_dtype gdt,
                     zrt_dtype pdt, size_t n, double *maxdiff) {
  size_t gsz = zrt_dtype_size(gdt), psz = zrt_dtype_size(pdt);
  float *m[3], *a[3], *b[3];
  for (int k = 0; k < 3; k++) {
    m[k] = malloc(n * 4);
    a[k] = calloc(n, 4);
    b[k] = calloc(n, 4);
  }
  void *gh = malloc(n * gsz), *ph = malloc(n * psz), *pref = malloc(n * psz);
  void *phg = malloc(n * psz);
  void *gdev = NULL, *pdev = NULL;
  ZT_OK(zrt_backend_alloc(be, n * gsz, ZRT_MEM_GRADS, &gdev));
  ZT_OK(zrt_backend_alloc(be, n * psz, ZRT_MEM_PARAMS16, &pdev));
  for (size_t i = 0; i < n; i++) m[0][i] = m[1][i] = m[2][i] = frand();
  int sgd_plain = hp.type == ZRT_OPTIM_SGD && hp.momentum == 0.0f;
  int has_s2 = hp.type == ZRT_OPTIM_ADAM || hp.type == ZRT_OPTIM_ADAMW;
  for (int step = 1; step <= 3; step++) {
    hp.step = step;
    for (size_t i = 0; i < n; i++) zrt_store_f(gh, gdt, i, 4.0f * frand());
    ZT_OK(zrt_backend_memcpy(be, gdev, gh, n * gsz, ZRT_COPY_H2D, NULL));
    ZT_OK(zrt_cpu_optim_step(&hp, m[0], sgd_plain ? NULL : a[0], has_s2 ? b[0] : NULL, gh, gdt,
                             pref, pdt, n));
    ZT_OK(zrt_offload_pipe_step(pipe, &hp, m[1], sgd_plain ? NULL : a[1], has_s2 ? b[1] : NULL,
                                gdev, gdt, pdev, pdt, n));
    ZT_OK(zrt_backend_memcpy(be, ph, pdev, n * psz, ZRT_COPY_D2H, NULL));
    ZT_OK(zrt_offload_pipe_step_host_grad(pipe, &hp, m[2], sgd_plain ? NULL : a[2],
                                          has_s2 ? b[2] : NULL, gh, gdt, pdev, pdt, n));
    ZT_OK(zrt_backend_memcpy(be, phg, pdev, n * psz, ZRT_COPY_D2H, NULL));
    ZT_OK(zrt_backend_synchronize(be, NULL));
    int same = !memcmp(m[0], m[1], n * 4) && !memcmp(a[0], a[1], n * 4) &&
               !memcmp(b[0], b[1], n * 4) && !memcmp(pref, ph, n * psz) &&
               !memcmp(m[0], m[2], n * 4) && !memcmp(a[0], a[2], n * 4) &&
               !memcmp(b[0], b[2], n * 4) && !memcmp(pref, phg, n * psz);
    if (!same) {
      for (size_t i = 0; i < n; i++) {
        double d = fmax(fabs((double)m[0][i] - m[1][i]), fabs((double)m[0][i] - m[2][i]));
        if (d > *maxdiff || isnan(d)) *maxdiff = isnan(d) ? INFINITY : d;
      }
      fprintf(stderr,
              "FAIL pipe (device or host grads) != zrt_cpu_optim_step: type %d grad %s param %s n "
              "%zu step %d\n",
              (int)hp.type, zrt_dtype_name(gdt), zrt_dtype_name(pdt), n, step);
      zt_failures++;
    }
  }
  zrt_backend_free(be, gdev);
  zrt_backend_free(be, pdev);
  free(phg);
  for (int k = 0; k < 3; k++) {
    free(m[k]);
    free(a[k]);
    free(b[k]);
  }
  free(gh);
  free(ph);
  free(pref);
}

/* Stream mode starts a step after the work queued before it on the
 * backend's stream: a producer there that is still running (a host function
 * that sleeps 50 ms, then writes the grads) must be waited for, so the
 * masters equal the reference computed from those grads (bitwise). */
/* A slow op on the backend's stream: 50 ms, then one copy (a producer of
 * device memory, or a consumer reading it back). */
typedef struct slow_copy_args {
  zrt_backend *be;
  void *dst;
  const void *src;
  size_t bytes;
  zrt_copy_kind kind;
} slow_copy_args;

static zrt_status slow_copy(void *arg) {
  const slow_copy_args *a = arg;
  struct timespec ts = {0, 50 * 1000 * 1000};
  nanosleep(&ts, NULL);
  return zrt_backend_memcpy(a->be, a->dst, a->src, a->bytes, a->kind, NULL);
}

static void check_after_producer(zrt_backend *be, zrt_offload_pipe *pipe) {
  size_t n = 2 * 4096 + 5;
  float *m = malloc(n * 4), *mref = malloc(n * 4), *g = malloc(n * 4);
  float *a = calloc(n, 4), *b = calloc(n, 4), *aref = calloc(n, 4), *bref = calloc(n, 4);
  for (size_t i = 0; i < n; i++) {
    m[i] = mref[i] = frand();
    g[i] = frand();
  }
  void *gdev = NULL;
  ZT_OK(zrt_backend_alloc(be, n * 4, ZRT_MEM_GRADS, &gdev));
  ZT_OK(zrt_backend_memset(be, gdev, 0, n * 4, NULL));
  zrt_optim_hparams h = zt_adam_step1(ZRT_OPTIM_ADAMW, 1e-2f);
  ZT_OK(zrt_cpu_optim_step(&h, mref, aref, bref, g, ZRT_F32, NULL, ZRT_BF16, n));
  slow_copy_args fa = {be, gdev, g, n * 4, ZRT_COPY_H2D};
  ZT_OK(zrt_backend_launch_host_named(be, slow_copy, &fa, sizeof fa, NULL, "slow producer"));
  ZT_OK(zrt_offload_pipe_step(pipe, &h, m, a, b, gdev, ZRT_F32, NULL, ZRT_BF16, n));
  ZT_OK(zrt_offload_pipe_sync(pipe));
  int same = !memcmp(m, mref, n * 4) && !memcmp(a, aref, n * 4) && !memcmp(b, bref, n * 4);
  printf("twin: a step queued behind a 50 ms producer on the backend's stream %s the reference\n",
         same ? "equals" : "DIFFERS FROM");
  ZT_CHECK(same);
  ZT_OK(zrt_backend_synchronize(be, NULL));
  zrt_backend_free(be, gdev);
  free(m);
  free(mref);
  free(g);
  free(a);
  free(b);
  free(aref);
  free(bref);
}

/* A reader of the 16-bit params queued before a step (a slow consumer on
 * the backend's stream, 50 ms) sees the params from before the step: the
 * pipe's H2D copies start after it (the blocking mode's join of its H2D
 * stream; stream mode's one join, which the write-back follows). */
static void check_reader_before_step(zrt_backend *be, zrt_offload_pipe *pipe) {
  size_t n = 2 * 4096 + 5;
  float *m = malloc(n * 4), *a = calloc(n, 4), *b = calloc(n, 4), *g = malloc(n * 4);
  uint16_t *old = malloc(n * 2), *seen = malloc(n * 2);
  for (size_t i = 0; i < n; i++) {
    m[i] = frand();
    g[i] = frand();
    old[i] = (uint16_t)(i * 7919u);
  }
  void *pdev = NULL;
  ZT_OK(zrt_backend_alloc(be, n * 2, ZRT_MEM_PARAMS16, &pdev));
  ZT_OK(zrt_backend_memcpy(be, pdev, old, n * 2, ZRT_COPY_H2D, NULL));
  zrt_optim_hparams h = zt_adam_step1(ZRT_OPTIM_ADAMW, 1e-2f);
  slow_copy_args ra = {be, seen, pdev, n * 2, ZRT_COPY_D2H};
  ZT_OK(zrt_backend_launch_host_named(be, slow_copy, &ra, sizeof ra, NULL, "slow reader"));
  ZT_OK(zrt_offload_pipe_step_host_grad(pipe, &h, m, a, b, g, ZRT_F32, pdev, ZRT_BF16, n));
  ZT_OK(zrt_offload_pipe_sync(pipe));
  ZT_OK(zrt_backend_synchronize(be, NULL));
  int same = !memcmp(seen, old, n * 2);
  printf("twin: a 50 ms reader queued before a step saw the params %s\n",
         same ? "from before the step" : "THE STEP WROTE");
  ZT_CHECK(same);
  zrt_backend_free(be, pdev);
  free(m);
  free(a);
  free(b);
  free(g);
  free(old);
  free(seen);
}

/* Stream mode's host waits: a queued step none, the sync one. */
static void check_host_waits(zrt_backend *be, zrt_offload_pipe *pipe) {
  size_t n = 3 * 4096 + 100;
  float *m = calloc(n, 4), *a = calloc(n, 4), *b = calloc(n, 4), *g = calloc(n, 4);
  void *pdev = NULL;
  ZT_OK(zrt_backend_alloc(be, n * 2, ZRT_MEM_PARAMS16, &pdev));
  ZT_OK(zrt_backend_synchronize(be, NULL));
  zrt_optim_hparams h = zt_adam_step1(ZRT_OPTIM_ADAMW, 1e-3f);
  uint64_t w0 = ZRT_BACKEND_COUNTER(be, host_waits);
  ZT_OK(zrt_offload_pipe_step_host_grad(pipe, &h, m, a, b, g, ZRT_F32, pdev, ZRT_BF16, n));
  uint64_t w1 = ZRT_BACKEND_COUNTER(be, host_waits);
  ZT_OK(zrt_offload_pipe_sync(pipe));
  uint64_t w2 = ZRT_BACKEND_COUNTER(be, host_waits);
  ZT_OK(zrt_offload_pipe_sync(pipe)); /* nothing queued: no wait */
  uint64_t w3 = ZRT_BACKEND_COUNTER(be, host_waits);
  printf("twin: host waits queueing a 4-tile step %llu, its sync %llu, a second sync %llu\n",
         (unsigned long long)(w1 - w0), (unsigned long long)(w2 - w1),
         (unsigned long long)(w3 - w2));
  ZT_CHECK(w1 - w0 == 0 && w2 - w1 == 1 && w3 - w2 == 0);
  zrt_backend_free(be, pdev);
  free(m);
  free(a);
  free(b);
  free(g);
}

static void run_backend(const char *name, int blocking) {
  printf("--- backend %s%s\n", name, blocking ? ", blocking mode" : "");
  zrt_backend *be = NULL;
  ZT_OK(zrt_backend_create(name, 0, 0, &be));
  zrt_hostpool_opts ho = {.numa_node = -1, .pin = 1, .allow_fallback = 1};
  zrt_hostpool *hp = NULL;
  ZT_OK(zrt_hostpool_create(&ho, be, &hp));
  zrt_offload_opts oo = {.tile_elems = 4096, .blocking = blocking};
  zrt_offload_pipe *pipe = NULL;
  ZT_OK(zrt_offload_pipe_create(be, hp, &oo, &pipe));
  zrt_mem_stats ms;
  zrt_pool_stats(zrt_hostpool_pool(hp), &ms);
  printf("staging in the host pool: %zu bytes (comm)\n", ms.current[ZRT_MEM_COMM]);
  ZT_CHECK(ms.current[ZRT_MEM_COMM] == 4 * 4096 * 4);

  zrt_optim_hparams base = {.lr = 1e-3f,
                            .beta1 = 0.9f,
                            .beta2 = 0.999f,
                            .eps = 1e-8f,
                            .weight_decay = 0.01f,
                            .momentum = 0.9f,
                            .bias_correction = 1,
                            .grad_mul = 0.25f};
  double maxdiff = 0;
  int cases = 0;
  for (int t = 0; t < 5; t++) {
    zrt_optim_hparams h = base;
    h.type = t < 4 ? (zrt_optim_type)t : ZRT_OPTIM_SGD;
    if (t == 4) h.momentum = 0.0f;
    for (int g = 0; g < 3; g++)
      for (int p = 0; p < 3; p++) {
        size_t n = (t + g + p) % 2 ? 3 * 4096 + 777 : 5; /* partial last tile; one tiny shard */
        run_case(be, pipe, h, (zrt_dtype)g, (zrt_dtype)p, n, &maxdiff);
        cases++;
      }
  }
  printf("%d cases: max |pipe - zrt_cpu_optim_step| on master %.3g (tolerance 0, bitwise)\n", cases,
         maxdiff);

  zrt_offload_timing tm;
  zrt_offload_pipe_timing(pipe, &tm);
  printf("last step: total %.3g s, copy %.3g s, update %.3g s, hidden %.2f\n", tm.total_s,
         tm.copy_s, tm.update_s, tm.hidden_fraction);
  ZT_CHECK(tm.total_s > 0 && tm.hidden_fraction >= 0 && tm.hidden_fraction <= 1);

  /* errors */
  zrt_optim_hparams h = base;
  h.type = ZRT_OPTIM_ADAMW;
  zrt_status st = zrt_offload_pipe_step(pipe, &h, NULL, NULL, NULL, &h, ZRT_F32, NULL, ZRT_BF16, 8);
  ZT_CHECK(st == ZRT_ERR_INVALID_ARG);
  ZT_CONTAINS(zrt_last_error(), "master is NULL");
  zrt_offload_opts bad = {.nvme = 1, .nvme_path = NULL};
  zrt_offload_pipe *p2 = NULL;
  st = zrt_offload_pipe_create(be, hp, &bad, &p2);
  ZT_CHECK(st == ZRT_ERR_CONFIG && p2 == NULL);
  ZT_CONTAINS(zrt_last_error(), "needs nvme_path");

  if (!strcmp(name, "twin")) {
    if (!blocking) check_host_waits(be, pipe);
    check_after_producer(be, pipe);
    check_reader_before_step(be, pipe);
  }
  zrt_offload_pipe_destroy(pipe);
  zrt_offload_pipe_destroy(NULL);
  zrt_pool_stats(zrt_hostpool_pool(hp), &ms);
  ZT_CHECK(ms.current_total == 0);
  zrt_hostpool_destroy(hp);
  zrt_backend_destroy(be);
}

int main(void) {
  /* the twin: jitter and slow side streams move every ordering around (set
   * first: the environment table is read once) */
  setenv("ZRT_TWIN_JITTER", "7", 0);
  setenv("ZRT_TWIN_SIDE_DELAY_US", "300", 0);
  run_backend("cpu", 0);
  run_backend("twin", 0);
  run_backend("twin", 1);
  ZT_DONE();
}
