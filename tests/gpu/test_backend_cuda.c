/*
 * test_backend_cuda.c — every op of the CUDA backend against the CPU
 * backend on the same inputs (DESIGN.md rule 3), plus streams/events
 * ordering, host functions queued on streams (their order and sticky
 * failure), free_on returning a block on its stream alone (no join of the
 * others), pinned registration, the registry's choice, and OOM both from
 * device_memory_limit and from the CUDA memory pool itself. Exits 77 without a
 * GPU (fails instead under ZRT_REQUIRE_GPU=1).
 *
 * ZRT_TEST_BACKEND=twin runs the same ops on the twin backend instead (the
 * CPU with a GPU's streams and events, backend_twin.c), skipping only the
 * CUDA-specific checks (device description, the registry's choice, CUDA's
 * own error messages): ctest's twin.test_backend_cuda runs it with jitter on
 * every machine, so a missing event between streams in this file (issue 23:
 * gemm_case uploaded on one stream and multiplied on another) fails here
 * before a GPU is lent.
 *
 * Tolerances (stated per check):
 *   memcpy / memset / convert: exact (the kernels are amp/dtype.h bit for bit);
 *   accumulate: 2 fp32 roundings of the magnitude (4 * 2^-24 * |x|max);
 *   scale_check: 1e-12 relative (double sums in different orders);
 *     scale_check_list: bit for bit the backend's own per-buffer calls,
 *     with one host wait for the list;
 *   GEMM: 2 * K * 2^-24 * |alpha| (fp32 accumulation, both sides) plus one
 *     ulp of the output dtype times max|C| (each side rounds once);
 *   optim_step: 1e-6 absolute vs the CPU backend after 3 steps (values ~1),
 *     and param16 within one 16-bit rounding of the CPU's.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "dtype.h"
#include "zt_free_on.h"
#include "zt_gpu.h"
#include "ztest.h"

static zrt_backend *gpu, *cpu;
static int is_cuda = 1; /* 0: ZRT_TEST_BACKEND=twin */

static uint64_t rng_state = 0x243f6a8885a308d3ull;
static double urand(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return (double)(rng_state >> 11) * (1.0 / 9007199254740992.0);
}
static float srand1(void) { return (float)(2.0 * urand() - 1.0); }

static void *dalloc(zrt_backend *b, size_t bytes) {
  void *p = NULL;
  ZT_OK(zrt_backend_alloc(b, bytes, ZRT_MEM_ACTIVATIONS, &p));
  return p;
}

/* Copies host data into a fresh allocation on backend b. */
static void *upload(zrt_backend *b, const void *h, size_t bytes) {
  void *d = dalloc(b, bytes);
  ZT_OK(zrt_backend_memcpy(b, d, h, bytes, ZRT_COPY_H2D, NULL));
  return d;
}

static void download(zrt_backend *b, void *h, const void *d, size_t bytes) {
  ZT_OK(zrt_backend_synchronize(b, NULL));
  ZT_OK(zrt_backend_memcpy(b, h, d, bytes, ZRT_COPY_D2H, NULL));
  ZT_OK(zrt_backend_synchronize(b, NULL));
}

static const zrt_dtype dts[3] = {ZRT_F32, ZRT_F16, ZRT_BF16};

static void test_info(void) {
  if (!is_cuda) return;
  printf("cuda backend: %s, device %d, NUMA node %d, capacity %zu\n", gpu->description,
         gpu->device_id, gpu->numa_node, gpu->device_capacity);
  ZT_CHECK(!strcmp(gpu->iface->name, "cuda"));
  ZT_CHECK(strstr(gpu->description, "(sm_") != NULL);
  ZT_CHECK(gpu->device_id >= 0 && gpu->device_capacity > 0);
  ZT_CHECK(zrt_pool_capacity(gpu->pool) == gpu->device_capacity);
  zrt_backend *a = NULL;
  ZT_OK(zrt_backend_create("auto", 0, 0, &a));
  ZT_CHECK(!strcmp(a->iface->name, "cuda")); /* auto prefers a present GPU */
  zrt_backend_destroy(a);
}

static void test_memory(void) {
  enum { N = (1 << 20) + 13 };
  /* cudaHostRegister pins whole pages: page-aligned buffers of whole pages
   * (an unaligned malloc'd range would pin its neighbours' pages too, and a
   * second range on a shared page fails as already registered) */
  size_t page = (size_t)sysconf(_SC_PAGESIZE), span = (N + page - 1) / page * page;
  unsigned char *h = aligned_alloc(page, span), *back = aligned_alloc(page, span);
  for (size_t i = 0; i < N; i++) h[i] = (unsigned char)(i * 131 + 7);
  unsigned char *d1 = dalloc(gpu, N), *d2 = dalloc(gpu, N);
  ZT_OK(zrt_backend_memcpy(gpu, d1, h, N, ZRT_COPY_H2D, NULL));
  ZT_OK(zrt_backend_memcpy(gpu, d2, d1, N, ZRT_COPY_D2D, NULL));
  download(gpu, back, d2, N);
  ZT_CHECK(!memcmp(back, h, N));
  ZT_OK(zrt_backend_memset(gpu, d2 + 100, 0x5a, 5000, NULL));
  download(gpu, back, d2, N);
  int ok = 1;
  for (size_t i = 0; i < N; i++) ok &= back[i] == ((i >= 100 && i < 5100) ? 0x5a : h[i]);
  ZT_CHECK(ok);
  /* a copy into pageable memory has completed when it returns (zrt.h; on
   * CUDA the stream is synchronized after it): read with no synchronize,
   * behind a memset still queued, and counted as one host wait */
  ZT_OK(zrt_backend_memset(gpu, d2, 0x33, N, NULL));
  uint64_t w0 = ZRT_BACKEND_COUNTER(gpu, host_waits);
  ZT_OK(zrt_backend_memcpy(gpu, back, d2, N, ZRT_COPY_D2H, NULL));
  uint64_t pageable_waits = ZRT_BACKEND_COUNTER(gpu, host_waits) - w0;
  ok = 1;
  for (size_t i = 0; i < N; i++) ok &= back[i] == 0x33;
  ZT_CHECK(ok && pageable_waits == 1);
  memset(back, 0, N);
  ZT_OK(zrt_backend_memcpy(gpu, back, h, N, ZRT_COPY_H2H, NULL));
  ZT_OK(zrt_backend_synchronize(gpu, NULL));
  ZT_CHECK(!memcmp(back, h, N));
  /* pinned registration, then async copies from / to it */
  ZT_OK(zrt_backend_host_register(gpu, h, span));
  ZT_OK(zrt_backend_host_register(gpu, back, span));
  /* registering the same range again is an error now (never a stale success) */
  ZT_CHECK(zrt_backend_host_register(gpu, h, span) != ZRT_OK);
  if (is_cuda) ZT_CONTAINS(zrt_last_error(), "already registered");
  memset(back, 0, N);
  ZT_OK(zrt_backend_memcpy(gpu, d2, h, N, ZRT_COPY_H2D, NULL));
  w0 = ZRT_BACKEND_COUNTER(gpu, host_waits);
  ZT_OK(zrt_backend_memcpy(gpu, back, d2, N, ZRT_COPY_D2H, NULL));
  uint64_t registered_waits = ZRT_BACKEND_COUNTER(gpu, host_waits) - w0;
  ZT_CHECK(registered_waits == 0); /* asynchronous into registered memory */
  ZT_OK(zrt_backend_synchronize(gpu, NULL));
  ZT_CHECK(!memcmp(back, h, N));
  printf("D2H copy: into pageable memory complete on return with %llu host wait(s), into "
         "registered memory %llu\n",
         (unsigned long long)pageable_waits, (unsigned long long)registered_waits);
  zrt_backend_host_unregister(gpu, h);
  zrt_backend_host_unregister(gpu, back);
  printf("memcpy (4 kinds, pageable and registered) / memset: %d bytes exact\n", N);
  zrt_backend_free(gpu, d1);
  zrt_backend_free(gpu, d2);
  free(h);
  free(back);
}

static void test_convert(void) {
  static const float edges[] = {0.0f,
                                -0.0f,
                                65504.0f,
                                65520.0f,
                                -65520.0f,
                                1e6f,
                                5.9604644775390625e-8f,
                                2.98023223876953125e-8f,
                                6.097555160522461e-5f,
                                1.00048828125f,
                                1.00146484375f,
                                1.00390625f,
                                1.01171875f,
                                3.4028235e38f,
                                1e-45f,
                                INFINITY,
                                -INFINITY,
                                NAN,
                                -NAN};
  const size_t ne = sizeof edges / sizeof edges[0], n = 300007;
  float *src = malloc(n * 4);
  for (size_t i = 0; i < n; i++)
    src[i] = i < ne ? edges[i] : (float)(srand1() * pow(2.0, (double)(i % 70) - 35));
  src[ne] = zrt_bits_to_f32(0x7f812345u); /* signalling NaN with payload */
  src[ne + 1] = zrt_bits_to_f32(0xffd00001u);
  void *hin = malloc(n * 4), *hg = malloc(n * 4), *hc = malloc(n * 4);
  long bad = 0;
  for (int si = 0; si < 3; si++)
    for (int di = 0; di < 3; di++) {
      zrt_dtype sd = dts[si], dd = dts[di];
      size_t ss = zrt_dtype_size(sd), ds = zrt_dtype_size(dd);
      for (size_t i = 0; i < n; i++) zrt_store_f(hin, sd, i, src[i]);
      void *gi = upload(gpu, hin, n * ss), *ci = upload(cpu, hin, n * ss);
      void *go = dalloc(gpu, n * ds), *co = dalloc(cpu, n * ds);
      ZT_OK(zrt_backend_convert(gpu, go, dd, gi, sd, n, NULL));
      ZT_OK(zrt_backend_convert(cpu, co, dd, ci, sd, n, NULL));
      download(gpu, hg, go, n * ds);
      download(cpu, hc, co, n * ds);
      long b = 0;
      for (size_t i = 0; i < n * ds; i++) b += ((unsigned char *)hg)[i] != ((unsigned char *)hc)[i];
      if (b)
        fprintf(stderr, "FAIL convert %s->%s: %ld bytes differ from the CPU backend\n",
                zrt_dtype_name(sd), zrt_dtype_name(dd), b);
      bad += b;
      zrt_backend_free(gpu, gi);
      zrt_backend_free(gpu, go);
      zrt_backend_free(cpu, ci);
      zrt_backend_free(cpu, co);
    }
  printf("convert: 9 dtype pairs x %zu values, %ld bytes differ from cpu (tolerance exact)\n", n,
         bad);
  ZT_CHECK(bad == 0);
  free(src);
  free(hin);
  free(hg);
  free(hc);
}

static void test_accumulate(void) {
  const size_t n = 1000003;
  float *dst = malloc(n * 4), *rg = malloc(n * 4), *rc = malloc(n * 4);
  void *src = malloc(n * 4);
  for (int t = 0; t < 3; t++) {
    for (size_t i = 0; i < n; i++) {
      dst[i] = 2.0f * srand1();
      zrt_store_f(src, dts[t], i, 2.0f * srand1());
    }
    size_t ss = n * zrt_dtype_size(dts[t]);
    float *gd = upload(gpu, dst, n * 4), *cd = upload(cpu, dst, n * 4);
    void *gs = upload(gpu, src, ss), *cs = upload(cpu, src, ss);
    ZT_OK(zrt_backend_accumulate(gpu, gd, gs, dts[t], -0.37f, n, NULL));
    ZT_OK(zrt_backend_accumulate(cpu, cd, cs, dts[t], -0.37f, n, NULL));
    download(gpu, rg, gd, n * 4);
    download(cpu, rc, cd, n * 4);
    char what[64];
    snprintf(what, sizeof what, "accumulate %s %s vs cpu", zrt_dtype_name(dts[t]),
             gpu->iface->name);
    ZT_CLOSE_ARRAY(what, rg, rc, n, 4.0 * 2.8 * 0x1p-24);
    zrt_backend_free(gpu, gd);
    zrt_backend_free(gpu, gs);
    zrt_backend_free(cpu, cd);
    zrt_backend_free(cpu, cs);
  }
  free(dst);
  free(rg);
  free(rc);
  free(src);
}

static void test_scale_check(void) {
  const size_t sizes[] = {1, 255, 4097, 3000017};
  for (size_t si = 0; si < 4; si++)
    for (int t = 0; t < 3; t++) {
      size_t n = sizes[si], bytes = n * zrt_dtype_size(dts[t]);
      void *h = malloc(bytes);
      for (size_t i = 0; i < n; i++) zrt_store_f(h, dts[t], i, 4.0f * srand1());
      void *g = upload(gpu, h, bytes), *c = upload(cpu, h, bytes);
      double sg = 0.25, sc = 0.25;
      int fg = 0, fc = 0;
      ZT_OK(zrt_backend_scale_check(gpu, g, dts[t], n, 0.5f, &sg, &fg, NULL));
      ZT_OK(zrt_backend_scale_check(cpu, c, dts[t], n, 0.5f, &sc, &fc, NULL));
      double rel = fabs(sg - sc) / fabs(sc);
      printf("scale_check %s n=%zu: %s %.15g cpu %.15g rel diff %.3g (tolerance 1e-12)\n",
             zrt_dtype_name(dts[t]), n, gpu->iface->name, sg, sc, rel);
      ZT_CHECK(rel <= 1e-12);
      ZT_CHECK(fg == 0 && fc == 0);
      /* non-finite injections: Inf, NaN, and the last element */
      size_t at[3] = {n / 2, n / 3, n - 1};
      float bad[3] = {INFINITY, NAN, -INFINITY};
      for (int k = 0; k < 3; k++) {
        float keep = zrt_load_f(h, dts[t], at[k]);
        zrt_store_f(h, dts[t], at[k], bad[k]);
        ZT_OK(zrt_backend_memcpy(gpu, g, h, bytes, ZRT_COPY_H2D, NULL));
        fg = 0;
        double s = 0;
        ZT_OK(zrt_backend_scale_check(gpu, g, dts[t], n, 0.5f, &s, &fg, NULL));
        ZT_CHECK(fg == 1);
        zrt_store_f(h, dts[t], at[k], keep);
      }
      zrt_backend_free(gpu, g);
      zrt_backend_free(cpu, c);
      free(h);
    }
}

/* The list (engine_step.c's one statistics pass): the same bits as the
 * backend's per-buffer calls in order, empty entries skipped, the flag of
 * any buffer kept, one host wait and one scalar read for the whole list. */
static void test_scale_check_list(void) {
  enum { K = 5 };
  const size_t sizes[K] = {4097, 0, 1, 300007, 255};
  for (int t = 0; t < 3; t++) {
    void *h[K], *d[K];
    for (int i = 0; i < K; i++) {
      size_t bytes = (sizes[i] ? sizes[i] : 1) * zrt_dtype_size(dts[t]);
      h[i] = malloc(bytes);
      for (size_t j = 0; j < sizes[i]; j++) zrt_store_f(h[i], dts[t], j, 4.0f * srand1());
      d[i] = sizes[i] ? upload(gpu, h[i], bytes) : NULL;
    }
    double one = 0.75, all = 0.75;
    int f1 = 0, fa = 0;
    for (int i = 0; i < K; i++)
      ZT_OK(zrt_backend_scale_check(gpu, d[i], dts[t], sizes[i], 0.5f, &one, &f1, NULL));
    uint64_t w0 = ZRT_BACKEND_COUNTER(gpu, host_waits), r0 = ZRT_BACKEND_COUNTER(gpu, d2h_reads);
    ZT_OK(zrt_backend_scale_check_list(gpu, (const void *const *)d, sizes, K, dts[t], 0.5f, &all,
                                       &fa, NULL));
    uint64_t waits = ZRT_BACKEND_COUNTER(gpu, host_waits) - w0,
             reads = ZRT_BACKEND_COUNTER(gpu, d2h_reads) - r0;
    printf("scale_check_list %s: %.17g, per buffer %.17g; %llu host wait(s), %llu read(s)\n",
           zrt_dtype_name(dts[t]), all, one, (unsigned long long)waits, (unsigned long long)reads);
    ZT_CHECK(memcmp(&all, &one, sizeof all) == 0);
    ZT_CHECK(fa == 0 && f1 == 0);
    ZT_CHECK(waits == 1 && reads == 1);
    /* a NaN in the fourth buffer: the flag comes back; a set flag stays set */
    zrt_store_f(h[3], dts[t], 17, NAN);
    ZT_OK(
        zrt_backend_memcpy(gpu, d[3], h[3], sizes[3] * zrt_dtype_size(dts[t]), ZRT_COPY_H2D, NULL));
    fa = 0;
    ZT_OK(zrt_backend_scale_check_list(gpu, (const void *const *)d, sizes, K, dts[t], 0.5f, &all,
                                       &fa, NULL));
    ZT_CHECK(fa == 1);
    ZT_OK(zrt_backend_scale_check_list(gpu, (const void *const *)d, sizes, 1, dts[t], 0.5f, &all,
                                       &fa, NULL));
    ZT_CHECK(fa == 1);
    for (int i = 0; i < K; i++) {
      if (d[i]) zrt_backend_free(gpu, d[i]);
      free(h[i]);
    }
  }
  /* bad arguments: messages that name the buffer */
  double s = 0;
  int f = 0;
  const void *nul[2] = {NULL, NULL};
  size_t two[2] = {0, 8};
  ZT_CHECK(zrt_backend_scale_check_list(gpu, nul, two, 2, ZRT_F32, 1.0f, &s, &f, NULL) ==
           ZRT_ERR_INVALID_ARG);
  ZT_CONTAINS(zrt_last_error(), "buffer 1 of 2 is NULL");
  ZT_CHECK(zrt_backend_scale_check_list(gpu, nul, two, -1, ZRT_F32, 1.0f, &s, &f, NULL) ==
           ZRT_ERR_INVALID_ARG);
  ZT_CONTAINS(zrt_last_error(), "-1 buffers");
  ZT_OK(zrt_backend_scale_check_list(gpu, nul, two, 1, ZRT_F32, 1.0f, &s, &f, NULL)); /* empty */
}

static double out_ulp(zrt_dtype dt) {
  return dt == ZRT_F32 ? 0x1p-23 : dt == ZRT_F16 ? 0x1p-10 : 0x1p-7;
}

static void gemm_case(int ta, int tb, int64_t m, int64_t n, int64_t k, zrt_dtype abt, zrt_dtype ct,
                      float alpha, float beta, int pad, zrt_stream gs) {
  int64_t lda = (ta ? m : k) + pad, ldb = (tb ? k : n) + pad, ldc = n + pad;
  if (lda < 1) lda = 1;
  size_t asz = (size_t)((ta ? k : m) * lda) * zrt_dtype_size(abt);
  size_t bsz = (size_t)((tb ? n : k) * ldb) * zrt_dtype_size(abt);
  size_t csz = (size_t)(m * ldc) * zrt_dtype_size(ct);
  void *ha = malloc(asz + 4), *hb = malloc(bsz + 4), *hc = malloc(csz), *og = malloc(csz),
       *oc = malloc(csz);
  for (size_t i = 0; i < asz / zrt_dtype_size(abt); i++) zrt_store_f(ha, abt, i, srand1());
  for (size_t i = 0; i < bsz / zrt_dtype_size(abt); i++) zrt_store_f(hb, abt, i, srand1());
  for (size_t i = 0; i < csz / zrt_dtype_size(ct); i++)
    zrt_store_f(hc, ct, i, beta == 0.0f ? NAN : srand1());
  void *ga = upload(gpu, ha, asz + 4), *gb = upload(gpu, hb, bsz + 4), *gc = upload(gpu, hc, csz);
  void *ca = upload(cpu, ha, asz + 4), *cb = upload(cpu, hb, bsz + 4), *cc = upload(cpu, hc, csz);
  /* The uploads ran on the NULL stream: a GEMM on another stream must be
   * ordered after them (an H2D copy from pageable memory may still be in
   * flight when cudaMemcpyAsync returns; the twin defers it likewise). */
  if (gs) ZT_OK(zrt_backend_stream_join(gpu, gs));
  zrt_mem_stats held;
  zrt_pool_stats(gpu->pool, &held);
  ZT_OK(
      zrt_backend_gemm(gpu, ta, tb, m, n, k, alpha, ga, lda, gb, ldb, abt, beta, gc, ldc, ct, gs));
  ZT_OK(zrt_backend_gemm(cpu, ta, tb, m, n, k, alpha, ca, lda, cb, ldb, abt, beta, cc, ldc, ct,
                         NULL));
  download(gpu, og, gc, csz);
  download(cpu, oc, cc, csz);
  /* a mixed-dtype GEMM's fp32 workspace lives for that call only */
  zrt_mem_stats after;
  zrt_pool_stats(gpu->pool, &after);
  if (after.current_total != held.current_total)
    fprintf(stderr, "FAIL gemm %s->%s: %zu bytes still allocated after the GEMM (before: %zu)\n",
            zrt_dtype_name(abt), zrt_dtype_name(ct), after.current_total, held.current_total);
  ZT_CHECK(after.current_total == held.current_total);
  size_t cnt = (size_t)(m * ldc);
  float *fg = malloc(cnt * 4), *fc = malloc(cnt * 4);
  double cmax = 0;
  for (size_t i = 0; i < cnt; i++) {
    fg[i] = zrt_load_f(og, ct, i);
    fc[i] = zrt_load_f(oc, ct, i);
    if (isnan(fc[i]) && isnan(fg[i])) fg[i] = fc[i] = 0; /* untouched padding of a NaN C */
    cmax = fmax(cmax, fabs(fc[i]));
  }
  double tol = 2.0 * (double)k * 0x1p-24 * fabs(alpha) + out_ulp(ct) * cmax + 1e-30;
  char what[128];
  snprintf(what, sizeof what, "gemm %c%c %lldx%lldx%lld %s->%s beta=%g %s vs cpu", ta ? 'T' : 'N',
           tb ? 'T' : 'N', (long long)m, (long long)n, (long long)k, zrt_dtype_name(abt),
           zrt_dtype_name(ct), beta, gpu->iface->name);
  ZT_CLOSE_ARRAY(what, fg, fc, cnt, tol);
  zrt_backend_free(gpu, ga);
  zrt_backend_free(gpu, gb);
  zrt_backend_free(gpu, gc);
  zrt_backend_free(cpu, ca);
  zrt_backend_free(cpu, cb);
  zrt_backend_free(cpu, cc);
  free(ha);
  free(hb);
  free(hc);
  free(og);
  free(oc);
  free(fg);
  free(fc);
}

static void test_gemm(void) {
  zrt_stream s = NULL;
  ZT_OK(zrt_backend_stream_create(gpu, &s));
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++)
      for (int ai = 0; ai < 3; ai++)
        for (int ci = 0; ci < 3; ci++)
          gemm_case(ta, tb, 67, 45, 333, dts[ai], dts[ci], 0.75f, (ta ^ tb) ? 0.5f : 0.0f, 3,
                    (ai + ci) % 2 ? s : NULL);
  gemm_case(0, 0, 256, 512, 1024, ZRT_BF16, ZRT_BF16, 1.0f, 1.0f, 0, NULL);
  gemm_case(1, 0, 128, 64, 4096, ZRT_F16, ZRT_F32, 1.0f, 0.0f, 0, s);
  gemm_case(0, 1, 5, 7, 0, ZRT_F16, ZRT_F16, 1.0f, 0.5f, 2, NULL); /* k = 0: C *= beta */
  gemm_case(0, 0, 5, 7, 0, ZRT_F32, ZRT_BF16, 1.0f, 0.0f, 1, NULL);
  zrt_backend_stream_destroy(gpu, s);
}

static void test_optim(void) {
  const size_t n = 500009;
  static const char *names[] = {"adam", "adamw", "sgd", "lion"};
  float *p = malloc(n * 4), *m = malloc(n * 4), *v = malloc(n * 4), *r1 = malloc(n * 4),
        *r2 = malloc(n * 4);
  void *g = malloc(n * 4), *p16g = malloc(n * 2), *p16c = malloc(n * 2);
  for (int type = 0; type < 4; type++)
    for (int gi = 0; gi < 3; gi++) {
      zrt_dtype gdt = dts[gi], pdt = gi == 1 ? ZRT_BF16 : ZRT_F16;
      zrt_optim_hparams hp = {.type = (zrt_optim_type)type,
                              .lr = 1e-3f,
                              .beta1 = 0.9f,
                              .beta2 = 0.999f,
                              .eps = 1e-8f,
                              .weight_decay = 0.01f,
                              .momentum = gi == 2 ? 0.0f : 0.9f,
                              .bias_correction = gi != 1,
                              .step = 1,
                              .grad_mul = 0.25f};
      int uses_v = type <= ZRT_OPTIM_ADAMW;
      int uses_m = type != ZRT_OPTIM_SGD || hp.momentum != 0.0f;
      for (size_t i = 0; i < n; i++) {
        p[i] = srand1();
        m[i] = 0.1f * srand1();
        v[i] = 0.01f * (float)urand();
      }
      float *gp = upload(gpu, p, n * 4), *gm = upload(gpu, m, n * 4), *gv = upload(gpu, v, n * 4);
      float *cp = upload(cpu, p, n * 4), *cm = upload(cpu, m, n * 4), *cv = upload(cpu, v, n * 4);
      void *gg = dalloc(gpu, n * 4), *cg = dalloc(cpu, n * 4);
      void *g16 = dalloc(gpu, n * 2), *c16 = dalloc(cpu, n * 2);
      for (int step = 1; step <= 3; step++) {
        hp.step = step;
        for (size_t i = 0; i < n; i++) zrt_store_f(g, gdt, i, 4.0f * srand1());
        ZT_OK(zrt_backend_memcpy(gpu, gg, g, n * zrt_dtype_size(gdt), ZRT_COPY_H2D, NULL));
        ZT_OK(zrt_backend_memcpy(cpu, cg, g, n * zrt_dtype_size(gdt), ZRT_COPY_H2D, NULL));
        ZT_OK(zrt_backend_optim_step(gpu, &hp, gp, uses_m ? gm : NULL, uses_v ? gv : NULL, gg, gdt,
                                     step == 2 ? NULL : g16, pdt, n, NULL));
        ZT_OK(zrt_backend_optim_step(cpu, &hp, cp, uses_m ? cm : NULL, uses_v ? cv : NULL, cg, gdt,
                                     step == 2 ? NULL : c16, pdt, n, NULL));
        /* the GPU needs the host gradient buffer until its copy ran */
        ZT_OK(zrt_backend_synchronize(gpu, NULL));
      }
      char what[96];
      download(gpu, r1, gp, n * 4);
      download(cpu, r2, cp, n * 4);
      snprintf(what, sizeof what, "optim %s grad %s master %s vs cpu", names[type],
               zrt_dtype_name(gdt), gpu->iface->name);
      ZT_CLOSE_ARRAY(what, r1, r2, n, 1e-6);
      if (uses_m) {
        download(gpu, r1, gm, n * 4);
        download(cpu, r2, cm, n * 4);
        snprintf(what, sizeof what, "optim %s grad %s state1 %s vs cpu", names[type],
                 zrt_dtype_name(gdt), gpu->iface->name);
        ZT_CLOSE_ARRAY(what, r1, r2, n, 1e-6);
      }
      if (uses_v) {
        download(gpu, r1, gv, n * 4);
        download(cpu, r2, cv, n * 4);
        snprintf(what, sizeof what, "optim %s grad %s state2 %s vs cpu", names[type],
                 zrt_dtype_name(gdt), gpu->iface->name);
        ZT_CLOSE_ARRAY(what, r1, r2, n, 1e-8);
      }
      download(gpu, p16g, g16, n * 2);
      download(cpu, p16c, c16, n * 2);
      float *a = r1, *b = r2;
      for (size_t i = 0; i < n; i++) {
        a[i] = zrt_load_f(p16g, pdt, i);
        b[i] = zrt_load_f(p16c, pdt, i);
      }
      snprintf(what, sizeof what, "optim %s grad %s param16 (%s) %s vs cpu", names[type],
               zrt_dtype_name(gdt), zrt_dtype_name(pdt), gpu->iface->name);
      ZT_CLOSE_ARRAY(what, a, b, n, out_ulp(pdt) * 1.1);
      zrt_backend_free(gpu, gp);
      zrt_backend_free(gpu, gm);
      zrt_backend_free(gpu, gv);
      zrt_backend_free(gpu, gg);
      zrt_backend_free(gpu, g16);
      zrt_backend_free(cpu, cp);
      zrt_backend_free(cpu, cm);
      zrt_backend_free(cpu, cv);
      zrt_backend_free(cpu, cg);
      zrt_backend_free(cpu, c16);
    }
  free(p);
  free(m);
  free(v);
  free(r1);
  free(r2);
  free(g);
  free(p16g);
  free(p16c);
}

/* A long producer on stream s1, an event, and a consumer on s2 that must
 * see the producer's result. */
static void test_streams(void) {
  const size_t n = 1u << 24;
  zrt_stream s1 = NULL, s2 = NULL;
  zrt_event e = NULL;
  ZT_OK(zrt_backend_stream_create(gpu, &s1));
  ZT_OK(zrt_backend_stream_create(gpu, &s2));
  ZT_OK(zrt_backend_event_create(gpu, &e));
  ZT_CHECK(s1 && s2 && e && s1 != s2);
  float *x = dalloc(gpu, n * 4), *ones = dalloc(gpu, n * 4);
  uint16_t *y = dalloc(gpu, n * 2);
  ZT_OK(zrt_backend_memset(gpu, x, 0, n * 4, s1));
  float *h1 = malloc(n * 4);
  for (size_t i = 0; i < n; i++) h1[i] = 1.0f;
  ZT_OK(zrt_backend_memcpy(gpu, ones, h1, n * 4, ZRT_COPY_H2D, s1));
  for (int r = 0; r < 20; r++) ZT_OK(zrt_backend_accumulate(gpu, x, ones, ZRT_F32, 1.0f, n, s1));
  ZT_OK(zrt_backend_event_record(gpu, e, s1));
  ZT_OK(zrt_backend_stream_wait_event(gpu, s2, e));
  ZT_OK(zrt_backend_convert(gpu, y, ZRT_BF16, x, ZRT_F32, n, s2));
  /* a query never waits (not a host wait); done once the host waited */
  int qdone = -1;
  uint64_t hw = ZRT_BACKEND_COUNTER(gpu, host_waits);
  ZT_OK(zrt_backend_event_query(gpu, e, &qdone));
  ZT_CHECK((qdone == 0 || qdone == 1) && ZRT_BACKEND_COUNTER(gpu, host_waits) == hw);
  ZT_OK(zrt_backend_synchronize(gpu, s2));
  ZT_OK(zrt_backend_event_query(gpu, e, &qdone));
  ZT_CHECK(qdone == 1);
  uint16_t *hy = malloc(n * 2);
  ZT_OK(zrt_backend_memcpy(gpu, hy, y, n * 2, ZRT_COPY_D2H, s2));
  ZT_OK(zrt_backend_synchronize(gpu, s2));
  long bad = 0;
  for (size_t i = 0; i < n; i++) bad += zrt_bf16_to_f32(hy[i]) != 20.0f;
  printf("streams: consumer after event saw %ld stale values of %zu (tolerance 0)\n", bad, n);
  ZT_CHECK(bad == 0);
  zrt_backend_event_destroy(gpu, e);
  zrt_backend_stream_destroy(gpu, s1);
  zrt_backend_stream_destroy(gpu, s2);
  zrt_backend_free(gpu, x);
  zrt_backend_free(gpu, ones);
  zrt_backend_free(gpu, y);
  free(h1);
  free(hy);
}

/* Host-side work queued on a stream (zrt_backend_enqueue_host_named,
 * cudaLaunchHostFunc on CUDA): it runs after the stream's earlier work (a
 * D2H copy into registered memory has landed) and before its later work (an
 * H2D copy of what it wrote carries the new bytes); its failure is sticky
 * and named by the next wait. */
typedef struct host_sum_args {
  const float *src;
  float *dst;
  size_t n;
  double *sum;
} host_sum_args;

static zrt_status host_sum(void *arg) {
  const host_sum_args *a = arg;
  double s = 0;
  for (size_t i = 0; i < a->n; i++) s += a->src[i];
  *a->sum = s;
  for (size_t i = 0; i < a->n; i++) a->dst[i] = a->src[i] * 2.0f;
  return ZRT_OK;
}

static zrt_status host_fail(void *arg) {
  (void)arg;
  return zrt_error(ZRT_ERR_IO, "test host function failed on purpose");
}

static void test_host_fns(void) {
  ZT_CHECK(zrt_backend_host_fn_async(gpu) == 1);
  ZT_CHECK(zrt_backend_host_fn_device(gpu) == !is_cuda);
  const size_t n = 1u << 22;
  zrt_stream s = NULL;
  ZT_OK(zrt_backend_stream_create(gpu, &s));
  float *x = dalloc(gpu, n * 4), *ones = dalloc(gpu, n * 4), *y = dalloc(gpu, n * 4);
  float *hin = NULL, *hout = NULL, *back = malloc(n * 4);
  ZT_CHECK(posix_memalign((void **)&hin, 4096, n * 4) == 0);
  ZT_CHECK(posix_memalign((void **)&hout, 4096, n * 4) == 0);
  ZT_OK(zrt_backend_host_register(gpu, hin, n * 4));
  ZT_OK(zrt_backend_host_register(gpu, hout, n * 4));
  for (size_t i = 0; i < n; i++) back[i] = 1.0f;
  ZT_OK(zrt_backend_memset(gpu, x, 0, n * 4, s));
  ZT_OK(zrt_backend_memcpy(gpu, ones, back, n * 4, ZRT_COPY_H2D, s));
  for (int r = 0; r < 12; r++) ZT_OK(zrt_backend_accumulate(gpu, x, ones, ZRT_F32, 1.0f, n, s));
  ZT_OK(zrt_backend_memcpy(gpu, hin, x, n * 4, ZRT_COPY_D2H, s)); /* registered: async */
  double sum = -1;
  host_sum_args a = {hin, hout, n, &sum};
  ZT_OK(zrt_backend_enqueue_host_named(gpu, host_sum, &a, sizeof a, s, "test host sum"));
  ZT_OK(zrt_backend_memcpy(gpu, y, hout, n * 4, ZRT_COPY_H2D, s));
  ZT_OK(zrt_backend_synchronize(gpu, s));
  ZT_OK(zrt_backend_memcpy(gpu, back, y, n * 4, ZRT_COPY_D2H, s));
  ZT_OK(zrt_backend_synchronize(gpu, s));
  long bad = 0;
  for (size_t i = 0; i < n; i++) bad += back[i] != 24.0f;
  printf("host functions: sum %.0f (expected %.0f), %ld of %zu values written by the function "
         "missing on the device (tolerance 0)\n",
         sum, 12.0 * (double)n, bad, n);
  ZT_CHECK(sum == 12.0 * (double)n && bad == 0);
  zrt_backend_host_unregister(gpu, hin);
  zrt_backend_host_unregister(gpu, hout);
  zrt_backend_stream_destroy(gpu, s);
  zrt_backend_free(gpu, x);
  zrt_backend_free(gpu, ones);
  zrt_backend_free(gpu, y);
  free(hin);
  free(hout);
  free(back);
  /* a failure is sticky (a backend of its own: on CUDA it stays failed) */
  zrt_backend *b = NULL;
  ZT_OK(zrt_backend_create(is_cuda ? "cuda" : "twin", 0, 0, &b));
  ZT_OK(zrt_backend_enqueue_host_named(b, host_fail, NULL, 0, NULL, "test failing host function"));
  ZT_CHECK(zrt_backend_synchronize(b, NULL) == ZRT_ERR_IO);
  printf("host function failure: %s\n", zrt_last_error());
  ZT_CONTAINS(zrt_last_error(), "test failing host function");
  ZT_CONTAINS(zrt_last_error(), "failed on purpose");
  ZT_CHECK(zrt_backend_synchronize(b, NULL) == ZRT_ERR_IO);
  zrt_backend_destroy(b);
}

static void test_oom(void) {
  if (!is_cuda) return;
  zrt_backend *b = NULL;
  ZT_OK(zrt_backend_create("cuda", 1u << 20, 0, &b));
  void *p = NULL;
  ZT_CHECK(zrt_backend_alloc(b, 2u << 20, ZRT_MEM_MASTER32, &p) == ZRT_ERR_OOM);
  ZT_CONTAINS(zrt_last_error(), "cannot allocate 2.00 MiB for master32");
  ZT_CONTAINS(zrt_last_error(), "limit 1.00 MiB");
  ZT_CONTAINS(zrt_last_error(), "device (cuda:");
  ZT_CONTAINS(zrt_last_error(), "raise zrt.device_memory_limit");
  zrt_backend_destroy(b);
  /* a limit above the device: the CUDA memory pool itself refuses, its message kept */
  size_t cap = gpu->device_capacity;
  ZT_OK(zrt_backend_create("cuda", cap * 4, 0, &b));
  zrt_status st = zrt_backend_alloc(b, cap * 2, ZRT_MEM_PARAMS16, &p);
  ZT_CHECK(st == ZRT_ERR_OOM);
  printf("cudaMalloc OOM: %s\n", zrt_last_error());
  ZT_CONTAINS(zrt_last_error(), "the allocator refused");
  ZT_CONTAINS(zrt_last_error(), "cudaMallocFromPoolAsync(");
  /* the failure is not sticky: the device still works */
  ZT_OK(zrt_backend_alloc(b, 1 << 20, ZRT_MEM_PARAMS16, &p));
  ZT_OK(zrt_backend_memset(b, p, 0, 1 << 20, NULL));
  ZT_OK(zrt_backend_synchronize(b, NULL));
  zrt_mem_stats ms;
  zrt_pool_stats(b->pool, &ms);
  ZT_CHECK(ms.current[ZRT_MEM_PARAMS16] == 1 << 20);
  zrt_backend_free(b, p);
  zrt_backend_destroy(b);
}

int main(void) {
  const char *want = getenv("ZRT_TEST_BACKEND");
  if (want && !strcmp(want, "twin"))
    is_cuda = 0;
  else if (want && *want && strcmp(want, "cuda")) {
    fprintf(stderr, "FAIL: ZRT_TEST_BACKEND='%s': expected cuda (default) or twin\n", want);
    return 1;
  }
  if (is_cuda) zt_gpu_or_skip();
  ZT_OK(zrt_backend_create(is_cuda ? "cuda" : "twin", 0, 0, &gpu));
  ZT_OK(zrt_backend_create("cpu", 0, 0, &cpu));
  test_info();
  test_memory();
  test_convert();
  test_accumulate();
  test_scale_check();
  test_scale_check_list();
  test_gemm();
  test_optim();
  test_streams();
  test_host_fns();
  zt_check_free_on(gpu); /* tests/common/zt_free_on.h */
  test_oom();
  zrt_mem_stats ms;
  zrt_pool_stats(gpu->pool, &ms);
  ZT_CHECK(ms.current_total == 0);
  printf("%s pool peak %zu bytes\n", gpu->iface->name, ms.peak_total);
  zrt_backend_destroy(gpu);
  zrt_backend_destroy(cpu);
  ZT_DONE();
}
