/*
 * test_backend_cpu.c — every op of the CPU backend against a float64 (or
 * bit-exact) reference, the registry, argument errors, the generic
 * fallbacks of NULL slots, and device-capacity OOM with its message.
 *
 * Tolerances (stated per check):
 *   memcpy / memset / convert: exact (convert: bit-equal to amp/dtype.h,
 *     NaN as NaN);
 *   accumulate: 2 fp32 roundings of the result magnitude (4 * 2^-24 * |x|max);
 *   scale_check: 1e-12 relative (double accumulation in another order);
 *   GEMM: 2 * K * 2^-24 * alpha * max|a| max|b| (fp32 accumulation) plus half
 *     an ulp of the output dtype times max|C|;
 *   optim_step: 2e-6 relative to max|x| of the double reference after 3 steps
 *     (the float recurrences differ from double by a few fp32 roundings);
 *     param16 bit-equal to the rounded master.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "cpu_optim.h"
#include "dtype.h"
#include "zt_optim.h"
#include "ztest.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static double urand(void) { /* [0, 1) */
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return (double)(rng_state >> 11) * (1.0 / 9007199254740992.0);
}
static float srand1(void) { return (float)(2.0 * urand() - 1.0); } /* [-1, 1) */

static void *balloc(zrt_backend *b, size_t bytes, zrt_mem_category c) {
  void *p = NULL;
  ZT_OK(zrt_backend_alloc(b, bytes, c, &p));
  return p;
}

/* --------------------------------------------------------------- registry */

static void test_registry(void) {
  zrt_backend *b = NULL;
  ZT_OK(zrt_backend_create("cpu", 0, 0, &b));
  ZT_CHECK(!strcmp(b->iface->name, "cpu"));
  ZT_CHECK(b->device_id == -1 && b->pool != NULL && b->description[0]);
  ZT_CHECK(zrt_pool_capacity(b->pool) == 0);
  printf("cpu backend: %s\n", b->description);
  zrt_backend_destroy(b);
  zrt_backend_destroy(NULL);

  /* auto picks cpu when no GPU is usable */
  if (zrt_backend_cuda_device_count() == 0) {
    ZT_OK(zrt_backend_create("auto", 0, 3, &b));
    ZT_CHECK(!strcmp(b->iface->name, "cpu"));
    zrt_backend_destroy(b);
    ZT_OK(zrt_backend_create(NULL, 0, 0, &b)); /* NULL = auto */
    ZT_CHECK(!strcmp(b->iface->name, "cpu"));
    zrt_backend_destroy(b);
    zrt_status st = zrt_backend_create("cuda", 0, 0, &b);
    ZT_CHECK(b == NULL);
    if (zrt_backend_cuda_built()) {
      ZT_CHECK(st == ZRT_ERR_CUDA);
      ZT_CONTAINS(zrt_last_error(), "no CUDA device is visible");
    } else {
      ZT_CHECK(st == ZRT_ERR_UNSUPPORTED);
      ZT_CONTAINS(zrt_last_error(), "built without CUDA");
    }
  }
  ZT_CHECK(zrt_backend_create("tpu", 0, 0, &b) == ZRT_ERR_INVALID_ARG);
  ZT_CONTAINS(zrt_last_error(), "backend \"tpu\" is unknown");
  ZT_CHECK(zrt_backend_create("cpu", 0, -1, &b) == ZRT_ERR_INVALID_ARG);
  ZT_CONTAINS(zrt_last_error(), "local_rank -1");
}

/* ------------------------------------------------------ memory and copies */

static void test_memory(zrt_backend *b) {
  enum { N = 4099 };
  unsigned char *host = malloc(N), *back = malloc(N);
  for (int i = 0; i < N; i++) host[i] = (unsigned char)(i * 7 + 3);
  unsigned char *d1 = balloc(b, N, ZRT_MEM_OTHER), *d2 = balloc(b, N, ZRT_MEM_OTHER);
  ZT_CHECK(((uintptr_t)d1 % 64) == 0 && ((uintptr_t)d2 % 64) == 0);
  ZT_OK(zrt_backend_memcpy(b, d1, host, N, ZRT_COPY_H2D, NULL));
  ZT_OK(zrt_backend_memcpy(b, d2, d1, N, ZRT_COPY_D2D, NULL));
  ZT_OK(zrt_backend_memcpy(b, back, d2, N, ZRT_COPY_D2H, NULL));
  ZT_CHECK(!memcmp(back, host, N));
  memset(back, 0, N);
  ZT_OK(zrt_backend_memcpy(b, back, host, N, ZRT_COPY_H2H, NULL));
  ZT_CHECK(!memcmp(back, host, N));
  /* overlapping D2D shift (compaction) */
  ZT_OK(zrt_backend_memcpy(b, d2, d2 + 100, N - 100, ZRT_COPY_D2D, NULL));
  ZT_CHECK(!memcmp(d2, host + 100, N - 100));
  /* memset of a sub-range */
  ZT_OK(zrt_backend_memset(b, d1 + 10, 0xab, 1000, NULL));
  ZT_OK(zrt_backend_memcpy(b, back, d1, N, ZRT_COPY_D2H, NULL));
  int ok = 1;
  for (int i = 0; i < N; i++) {
    unsigned char want = (i >= 10 && i < 1010) ? 0xab : host[i];
    ok &= back[i] == want;
  }
  ZT_CHECK(ok);
  /* zero-byte ops are no-ops even with NULL pointers */
  ZT_OK(zrt_backend_memcpy(b, NULL, NULL, 0, ZRT_COPY_D2D, NULL));
  ZT_OK(zrt_backend_memset(b, NULL, 0, 0, NULL));
  ZT_CHECK(zrt_backend_memcpy(b, d1, NULL, 4, ZRT_COPY_D2D, NULL) == ZRT_ERR_INVALID_ARG);
  ZT_CONTAINS(zrt_last_error(), "src is NULL");
  ZT_CHECK(zrt_backend_memcpy(b, d1, d2, 4, (zrt_copy_kind)9, NULL) == ZRT_ERR_INVALID_ARG);
  ZT_CONTAINS(zrt_last_error(), "copy kind 9");
  printf("memcpy/memset: %d bytes exact\n", N);
  zrt_backend_free(b, d1);
  zrt_backend_free(b, d2);
  free(host);
  free(back);
}

/* -------------------------------------------------------------- convert */

static float edge_values[] = {0.0f,
                              -0.0f,
                              1.0f,
                              -1.0f,
                              65504.0f,
                              65520.0f,
                              -65520.0f,
                              1e6f,
                              5.9604644775390625e-8f,
                              2.98023223876953125e-8f,
                              8.940696716308594e-8f,
                              6.097555160522461e-5f,
                              1.00048828125f,
                              1.00146484375f,
                              1.00390625f,
                              1.01171875f,
                              3.3895314e38f,
                              3.4028235e38f,
                              1e-45f,
                              9.18355e-41f,
                              INFINITY,
                              -INFINITY,
                              NAN,
                              -NAN};

static int same_value(float got, float want) {
  if (isnan(want)) return isnan(got);
  return zrt_f32_to_bits(got) == zrt_f32_to_bits(want);
}

static void test_convert(zrt_backend *b) {
  const size_t ne = sizeof edge_values / sizeof edge_values[0];
  const size_t n = 70001 + ne; /* above the threading threshold */
  float *src = malloc(n * 4);
  for (size_t i = 0; i < ne; i++) src[i] = edge_values[i];
  for (size_t i = ne; i < n; i++) src[i] = (float)(srand1() * pow(2.0, (double)(i % 60) - 30));
  const zrt_dtype dts[3] = {ZRT_F32, ZRT_F16, ZRT_BF16};
  void *in = balloc(b, n * 4, ZRT_MEM_OTHER), *out = balloc(b, n * 4, ZRT_MEM_OTHER);
  void *href = malloc(n * 4), *hin = malloc(n * 4), *hout = malloc(n * 4);
  long mism = 0, total = 0;
  for (int si = 0; si < 3; si++)
    for (int di = 0; di < 3; di++) {
      zrt_dtype sd = dts[si], dd = dts[di];
      for (size_t i = 0; i < n; i++) zrt_store_f(hin, sd, i, src[i]); /* host reference input */
      ZT_OK(zrt_backend_memcpy(b, in, hin, n * zrt_dtype_size(sd), ZRT_COPY_H2D, NULL));
      ZT_OK(zrt_backend_convert(b, out, dd, in, sd, n, NULL));
      ZT_OK(zrt_backend_memcpy(b, hout, out, n * zrt_dtype_size(dd), ZRT_COPY_D2H, NULL));
      for (size_t i = 0; i < n; i++) zrt_store_f(href, dd, i, zrt_load_f(hin, sd, i));
      long bad = 0;
      for (size_t i = 0; i < n; i++) {
        int ok = dd == ZRT_F32
                     ? same_value(((float *)hout)[i], ((float *)href)[i])
                     : (((uint16_t *)hout)[i] == ((uint16_t *)href)[i] ||
                        (isnan(zrt_load_f(hout, dd, i)) && isnan(zrt_load_f(href, dd, i))));
        if (!ok && bad++ < 5)
          fprintf(stderr, "FAIL convert %s->%s [%zu] %.9g: got %.9g want %.9g\n",
                  zrt_dtype_name(sd), zrt_dtype_name(dd), i, src[i], zrt_load_f(hout, dd, i),
                  zrt_load_f(href, dd, i));
      }
      mism += bad;
      total += (long)n;
    }
  ZT_CHECK(mism == 0);
  printf("convert: 9 dtype pairs x %zu values, %ld mismatches vs amp/dtype.h (tolerance exact)\n",
         n, mism);
  (void)total;
  ZT_CHECK(zrt_backend_convert(b, out, (zrt_dtype)7, in, ZRT_F32, 4, NULL) == ZRT_ERR_INVALID_ARG);
  ZT_CONTAINS(zrt_last_error(), "destination dtype 7");
  zrt_backend_free(b, in);
  zrt_backend_free(b, out);
  free(src);
  free(href);
  free(hin);
  free(hout);
}

/* ----------------------------------------------------------- accumulate */

static void test_accumulate(zrt_backend *b) {
  const size_t n = 100003;
  const float alpha = -0.37f;
  float *dst0 = malloc(n * 4), *got = malloc(n * 4);
  double *want = malloc(n * 8);
  void *src = malloc(n * 4);
  float *dd = balloc(b, n * 4, ZRT_MEM_GRADS);
  void *ds = balloc(b, n * 4, ZRT_MEM_GRADS);
  const zrt_dtype dts[3] = {ZRT_F32, ZRT_F16, ZRT_BF16};
  for (int t = 0; t < 3; t++) {
    for (size_t i = 0; i < n; i++) {
      dst0[i] = 2.0f * srand1();
      zrt_store_f(src, dts[t], i, 2.0f * srand1());
      want[i] = (double)dst0[i] + (double)zrt_load_f(src, dts[t], i) * (double)alpha;
    }
    ZT_OK(zrt_backend_memcpy(b, dd, dst0, n * 4, ZRT_COPY_H2D, NULL));
    ZT_OK(zrt_backend_memcpy(b, ds, src, n * zrt_dtype_size(dts[t]), ZRT_COPY_H2D, NULL));
    ZT_OK(zrt_backend_accumulate(b, dd, ds, dts[t], alpha, n, NULL));
    ZT_OK(zrt_backend_memcpy(b, got, dd, n * 4, ZRT_COPY_D2H, NULL));
    char what[64];
    snprintf(what, sizeof what, "accumulate %s", zrt_dtype_name(dts[t]));
    ZT_CLOSE_ARRAY(what, got, want, n, 4.0 * 2.7 * 0x1p-24);
  }
  zrt_backend_free(b, dd);
  zrt_backend_free(b, ds);
  free(dst0);
  free(got);
  free(want);
  free(src);
}

/* ---------------------------------------------------------- scale_check */

static void test_scale_check(zrt_backend *b) {
  const size_t n = 200003;
  const float scale = 0.125f;
  void *h = malloc(n * 4);
  void *d = balloc(b, n * 4, ZRT_MEM_GRADS);
  const zrt_dtype dts[3] = {ZRT_F32, ZRT_F16, ZRT_BF16};
  for (int t = 0; t < 3; t++) {
    zrt_dtype dt = dts[t];
    double want = 0;
    for (size_t i = 0; i < n; i++) {
      zrt_store_f(h, dt, i, 3.0f * srand1());
      double x = (double)zrt_load_f(h, dt, i) * scale;
      want += x * x;
    }
    ZT_OK(zrt_backend_memcpy(b, d, h, n * zrt_dtype_size(dt), ZRT_COPY_H2D, NULL));
    double sumsq = 1.5; /* accumulates into what is there */
    int nf = 0;
    ZT_OK(zrt_backend_scale_check(b, d, dt, n, scale, &sumsq, &nf, NULL));
    double got = sumsq - 1.5;
    double rel = fabs(got - want) / want;
    printf("scale_check %s: sumsq %.12g want %.12g rel diff %.3g (tolerance 1e-12)\n",
           zrt_dtype_name(dt), got, want, rel);
    ZT_CHECK(rel <= 1e-12);
    ZT_CHECK(nf == 0);
    /* inject a non-finite value at a random place: Inf, NaN, and for fp16 a
     * finite fp32 value that overflows to Inf when stored */
    float bad[3] = {INFINITY, NAN, -INFINITY};
    for (int k = 0; k < 3; k++) {
      size_t at = (size_t)(urand() * (double)n);
      float keep = zrt_load_f(h, dt, at);
      zrt_store_f(h, dt, at, dt == ZRT_F16 && k == 2 ? -1e6f : bad[k]);
      ZT_OK(zrt_backend_memcpy(b, d, h, n * zrt_dtype_size(dt), ZRT_COPY_H2D, NULL));
      double s2 = 0;
      nf = 0;
      ZT_OK(zrt_backend_scale_check(b, d, dt, n, scale, &s2, &nf, NULL));
      ZT_CHECK(nf == 1);
      /* the flag is OR-ed: a clean pass keeps an earlier 1 */
      zrt_store_f(h, dt, at, keep);
      ZT_OK(zrt_backend_memcpy(b, d, h, n * zrt_dtype_size(dt), ZRT_COPY_H2D, NULL));
      ZT_OK(zrt_backend_scale_check(b, d, dt, n, scale, &s2, &nf, NULL));
      ZT_CHECK(nf == 1);
    }
  }
  zrt_backend_free(b, d);
  free(h);
}

/* ----------------------------------------------------------------- GEMM */

static double out_eps(zrt_dtype dt) {
  return dt == ZRT_F32 ? 0x1p-24 : dt == ZRT_F16 ? 0x1p-11 : 0x1p-8;
}

/* One GEMM case on backend b vs a double triple loop over the stored
 * (already quantised) inputs. Returns the max diff. */
static void gemm_case(zrt_backend *b, int ta, int tb, int64_t m, int64_t n, int64_t k,
                      zrt_dtype abt, zrt_dtype ct, float alpha, float beta, int pad) {
  int64_t lda = (ta ? m : k) + pad, ldb = (tb ? k : n) + pad, ldc = n + pad;
  int64_t arows = ta ? k : m, brows = tb ? n : k;
  size_t abs_ = zrt_dtype_size(abt), cs = zrt_dtype_size(ct);
  void *ha = malloc((size_t)(arows * lda) * abs_), *hb = malloc((size_t)(brows * ldb) * abs_);
  void *hc = malloc((size_t)(m * ldc) * cs), *hout = malloc((size_t)(m * ldc) * cs);
  for (int64_t i = 0; i < arows * lda; i++) zrt_store_f(ha, abt, (size_t)i, srand1());
  for (int64_t i = 0; i < brows * ldb; i++) zrt_store_f(hb, abt, (size_t)i, srand1());
  for (int64_t i = 0; i < m * ldc; i++)
    zrt_store_f(hc, ct, (size_t)i, beta == 0.0f ? NAN : srand1()); /* beta 0: C is not read */
  void *da = balloc(b, (size_t)(arows * lda) * abs_, ZRT_MEM_ACTIVATIONS);
  void *db = balloc(b, (size_t)(brows * ldb) * abs_, ZRT_MEM_ACTIVATIONS);
  void *dc = balloc(b, (size_t)(m * ldc) * cs, ZRT_MEM_ACTIVATIONS);
  ZT_OK(zrt_backend_memcpy(b, da, ha, (size_t)(arows * lda) * abs_, ZRT_COPY_H2D, NULL));
  ZT_OK(zrt_backend_memcpy(b, db, hb, (size_t)(brows * ldb) * abs_, ZRT_COPY_H2D, NULL));
  ZT_OK(zrt_backend_memcpy(b, dc, hc, (size_t)(m * ldc) * cs, ZRT_COPY_H2D, NULL));
  ZT_OK(
      zrt_backend_gemm(b, ta, tb, m, n, k, alpha, da, lda, db, ldb, abt, beta, dc, ldc, ct, NULL));
  ZT_OK(zrt_backend_synchronize(b, NULL));
  ZT_OK(zrt_backend_memcpy(b, hout, dc, (size_t)(m * ldc) * cs, ZRT_COPY_D2H, NULL));
  double *want = malloc((size_t)(m * n) * 8), *got = malloc((size_t)(m * n) * 8);
  double cmax = 0;
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < n; j++) {
      double acc = 0;
      for (int64_t p = 0; p < k; p++) {
        double av = zrt_load_f(ha, abt, (size_t)(ta ? p * lda + i : i * lda + p));
        double bv = zrt_load_f(hb, abt, (size_t)(tb ? j * ldb + p : p * ldb + j));
        acc += av * bv;
      }
      double c0 = beta == 0.0f ? 0.0 : zrt_load_f(hc, ct, (size_t)(i * ldc + j));
      want[i * n + j] = alpha * acc + beta * c0;
      got[i * n + j] = zrt_load_f(hout, ct, (size_t)(i * ldc + j));
      cmax = fmax(cmax, fabs(want[i * n + j]));
    }
  /* padding columns untouched */
  int pad_ok = 1;
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = n; j < ldc; j++)
      pad_ok &= !memcmp((char *)hout + (size_t)(i * ldc + j) * cs,
                        (char *)hc + (size_t)(i * ldc + j) * cs, cs);
  ZT_CHECK(pad_ok);
  double tol = 2.0 * (double)k * 0x1p-24 * fabs(alpha) + out_eps(ct) * cmax + 1e-30;
  char what[128];
  snprintf(what, sizeof what, "gemm %c%c m=%lld n=%lld k=%lld %s->%s beta=%g", ta ? 'T' : 'N',
           tb ? 'T' : 'N', (long long)m, (long long)n, (long long)k, zrt_dtype_name(abt),
           zrt_dtype_name(ct), beta);
  ZT_CLOSE_ARRAY(what, got, want, (size_t)(m * n), tol);
  zrt_backend_free(b, da);
  zrt_backend_free(b, db);
  zrt_backend_free(b, dc);
  free(ha);
  free(hb);
  free(hc);
  free(hout);
  free(want);
  free(got);
}

static void test_gemm(zrt_backend *b) {
  const zrt_dtype dts[3] = {ZRT_F32, ZRT_F16, ZRT_BF16};
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++)
      for (int ai = 0; ai < 3; ai++)
        for (int ci = 0; ci < 3; ci++)
          gemm_case(b, ta, tb, 37, 29, 131, dts[ai], dts[ci], 0.75f, (ta ^ tb) ? 0.5f : 0.0f, 3);
  /* several K-panels of the widening path (workspace 4M floats / (m+n)) */
  gemm_case(b, 0, 0, 24, 40, 70001, ZRT_BF16, ZRT_F32, 1.0f, 1.0f, 0);
  gemm_case(b, 1, 1, 40, 24, 70001, ZRT_F16, ZRT_BF16, -0.5f, 0.25f, 1);
  /* degenerate shapes: k = 0 scales C by beta; m = 0 touches nothing */
  gemm_case(b, 0, 1, 5, 7, 0, ZRT_F16, ZRT_F16, 1.0f, 0.5f, 2);
  gemm_case(b, 0, 0, 5, 7, 0, ZRT_F32, ZRT_F32, 1.0f, 0.0f, 1);
  ZT_OK(zrt_backend_gemm(b, 0, 0, 0, 4, 4, 1.0f, NULL, 4, NULL, 4, ZRT_F32, 0.0f, NULL, 4, ZRT_F32,
                         NULL));
  /* argument errors name the offending value */
  float x[64];
  ZT_CHECK(zrt_backend_gemm(b, 0, 0, 4, 4, 8, 1.0f, x, 7, x, 4, ZRT_F32, 0.0f, x, 4, ZRT_F32,
                            NULL) == ZRT_ERR_INVALID_ARG);
  ZT_CONTAINS(zrt_last_error(), "lda=7 needs >= 8");
  ZT_CHECK(zrt_backend_gemm(b, 0, 0, -1, 4, 8, 1.0f, x, 8, x, 4, ZRT_F32, 0.0f, x, 4, ZRT_F32,
                            NULL) == ZRT_ERR_INVALID_ARG);
  ZT_CONTAINS(zrt_last_error(), "negative size m=-1");
}

/* ---------------------------------------------------------- optimizer */

/* Double-precision reference of the semantics in cpu_optim_scalar.c. */
static void optim_ref(const zrt_optim_hparams *hp, double *p, double *m, double *v,
                      const double *g0, size_t n) {
  double b1 = hp->beta1, b2 = hp->beta2, lr = hp->lr, wd = hp->weight_decay, eps = hp->eps;
  double bc1 = 1, bc2 = 1;
  if (hp->bias_correction && (hp->type == ZRT_OPTIM_ADAM || hp->type == ZRT_OPTIM_ADAMW)) {
    bc1 = 1 - pow(b1, (double)hp->step);
    bc2 = 1 - pow(b2, (double)hp->step);
  }
  for (size_t i = 0; i < n; i++) {
    double g = g0[i] * hp->grad_mul;
    switch (hp->type) {
    case ZRT_OPTIM_ADAM:
    case ZRT_OPTIM_ADAMW:
      if (hp->type == ZRT_OPTIM_ADAM)
        g += wd * p[i];
      else
        p[i] *= 1 - lr * wd;
      m[i] = b1 * m[i] + (1 - b1) * g;
      v[i] = b2 * v[i] + (1 - b2) * g * g;
      p[i] -= lr / bc1 * m[i] / (sqrt(v[i]) / sqrt(bc2) + eps);
      break;
    case ZRT_OPTIM_SGD:
      g += wd * p[i];
      if (hp->momentum != 0) {
        m[i] = hp->momentum * m[i] + g;
        g = m[i];
      }
      p[i] -= lr * g;
      break;
    case ZRT_OPTIM_LION: {
      double c = b1 * m[i] + (1 - b1) * g;
      p[i] *= 1 - lr * wd;
      p[i] -= lr * ((c > 0) - (c < 0));
      m[i] = b2 * m[i] + (1 - b2) * g;
      break;
    }
    }
  }
}

static void test_optim(zrt_backend *b) {
  const size_t n = 40009;
  const zrt_dtype dts[3] = {ZRT_F32, ZRT_F16, ZRT_BF16};
  float *hp_ = malloc(n * 4), *hm = malloc(n * 4), *hv = malloc(n * 4);
  double *rp = malloc(n * 8), *rm = malloc(n * 8), *rv = malloc(n * 8), *rg = malloc(n * 8);
  void *hg = malloc(n * 4), *h16 = malloc(n * 2);
  float *dp = balloc(b, n * 4, ZRT_MEM_MASTER32), *dm = balloc(b, n * 4, ZRT_MEM_OPTIM_STATE);
  float *dv = balloc(b, n * 4, ZRT_MEM_OPTIM_STATE);
  void *dg = balloc(b, n * 4, ZRT_MEM_GRADS), *d16 = balloc(b, n * 2, ZRT_MEM_PARAMS16);
  static const char *names[] = {"adam", "adamw", "sgd", "lion"};
  for (int type = 0; type < 4; type++)
    for (int gi = 0; gi < 3; gi++) {
      zrt_dtype gdt = dts[gi], pdt = gi == 2 ? ZRT_F16 : ZRT_BF16;
      zrt_optim_hparams hp = {.type = (zrt_optim_type)type,
                              .lr = type == ZRT_OPTIM_LION ? 1e-4f : 1e-3f,
                              .beta1 = 0.9f,
                              .beta2 = type == ZRT_OPTIM_LION ? 0.99f : 0.999f,
                              .eps = 1e-8f,
                              .weight_decay = 0.01f,
                              .momentum = 0.9f,
                              .bias_correction = 1,
                              .step = 1,
                              .grad_mul = 0.5f};
      for (size_t i = 0; i < n; i++) {
        hp_[i] = srand1();
        hm[i] = type == ZRT_OPTIM_SGD ? 0.0f : 0.1f * srand1();
        hv[i] = 0.01f * (float)urand();
        rp[i] = hp_[i];
        rm[i] = hm[i];
        rv[i] = hv[i];
      }
      ZT_OK(zrt_backend_memcpy(b, dp, hp_, n * 4, ZRT_COPY_H2D, NULL));
      ZT_OK(zrt_backend_memcpy(b, dm, hm, n * 4, ZRT_COPY_H2D, NULL));
      ZT_OK(zrt_backend_memcpy(b, dv, hv, n * 4, ZRT_COPY_H2D, NULL));
      int uses_v = type == ZRT_OPTIM_ADAM || type == ZRT_OPTIM_ADAMW;
      for (int step = 1; step <= 3; step++) {
        hp.step = step;
        for (size_t i = 0; i < n; i++) {
          zrt_store_f(hg, gdt, i, 2.0f * srand1());
          rg[i] = zrt_load_f(hg, gdt, i);
        }
        ZT_OK(zrt_backend_memcpy(b, dg, hg, n * zrt_dtype_size(gdt), ZRT_COPY_H2D, NULL));
        ZT_OK(
            zrt_backend_optim_step(b, &hp, dp, dm, uses_v ? dv : NULL, dg, gdt, d16, pdt, n, NULL));
        optim_ref(&hp, rp, rm, rv, rg, n);
      }
      ZT_OK(zrt_backend_memcpy(b, hp_, dp, n * 4, ZRT_COPY_D2H, NULL));
      ZT_OK(zrt_backend_memcpy(b, hm, dm, n * 4, ZRT_COPY_D2H, NULL));
      ZT_OK(zrt_backend_memcpy(b, hv, dv, n * 4, ZRT_COPY_D2H, NULL));
      ZT_OK(zrt_backend_memcpy(b, h16, d16, n * 2, ZRT_COPY_D2H, NULL));
      char what[96];
      snprintf(what, sizeof what, "optim %s grad %s: master", names[type], zrt_dtype_name(gdt));
      ZT_CLOSE_ARRAY(what, hp_, rp, n, 2e-6 * 1.1);
      snprintf(what, sizeof what, "optim %s grad %s: state1", names[type], zrt_dtype_name(gdt));
      ZT_CLOSE_ARRAY(what, hm, rm, n, 2e-6 * 1.0);
      if (uses_v) {
        snprintf(what, sizeof what, "optim %s grad %s: state2", names[type], zrt_dtype_name(gdt));
        ZT_CLOSE_ARRAY(what, hv, rv, n, 2e-6 * 0.02);
      }
      long bad16 = 0;
      for (size_t i = 0; i < n; i++) {
        uint16_t want = pdt == ZRT_F16 ? zrt_f32_to_f16(hp_[i]) : zrt_f32_to_bf16(hp_[i]);
        bad16 += ((uint16_t *)h16)[i] != want;
      }
      printf("optim %s grad %s: param16 (%s) %ld mismatches vs rounded master (exact)\n",
             names[type], zrt_dtype_name(gdt), zrt_dtype_name(pdt), bad16);
      ZT_CHECK(bad16 == 0);
    }
  /* Adam without s2 is refused with a message naming it */
  zrt_optim_hparams hp = zt_adam_step1(ZRT_OPTIM_ADAM, 1e-3f);
  ZT_CHECK(zrt_backend_optim_step(b, &hp, dp, dm, NULL, dg, ZRT_F32, NULL, ZRT_F16, n, NULL) ==
           ZRT_ERR_INVALID_ARG);
  ZT_CONTAINS(zrt_last_error(), "state s2 (v) is NULL");
  hp.step = 0;
  ZT_CHECK(zrt_backend_optim_step(b, &hp, dp, dm, dv, dg, ZRT_F32, NULL, ZRT_F16, n, NULL) ==
           ZRT_ERR_INVALID_ARG);
  ZT_CONTAINS(zrt_last_error(), "1-based");
  zrt_backend_free(b, dp);
  zrt_backend_free(b, dm);
  zrt_backend_free(b, dv);
  zrt_backend_free(b, dg);
  zrt_backend_free(b, d16);
  free(hp_);
  free(hm);
  free(hv);
  free(rp);
  free(rm);
  free(rv);
  free(rg);
  free(hg);
  free(h16);
}

/* ------------------------------------------------------- streams, fallbacks */

static void test_streams_and_fallbacks(zrt_backend *b) {
  zrt_stream s = (zrt_stream)1;
  zrt_event e = (zrt_event)1;
  ZT_OK(zrt_backend_stream_create(b, &s));
  ZT_OK(zrt_backend_event_create(b, &e));
  ZT_CHECK(s == NULL && e == NULL); /* synchronous backend: the default stream only */
  ZT_OK(zrt_backend_event_record(b, e, s));
  ZT_OK(zrt_backend_stream_wait_event(b, s, e));
  ZT_OK(zrt_backend_synchronize(b, s));
  zrt_backend_event_destroy(b, e);
  zrt_backend_stream_destroy(b, s);
  char buf[256];
  ZT_OK(zrt_backend_host_register(b, buf, sizeof buf));
  zrt_backend_host_unregister(b, buf);

  /* A backend whose optional/host-addressable slots are NULL uses the
   * registry's generic code; results must equal the CPU slots'. */
  zrt_backend_iface bare = *b->iface;
  bare.name = "bare";
  bare.accumulate = NULL;
  bare.memcpy = NULL;
  bare.memset = NULL;
  bare.synchronize = NULL;
  bare.gemm = NULL;
  const zrt_backend_iface *keep = b->iface;
  enum { N = 1000 };
  float dst[N], ref[N], src[N];
  for (int i = 0; i < N; i++) {
    dst[i] = ref[i] = srand1();
    src[i] = srand1();
  }
  ZT_OK(zrt_backend_accumulate(b, ref, src, ZRT_F32, 0.3f, N, NULL));
  b->iface = &bare;
  ZT_OK(zrt_backend_accumulate(b, dst, src, ZRT_F32, 0.3f, N, NULL));
  ZT_CLOSE_ARRAY("fallback accumulate vs cpu slot", dst, ref, N, 0.0);
  ZT_OK(zrt_backend_memset(b, dst, 0, sizeof dst, NULL));
  ZT_OK(zrt_backend_memcpy(b, dst, src, sizeof dst, ZRT_COPY_D2D, NULL));
  ZT_CHECK(!memcmp(dst, src, sizeof dst));
  ZT_OK(zrt_backend_synchronize(b, NULL));
  ZT_CHECK(zrt_backend_gemm(b, 0, 0, 2, 2, 2, 1.0f, src, 2, src, 2, ZRT_F32, 0.0f, dst, 2, ZRT_F32,
                            NULL) == ZRT_ERR_UNSUPPORTED);
  ZT_CONTAINS(zrt_last_error(), "backend bare has no gemm op");
  b->iface = keep;
}

/* ------------------------------------------------------------ capacity */

static void test_oom(void) {
  zrt_backend *b = NULL;
  const size_t MiB = 1u << 20;
  ZT_OK(zrt_backend_create("cpu", MiB, 0, &b));
  ZT_CHECK(zrt_pool_capacity(b->pool) == MiB);
  void *p = NULL, *q = NULL, *r = NULL;
  zrt_status st = zrt_backend_alloc(b, 2 * MiB, ZRT_MEM_MASTER32, &p);
  ZT_CHECK(st == ZRT_ERR_OOM && p == NULL);
  const char *msg = zrt_last_error();
  printf("OOM message: %s\n", msg);
  ZT_CONTAINS(msg, "cannot allocate 2.00 MiB for master32");
  ZT_CONTAINS(msg, "limit 1.00 MiB");
  static const char *cats[] = {"params16",    "grads", "master32", "optim_state",
                               "activations", "comm",  "other"};
  for (int c = 0; c < 7; c++) ZT_CONTAINS(msg, cats[c]);
  ZT_CONTAINS(msg, "raise zero_optimization.stage, enable offload_optimizer/offload_param, or "
                   "raise zrt.device_memory_limit");

  /* in-use bytes by category appear in the message; peaks per category */
  ZT_OK(zrt_backend_alloc(b, 512 * 1024, ZRT_MEM_PARAMS16, &p));
  ZT_OK(zrt_backend_alloc(b, 256 * 1024, ZRT_MEM_GRADS, &q));
  st = zrt_backend_alloc(b, 512 * 1024, ZRT_MEM_OPTIM_STATE, &r);
  ZT_CHECK(st == ZRT_ERR_OOM);
  ZT_CONTAINS(zrt_last_error(), "in use 768.00 KiB of limit 1.00 MiB");
  ZT_CONTAINS(zrt_last_error(), "params16 512.00 KiB, grads 256.00 KiB, master32 0 B");
  ZT_OK(zrt_backend_alloc(b, 256 * 1024, ZRT_MEM_OPTIM_STATE, &r)); /* exactly full */
  zrt_mem_stats ms;
  zrt_pool_stats(b->pool, &ms);
  ZT_CHECK(ms.current_total == MiB && ms.peak_total == MiB);
  zrt_backend_free(b, q);
  zrt_backend_free(b, r);
  ZT_OK(zrt_backend_alloc(b, 128 * 1024, ZRT_MEM_GRADS, &q));
  zrt_pool_stats(b->pool, &ms);
  ZT_CHECK(ms.current[ZRT_MEM_GRADS] == 128 * 1024 && ms.peak[ZRT_MEM_GRADS] == 256 * 1024);
  ZT_CHECK(ms.current[ZRT_MEM_OPTIM_STATE] == 0 && ms.peak[ZRT_MEM_OPTIM_STATE] == 256 * 1024);
  ZT_CHECK(ms.peak[ZRT_MEM_PARAMS16] == 512 * 1024 && ms.peak[ZRT_MEM_MASTER32] == 0);
  printf("peaks: params16 %zu grads %zu optim_state %zu total %zu\n", ms.peak[ZRT_MEM_PARAMS16],
         ms.peak[ZRT_MEM_GRADS], ms.peak[ZRT_MEM_OPTIM_STATE], ms.peak_total);

  /* a 16-bit GEMM takes its fp32 workspace from the same pool: with 640 KiB
   * left, the fp32 C (256 KiB) and the widened panels (512 KiB) do not fit */
  void *a = NULL, *bb = NULL, *c = NULL;
  zrt_backend_free(b, q);
  zrt_backend_free(b, p);
  ZT_OK(zrt_backend_alloc(b, 256 * 256 * 2, ZRT_MEM_ACTIVATIONS, &a));
  ZT_OK(zrt_backend_alloc(b, 256 * 256 * 2, ZRT_MEM_ACTIVATIONS, &bb));
  ZT_OK(zrt_backend_alloc(b, 256 * 256 * 2, ZRT_MEM_ACTIVATIONS, &c));
  memset(a, 0, 256 * 256 * 2);
  memset(bb, 0, 256 * 256 * 2);
  st = zrt_backend_gemm(b, 0, 0, 256, 256, 256, 1.0f, a, 256, bb, 256, ZRT_F16, 0.0f, c, 256,
                        ZRT_F16, NULL);
  ZT_CHECK(st == ZRT_ERR_OOM);
  ZT_CONTAINS(zrt_last_error(), "for activations");
  zrt_pool_stats(b->pool, &ms);
  ZT_CHECK(ms.current_total == 3 * 256 * 256 * 2); /* the failed call leaked nothing */
  zrt_backend_destroy(b);                          /* frees a, bb, c with the pool */
}

int main(void) {
  test_registry();
  zrt_backend *b = NULL;
  ZT_OK(zrt_backend_create("cpu", 0, 0, &b));
  test_memory(b);
  test_convert(b);
  test_accumulate(b);
  test_scale_check(b);
  test_gemm(b);
  test_optim(b);
  test_streams_and_fallbacks(b);
  zrt_mem_stats ms;
  zrt_pool_stats(b->pool, &ms);
  ZT_CHECK(ms.current_total == 0); /* every test freed what it took */
  printf("device pool peak %zu bytes\n", ms.peak_total);
  zrt_backend_destroy(b);
  test_oom();
  ZT_DONE();
}
