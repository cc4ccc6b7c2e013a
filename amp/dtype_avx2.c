/*
 * dtype_avx2.c — AVX2 (+F16C) bulk conversions between fp32 and fp16 / bf16
 * and the pairwise 16-bit reduction kernel (built with -mavx2 -mfma -mf16c;
 * amp/dtype.c calls it only after cpuid says avx2, fma and f16c are
 * present).
 *
 * Invariant: every result is bit-identical to the scalar reference in
 * amp/dtype.h, NaN payloads included (unit.test_dtype holds it to the
 * scalar loop over every 16-bit pattern and every tail length).
 * 16 elements per step; the tail (< 16) runs the same step on a zero-padded
 * copy on the stack, so the tail takes the vector code too, and nothing past
 * n is read or written. fp16 narrowing is vcvtps2ph in round-to-nearest-even
 * (matches the reference for finite, Inf, subnormal and NaN inputs);
 * fp16 widening is vcvtph2ps with signalling NaN lanes rebuilt (the
 * reference keeps the pattern); bf16 rounds with the integer form in
 * amp/bf16_avx2.h (AVX2 has no instruction for it).
 */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "bf16_avx2.h"
#include "dtype_kernels.h"

#define DT_AI static inline __attribute__((always_inline))
#define DT_W 16 /* elements per step */

/* 8 fp16 lanes widened exactly: vcvtph2ps quiets a signalling NaN, the
 * reference keeps (sign, all-ones exponent, payload << 13); NaN lanes are
 * rebuilt with integer ops (a branch almost never taken). */
DT_AI __m256 widen_f16_exact8(__m128i h) {
  __m256 f = _mm256_cvtph_ps(h);
  __m256i w = _mm256_cvtepu16_epi32(h);
  __m256i a = _mm256_and_si256(w, _mm256_set1_epi32(0x7fff));
  __m256i nan = _mm256_cmpgt_epi32(a, _mm256_set1_epi32(0x7c00));
  if (__builtin_expect(!_mm256_testz_si256(nan, nan), 0)) {
    __m256i sign = _mm256_slli_epi32(_mm256_and_si256(w, _mm256_set1_epi32(0x8000)), 16);
    __m256i mant = _mm256_slli_epi32(_mm256_and_si256(w, _mm256_set1_epi32(0x3ff)), 13);
    __m256i bits = _mm256_or_si256(_mm256_or_si256(sign, mant), _mm256_set1_epi32(0x7f800000));
    f = _mm256_blendv_ps(f, _mm256_castsi256_ps(bits), _mm256_castsi256_ps(nan));
  }
  return f;
}

/* 8 16-bit lanes to fp32 for arithmetic (fp16 NaNs come out quiet, which
 * an add or a compare does anyway). */
DT_AI __m256 widen8(__m128i h, zrt_dtype dt) {
  if (dt == ZRT_F16) return _mm256_cvtph_ps(h);
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

DT_AI __m128i narrow8_f16(__m256 x) {
  return _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}

DT_AI __m128i lo128(__m256i v) { return _mm256_castsi256_si128(v); }
DT_AI __m128i hi128(__m256i v) { return _mm256_extracti128_si256(v, 1); }

/* ---------------------------------------------------------------- widen */

DT_AI void widen_step(float *dst, const uint16_t *src, zrt_dtype dt) {
  __m256i h = _mm256_loadu_si256((const __m256i *)src);
  if (dt == ZRT_F16) {
    _mm256_storeu_ps(dst, widen_f16_exact8(lo128(h)));
    _mm256_storeu_ps(dst + 8, widen_f16_exact8(hi128(h)));
  } else {
    _mm256_storeu_ps(dst, widen8(lo128(h), ZRT_BF16));
    _mm256_storeu_ps(dst + 8, widen8(hi128(h), ZRT_BF16));
  }
}

DT_AI void widen_body(float *dst, const uint16_t *src, zrt_dtype dt, size_t n) {
  size_t i = 0;
  for (; i + DT_W <= n; i += DT_W) widen_step(dst + i, src + i, dt);
  if (i < n) {
    uint16_t s[DT_W] = {0};
    float d[DT_W];
    memcpy(s, src + i, (n - i) * sizeof *s);
    widen_step(d, s, dt);
    memcpy(dst + i, d, (n - i) * sizeof *d);
  }
}

void zrt_dtype_widen_avx2(float *dst, const uint16_t *src, zrt_dtype dt, size_t n) {
  if (dt == ZRT_F16)
    widen_body(dst, src, ZRT_F16, n);
  else
    widen_body(dst, src, ZRT_BF16, n);
}

/* --------------------------------------------------------------- narrow */

/* One whole step loaded before its store: dst == src (in place) is safe. */
DT_AI void narrow_step(uint16_t *dst, const float *src, zrt_dtype dt) {
  __m256 lo = _mm256_loadu_ps(src), hi = _mm256_loadu_ps(src + 8);
  if (dt == ZRT_F16)
    _mm256_storeu_si256((__m256i *)dst, _mm256_set_m128i(narrow8_f16(hi), narrow8_f16(lo)));
  else
    _mm256_storeu_si256((__m256i *)dst, zrt_bf16_pack16(lo, hi));
}

DT_AI void narrow_body(uint16_t *dst, const float *src, zrt_dtype dt, size_t n) {
  size_t i = 0;
  for (; i + DT_W <= n; i += DT_W) narrow_step(dst + i, src + i, dt);
  if (i < n) {
    float s[DT_W] = {0};
    uint16_t d[DT_W];
    memcpy(s, src + i, (n - i) * sizeof *s);
    narrow_step(d, s, dt);
    memcpy(dst + i, d, (n - i) * sizeof *d);
  }
}

void zrt_dtype_narrow_avx2(uint16_t *dst, const float *src, zrt_dtype dt, size_t n) {
  if (dt == ZRT_F16)
    narrow_body(dst, src, ZRT_F16, n);
  else
    narrow_body(dst, src, ZRT_BF16, n);
}

/* --------------------------------------------------------------- reduce */

/* MAX / MIN of 8 lanes on the 16-bit patterns, so the result is one of the
 * inputs bit for bit; the fp32 compare decides, a NaN in either operand
 * winning (inout's first). */
DT_AI __m128i pick8(__m128i ha, __m128i hb, zrt_dtype dt, zrt_half_op op) {
  __m256 a = widen8(ha, dt), b = widen8(hb, dt);
  __m256 take =
      op == ZRT_HALF_MAX ? _mm256_cmp_ps(b, a, _CMP_GT_OQ) : _mm256_cmp_ps(b, a, _CMP_LT_OQ);
  take = _mm256_or_ps(take, _mm256_cmp_ps(b, b, _CMP_UNORD_Q));
  take = _mm256_andnot_ps(_mm256_cmp_ps(a, a, _CMP_UNORD_Q), take);
  __m256i t = _mm256_castps_si256(take);
  return _mm_blendv_epi8(ha, hb, _mm_packs_epi32(lo128(t), hi128(t)));
}

/* a + b, except that a NaN a wins (the narrowing quiets it): the
 * reference's rule, since which of two NaN operands an add returns depends
 * on the operand order the compiler picks. */
DT_AI __m256 sum_nan_a(__m256 a, __m256 b) {
  return _mm256_blendv_ps(_mm256_add_ps(a, b), a, _mm256_cmp_ps(a, a, _CMP_UNORD_Q));
}

DT_AI void reduce_step(uint16_t *inout, const uint16_t *in, zrt_dtype dt, zrt_half_op op) {
  __m256i ha = _mm256_loadu_si256((const __m256i *)inout);
  __m256i hb = _mm256_loadu_si256((const __m256i *)in);
  __m256i r;
  if (op != ZRT_HALF_SUM) {
    r = _mm256_set_m128i(pick8(hi128(ha), hi128(hb), dt, op), pick8(lo128(ha), lo128(hb), dt, op));
  } else if (dt == ZRT_F16) {
    __m128i lo = narrow8_f16(sum_nan_a(widen8(lo128(ha), dt), widen8(lo128(hb), dt)));
    __m128i hi = narrow8_f16(sum_nan_a(widen8(hi128(ha), dt), widen8(hi128(hb), dt)));
    r = _mm256_set_m128i(hi, lo);
  } else {
    /* bf16: even elements widen by a shift, odd ones by a mask, no lane
     * crossing */
    const __m256i hi = _mm256_set1_epi32((int)0xffff0000u);
    __m256 ev = sum_nan_a(_mm256_castsi256_ps(_mm256_slli_epi32(ha, 16)),
                          _mm256_castsi256_ps(_mm256_slli_epi32(hb, 16)));
    __m256 od = sum_nan_a(_mm256_castsi256_ps(_mm256_and_si256(ha, hi)),
                          _mm256_castsi256_ps(_mm256_and_si256(hb, hi)));
    r = zrt_bf16_pack_evod(ev, od);
  }
  _mm256_storeu_si256((__m256i *)inout, r);
}

DT_AI void reduce_body(uint16_t *inout, const uint16_t *in, zrt_dtype dt, size_t n,
                       zrt_half_op op) {
  size_t i = 0;
  for (; i + DT_W <= n; i += DT_W) reduce_step(inout + i, in + i, dt, op);
  if (i < n) {
    uint16_t a[DT_W] = {0}, b[DT_W] = {0};
    memcpy(a, inout + i, (n - i) * sizeof *a);
    memcpy(b, in + i, (n - i) * sizeof *b);
    reduce_step(a, b, dt, op);
    memcpy(inout + i, a, (n - i) * sizeof *a);
  }
}

void zrt_half_reduce_avx2(uint16_t *inout, const uint16_t *in, zrt_dtype dt, size_t n,
                          zrt_half_op op) {
  /* Constant arguments per call so each loop is specialised. */
  int f16 = dt == ZRT_F16;
  if (op == ZRT_HALF_SUM)
    f16 ? reduce_body(inout, in, ZRT_F16, n, ZRT_HALF_SUM)
        : reduce_body(inout, in, ZRT_BF16, n, ZRT_HALF_SUM);
  else if (op == ZRT_HALF_MAX)
    f16 ? reduce_body(inout, in, ZRT_F16, n, ZRT_HALF_MAX)
        : reduce_body(inout, in, ZRT_BF16, n, ZRT_HALF_MAX);
  else
    f16 ? reduce_body(inout, in, ZRT_F16, n, ZRT_HALF_MIN)
        : reduce_body(inout, in, ZRT_BF16, n, ZRT_HALF_MIN);
}
