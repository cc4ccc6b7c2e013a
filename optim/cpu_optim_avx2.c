/*
 * cpu_optim_avx2.c — the AVX2 + F16C path of the fused optimizer step and of
 * the sum-of-squares check (built with -mavx2 -mf16c -mfma; only called after
 * cpuid says avx2, f16c and fma are present).
 *
 * 8 lanes per iteration (software prefetch ZRT_OPTIM_PF_ELEMS ahead); the tail (< 8 elements) runs
 * the scalar reference itself, so tails are exact by construction. bf16 stores use the integer
 * round-to-nearest-even of amp/bf16_avx2.h (shared with the AVX2 conversions and shm SUM).
 *
 * Invariant: per element the same IEEE operations in the same order as the
 * scalar reference; FMA contraction is off for this file.
 */
#pragma GCC optimize("fp-contract=off")
#include <immintrin.h>
#include <math.h>
#include <stdint.h>

#include "bf16_avx2.h"
#include "cpu_optim_internal.h"
#include "dtype.h"

#define ZRT_P_NONE (-1)

/* Software prefetch distance in elements (4 KiB of fp32 ahead of each of
 * master, m, v and the gradient). Issue 25 measured +11-14% from software
 * prefetch on a quiet 2-core Zen 3 (the hardware prefetcher alone left the
 * step at 0.86 of DeepSpeed CPUAdam); the alternated runs of
 * perf/RESULTS.md, taken under a load of 17-20 on 2 cores, could not resolve
 * a difference either way. Prefetches change no result. */
#ifndef ZRT_OPTIM_PF_ELEMS
#define ZRT_OPTIM_PF_ELEMS 1024
#endif

static inline __attribute__((always_inline)) __m256 zrt_ld_grad8(const void *g, int gdt, size_t i) {
  if (gdt == ZRT_F32) return _mm256_loadu_ps((const float *)g + i);
  __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)g + i));
  if (gdt == ZRT_F16) return _mm256_cvtph_ps(h);
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* 8 master / state lanes of dtype dt (fp32, or bf16 widened exactly) and
 * their store (bf16: the round-to-nearest-even of zrt_bf16_pack8). */
static inline __attribute__((always_inline)) __m256 zrt_ld8(const void *p, int dt, size_t i) {
  if (dt == ZRT_F32) return _mm256_loadu_ps((const float *)p + i);
  __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)p + i));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
static inline __attribute__((always_inline)) void zrt_st8(void *p, int dt, size_t i, __m256 v) {
  if (dt == ZRT_F32)
    _mm256_storeu_ps((float *)p + i, v);
  else
    _mm_storeu_si128((__m128i *)((uint16_t *)p + i), zrt_bf16_pack8(v));
}

/* mdt / sdt: dtype of master / of s1 and s2 (fp32 or bf16). */
static inline __attribute__((always_inline)) void
zrt_kernel8(const zrt_optim_consts *c, void *master, void *s1, void *s2, const void *grad,
            void *param16, size_t n, const int type, const int gdt, const int pdt, const int mdt,
            const int sdt) {
  const __m256 mul = _mm256_set1_ps(c->mul), b1 = _mm256_set1_ps(c->b1), b2 = _mm256_set1_ps(c->b2),
               omb1 = _mm256_set1_ps(c->omb1), omb2 = _mm256_set1_ps(c->omb2),
               eps = _mm256_set1_ps(c->eps), wd = _mm256_set1_ps(c->wd), lr = _mm256_set1_ps(c->lr),
               step = _mm256_set1_ps(c->step_size), ibc2 = _mm256_set1_ps(c->inv_sqrt_bc2),
               decay = _mm256_set1_ps(c->decay), mom = _mm256_set1_ps(c->momentum),
               one = _mm256_set1_ps(1.0f), zero = _mm256_setzero_ps();
  size_t n8 = n & ~(size_t)7;
  const size_t gsz = gdt == ZRT_F32 ? 4 : 2, msz = mdt == ZRT_F32 ? 4 : 2;
  const size_t ssz = sdt == ZRT_F32 ? 4 : 2;
  for (size_t i = 0; i < n8; i += 8) {
    if (!(i & 15) && i + ZRT_OPTIM_PF_ELEMS < n) {
      /* one line ahead of each stream per 64 bytes of fp32 (every other
       * 8-lane step); the 16-bit streams get a line per 32 elements */
      size_t j = i + ZRT_OPTIM_PF_ELEMS;
      if (msz == 4 || !(i & 31)) _mm_prefetch((const char *)master + j * msz, _MM_HINT_T0);
      if (ssz == 4 || !(i & 31)) {
        _mm_prefetch((const char *)s1 + j * ssz, _MM_HINT_T0);
        if (type == ZRT_OPTIM_ADAM || type == ZRT_OPTIM_ADAMW)
          _mm_prefetch((const char *)s2 + j * ssz, _MM_HINT_T0);
      }
      if (gsz == 4 || !(i & 31)) _mm_prefetch((const char *)grad + j * gsz, _MM_HINT_T0);
    }
    __m256 g = _mm256_mul_ps(zrt_ld_grad8(grad, gdt, i), mul);
    __m256 p = zrt_ld8(master, mdt, i);
    if (type == ZRT_OPTIM_ADAM || type == ZRT_OPTIM_ADAMW) {
      if (type == ZRT_OPTIM_ADAM)
        g = _mm256_add_ps(g, _mm256_mul_ps(wd, p));
      else
        p = _mm256_mul_ps(p, decay);
      __m256 m = _mm256_add_ps(_mm256_mul_ps(b1, zrt_ld8(s1, sdt, i)), _mm256_mul_ps(omb1, g));
      __m256 v = _mm256_add_ps(_mm256_mul_ps(b2, zrt_ld8(s2, sdt, i)),
                               _mm256_mul_ps(_mm256_mul_ps(omb2, g), g));
      zrt_st8(s1, sdt, i, m);
      zrt_st8(s2, sdt, i, v);
      __m256 den = _mm256_add_ps(_mm256_mul_ps(_mm256_sqrt_ps(v), ibc2), eps);
      p = _mm256_sub_ps(p, _mm256_div_ps(_mm256_mul_ps(step, m), den));
    } else if (type == ZRT_OPTIM_SGD) {
      g = _mm256_add_ps(g, _mm256_mul_ps(wd, p));
      if (c->momentum != 0.0f) {
        g = _mm256_add_ps(_mm256_mul_ps(mom, zrt_ld8(s1, sdt, i)), g);
        zrt_st8(s1, sdt, i, g);
      }
      p = _mm256_sub_ps(p, _mm256_mul_ps(lr, g));
    } else { /* Lion */
      __m256 m0 = zrt_ld8(s1, sdt, i);
      __m256 cc = _mm256_add_ps(_mm256_mul_ps(b1, m0), _mm256_mul_ps(omb1, g));
      p = _mm256_mul_ps(p, decay);
      __m256 pos = _mm256_and_ps(_mm256_cmp_ps(cc, zero, _CMP_GT_OQ), one);
      __m256 neg = _mm256_and_ps(_mm256_cmp_ps(cc, zero, _CMP_LT_OQ), one);
      p = _mm256_sub_ps(p, _mm256_mul_ps(lr, _mm256_sub_ps(pos, neg)));
      zrt_st8(s1, sdt, i, _mm256_add_ps(_mm256_mul_ps(b2, m0), _mm256_mul_ps(omb2, g)));
    }
    zrt_st8(master, mdt, i, p);
    if (pdt == ZRT_F32)
      _mm256_storeu_ps((float *)param16 + i, p);
    else if (pdt == ZRT_F16)
      _mm_storeu_si128((__m128i *)((uint16_t *)param16 + i),
                       _mm256_cvtps_ph(p, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    else if (pdt == ZRT_BF16)
      _mm_storeu_si128((__m128i *)((uint16_t *)param16 + i), zrt_bf16_pack8(p));
  }
}

#define ZRT_K(T, G, P) zrt_kernel8(c, master, s1, s2, grad, param16, n, T, G, P, ZRT_F32, ZRT_F32)
#define ZRT_KP(T, G)                                                                               \
  switch (p) {                                                                                     \
  case ZRT_P_NONE: ZRT_K(T, G, ZRT_P_NONE); break;                                                 \
  case ZRT_F32: ZRT_K(T, G, ZRT_F32); break;                                                       \
  case ZRT_F16: ZRT_K(T, G, ZRT_F16); break;                                                       \
  default: ZRT_K(T, G, ZRT_BF16); break;                                                           \
  }
#define ZRT_KG(T)                                                                                  \
  switch (gdt) {                                                                                   \
  case ZRT_F32: ZRT_KP(T, ZRT_F32); break;                                                         \
  case ZRT_F16: ZRT_KP(T, ZRT_F16); break;                                                         \
  default: ZRT_KP(T, ZRT_BF16); break;                                                             \
  }

/* The tail (< 8 elements), element by element, in the reference's order. */
static void zrt_tail_scalar(const zrt_optim_consts *c, float *master, float *s1, float *s2,
                            const void *grad, zrt_dtype gdt, void *param16, zrt_dtype pdt,
                            size_t from, size_t n) {
  for (size_t i = from; i < n; i++) {
    float g = zrt_load_f(grad, gdt, i) * c->mul;
    float p = master[i];
    switch (c->type) {
    case ZRT_OPTIM_ADAM:
    case ZRT_OPTIM_ADAMW: {
      if (c->type == ZRT_OPTIM_ADAM)
        g += c->wd * p;
      else
        p *= c->decay;
      float m = c->b1 * s1[i] + c->omb1 * g;
      float v = c->b2 * s2[i] + c->omb2 * g * g;
      s1[i] = m;
      s2[i] = v;
      p -= c->step_size * m / (sqrtf(v) * c->inv_sqrt_bc2 + c->eps);
      break;
    }
    case ZRT_OPTIM_SGD:
      g += c->wd * p;
      if (c->momentum != 0.0f) {
        float buf = c->momentum * s1[i] + g;
        s1[i] = buf;
        g = buf;
      }
      p -= c->lr * g;
      break;
    case ZRT_OPTIM_LION: {
      float cc = c->b1 * s1[i] + c->omb1 * g;
      p *= c->decay;
      p -= c->lr * (float)((cc > 0.0f) - (cc < 0.0f));
      s1[i] = c->b2 * s1[i] + c->omb2 * g;
      break;
    }
    }
    master[i] = p;
    if (param16) zrt_store_f(param16, pdt, i, p);
  }
}

void zrt_cpu_optim_range_avx2(const zrt_optim_consts *c, float *master, float *s1, float *s2,
                              const void *grad, zrt_dtype gdt, void *param16, zrt_dtype pdt,
                              size_t n) {
  int p = param16 ? (int)pdt : ZRT_P_NONE;
  switch (c->type) {
  case ZRT_OPTIM_ADAM: ZRT_KG(ZRT_OPTIM_ADAM); break;
  case ZRT_OPTIM_ADAMW: ZRT_KG(ZRT_OPTIM_ADAMW); break;
  case ZRT_OPTIM_SGD: ZRT_KG(ZRT_OPTIM_SGD); break;
  default: ZRT_KG(ZRT_OPTIM_LION); break;
  }
  size_t n8 = n & ~(size_t)7;
  if (n8 < n) zrt_tail_scalar(c, master, s1, s2, grad, gdt, param16, pdt, n8, n);
}

/* bf16 master (mdt) and fp32 or bf16 states (sdt), Adam/AdamW (the only
 * optimizers bf16 masters run with): bf16 read and written in the kernel
 * itself; the tail (< 8 elements) through fp32 copies and the fp32 tail,
 * so every element is the widen / scalar / round reference's. */
#define ZRT_KL(T, G, P, S) zrt_kernel8(c, master, s1, s2, grad, param16, n, T, G, P, ZRT_BF16, S)
#define ZRT_KLP(T, G, S)                                                                           \
  switch (p) {                                                                                     \
  case ZRT_P_NONE: ZRT_KL(T, G, ZRT_P_NONE, S); break;                                             \
  case ZRT_F32: ZRT_KL(T, G, ZRT_F32, S); break;                                                   \
  case ZRT_F16: ZRT_KL(T, G, ZRT_F16, S); break;                                                   \
  default: ZRT_KL(T, G, ZRT_BF16, S); break;                                                       \
  }
#define ZRT_KLG(T, S)                                                                              \
  switch (gdt) {                                                                                   \
  case ZRT_F32: ZRT_KLP(T, ZRT_F32, S); break;                                                     \
  case ZRT_F16: ZRT_KLP(T, ZRT_F16, S); break;                                                     \
  default: ZRT_KLP(T, ZRT_BF16, S); break;                                                         \
  }

int zrt_cpu_optim_range_avx2_lp(const zrt_optim_consts *c, void *master, zrt_dtype mdt, void *s1,
                                void *s2, zrt_dtype sdt, const void *grad, zrt_dtype gdt,
                                void *param16, zrt_dtype pdt, size_t n) {
  if (mdt != ZRT_BF16 || (c->type != ZRT_OPTIM_ADAM && c->type != ZRT_OPTIM_ADAMW)) return 0;
  int p = param16 ? (int)pdt : ZRT_P_NONE;
  if (c->type == ZRT_OPTIM_ADAM) {
    if (sdt == ZRT_F32) {
      ZRT_KLG(ZRT_OPTIM_ADAM, ZRT_F32);
    } else {
      ZRT_KLG(ZRT_OPTIM_ADAM, ZRT_BF16);
    }
  } else if (sdt == ZRT_F32) {
    ZRT_KLG(ZRT_OPTIM_ADAMW, ZRT_F32);
  } else {
    ZRT_KLG(ZRT_OPTIM_ADAMW, ZRT_BF16);
  }
  size_t n8 = n & ~(size_t)7;
  if (n8 < n) {
    float m[8], a[8], b[8];
    size_t k = n - n8, gsz = zrt_dtype_size(gdt);
    for (size_t i = 0; i < k; i++) {
      m[i] = zrt_load_f(master, mdt, n8 + i);
      a[i] = zrt_load_f(s1, sdt, n8 + i);
      b[i] = zrt_load_f(s2, sdt, n8 + i);
    }
    zrt_tail_scalar(c, m, a, b, (const char *)grad + n8 * gsz, gdt,
                    param16 ? (char *)param16 + n8 * zrt_dtype_size(pdt) : NULL, pdt, 0, k);
    for (size_t i = 0; i < k; i++) {
      zrt_store_f(master, mdt, n8 + i, m[i]);
      zrt_store_f((char *)s1, sdt, n8 + i, a[i]);
      zrt_store_f((char *)s2, sdt, n8 + i, b[i]);
    }
  }
  return 1;
}

void zrt_cpu_sumsq_range_avx2(const void *grad, zrt_dtype gdt, size_t n, float scale, double *sumsq,
                              int *nonfinite) {
  __m256d acc0 = _mm256_setzero_pd(), acc1 = _mm256_setzero_pd();
  const __m256d sc = _mm256_set1_pd((double)scale);
  const __m256i expm = _mm256_set1_epi32(0x7f800000);
  __m256i bad = _mm256_setzero_si256();
  size_t n8 = n & ~(size_t)7;
  for (size_t i = 0; i < n8; i += 8) {
    __m256 g = zrt_ld_grad8(grad, gdt, i);
    __m256i e = _mm256_and_si256(_mm256_castps_si256(g), expm);
    bad = _mm256_or_si256(bad, _mm256_cmpeq_epi32(e, expm));
    __m256d lo = _mm256_mul_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(g)), sc);
    __m256d hi = _mm256_mul_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(g, 1)), sc);
    acc0 = _mm256_add_pd(acc0, _mm256_mul_pd(lo, lo));
    acc1 = _mm256_add_pd(acc1, _mm256_mul_pd(hi, hi));
  }
  double lanes[4];
  _mm256_storeu_pd(lanes, _mm256_add_pd(acc0, acc1));
  double acc = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
  int nf = !_mm256_testz_si256(bad, bad);
  for (size_t i = n8; i < n; i++) {
    float g = zrt_load_f(grad, gdt, i);
    uint32_t u = zrt_f32_to_bits(g);
    if ((u & 0x7f800000u) == 0x7f800000u) nf = 1;
    double x = (double)g * scale;
    acc += x * x;
  }
  *sumsq += acc;
  if (nf) *nonfinite = 1;
}
