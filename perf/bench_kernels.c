/*
 * bench_kernels.c — `zrt-perf kernels`: the host's streaming kernels that
 * sit on the data path, one thread, against the copy bandwidth of the same
 * run: the shm comm's SUM of two inputs (fp32 and bf16: a 2-rank
 * reduce_scatter's inner loop), the fp32 <-> bf16 conversions the engine
 * casts weights and gradients with, and the pairwise bf16 sum of the MPI
 * comm's 16-bit reduction op (zrt_half_reduce). Each through its own
 * run-time dispatch, so the path measured is the one zrt_isa_best() picks
 * ("isa" in the JSON; ZRT_CPU_ISA forces a lesser one).
 *
 * Every figure is DRAM traffic per second, bytes read plus bytes written as
 * the kernel names them (no write-allocate reads counted), over buffers
 * cycled through sets that together span twice the last-level cache, so
 * nothing is served from the cache. The limit is the streaming copy's
 * traffic (zrt_copy_stream: read + write, 2 bytes per byte copied, no
 * write-allocate); glibc's memcpy is reported beside it. Kernels that store
 * ordinarily may pay a write-allocate read per line written, which would
 * hold them to (r + w) / (r + 2w) of the copy ("limit_write_allocate"; 1
 * for half_reduce, which writes the lines it has just read); a CPU that
 * skips the read for whole-line stores reaches 1. Rounds
 * alternate the copy and every kernel, so each sees the same load; figures
 * are medians over the rounds with p10/p90.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm_shm_impl.h"
#include "copy_stream.h"
#include "cpu_features.h"
#include "dtype.h"
#include "perf.h"

#define ZRT_KB_SETS_MAX 16

enum { KB_COPY_STREAM, KB_MEMCPY, KB_SUM_F32, KB_SUM_BF16, KB_NARROW, KB_WIDEN, KB_HALF_SUM, KB_N };

static const char *const zrt_kb_names[KB_N] = {
    "copy_stream",      "memcpy",          "shm_sum_fp32_2in",    "shm_sum_bf16_2in",
    "narrow_fp32_bf16", "widen_bf16_fp32", "half_reduce_bf16_sum"};

/* Bytes read and written per element, and whether the stores stream. */
static void zrt_kb_traffic(int k, double *r, double *w, int *nt) {
  static const double rw[KB_N][2] = {{1, 1}, {1, 1}, {8, 4}, {4, 2}, {4, 2}, {2, 4}, {4, 2}};
  *r = rw[k][0];
  *w = rw[k][1];
  *nt = k == KB_COPY_STREAM;
}

typedef struct zrt_kb_set {
  void *a, *b, *o; /* each `bytes` long */
} zrt_kb_set;

/* One timed call of kernel k on set s over `bytes` per buffer; returns
 * seconds. */
static double zrt_kb_run(int k, const zrt_kb_set *s, size_t bytes) {
  size_t n32 = bytes / 4, n16 = bytes / 4; /* elements: a 16-bit array takes half a buffer */
  const void *in[2] = {s->a, s->b};
  double t0 = zrt_now_s();
  switch (k) {
  case KB_COPY_STREAM:
    zrt_copy_stream(s->o, s->a, bytes);
    zrt_store_fence();
    break;
  case KB_MEMCPY: memcpy(s->o, s->a, bytes); break;
  /* the comm's own dispatch: the kernel zrt_isa_best() picks, the
   * portable loops on a CPU without AVX2 */
  case KB_SUM_F32: zrt_shm_reduce_into(s->o, NULL, in, 2, n32, ZRT_F32, ZRT_RED_SUM, 0); break;
  case KB_SUM_BF16:
    zrt_shm_reduce_into(s->o, NULL, in, 2, bytes / 2, ZRT_BF16, ZRT_RED_SUM, 0);
    break;
  case KB_NARROW: zrt_dtype_convert_host(s->o, ZRT_BF16, s->a, ZRT_F32, n32); break;
  case KB_WIDEN: zrt_dtype_convert_host(s->o, ZRT_F32, s->a, ZRT_BF16, n16); break;
  case KB_HALF_SUM: zrt_half_reduce(s->o, s->a, ZRT_BF16, bytes / 2, ZRT_HALF_SUM); break;
  }
  return zrt_now_s() - t0;
}

/* Traffic bytes of one call of kernel k over `bytes` per buffer. */
static double zrt_kb_bytes(int k, size_t bytes) {
  double r, w;
  int nt;
  zrt_kb_traffic(k, &r, &w, &nt);
  size_t elems = k == KB_SUM_BF16 || k == KB_HALF_SUM ? bytes / 2 : bytes / 4;
  if (k == KB_COPY_STREAM || k == KB_MEMCPY) elems = bytes;
  return (r + w) * (double)elems;
}

static int zrt_kb_bench(const zrt_perf_args *a, cJSON *result) {
  const char *o = zrt_perf_opt(a, "bytes");
  uint64_t bytes64 = (uint64_t)16 << 20;
  if (o && !zrt_parse_size(o, &bytes64)) {
    fprintf(stderr, "kernels: --bytes %s: expected a size such as 16MiB or 1048576\n", o);
    return 2;
  }
  size_t bytes = (size_t)bytes64;
  o = zrt_perf_opt(a, "rounds");
  int rounds = o ? atoi(o) : (a->quick ? 5 : 15);
  if (bytes < 4096 || rounds < 1 || rounds > 1000) {
    fprintf(stderr, "kernels: --bytes must be at least 4096 and --rounds 1..1000\n");
    return 2;
  }
  bytes = bytes / 256 * 256;
  size_t llc = zrt_cpu_llc_bytes();
  size_t per_set = 3 * bytes;
  int sets = llc ? (int)((2 * llc + per_set - 1) / per_set) : 4;
  sets = sets < 4 ? 4 : sets > ZRT_KB_SETS_MAX ? ZRT_KB_SETS_MAX : sets;
  zrt_kb_set set[ZRT_KB_SETS_MAX] = {{0}};
  int rc = 0;
  for (int i = 0; i < sets; i++) {
    void **p[3] = {&set[i].a, &set[i].b, &set[i].o};
    for (int j = 0; j < 3; j++) {
      if (posix_memalign(p[j], 64, bytes)) {
        fprintf(stderr, "kernels: out of host memory (%d sets of 3 x %zu bytes)\n", sets, bytes);
        rc = 1;
        goto done;
      }
      /* finite bf16 / fp32 data (0x3f80 pairs: 1.0 in bf16, ~1.0 in fp32) */
      uint16_t *h = *p[j];
      for (size_t e = 0; e < bytes / 2; e++) h[e] = (uint16_t)(0x3f80 + (e % 61));
    }
  }
  double *sec = calloc((size_t)KB_N * (size_t)rounds, sizeof(double));
  double *v = calloc((size_t)rounds, sizeof(double));
  if (!sec || !v) {
    free(sec);
    free(v);
    rc = 1;
    goto done;
  }
  for (int k = 0; k < KB_N; k++) zrt_kb_run(k, &set[0], bytes); /* fault pages in */
  int it = 0;
  for (int r = 0; r < rounds; r++)
    for (int k = 0; k < KB_N; k++) {
      /* best of one pass over the sets: one DRAM-cold call each */
      double best = 1e30;
      for (int s = 0; s < sets; s++) {
        double t = zrt_kb_run(k, &set[it++ % sets], bytes);
        if (t < best) best = t;
      }
      sec[k * rounds + r] = best;
    }
  cJSON_AddNumberToObject(result, "bytes_per_buffer", (double)bytes);
  cJSON_AddNumberToObject(result, "buffer_sets", sets);
  cJSON_AddNumberToObject(result, "llc_bytes", (double)llc);
  cJSON_AddNumberToObject(result, "rounds", rounds);
  cJSON_AddStringToObject(result, "isa", zrt_isa_name(zrt_isa_best()));
  cJSON_AddBoolToObject(result, "avx512_bf16", zrt_isa_has_avx512bf16() != 0);
  cJSON *ks = cJSON_AddObjectToObject(result, "kernels");
  double copy_med = 0;
  zrt_perf_note("kernels: %zu bytes per buffer, %d sets, %d rounds (median traffic GB/s; ratio to "
                "the streaming copy's traffic of the same round)",
                bytes, sets, rounds);
  for (int k = 0; k < KB_N; k++) {
    cJSON *e = cJSON_AddObjectToObject(ks, zrt_kb_names[k]);
    double rd, wr;
    int nt;
    zrt_kb_traffic(k, &rd, &wr, &nt);
    for (int r = 0; r < rounds; r++) v[r] = zrt_kb_bytes(k, bytes) / sec[k * rounds + r];
    double med = zrt_perf_spread(e, "traffic_bytes_per_s", v, rounds);
    if (k == KB_COPY_STREAM) copy_med = med;
    for (int r = 0; r < rounds; r++)
      v[r] = (zrt_kb_bytes(k, bytes) / sec[k * rounds + r]) /
             (zrt_kb_bytes(KB_COPY_STREAM, bytes) / sec[KB_COPY_STREAM * rounds + r]);
    double ratio = zrt_perf_spread(e, "over_copy_stream", v, rounds);
    double lim = nt || k == KB_HALF_SUM ? 1.0 : (rd + wr) / (rd + 2 * wr);
    cJSON_AddNumberToObject(e, "read_bytes_per_element", rd);
    cJSON_AddNumberToObject(e, "written_bytes_per_element", wr);
    if (k != KB_MEMCPY) cJSON_AddNumberToObject(e, "limit_write_allocate", lim);
    zrt_perf_note("  %-22s %6.2f GB/s  %.2f of the copy (%.2f if every store read its line first)",
                  zrt_kb_names[k], med / 1e9, ratio, k == KB_MEMCPY ? 2.0 / 3.0 : lim);
    /* A mix with more reads than writes may pass the copy's 1:1 traffic by
     * a few percent (fewer bus turnarounds: half_reduce measured 1.05);
     * far above it the buffers were cached. */
    if (k != KB_COPY_STREAM && ratio > 1.25)
      zrt_perf_flag(result,
                    "kernels: %s moved %.2f of the streaming copy's traffic: above memory "
                    "speed, the buffers were not cold",
                    zrt_kb_names[k], ratio);
  }
  cJSON_AddNumberToObject(result, "copy_stream_traffic_bytes_per_s", copy_med);
  cJSON_AddNumberToObject(result, "loadavg_1min", zrt_perf_loadavg());
  free(sec);
  free(v);
done:
  for (int i = 0; i < sets; i++) {
    free(set[i].a);
    free(set[i].b);
    free(set[i].o);
  }
  return rc;
}

ZRT_PERF_BENCH(kernels,
               "the host's streaming kernels (shm SUM fp32/bf16, fp32<->bf16 conversions, the "
               "pairwise bf16 sum) in DRAM traffic per second, one thread, against the streaming "
               "copy of the same round (--bytes per buffer, default 16 MiB; --rounds, default 15)",
               zrt_kb_bench)
