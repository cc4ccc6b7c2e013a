/*
 * comm_shm_avx2.c — the shared-memory comm's SUM kernel, AVX2 + F16C (built
 * with -mavx2 -mfma -mf16c; comm_shm.c calls it only after cpuid said avx2,
 * fma and f16c). One pass: 16 elements of every input are loaded (16-bit
 * ones widened exactly: fp16 by vcvtph2ps, bf16 by a shift for the even
 * elements and a mask for the odd ones, no lane crossing), added in fp32 in
 * rank order, and stored to one output or two (16-bit: rounded once, fp16
 * by vcvtps2ph, bf16 by amp/bf16_avx2.h's integer rounding) — the bits of
 * comm_shm.c's portable loops.
 *
 * Full steps use plain loads and stores (non-temporal ones to out when
 * asked, from out's first 64-byte boundary); the tail (< 16 elements) runs
 * the same step over zero-padded copies on the stack, so nothing past len
 * is read or written and the tail takes the vector code too. No FMA is
 * used (the adds are separate, as in the scalar loop).
 */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "bf16_avx2.h"
#include "comm_shm_kernels.h"
#include "dtype.h"

#define SHM_AI static inline __attribute__((always_inline))
#define SHM_W 16 /* elements per step */

SHM_AI __m256 shm_ld8(const void *p, size_t i, zrt_dtype dt) {
  if (dt == ZRT_F32) return _mm256_loadu_ps((const float *)p + i);
  return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)p + i)));
}

SHM_AI void shm_st256(void *p, __m256i v, int nt) {
  if (nt)
    _mm256_stream_si256((__m256i *)p, v);
  else
    _mm256_storeu_si256((__m256i *)p, v);
}

/* Elements [i, i + 16) of every input summed into out (and out2). nt: out
 * + i is 32-byte aligned and its stores stream past the caches. */
SHM_AI void shm_step(void *out, void *out2, const void *const *in, int n, size_t i, zrt_dtype dt,
                     int nt) {
  if (dt == ZRT_BF16) {
    const __m256i hi = _mm256_set1_epi32((int)0xffff0000u);
    __m256i x = _mm256_loadu_si256((const __m256i *)((const uint16_t *)in[0] + i));
    __m256 ev = _mm256_castsi256_ps(_mm256_slli_epi32(x, 16));
    __m256 od = _mm256_castsi256_ps(_mm256_and_si256(x, hi));
    for (int r = 1; r < n; r++) {
      __m256i y = _mm256_loadu_si256((const __m256i *)((const uint16_t *)in[r] + i));
      ev = _mm256_add_ps(ev, _mm256_castsi256_ps(_mm256_slli_epi32(y, 16)));
      od = _mm256_add_ps(od, _mm256_castsi256_ps(_mm256_and_si256(y, hi)));
    }
    __m256i h = zrt_bf16_pack_evod(ev, od);
    shm_st256((uint16_t *)out + i, h, nt);
    if (out2) shm_st256((uint16_t *)out2 + i, h, 0);
    return;
  }
  __m256 a0 = shm_ld8(in[0], i, dt), a1 = shm_ld8(in[0], i + 8, dt);
  for (int r = 1; r < n; r++) {
    a0 = _mm256_add_ps(a0, shm_ld8(in[r], i, dt));
    a1 = _mm256_add_ps(a1, shm_ld8(in[r], i + 8, dt));
  }
  if (dt == ZRT_F32) {
    float *o = (float *)out + i;
    shm_st256(o, _mm256_castps_si256(a0), nt);
    shm_st256(o + 8, _mm256_castps_si256(a1), nt);
    if (out2) {
      _mm256_storeu_ps((float *)out2 + i, a0);
      _mm256_storeu_ps((float *)out2 + i + 8, a1);
    }
    return;
  }
  /* a literal immediate: a const variable is not one at -O0 (the Debug
   * ASan build) */
#define SHM_RN (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
  __m256i h = _mm256_set_m128i(_mm256_cvtps_ph(a1, SHM_RN), _mm256_cvtps_ph(a0, SHM_RN));
#undef SHM_RN
  shm_st256((uint16_t *)out + i, h, nt);
  if (out2) shm_st256((uint16_t *)out2 + i, h, 0);
}

/* Elements [i, len) (fewer than 16): the same step over zero-padded
 * copies on the stack; more inputs than the stack holds take the reference
 * order one element at a time. */
SHM_AI void shm_tail(void *out, void *out2, const void *const *in, int n, size_t i, size_t len,
                     zrt_dtype dt) {
  size_t es = dt == ZRT_F32 ? 4 : 2, k = len - i;
  if (n > ZRT_SHM_MAX_INPUTS) {
    for (; i < len; i++) {
      float acc = zrt_load_f(in[0], dt, i);
      for (int r = 1; r < n; r++) acc += zrt_load_f(in[r], dt, i);
      zrt_store_f(out, dt, i, acc);
      if (out2) zrt_store_f(out2, dt, i, acc);
    }
    return;
  }
  float buf[ZRT_SHM_MAX_INPUTS][SHM_W], o[SHM_W];
  const void *p[ZRT_SHM_MAX_INPUTS] = {0};
  for (int r = 0; r < n; r++) {
    memset(buf[r], 0, sizeof buf[r]);
    memcpy(buf[r], (const char *)in[r] + i * es, k * es);
    p[r] = buf[r];
  }
  shm_step(o, NULL, p, n, 0, dt, 0);
  memcpy((char *)out + i * es, o, k * es);
  if (out2) memcpy((char *)out2 + i * es, o, k * es);
}

SHM_AI void shm_sum(void *out, void *out2, const void *const *in, int n, size_t len, zrt_dtype dt,
                    int nt) {
  size_t i = 0;
  for (; i + SHM_W <= len; i += SHM_W) shm_step(out, out2, in, n, i, dt, nt);
  if (i < len) shm_tail(out, out2, in, n, i, len, dt);
}

static void shm_sum_dt(void *out, void *out2, const void *const *in, int n, size_t len,
                       zrt_dtype dt, int nt) {
  /* constant arguments per call so each loop is specialised */
  if (dt == ZRT_F32)
    nt ? shm_sum(out, out2, in, n, len, ZRT_F32, 1) : shm_sum(out, out2, in, n, len, ZRT_F32, 0);
  else if (dt == ZRT_F16)
    nt ? shm_sum(out, out2, in, n, len, ZRT_F16, 1) : shm_sum(out, out2, in, n, len, ZRT_F16, 0);
  else
    nt ? shm_sum(out, out2, in, n, len, ZRT_BF16, 1) : shm_sum(out, out2, in, n, len, ZRT_BF16, 0);
}

void zrt_shm_sum_avx2(void *out, void *out2, const void *const *in, int n, size_t len, zrt_dtype dt,
                      int nt) {
  size_t es = dt == ZRT_F32 ? 4 : 2;
  size_t h = nt ? ((64 - ((uintptr_t)out & 63)) & 63) / es : 0;
  if (!nt || h >= len || n > ZRT_SHM_MAX_INPUTS || ((uintptr_t)out & (es - 1))) {
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
