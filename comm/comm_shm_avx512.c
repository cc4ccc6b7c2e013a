/*
 * comm_shm_avx512.c — the shared-memory comm's SUM kernel, AVX-512 (built
 * with -mavx512{f,bw,vl,dq,bf16} -mf16c; comm_shm.c calls it only after
 * cpuid said avx512, and asks for vcvtne2ps2bf16 only when cpuid said
 * avx512_bf16). One pass: 16 lanes (bf16: 32) of every input are loaded
 * (16-bit ones widened exactly), added in fp32 in rank order, and stored to
 * one output or two (16-bit: rounded once, as amp/dtype.h's narrowing does).
 *
 * Full vectors use plain loads and stores; only the tail is masked. Masked
 * loads and stores over whole arrays held this kernel to 16 GB/s of DRAM
 * traffic on the Zen 5 machine, against 40 GB/s unmasked (as
 * optim/cpu_optim_avx512.c found for its own loop).
 */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "comm_shm_kernels.h"

#define SHM_AI static inline __attribute__((always_inline))

SHM_AI __m512 shm_ld(const void *p, size_t i, zrt_dtype dt, __mmask16 k, int full) {
  if (dt == ZRT_F32)
    return full ? _mm512_loadu_ps((const float *)p + i)
                : _mm512_maskz_loadu_ps(k, (const float *)p + i);
  __m256i h = full ? _mm256_loadu_si256((const __m256i *)((const uint16_t *)p + i))
                   : _mm256_maskz_loadu_epi16(k, (const uint16_t *)p + i);
  return _mm512_cvtph_ps(h);
}

/* fp32 and fp16, 16 lanes at element i (full: all 16, else the lanes in
 * k); nt: a full step's store to out streams past the caches (out + i
 * 64-byte aligned, fp16: 32-byte). */
SHM_AI void shm_step16(void *out, void *out2, const void *const *in, int n, size_t i, zrt_dtype dt,
                       int nt, __mmask16 k, int full) {
  __m512 acc = shm_ld(in[0], i, dt, k, full);
  for (int r = 1; r < n; r++) acc = _mm512_add_ps(acc, shm_ld(in[r], i, dt, k, full));
  if (dt == ZRT_F32) {
    float *o = (float *)out + i;
    if (full && nt)
      _mm512_stream_ps(o, acc);
    else if (full)
      _mm512_storeu_ps(o, acc);
    else
      _mm512_mask_storeu_ps(o, k, acc);
    if (out2 && full) _mm512_storeu_ps((float *)out2 + i, acc);
    if (out2 && !full) _mm512_mask_storeu_ps((float *)out2 + i, k, acc);
    return;
  }
  __m256i h = _mm512_cvtps_ph(acc, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  uint16_t *o = (uint16_t *)out + i;
  if (full && nt)
    _mm256_stream_si256((__m256i *)o, h);
  else if (full)
    _mm256_storeu_si256((__m256i *)o, h);
  else
    _mm256_mask_storeu_epi16(o, k, h);
  if (out2 && full) _mm256_storeu_si256((__m256i *)((uint16_t *)out2 + i), h);
  if (out2 && !full) _mm256_mask_storeu_epi16((uint16_t *)out2 + i, k, h);
}

SHM_AI void shm_sum16(void *out, void *out2, const void *const *in, int n, size_t len, zrt_dtype dt,
                      int nt) {
  size_t i = 0;
  for (; i + 16 <= len; i += 16) shm_step16(out, out2, in, n, i, dt, nt, 0, 1);
  if (i < len) shm_step16(out, out2, in, n, i, dt, 0, (__mmask16)((1u << (len - i)) - 1u), 0);
}

/* bf16 bits of x's 16 lanes, rounded to nearest even in the upper 16 bits
 * of each lane (NaN quieted): zrt_bf16_shift's rounding, before its
 * narrowing. */
SHM_AI __m512i shm_bf16_round(__m512 x) {
  __m512i u = _mm512_castps_si512(x);
  __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  __m512i r = _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb);
  __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
  return _mm512_mask_or_epi32(r, nan, u, _mm512_set1_epi32(0x00400000));
}

/* The even elements' sums ev and the odd ones' od, rounded to bf16 and
 * put back in element order. insn: vcvtne2ps2bf16 (same rounding and NaN
 * quieting, but it flushes denormal inputs to zero, so a step holding a
 * denormal sum takes the integer rounding) and one permute, about 40%
 * faster in cache than the integer rounding. */
SHM_AI __m512i shm_bf16_pack(__m512 ev, __m512 od, int insn) {
  if (insn && !(_mm512_fpclass_ps_mask(ev, 0x20) | _mm512_fpclass_ps_mask(od, 0x20))) {
    /* cvtne2ps(od, ev) = [ev0..ev15, od0..od15]; element 2j is ev_j */
    const __m512i idx = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24,
                                         8, 23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    return _mm512_permutexvar_epi16(idx, (__m512i)_mm512_cvtne2ps_pbh(od, ev));
  }
  return _mm512_mask_blend_epi16((__mmask32)0xaaaaaaaau, _mm512_srli_epi32(shm_bf16_round(ev), 16),
                                 shm_bf16_round(od));
}

/* bf16, 32 elements at element i with no lane crossing on the way in: the
 * even elements of a 512-bit load widen by a shift (x << 16), the odd ones
 * by a mask (x & 0xffff0000); each half is summed in fp32 in rank order
 * and packed as above. */
SHM_AI void shm_step_bf16(void *out, void *out2, const void *const *in, int n, size_t i, int nt,
                          int insn, __mmask32 k, int full) {
  const __m512i hi = _mm512_set1_epi32((int)0xffff0000u);
  __m512i x = full ? _mm512_loadu_si512((const uint16_t *)in[0] + i)
                   : _mm512_maskz_loadu_epi16(k, (const uint16_t *)in[0] + i);
  __m512 ev = _mm512_castsi512_ps(_mm512_slli_epi32(x, 16));
  __m512 od = _mm512_castsi512_ps(_mm512_and_si512(x, hi));
  for (int r = 1; r < n; r++) {
    __m512i y = full ? _mm512_loadu_si512((const uint16_t *)in[r] + i)
                     : _mm512_maskz_loadu_epi16(k, (const uint16_t *)in[r] + i);
    ev = _mm512_add_ps(ev, _mm512_castsi512_ps(_mm512_slli_epi32(y, 16)));
    od = _mm512_add_ps(od, _mm512_castsi512_ps(_mm512_and_si512(y, hi)));
  }
  __m512i h = shm_bf16_pack(ev, od, insn);
  uint16_t *o = (uint16_t *)out + i;
  if (full && nt)
    _mm512_stream_si512((void *)o, h);
  else if (full)
    _mm512_storeu_si512(o, h);
  else
    _mm512_mask_storeu_epi16(o, k, h);
  if (out2 && full) _mm512_storeu_si512((uint16_t *)out2 + i, h);
  if (out2 && !full) _mm512_mask_storeu_epi16((uint16_t *)out2 + i, k, h);
}

SHM_AI void shm_sum_bf16(void *out, void *out2, const void *const *in, int n, size_t len, int nt,
                         int insn) {
  size_t i = 0;
  for (; i + 32 <= len; i += 32) shm_step_bf16(out, out2, in, n, i, nt, insn, 0, 1);
  if (i < len) shm_step_bf16(out, out2, in, n, i, 0, insn, (__mmask32)((1u << (len - i)) - 1u), 0);
}

static void shm_sum_dt(void *out, void *out2, const void *const *in, int n, size_t len,
                       zrt_dtype dt, int nt, int insn) {
  /* constant arguments per call so each loop is specialised */
  if (dt == ZRT_F32)
    nt ? shm_sum16(out, out2, in, n, len, ZRT_F32, 1)
       : shm_sum16(out, out2, in, n, len, ZRT_F32, 0);
  else if (dt == ZRT_F16)
    nt ? shm_sum16(out, out2, in, n, len, ZRT_F16, 1)
       : shm_sum16(out, out2, in, n, len, ZRT_F16, 0);
  else if (insn)
    nt ? shm_sum_bf16(out, out2, in, n, len, 1, 1) : shm_sum_bf16(out, out2, in, n, len, 0, 1);
  else
    nt ? shm_sum_bf16(out, out2, in, n, len, 1, 0) : shm_sum_bf16(out, out2, in, n, len, 0, 0);
}

void zrt_shm_sum_avx512(void *out, void *out2, const void *const *in, int n, size_t len,
                        zrt_dtype dt, int nt, int bf16_insn) {
  size_t es = dt == ZRT_F32 ? 4 : 2;
  size_t h = nt ? ((64 - ((uintptr_t)out & 63)) & 63) / es : 0;
  if (!nt || h >= len || n > ZRT_SHM_MAX_INPUTS) {
    shm_sum_dt(out, out2, in, n, len, dt, 0, bf16_insn);
    return;
  }
  /* the head up to out's next 64-byte boundary with ordinary stores, every
   * step after it aligned */
  const void *rest[ZRT_SHM_MAX_INPUTS];
  if (h) shm_sum_dt(out, out2, in, n, h, dt, 0, bf16_insn);
  for (int r = 0; r < n; r++) rest[r] = (const char *)in[r] + h * es;
  shm_sum_dt((char *)out + h * es, out2 ? (char *)out2 + h * es : NULL, rest, n, len - h, dt, 1,
             bf16_insn);
}
