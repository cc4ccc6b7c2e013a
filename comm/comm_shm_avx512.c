/*
 * comm_shm_avx512.c — the shared-memory comm's SUM kernel, AVX-512 (built
 * with -mavx512{f,bw,vl,dq,bf16} -mf16c; comm_shm.c calls it only after
 * cpuid said avx512). One pass: 16 lanes of every input are loaded (16-bit
 * ones widened exactly), added in fp32 in rank order, and stored, to one
 * output or two (16-bit:
 * rounded once, as amp/dtype.h's narrowing does). Masked tail, no scalar
 * loop.
 */
#include <immintrin.h>
#include <stdint.h>

#include "bf16_avx512.h"
#include "comm_shm_kernels.h"

static inline __attribute__((always_inline)) __mmask16 shm_tail(size_t left) {
  return left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1u);
}

static inline __attribute__((always_inline)) __m512 shm_ld(const void *p, size_t i, zrt_dtype dt,
                                                           __mmask16 k) {
  if (dt == ZRT_F32) return _mm512_maskz_loadu_ps(k, (const float *)p + i);
  __m256i h = _mm256_maskz_loadu_epi16(k, (const uint16_t *)p + i);
  if (dt == ZRT_F16) return _mm512_cvtph_ps(h);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

static inline __attribute__((always_inline)) void shm_sum_body(void *out, void *out2,
                                                               const void *const *in, int n,
                                                               size_t len, zrt_dtype dt, int insn) {
  for (size_t i = 0; i < len; i += 16) {
    __mmask16 k = shm_tail(len - i);
    __m512 acc = shm_ld(in[0], i, dt, k);
    for (int r = 1; r < n; r++) acc = _mm512_add_ps(acc, shm_ld(in[r], i, dt, k));
    if (dt == ZRT_F32) {
      _mm512_mask_storeu_ps((float *)out + i, k, acc);
      if (out2) _mm512_mask_storeu_ps((float *)out2 + i, k, acc);
    } else {
      __m256i h = dt == ZRT_F16
                      ? _mm512_cvtps_ph(acc, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
                  : insn ? zrt_bf16_insn(acc)
                         : zrt_bf16_shift(acc);
      _mm256_mask_storeu_epi16((uint16_t *)out + i, k, h);
      if (out2) _mm256_mask_storeu_epi16((uint16_t *)out2 + i, k, h);
    }
  }
}

void zrt_shm_sum_avx512(void *out, void *out2, const void *const *in, int n, size_t len,
                        zrt_dtype dt, int bf16_insn) {
  /* constant arguments per call so each loop is specialised */
  if (dt == ZRT_F32)
    shm_sum_body(out, out2, in, n, len, ZRT_F32, 0);
  else if (dt == ZRT_F16)
    shm_sum_body(out, out2, in, n, len, ZRT_F16, 0);
  else if (bf16_insn)
    shm_sum_body(out, out2, in, n, len, ZRT_BF16, 1);
  else
    shm_sum_body(out, out2, in, n, len, ZRT_BF16, 0);
}
