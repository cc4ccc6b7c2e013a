/*
 * dtype_avx512.c — AVX-512 bulk conversions between fp32 and fp16 / bf16 and
 * the pairwise 16-bit reduction kernel (built with -mavx512{f,bw,vl,dq,bf16}
 * -mf16c; amp/dtype.c calls it only after cpuid says avx512f/bw/vl/dq are
 * present, and passes bf16_insn = 1 only when AVX512_BF16 is there too).
 *
 * Invariant: every result is bit-identical to the scalar reference in
 * amp/dtype.h (zrt_f32_to_bf16 / zrt_f32_to_f16 / the widenings), NaN
 * payloads included. 16 lanes per iteration, a masked tail, no scalar loop.
 * Full vectors load and store plainly; only the tail is masked (masked
 * loads and stores over whole arrays ran at 40% of memory speed on Zen 5,
 * as comm/comm_shm_avx512.c measured).
 * Widening is exact (bf16: shift; fp16: vcvtph2ps). fp16 narrowing is
 * vcvtps2ph in round-to-nearest-even, which matches the reference for
 * finite, Inf, subnormal and NaN inputs (NaN: quiet bit set, payload
 * truncated). bf16 narrowing uses vcvtneps2bf16 when allowed; that
 * instruction flushes fp32 denormal inputs to zero, so lanes holding one are
 * redone with the shift-based rounding (rare: |x| < 2^-126).
 */
#include <immintrin.h>
#include <stdint.h>

#include "bf16_avx512.h"
#include "dtype_kernels.h"

#define DT_AI static inline __attribute__((always_inline))

/* Loads and stores of one step: whole (full, a compile-time constant) or
 * the lanes in k. */
DT_AI __m256i ld16(const uint16_t *p, __mmask16 k, int full) {
  return full ? _mm256_loadu_si256((const __m256i *)p) : _mm256_maskz_loadu_epi16(k, p);
}
DT_AI __m512 ld32(const float *p, __mmask16 k, int full) {
  return full ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(k, p);
}
DT_AI void st16(uint16_t *p, __mmask16 k, int full, __m256i v) {
  if (full)
    _mm256_storeu_si256((__m256i *)p, v);
  else
    _mm256_mask_storeu_epi16(p, k, v);
}
DT_AI void st32(float *p, __mmask16 k, int full, __m512 v) {
  if (full)
    _mm512_storeu_ps(p, v);
  else
    _mm512_mask_storeu_ps(p, k, v);
}

/* for every full 16-lane step of n, then the masked tail: STEP(i, k, full) */
#define DT_LOOP(n, STEP)                                                                           \
  do {                                                                                             \
    size_t i_ = 0;                                                                                 \
    for (; i_ + 16 <= (n); i_ += 16) STEP(i_, (__mmask16)0xffff, 1);                               \
    if (i_ < (n)) STEP(i_, (__mmask16)((1u << ((n)-i_)) - 1u), 0);                                 \
  } while (0)

DT_AI __m512 ld_half(const uint16_t *p, zrt_dtype dt, __mmask16 k, int full) {
  __m256i h = ld16(p, k, full);
  if (dt == ZRT_F16) return _mm512_cvtph_ps(h);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

DT_AI __m256i narrow(__m512 x, zrt_dtype dt, int insn) {
  if (dt == ZRT_F16) return _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  return insn ? zrt_bf16_insn(x) : zrt_bf16_shift(x);
}

/* vcvtph2ps quiets a signalling fp16 NaN; the reference widening keeps
 * the pattern (sign, all-ones exponent, payload << 13), so NaN lanes are
 * rebuilt with integer ops (rare: a branch that is almost never taken). The
 * reduction kernel below needs no such fix-up: an add quiets the NaN in
 * both paths and MAX/MIN select 16-bit patterns. */
DT_AI __m512 widen_f16_exact(__m256i h) {
  __m512 f = _mm512_cvtph_ps(h);
  __m512i w = _mm512_cvtepu16_epi32(h);
  __m512i a = _mm512_and_si512(w, _mm512_set1_epi32(0x7fff));
  __mmask16 nan = _mm512_cmpgt_epu32_mask(a, _mm512_set1_epi32(0x7c00));
  if (__builtin_expect(nan != 0, 0)) {
    __m512i sign = _mm512_slli_epi32(_mm512_and_si512(w, _mm512_set1_epi32(0x8000)), 16);
    __m512i mant = _mm512_slli_epi32(_mm512_and_si512(w, _mm512_set1_epi32(0x3ff)), 13);
    __m512i bits = _mm512_or_si512(_mm512_or_si512(sign, mant), _mm512_set1_epi32(0x7f800000));
    f = _mm512_mask_mov_ps(f, nan, _mm512_castsi512_ps(bits));
  }
  return f;
}

void zrt_dtype_widen_avx512(float *dst, const uint16_t *src, zrt_dtype dt, size_t n) {
#define WIDEN(i, k, full)                                                                          \
  st32(dst + (i), k, full,                                                                         \
       dt == ZRT_F16 ? widen_f16_exact(ld16(src + (i), k, full))                                   \
                     : ld_half(src + (i), ZRT_BF16, k, full))
  DT_LOOP(n, WIDEN);
#undef WIDEN
}

/* Front to back, one whole vector loaded before its store: dst == src
 * (narrowing in place) is safe, as amp/dtype_kernels.h promises. */
void zrt_dtype_narrow_avx512(uint16_t *dst, const float *src, zrt_dtype dt, size_t n,
                             int bf16_insn_ok) {
#define NARROW_INSN(i, k, full)                                                                    \
  st16(dst + (i), k, full, narrow(ld32(src + (i), k, full), ZRT_BF16, 1))
#define NARROW(i, k, full) st16(dst + (i), k, full, narrow(ld32(src + (i), k, full), dt, 0))
  if (dt == ZRT_BF16 && bf16_insn_ok)
    DT_LOOP(n, NARROW_INSN);
  else
    DT_LOOP(n, NARROW);
#undef NARROW_INSN
#undef NARROW
}

/* The selection for MAX/MIN happens on the 16-bit patterns, so the result
 * is one of the inputs bit for bit (NaN payloads kept); the fp32 compare
 * decides which, a NaN in either operand winning. */
DT_AI __m256i pick(__m256i ha, __m256i hb, __m512 a, __m512 b, zrt_half_op op) {
  __mmask16 take_b = op == ZRT_HALF_MAX ? _mm512_cmp_ps_mask(b, a, _CMP_GT_OQ)
                                        : _mm512_cmp_ps_mask(b, a, _CMP_LT_OQ);
  take_b |= _mm512_cmp_ps_mask(b, b, _CMP_UNORD_Q);
  take_b &= ~_mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q);
  return _mm256_mask_blend_epi16(take_b, ha, hb);
}

DT_AI void reduce_step(uint16_t *inout, const uint16_t *in, zrt_dtype dt, zrt_half_op op, int insn,
                       __mmask16 k, int full) {
  {
    __m256i ha = ld16(inout, k, full);
    __m256i hb = ld16(in, k, full);
    __m512 a = dt == ZRT_F16
                   ? _mm512_cvtph_ps(ha)
                   : _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(ha), 16));
    __m512 b = dt == ZRT_F16
                   ? _mm512_cvtph_ps(hb)
                   : _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(hb), 16));
    /* SUM: a NaN in inout wins (the reference's rule; the narrowing
     * quiets it) */
    __m512 s = _mm512_mask_mov_ps(_mm512_add_ps(a, b), _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q), a);
    __m256i r = op == ZRT_HALF_SUM ? narrow(s, dt, insn) : pick(ha, hb, a, b, op);
    st16(inout, k, full, r);
  }
}

DT_AI void reduce_body(uint16_t *inout, const uint16_t *in, zrt_dtype dt, size_t n, zrt_half_op op,
                       int insn) {
#define REDUCE(i, k, full) reduce_step(inout + (i), in + (i), dt, op, insn, k, full)
  DT_LOOP(n, REDUCE);
#undef REDUCE
}

void zrt_half_reduce_avx512(uint16_t *inout, const uint16_t *in, zrt_dtype dt, size_t n,
                            zrt_half_op op, int bf16_insn_ok) {
  /* Constant arguments per call so each loop is specialised. */
  if (op == ZRT_HALF_SUM) {
    if (dt == ZRT_F16)
      reduce_body(inout, in, ZRT_F16, n, ZRT_HALF_SUM, 0);
    else if (bf16_insn_ok)
      reduce_body(inout, in, ZRT_BF16, n, ZRT_HALF_SUM, 1);
    else
      reduce_body(inout, in, ZRT_BF16, n, ZRT_HALF_SUM, 0);
  } else if (op == ZRT_HALF_MAX) {
    reduce_body(inout, in, dt, n, ZRT_HALF_MAX, 0);
  } else {
    reduce_body(inout, in, dt, n, ZRT_HALF_MIN, 0);
  }
}
