/*
 * bench_pinned.c — `zrt-perf pinned`: zrt's pinned host <-> device copies
 * against the plain pinned copy of the same backend, and the share of those
 * copies a GEMM on the compute stream hides (issue 24's transfer goals: 90%
 * of the plain bandwidth, transfers hidden behind compute).
 *
 *  plain  one buffer of --mib MiB from malloc, registered whole with the
 *         backend's host_register (cudaHostRegister on CUDA: page-locked
 *         exactly as cudaMallocHost's pages), one copy of all of it on the
 *         default stream, then a synchronize: a plain pinned cudaMemcpy.
 *  zrt    the same bytes from the NUMA-pinned host pool (offload/hostpool.h:
 *         the node of the GPU, registered by the pool) copied the way the
 *         offload path copies, in tiles of --tile_mib MiB on a copy stream
 *         of its own, then one synchronize of that stream.
 *  hidden the zrt copies (host-to-device then device-to-host, as the
 *         params and grads of an offloaded step) on the copy stream while
 *         bf16 GEMMs of side --gemm_n run on the compute stream, sized to
 *         take about as long as the copies alone: hidden = (compute alone +
 *         copies alone - both) / copies alone, clamped to [0, 1]. On the
 *         cpu backend every op runs to completion when issued, so nothing
 *         can hide: what it reports there is timing noise around 0 (large
 *         on a loaded machine: the driver warns when it is busy).
 * Every figure is the best of --reps runs (default 5; for the hidden
 * share, the best of each of its three times). Bandwidths are
 * bytes / seconds of host wall time from issue to the synchronize's return.
 * Runs on any backend (--backend auto|cuda|twin|cpu); on cpu and twin the
 * copies are memcpys, so the numbers say nothing about PCIe, only that the
 * harness runs. Never asserts a timing.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hostpool.h"
#include "perf.h"

typedef struct zrt_pin_ctx {
  zrt_backend *be;
  zrt_stream copy; /* zrt's copy stream (NULL on backends without streams) */
  void *dev, *plain, *pooled;
  size_t bytes, tile;
} zrt_pin_ctx;

/* One plain copy of every byte, default stream, synchronized. */
static zrt_status zrt_pin_plain(zrt_pin_ctx *c, int h2d, double *s) {
  double t0 = zrt_now_s();
  ZRT_CHECK(zrt_backend_memcpy(c->be, h2d ? c->dev : c->plain, h2d ? c->plain : c->dev, c->bytes,
                               h2d ? ZRT_COPY_H2D : ZRT_COPY_D2H, NULL));
  ZRT_CHECK(zrt_backend_synchronize(c->be, NULL));
  *s = zrt_now_s() - t0;
  return ZRT_OK;
}

/* The tiles of one direction queued on the copy stream (no wait). */
static zrt_status zrt_pin_tiles(zrt_pin_ctx *c, int h2d) {
  for (size_t o = 0; o < c->bytes; o += c->tile) {
    size_t n = ZRT_MIN(c->tile, c->bytes - o);
    char *d = (char *)c->dev + o, *h = (char *)c->pooled + o;
    ZRT_CHECK(zrt_backend_memcpy(c->be, h2d ? (void *)d : (void *)h, h2d ? (void *)h : (void *)d, n,
                                 h2d ? ZRT_COPY_H2D : ZRT_COPY_D2H, c->copy));
  }
  return ZRT_OK;
}

static zrt_status zrt_pin_zrt(zrt_pin_ctx *c, int h2d, double *s) {
  double t0 = zrt_now_s();
  ZRT_CHECK(zrt_pin_tiles(c, h2d));
  ZRT_CHECK(zrt_backend_synchronize(c->be, c->copy));
  *s = zrt_now_s() - t0;
  return ZRT_OK;
}

typedef struct zrt_pin_gemm {
  void *a, *b, *c;
  int64_t n;
} zrt_pin_gemm;

static zrt_status zrt_pin_compute(zrt_pin_ctx *c, const zrt_pin_gemm *g, int reps) {
  for (int i = 0; i < reps; i++)
    ZRT_CHECK(zrt_backend_gemm(c->be, 0, 0, g->n, g->n, g->n, 1.0f, g->a, g->n, g->b, g->n,
                               ZRT_BF16, 0.0f, g->c, g->n, ZRT_F32, NULL));
  return ZRT_OK;
}

/* Seconds of `reps` GEMMs alone, of both directions' copies alone, and of
 * both issued together (GEMMs first on the compute stream, then the copies
 * on the copy stream, then both synchronized). */
static zrt_status zrt_pin_overlap(zrt_pin_ctx *c, const zrt_pin_gemm *g, int reps, double *t_comp,
                                  double *t_copy, double *t_both) {
  double t0 = zrt_now_s();
  ZRT_CHECK(zrt_pin_compute(c, g, reps));
  ZRT_CHECK(zrt_backend_synchronize(c->be, NULL));
  double t1 = zrt_now_s();
  ZRT_CHECK(zrt_pin_tiles(c, 1));
  ZRT_CHECK(zrt_pin_tiles(c, 0));
  ZRT_CHECK(zrt_backend_synchronize(c->be, c->copy));
  double t2 = zrt_now_s();
  ZRT_CHECK(zrt_pin_compute(c, g, reps));
  ZRT_CHECK(zrt_pin_tiles(c, 1));
  ZRT_CHECK(zrt_pin_tiles(c, 0));
  ZRT_CHECK(zrt_backend_synchronize(c->be, c->copy));
  ZRT_CHECK(zrt_backend_synchronize(c->be, NULL));
  double t3 = zrt_now_s();
  *t_comp = t1 - t0;
  *t_copy = t2 - t1;
  *t_both = t3 - t2;
  return ZRT_OK;
}

static int64_t zrt_pin_size_opt(const zrt_perf_args *a, const char *key, int64_t dflt) {
  const char *v = zrt_perf_opt(a, key);
  return v ? (int64_t)atof(v) : dflt;
}

static int zrt_bench_pinned(const zrt_perf_args *a, cJSON *r) {
  const char *want = zrt_perf_opt(a, "backend");
  int64_t mib = zrt_pin_size_opt(a, "mib", a->quick ? 64 : 256);
  int64_t tile_mib = zrt_pin_size_opt(a, "tile_mib", 4);
  int reps = (int)zrt_pin_size_opt(a, "reps", 5);
  if (mib < 1 || tile_mib < 1 || reps < 1) {
    zrt_perf_note("pinned: --mib, --tile_mib and --reps take integers >= 1 "
                  "(got %lld, %lld, %d)",
                  (long long)mib, (long long)tile_mib, reps);
    return 1;
  }
  zrt_pin_ctx c = {.bytes = (size_t)mib << 20, .tile = (size_t)ZRT_MIN(tile_mib, mib) << 20};
  zrt_hostpool *hp = NULL;
  zrt_pool *pool = NULL;
  zrt_pin_gemm g = {0};
  int registered = 0;
  zrt_status st = ZRT_OK;
  if (zrt_backend_create(want ? want : "auto", 0, 0, &c.be) != ZRT_OK) {
    zrt_perf_note("pinned: --backend %s: %s", want ? want : "auto", zrt_last_error());
    return 1;
  }
  int gpu = c.be->device_id >= 0;
  g.n = zrt_pin_size_opt(a, "gemm_n", gpu ? 4096 : 256);
  /* a pool that could not pin still gives figures, flagged below */
  zrt_hostpool_opts ho = {.numa_node = -1, .pin = 1, .allow_fallback = 1};
  ZRT_CHECK_GOTO(zrt_hostpool_create(&ho, c.be, &hp), st, done);
  pool = zrt_hostpool_pool(hp);
  ZRT_CHECK_GOTO(zrt_pool_alloc(pool, c.bytes, ZRT_MEM_OTHER, &c.pooled), st, done);
  ZRT_CHECK_GOTO(zrt_backend_alloc(c.be, c.bytes, ZRT_MEM_OTHER, &c.dev), st, done);
  ZRT_CHECK_GOTO(zrt_backend_stream_create(c.be, &c.copy), st, done);
  c.plain = aligned_alloc(4096, c.bytes);
  if (!c.plain) {
    st = zrt_error(ZRT_ERR_OOM, "pinned: %zu bytes of host memory for the plain buffer", c.bytes);
    goto done;
  }
  memset(c.plain, 1, c.bytes);
  memset(c.pooled, 1, c.bytes);
  ZRT_CHECK_GOTO(zrt_backend_host_register(c.be, c.plain, c.bytes), st, done);
  registered = 1;
  size_t nn = (size_t)(g.n * g.n);
  ZRT_CHECK_GOTO(zrt_backend_alloc(c.be, nn * 2, ZRT_MEM_OTHER, &g.a), st, done);
  ZRT_CHECK_GOTO(zrt_backend_alloc(c.be, nn * 2, ZRT_MEM_OTHER, &g.b), st, done);
  ZRT_CHECK_GOTO(zrt_backend_alloc(c.be, nn * 4, ZRT_MEM_OTHER, &g.c), st, done);
  ZRT_CHECK_GOTO(zrt_backend_memset(c.be, g.a, 0, nn * 2, NULL), st, done);
  ZRT_CHECK_GOTO(zrt_backend_memset(c.be, g.b, 0, nn * 2, NULL), st, done);

  /* bandwidths: best of reps, after one warm-up copy each */
  double best[2][2] = {{1e30, 1e30}, {1e30, 1e30}}; /* [plain, zrt][d2h, h2d] */
  for (int rep = 0; rep <= reps && st == ZRT_OK; rep++)
    for (int h2d = 0; h2d < 2 && st == ZRT_OK; h2d++) {
      double tp = 0, tz = 0;
      st = zrt_pin_plain(&c, h2d, &tp);
      if (st == ZRT_OK) st = zrt_pin_zrt(&c, h2d, &tz);
      if (rep == 0) continue; /* warm-up */
      best[0][h2d] = ZRT_MIN(best[0][h2d], tp);
      best[1][h2d] = ZRT_MIN(best[1][h2d], tz);
    }
  if (st != ZRT_OK) goto done;
  /* the GEMM count that takes about as long as both directions' copies */
  int greps = 1;
  double t_comp = 0, t_copy = 0, t_both = 0;
  for (;;) {
    ZRT_CHECK_GOTO(zrt_pin_overlap(&c, &g, greps, &t_comp, &t_copy, &t_both), st, done);
    if (t_comp >= t_copy || greps >= 4096) break;
    greps *= 2;
  }
  /* each time the best of the runs (noise only ever adds time): serial
   * execution then gives both >= compute + copies, hence 0 hidden */
  double b_comp = 1e30, b_copy = 1e30, b_both = 1e30;
  for (int rep = 0; rep < reps; rep++) {
    ZRT_CHECK_GOTO(zrt_pin_overlap(&c, &g, greps, &t_comp, &t_copy, &t_both), st, done);
    b_comp = ZRT_MIN(b_comp, t_comp);
    b_copy = ZRT_MIN(b_copy, t_copy);
    b_both = ZRT_MIN(b_both, t_both);
  }
  t_comp = b_comp, t_copy = b_copy, t_both = b_both;
  double hidden = t_copy > 0 ? (t_comp + t_copy - t_both) / t_copy : 0;
  hidden = ZRT_MAX(0.0, ZRT_MIN(1.0, hidden));
  double B = (double)c.bytes;
  cJSON_AddStringToObject(r, "backend", c.be->iface->name);
  cJSON_AddStringToObject(r, "device", c.be->description);
  cJSON_AddNumberToObject(r, "bytes", B);
  cJSON_AddNumberToObject(r, "tile_bytes", (double)c.tile);
  cJSON_AddBoolToObject(r, "pool_pinned", zrt_hostpool_pinned(hp));
  cJSON_AddNumberToObject(r, "pool_numa_node", zrt_hostpool_node(hp));
  static const char *const dir[2] = {"d2h", "h2d"};
  char key[64];
  for (int d = 0; d < 2; d++) {
    snprintf(key, sizeof key, "plain_%s_bytes_per_s", dir[d]);
    cJSON_AddNumberToObject(r, key, B / best[0][d]);
    snprintf(key, sizeof key, "zrt_%s_bytes_per_s", dir[d]);
    cJSON_AddNumberToObject(r, key, B / best[1][d]);
    snprintf(key, sizeof key, "zrt_%s_fraction_of_plain", dir[d]);
    cJSON_AddNumberToObject(r, key, best[0][d] / best[1][d]);
  }
  cJSON_AddNumberToObject(r, "goal_fraction_of_plain", 0.9);
  cJSON_AddNumberToObject(r, "gemm_n", (double)g.n);
  cJSON_AddNumberToObject(r, "gemms", greps);
  cJSON_AddNumberToObject(r, "compute_s", t_comp);
  cJSON_AddNumberToObject(r, "copies_s", t_copy);
  cJSON_AddNumberToObject(r, "both_s", t_both);
  cJSON_AddNumberToObject(r, "hidden_fraction", hidden);
  char sum[256];
  snprintf(sum, sizeof sum,
           "%s: zrt pinned H2D %.2f GB/s (%.0f%% of plain %.2f), D2H %.2f GB/s "
           "(%.0f%% of plain "
           "%.2f); %.0f%% of the copies hidden behind bf16 GEMMs",
           c.be->iface->name, B / best[1][1] / 1e9, 100 * best[0][1] / best[1][1],
           B / best[0][1] / 1e9, B / best[1][0] / 1e9, 100 * best[0][0] / best[1][0],
           B / best[0][0] / 1e9, 100 * hidden);
  cJSON_AddStringToObject(r, "summary", sum);
  for (int d = 0; d < 2; d++)
    if (gpu && best[0][d] / best[1][d] > 1.25)
      zrt_perf_flag(r,
                    "zrt's %s copies ran %.2fx the plain copy's bandwidth: the plain figure is "
                    "suspect (re-run on an idle machine)",
                    dir[d], best[0][d] / best[1][d]);
  if (gpu && !zrt_hostpool_pinned(hp))
    zrt_perf_flag(r, "the host pool could not pin its pages (logged above): "
                     "the zrt figures are "
                     "for pageable memory");
  if (!a->json) printf("%s\n", sum);
done:
  if (st != ZRT_OK) zrt_perf_note("pinned: %s", zrt_last_error());
  if (c.be) zrt_backend_synchronize(c.be, NULL);
  if (registered) zrt_backend_host_unregister(c.be, c.plain);
  free(c.plain);
  zrt_backend_free(c.be, g.a);
  zrt_backend_free(c.be, g.b);
  zrt_backend_free(c.be, g.c);
  zrt_backend_free(c.be, c.dev);
  if (c.copy) zrt_backend_stream_destroy(c.be, c.copy);
  if (pool) zrt_pool_free(pool, c.pooled);
  zrt_hostpool_destroy(hp);
  zrt_backend_destroy(c.be);
  return st == ZRT_OK ? 0 : 1;
}

ZRT_PERF_BENCH(pinned,
               "pinned host<->device copies: zrt's pool + tiled copy stream vs "
               "one plain pinned "
               "copy, and the share hidden behind bf16 GEMMs [--backend "
               "auto|cuda|twin|cpu] "
               "[--mib N] [--tile_mib N] [--gemm_n N] [--reps N]",
               zrt_bench_pinned)
