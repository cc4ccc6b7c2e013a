/*
 * bf16_avx512.h — fp32 -> bf16 narrowing of 16 lanes, bit-identical to the
 * scalar zrt_f32_to_bf16 (round to nearest even, quiet NaN), shared by the
 * AVX-512 conversion kernels (amp/dtype_avx512.c) and the fused optimizer
 * (offload/cpu_optim_avx512.c). Include only from files built with
 * -mavx512{f,bw,vl,dq,bf16}.
 *
 * zrt_bf16_shift is the integer rounding; zrt_bf16_insn uses vcvtneps2bf16,
 * which flushes fp32 denormal inputs to zero, so lanes holding one are
 * redone with the shift (rare: |x| < 2^-126).
 */
#ifndef ZRT_BF16_AVX512_H
#define ZRT_BF16_AVX512_H

#include <immintrin.h>

static inline __attribute__((always_inline)) __m256i zrt_bf16_shift(__m512 x) {
  __m512i u = _mm512_castps_si512(x);
  __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  __m512i r = _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb);
  __m512i a = _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff));
  __mmask16 nan = _mm512_cmpgt_epu32_mask(a, _mm512_set1_epi32(0x7f800000));
  r = _mm512_mask_or_epi32(r, nan, u, _mm512_set1_epi32(0x00400000));
  return _mm512_cvtepi32_epi16(_mm512_srli_epi32(r, 16));
}

static inline __attribute__((always_inline)) __m256i zrt_bf16_insn(__m512 x) {
  __m256i r = (__m256i)_mm512_cvtneps_pbh(x);
  __m512i a = _mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32(0x7fffffff));
  /* denormals: nonzero with a zero exponent field */
  __mmask16 den =
      _mm512_test_epi32_mask(a, a) & _mm512_cmplt_epu32_mask(a, _mm512_set1_epi32(0x00800000));
  if (__builtin_expect(den != 0, 0)) r = _mm256_mask_blend_epi16(den, r, zrt_bf16_shift(x));
  return r;
}

#endif
