/*
 * test_gpt2_cpu_kernels.c — the performance paths of the GPT-2 example's
 * float CPU ops that the float64 gradient check does not reach:
 *   - the GEMM split over the OpenMP team (engine-backed cpu_gemm with two
 *     threads, OpenBLAS single-threaded): every transpose pair, row and
 *     column splits, beta 0 and 1, against the float64 loops within 1e-5
 *     absolute (entries are sums of <= 120 products of magnitude <= 0.25);
 *   - an error in a slab reaches the calling thread's zrt_last_error() and
 *     leaves C as it was;
 *   - the branch-free float exp / tanh against libm in double: exp within
 *     2 ulp relative on [-87, 0] (the callers' range), exactly 0 below -87.3
 *     and NaN in -> NaN out; tanh within 2e-7 absolute on [-12, 12].
 *
 * Compiles the example's model source directly (like test_gpt2_gradcheck);
 * the engine is a single-rank CPU engine from the default config.
 */
#include "../../examples/gpt2/gpt2_model.c"

#include <stdlib.h>

#include "ztest.h"

static int zt_failures;

static float frand(uint64_t *s) {
  *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
  return (float)((*s >> 40) & 0xffffff) / 16777216.0f - 0.5f;
}

/* One engine-backed GEMM with the team of two vs the double loops. */
static void check_gemm(const gpt2_ops_f32 *ops, int ta, int tb, int64_t m, int64_t n, int64_t k,
                       float beta) {
  int64_t lda = ta ? m : k, ldb = tb ? k : n, ldc = n;
  float *a = malloc(sizeof(float) * (size_t)(m * k)), *b = malloc(sizeof(float) * (size_t)(k * n));
  float *c = malloc(sizeof(float) * (size_t)(m * n));
  double *a64 = malloc(sizeof(double) * (size_t)(m * k)),
         *b64 = malloc(sizeof(double) * (size_t)(k * n));
  double *c64 = malloc(sizeof(double) * (size_t)(m * n));
  uint64_t s = (uint64_t)(ta * 2 + tb) * 977 + (uint64_t)m;
  for (int64_t i = 0; i < m * k; i++) a64[i] = a[i] = frand(&s);
  for (int64_t i = 0; i < k * n; i++) b64[i] = b[i] = frand(&s);
  for (int64_t i = 0; i < m * n; i++) c64[i] = c[i] = frand(&s);
  ZT_OK(ops->gemm(ops->ctx, ta, tb, m, n, k, 0.5f, a, lda, b, ldb, beta, c, ldc));
  ZT_OK(cpu_gemm_naive_f64(ta, tb, m, n, k, 0.5f, a64, lda, b64, ldb, beta, c64, ldc));
  char what[96];
  snprintf(what, sizeof what, "gemm ta=%d tb=%d m=%lld n=%lld k=%lld beta=%g (split over %s)", ta,
           tb, (long long)m, (long long)n, (long long)k, (double)beta, m >= n ? "rows" : "columns");
  /* Sums of k <= 120 products <= 0.25 accumulate a few 1e-7 in fp32; a
   * misplaced or missing slab is off by ~0.1. */
  ZT_CLOSE_ARRAY(what, c, c64, m * n, 1e-5);
  free(a), free(b), free(c), free(a64), free(b64), free(c64);
}

int main(void) {
  zrt_config *zc = NULL;
  zrt_engine *eng = NULL;
  ZT_OK(zrt_config_from_env(&zc));
  ZT_OK(zrt_config_set(zc, "zrt.blas_threads", "1", "test"));
  ZT_OK(zrt_engine_create(zc, &eng));
  omp_set_num_threads(2);
  gpt2_ops_f32 ops = gpt2_cpu_ops_f32;
  ops.ctx = eng;

  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++) {
      check_gemm(&ops, ta, tb, 200, 72, 120, 0.0f); /* rows, a ragged last slab */
      check_gemm(&ops, ta, tb, 64, 333, 96, 1.0f);  /* columns, accumulate */
    }

  /* ldc < n: every slab fails its argument check on a worker thread. */
  {
    int64_t m = 128, n = 96, k = 128;
    float *a = calloc((size_t)(m * k), 4), *b = calloc((size_t)(k * n), 4);
    float *c = malloc(sizeof(float) * (size_t)(m * n));
    for (int64_t i = 0; i < m * n; i++) c[i] = 3.0f;
    zrt_status st = ops.gemm(ops.ctx, 0, 0, m, n, k, 1, a, k, b, n, 1, c, n - 1);
    printf("gemm with ldc < n: %s: %s\n", zrt_status_string(st), zrt_last_error());
    ZT_CHECK(st == ZRT_ERR_INVALID_ARG);
    ZT_CONTAINS(zrt_last_error(), "leading dimension too small");
    int unchanged = 1;
    for (int64_t i = 0; i < m * n; i++) unchanged &= c[i] == 3.0f;
    ZT_CHECK(unchanged);
    free(a), free(b), free(c);
  }

  /* exp / tanh of the simd kernels. */
  double max_ulp = 0, max_th = 0;
  for (float x = -87.0f; x <= 0.0f; x += 3.7e-4f) {
    double want = exp((double)x), got = gpt2_expf(x);
    double ulp = fabs(got - want) / (want * 5.9604644775390625e-8);
    if (ulp > max_ulp) max_ulp = ulp;
  }
  for (float u = -12.0f; u <= 12.0f; u += 1.3e-4f) {
    double d = fabs((double)gpt2_tanhf(u) - tanh((double)u));
    if (d > max_th) max_th = d;
  }
  printf("gpt2_expf on [-87, 0]: max error %.3g ulp (tolerance 2)\n", max_ulp);
  printf("gpt2_tanhf on [-12, 12]: max abs diff %.3g (tolerance 2e-7)\n", max_th);
  ZT_CHECK(max_ulp <= 2.0);
  ZT_CHECK(max_th <= 2e-7);
  ZT_CHECK(gpt2_expf(-88.0f) == 0.0f && gpt2_expf(-INFINITY) == 0.0f);
  ZT_CHECK(gpt2_expf(0.0f) == 1.0f);
  ZT_CHECK(isnan(gpt2_expf(NAN)) && isnan(gpt2_tanhf(NAN)));

  zrt_engine_destroy(eng);
  zrt_config_destroy(zc);
  ZT_DONE();
}
