/*
 * comm_shm_avx512.c — the shared-memory comm's SUM kernel, AVX-512 (built
 * with -mavx512{f,bw,vl,dq,bf16} -mf16c; comm_shm.c calls it only after
 * cpuid said avx512). One pass: 16 lanes (bf16: 32) of every input are
 * loaded (16-bit ones widened exactly), added in fp32 in rank order, and
 * stored to one output or two (16-bit: rounded once, as amp/dtype.h's
 * narrowing does). Masked tail, no scalar loop.
 */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "comm_shm_kernels.h"

static inline __attribute__((always_inline)) __mmask16 shm_tail(size_t left) {
  return left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1u);
}

static inline __attribute__((always_inline)) __m512 shm_ld(const void *p, size_t i, zrt_dtype dt,
                                                           __mmask16 k) {
  if (dt == ZRT_F32) return _mm512_maskz_loadu_ps(k, (const float *)p + i);
  return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(k, (const uint16_t *)p + i));
}

/* fp32 and fp16, 16 lanes a step; nt: full 64-byte stores to out stream
 * past the caches (out 64-byte aligned). */
static inline __attribute__((always_inline)) void shm_sum_body(void *out, void *out2,
                                                               const void *const *in, int n,
                                                               size_t len, zrt_dtype dt, int nt) {
  for (size_t i = 0; i < len; i += 16) {
    __mmask16 k = shm_tail(len - i);
    __m512 acc = shm_ld(in[0], i, dt, k);
    for (int r = 1; r < n; r++) acc = _mm512_add_ps(acc, shm_ld(in[r], i, dt, k));
    if (dt == ZRT_F32) {
      if (nt && k == (__mmask16)0xffff)
        _mm512_stream_ps((float *)out + i, acc);
      else
        _mm512_mask_storeu_ps((float *)out + i, k, acc);
      if (out2) _mm512_mask_storeu_ps((float *)out2 + i, k, acc);
    } else {
      __m256i h = _mm512_cvtps_ph(acc, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      _mm256_mask_storeu_epi16((uint16_t *)out + i, k, h);
      if (out2) _mm256_mask_storeu_epi16((uint16_t *)out2 + i, k, h);
    }
  }
}

/* bf16 bits of x's 16 lanes, rounded to nearest even in the upper 16 bits
 * of each lane (NaN quieted): zrt_bf16_shift's rounding, before its
 * narrowing. */
static inline __attribute__((always_inline)) __m512i shm_bf16_round(__m512 x) {
  __m512i u = _mm512_castps_si512(x);
  __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  __m512i r = _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb);
  __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
  return _mm512_mask_or_epi32(r, nan, u, _mm512_set1_epi32(0x00400000));
}

/* bf16, 32 elements a step with no lane crossing: the even elements of a
 * 512-bit load widen by a shift (x << 16), the odd ones by a mask (x &
 * 0xffff0000); each half is summed in fp32 in rank order, rounded as
 * above, and the halves blend back into place. Same bits as the 16-lane
 * body (the rounding is zrt_bf16_shift's, itself equal to vcvtneps2bf16
 * with denormals kept). */
static inline __attribute__((always_inline)) void
shm_sum_bf16(void *out, void *out2, const void *const *in, int n, size_t len, int nt) {
  const __m512i hi = _mm512_set1_epi32((int)0xffff0000u);
  for (size_t i = 0; i < len; i += 32) {
    __mmask32 k = len - i >= 32 ? (__mmask32)0xffffffffu : (__mmask32)((1u << (len - i)) - 1u);
    __m512i x = _mm512_maskz_loadu_epi16(k, (const uint16_t *)in[0] + i);
    __m512 ev = _mm512_castsi512_ps(_mm512_slli_epi32(x, 16));
    __m512 od = _mm512_castsi512_ps(_mm512_and_si512(x, hi));
    for (int r = 1; r < n; r++) {
      __m512i y = _mm512_maskz_loadu_epi16(k, (const uint16_t *)in[r] + i);
      ev = _mm512_add_ps(ev, _mm512_castsi512_ps(_mm512_slli_epi32(y, 16)));
      od = _mm512_add_ps(od, _mm512_castsi512_ps(_mm512_and_si512(y, hi)));
    }
    __m512i h = _mm512_mask_blend_epi16(
        (__mmask32)0xaaaaaaaau, _mm512_srli_epi32(shm_bf16_round(ev), 16), shm_bf16_round(od));
    if (nt && k == (__mmask32)0xffffffffu)
      _mm512_stream_si512((void *)((uint16_t *)out + i), h);
    else
      _mm512_mask_storeu_epi16((uint16_t *)out + i, k, h);
    if (out2) _mm512_mask_storeu_epi16((uint16_t *)out2 + i, k, h);
  }
}

static void shm_sum_dt(void *out, void *out2, const void *const *in, int n, size_t len,
                       zrt_dtype dt, int nt) {
  /* constant arguments per call so each loop is specialised */
  if (dt == ZRT_F32)
    nt ? shm_sum_body(out, out2, in, n, len, ZRT_F32, 1)
       : shm_sum_body(out, out2, in, n, len, ZRT_F32, 0);
  else if (dt == ZRT_F16)
    nt ? shm_sum_body(out, out2, in, n, len, ZRT_F16, 1)
       : shm_sum_body(out, out2, in, n, len, ZRT_F16, 0);
  else
    nt ? shm_sum_bf16(out, out2, in, n, len, 1) : shm_sum_bf16(out, out2, in, n, len, 0);
}

void zrt_shm_sum_avx512(void *out, void *out2, const void *const *in, int n, size_t len,
                        zrt_dtype dt, int nt) {
  size_t es = dt == ZRT_F32 ? 4 : 2;
  size_t h = nt ? ((64 - ((uintptr_t)out & 63)) & 63) / es : 0;
  if (!nt || h >= len || n > ZRT_SHM_MAX_INPUTS) {
    shm_sum_dt(out, out2, in, n, len, dt, 0);
    return;
  }
  /* the head up to out's next 64-byte boundary with ordinary stores, every
   * step after it aligned */
  const void *rest[ZRT_SHM_MAX_INPUTS];
  if (h) shm_sum_dt(out, out2, in, n, h, dt, 0);
  for (int r = 0; r < n; r++) rest[r] = (const char *)in[r] + h * es;
  shm_sum_dt((char *)out + h * es, out2 ? (char *)out2 + h * es : NULL, rest, n, len - h, dt, 1);
}

void zrt_shm_copy_nt(void *dst, const void *src, size_t bytes) {
  size_t h = (64 - ((uintptr_t)dst & 63)) & 63;
  if (h >= bytes) {
    memcpy(dst, src, bytes);
    return;
  }
  memcpy(dst, src, h);
  char *d = (char *)dst + h;
  const char *p = (const char *)src + h;
  size_t n = bytes - h, i = 0;
  for (; i + 64 <= n; i += 64) _mm512_stream_si512((void *)(d + i), _mm512_loadu_si512(p + i));
  memcpy(d + i, p + i, n - i);
}
