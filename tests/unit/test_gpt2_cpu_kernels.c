/*
 * test_gpt2_cpu_kernels.c — the performance paths of the GPT-2 example's
 * float CPU ops that the float64 gradient check does not reach:
 *   - the GEMM split over the OpenMP team (engine-backed cpu_gemm with two
 *     threads, OpenBLAS single-threaded): every transpose pair, row and
 *     column splits, beta 0 and 1, against the float64 loops within 1e-5
 *     absolute (entries are sums of <= 120 products of magnitude <= 0.25);
 *   - an error in a slab reaches the calling thread's zrt_last_error() and
 *     leaves C as it was;
 *   - the GEMM-blocked causal attention (forward and backward), float through
 *     the engine and double through the loops, against direct float64
 *     loops written here: T = 150 spans three query blocks of 64 (the last
 *     one ragged), 3 heads of 16, batch 2; float within 2e-5 absolute
 *     (att, out) and 1e-4 (dqkv, entries of size <= ~2), double within
 *     1e-12; att exactly 0 above the diagonal; dqkv is written (NaN before);
 *     without and with the qkv GEMM's bias (added as q, k, v are read);
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

/* Direct causal attention in float64: the definition the GEMM-blocked
 * kernels must match. */
static void ref_attention(double *out, double *att, double *dqkv, const double *qkv,
                          const double *dout, int B, int T, int C, int NH) {
  int hs = C / NH;
  double scale = 1.0 / sqrt((double)hs);
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++) {
      const double *base = qkv + (size_t)b * T * 3 * C + h * hs;
      double *dbase = dqkv + (size_t)b * T * 3 * C + h * hs;
      for (int t = 0; t < T; t++) {
        double *a = att + (((size_t)b * NH + h) * T + t) * T, mx = -INFINITY, sum = 0;
        for (int t2 = 0; t2 < T; t2++) {
          double d = 0;
          for (int i = 0; i < hs; i++)
            d += base[(size_t)t * 3 * C + i] * base[(size_t)t2 * 3 * C + C + i];
          a[t2] = t2 <= t ? d * scale : 0;
          if (t2 <= t && a[t2] > mx) mx = a[t2];
        }
        for (int t2 = 0; t2 <= t; t2++) sum += a[t2] = exp(a[t2] - mx);
        for (int t2 = 0; t2 <= t; t2++) a[t2] /= sum;
        double *o = out + ((size_t)b * T + t) * C + h * hs;
        for (int i = 0; i < hs; i++) {
          o[i] = 0;
          for (int t2 = 0; t2 <= t; t2++) o[i] += a[t2] * base[(size_t)t2 * 3 * C + 2 * C + i];
        }
        /* backward of this row */
        const double *dy = dout + ((size_t)b * T + t) * C + h * hs;
        double da[T], s = 0;
        for (int t2 = 0; t2 <= t; t2++) {
          da[t2] = 0;
          for (int i = 0; i < hs; i++) da[t2] += dy[i] * base[(size_t)t2 * 3 * C + 2 * C + i];
          s += a[t2] * da[t2];
        }
        for (int t2 = 0; t2 <= t; t2++) {
          double ds = a[t2] * (da[t2] - s) * scale;
          for (int i = 0; i < hs; i++) {
            dbase[(size_t)t2 * 3 * C + 2 * C + i] += a[t2] * dy[i];
            dbase[(size_t)t * 3 * C + i] += ds * base[(size_t)t2 * 3 * C + C + i];
            dbase[(size_t)t2 * 3 * C + C + i] += ds * base[(size_t)t * 3 * C + i];
          }
        }
      }
    }
}

/* Runs the float (engine) and double (loops) kernels and compares both
 * with ref_attention. */
static void check_attention(void *eng, int with_bias) {
  enum { AB = 2, AT = 150, AC = 48, ANH = 3 };
  size_t nq = (size_t)AB * AT * 3 * AC, no = (size_t)AB * AT * AC, na = (size_t)AB * ANH * AT * AT;
  double *q64 = malloc(nq * 8), *dq64 = malloc(nq * 8), *do64 = malloc(no * 8);
  double *o64 = malloc(no * 8), *a64 = malloc(na * 8), *rq = malloc(nq * 8);
  double *ro = malloc(no * 8), *ra = malloc(na * 8);
  float *q32 = malloc(nq * 4), *dq32 = malloc(nq * 4), *do32 = malloc(no * 4);
  float *o32 = malloc(no * 4), *a32 = malloc(na * 4);
  uint64_t s = 12345 + (uint64_t)with_bias;
  float b32[3 * AC];
  double b64[3 * AC];
  for (int i = 0; i < 3 * AC; i++) b32[i] = frand(&s), b64[i] = b32[i];
  double *qe = malloc(nq * 8); /* q, k, v as read: with the bias */
  for (size_t i = 0; i < nq; i++) {
    q32[i] = 2 * frand(&s), q64[i] = q32[i];
    qe[i] = q64[i] + (with_bias ? b64[i % (3 * AC)] : 0.0);
    dq32[i] = NAN, dq64[i] = NAN, rq[i] = 0; /* written */
  }
  for (size_t i = 0; i < no; i++) do32[i] = frand(&s), do64[i] = do32[i];
  for (size_t i = 0; i < na; i++) a32[i] = 7.0f, a64[i] = 7.0; /* must be overwritten */
  ref_attention(ro, ra, rq, qe, do64, AB, AT, AC, ANH);

  const float *bf = with_bias ? b32 : NULL;
  const double *bd = with_bias ? b64 : NULL;
  ZT_OK(gpt2_cpu_ops_f32.attention_forward(eng, o32, a32, q32, bf, AB, AT, AC, ANH));
  ZT_OK(gpt2_cpu_ops_f32.attention_backward(eng, dq32, do32, q32, bf, o32, a32, AB, AT, AC, ANH));
  ZT_OK(gpt2_cpu_ops_f64.attention_forward(NULL, o64, a64, q64, bd, AB, AT, AC, ANH));
  ZT_OK(gpt2_cpu_ops_f64.attention_backward(NULL, dq64, do64, q64, bd, o64, a64, AB, AT, AC, ANH));
  double e32[3] = {0}, e64[3] = {0};
  int upper_zero = 1;
/* the worst error; a NaN (an element never written) makes it NaN, which fails the checks */
#define ATT_WORST(e, d)                                                                            \
  do {                                                                                             \
    double d_ = (d);                                                                               \
    if (!(d_ <= (e))) (e) = d_;                                                                    \
  } while (0)
  for (size_t i = 0; i < na; i++) {
    ATT_WORST(e32[0], fabs(a32[i] - ra[i]));
    ATT_WORST(e64[0], fabs(a64[i] - ra[i]));
    size_t t = (i / AT) % AT, t2 = i % AT;
    if (t2 > t) upper_zero &= a32[i] == 0.0f && a64[i] == 0.0;
  }
  for (size_t i = 0; i < no; i++) {
    ATT_WORST(e32[1], fabs(o32[i] - ro[i]));
    ATT_WORST(e64[1], fabs(o64[i] - ro[i]));
  }
  for (size_t i = 0; i < nq; i++) {
    ATT_WORST(e32[2], fabs(dq32[i] - rq[i]));
    ATT_WORST(e64[2], fabs(dq64[i] - rq[i]));
  }
#undef ATT_WORST
  printf("attention T=%d%s: float max diff att %.3g out %.3g dqkv %.3g; double %.3g %.3g %.3g\n",
         AT, with_bias ? " (bias)" : "", e32[0], e32[1], e32[2], e64[0], e64[1], e64[2]);
  ZT_CHECK(e32[0] <= 2e-5 && e32[1] <= 2e-5 && e32[2] <= 1e-4);
  ZT_CHECK(e64[0] <= 1e-12 && e64[1] <= 1e-12 && e64[2] <= 1e-12);
  ZT_CHECK(upper_zero);
  free(qe), free(q64), free(dq64), free(do64), free(o64), free(a64), free(rq), free(ro), free(ra);
  free(q32), free(dq32), free(do32), free(o32), free(a32);
}

int main(void) {
  zrt_config *zc = NULL;
  zrt_engine *eng = NULL;
  ZT_OK(zrt_config_from_env(&zc));
  ZT_OK(zrt_config_set(zc, "zrt.blas_threads", "1", "test"));
  /* host arrays go to the engine's GEMM: pin the CPU backend (auto picks CUDA on a GPU) */
  ZT_OK(zrt_config_set(zc, "zrt.backend", "cpu", "test"));
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

  check_attention(eng, 0);
  check_attention(eng, 1);

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
