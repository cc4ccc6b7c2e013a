/*
 * dtype.h — scalar fp32 <-> fp16 / bf16 conversions on the host, and bulk
 * host conversion loops. Round-to-nearest-even; NaN stays NaN (quiet), Inf
 * stays Inf; fp16 overflow rounds to Inf as IEEE says. These are the
 * reference every backend's conversion is tested against.
 *
 * The bulk functions (zrt_dtype_convert_host, zrt_half_reduce) pick an
 * AVX-512 path at run time when the CPU has one (and $ZRT_CPU_ISA does not
 * force scalar or avx2); every path gives the scalar functions' bits.
 */
#ifndef ZRT_DTYPE_H
#define ZRT_DTYPE_H

#include <stdint.h>
#include <string.h>

#include "zrt.h"

static inline float zrt_bits_to_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static inline uint32_t zrt_f32_to_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

static inline float zrt_bf16_to_f32(uint16_t h) { return zrt_bits_to_f32((uint32_t)h << 16); }

static inline uint16_t zrt_f32_to_bf16(float f) {
  uint32_t u = zrt_f32_to_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u); /* quiet NaN */
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

static inline float zrt_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    if (mant == 0) return zrt_bits_to_f32(sign);
    /* subnormal: value = mant * 2^-24 */
    float v = (float)mant * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  if (exp == 31) return zrt_bits_to_f32(sign | 0x7f800000u | (mant << 13));
  return zrt_bits_to_f32(sign | ((exp + 112u) << 23) | (mant << 13));
}

static inline uint16_t zrt_f32_to_f16(float f) {
  uint32_t u = zrt_f32_to_bits(f);
  uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu)); /* NaN */
  if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* >= 65520 rounds to Inf */
  if (a < 0x38800000u) {                                   /* below 2^-14: subnormal/zero */
    if (a < 0x33000000u) return sign;                      /* < 2^-25 rounds to 0 */
    uint32_t e = a >> 23;
    uint32_t m = (a & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126u - e; /* 14..24 */
    uint32_t h = m >> shift;
    uint32_t rem = m & ((1u << shift) - 1u);
    uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (h & 1u))) h++;
    return (uint16_t)(sign | h);
  }
  uint32_t r = a + 0x0fffu + ((a >> 13) & 1u);
  return (uint16_t)(sign | ((r - 0x38000000u) >> 13));
}

static inline float zrt_load_f(const void *p, zrt_dtype dt, size_t i) {
  switch (dt) {
  case ZRT_F16: return zrt_f16_to_f32(((const uint16_t *)p)[i]);
  case ZRT_BF16: return zrt_bf16_to_f32(((const uint16_t *)p)[i]);
  default: return ((const float *)p)[i];
  }
}
static inline void zrt_store_f(void *p, zrt_dtype dt, size_t i, float v) {
  switch (dt) {
  case ZRT_F16: ((uint16_t *)p)[i] = zrt_f32_to_f16(v); break;
  case ZRT_BF16: ((uint16_t *)p)[i] = zrt_f32_to_bf16(v); break;
  default: ((float *)p)[i] = v; break;
  }
}

/* Bulk host conversion of n elements, any pair of dtypes (equal dtypes:
 * memmove). Buffers must not overlap, except dst == src when narrowing
 * (fp32 -> fp16/bf16 in place). Single-threaded. */
void zrt_dtype_convert_host(void *dst, zrt_dtype dst_dt, const void *src, zrt_dtype src_dt,
                            size_t n);

/* Pairwise reduction of 16-bit values, the combine step of a 16-bit
 * collective: inout[i] = op(inout[i], in[i]) for dt fp16 or bf16. SUM
 * widens both to fp32, adds once in fp32 and rounds once to dt (so the
 * result equals zrt_store_f(zrt_load_f(a) + zrt_load_f(b))). MAX / MIN
 * return one of the two inputs bit for bit; a NaN operand wins (NaN
 * propagates), -0 and +0 compare equal (inout kept). */
typedef enum zrt_half_op { ZRT_HALF_SUM = 0, ZRT_HALF_MAX, ZRT_HALF_MIN } zrt_half_op;
void zrt_half_reduce(uint16_t *inout, const uint16_t *in, zrt_dtype dt, size_t n, zrt_half_op op);

#endif
