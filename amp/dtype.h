/*
 * dtype.h — scalar fp32 <-> fp16 / bf16 conversions on the host, and bulk
 * host conversion loops. Round-to-nearest-even; NaN stays NaN (quiet), Inf
 * stays Inf; fp16 overflow rounds to Inf as IEEE says. The scalar
 * conversions live in amp/dtype_scalar.h, shared with the CUDA kernels;
 * they are the reference every backend's conversion is tested against.
 *
 * The bulk functions (zrt_dtype_convert_host, zrt_half_reduce) pick the
 * AVX-512, AVX2 (+F16C) or scalar path at run time: the best the CPU has,
 * or a lesser one $ZRT_CPU_ISA forces; every path gives the scalar
 * functions' bits.
 */
#ifndef ZRT_DTYPE_H
#define ZRT_DTYPE_H

#include <stdint.h>
#include <string.h>

#include "dtype_scalar.h"
#include "zrt.h"

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
 * result equals zrt_store_f(zrt_load_f(a) + zrt_load_f(b)); where both
 * are NaN, inout's NaN, quieted, on every path). MAX / MIN
 * return one of the two inputs bit for bit; a NaN operand wins (NaN
 * propagates), -0 and +0 compare equal (inout kept). */
typedef enum zrt_half_op { ZRT_HALF_SUM = 0, ZRT_HALF_MAX, ZRT_HALF_MIN } zrt_half_op;
void zrt_half_reduce(uint16_t *inout, const uint16_t *in, zrt_dtype dt, size_t n, zrt_half_op op);

#endif
