/*
 * bf16_avx2.h — fp32 -> bf16 narrowing of 8 or 16 lanes with AVX2,
 * bit-identical to the scalar zrt_f32_to_bf16 (round to nearest even, NaN
 * quieted with its payload's upper bits kept, denormals rounded as
 * integers like every other value), shared by the AVX2 conversion kernels
 * (amp/dtype_avx2.c), the shm comm's AVX2 SUM kernel and the AVX2 fused
 * optimizer. Include only from files built with -mavx2 -mfma -mf16c.
 *
 * AVX2 has no instruction for the rounding, and its 32 -> 16-bit packs
 * work within 128-bit lanes, so a 16-lane result is two 8-lane roundings,
 * one pack and one 64-bit permute.
 */
#ifndef ZRT_BF16_AVX2_H
#define ZRT_BF16_AVX2_H

#include <immintrin.h>

/* The rounded bf16 bits of each of x's 8 lanes in the upper half of the
 * 32-bit lane (the lower half is garbage): u + 0x7fff + lsb, or u | quiet
 * bit for a NaN. */
static inline __attribute__((always_inline)) __m256i zrt_bf16_round8_hi(__m256 x) {
  __m256i u = _mm256_castps_si256(x);
  __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  __m256i r = _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb);
  __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q));
  return _mm256_blendv_epi8(r, _mm256_or_si256(u, _mm256_set1_epi32(0x00400000)), nan);
}

/* 16 lanes (lo: elements 0..7, hi: 8..15) rounded and packed in element
 * order. */
static inline __attribute__((always_inline)) __m256i zrt_bf16_pack16(__m256 lo, __m256 hi) {
  __m256i a = _mm256_srli_epi32(zrt_bf16_round8_hi(lo), 16);
  __m256i b = _mm256_srli_epi32(zrt_bf16_round8_hi(hi), 16);
  /* packus per 128-bit lane: [a0-3 b0-3 | a4-7 b4-7] -> [a0-7 | b0-7] */
  return _mm256_permute4x64_epi64(_mm256_packus_epi32(a, b), 0xd8);
}

/* 8 lanes rounded and packed in element order. */
static inline __attribute__((always_inline)) __m128i zrt_bf16_pack8(__m256 x) {
  __m256i a = _mm256_srli_epi32(zrt_bf16_round8_hi(x), 16);
  return _mm256_castsi256_si128(_mm256_permute4x64_epi64(_mm256_packus_epi32(a, a), 0x08));
}

/* Element-interleaved form: ev holds elements 0, 2, 4 ... 14, od elements
 * 1, 3 ... 15 (as a 256-bit load of 16 bf16 splits without lane
 * crossing: x << 16 and x & 0xffff0000); packed back in element order. */
static inline __attribute__((always_inline)) __m256i zrt_bf16_pack_evod(__m256 ev, __m256 od) {
  return _mm256_blend_epi16(_mm256_srli_epi32(zrt_bf16_round8_hi(ev), 16), zrt_bf16_round8_hi(od),
                            0xaa);
}

#endif
