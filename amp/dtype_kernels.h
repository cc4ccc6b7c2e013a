/*
 * dtype_kernels.h — the per-ISA kernels behind the bulk host conversions
 * and the pairwise 16-bit reduction of amp/dtype.h. Not a contract for other
 * modules; tests drive each kernel this CPU can run directly (AVX2, and
 * AVX-512 with and without the AVX512_BF16 instructions) and hold it
 * bitwise to the scalar reference.
 *
 * Buffers must not overlap, except that narrowing may run in place
 * (dst == src: every vector is loaded before its half-size store lands).
 */
#ifndef ZRT_DTYPE_KERNELS_H
#define ZRT_DTYPE_KERNELS_H

#include "dtype.h"

void zrt_dtype_widen_avx512(float *dst, const uint16_t *src, zrt_dtype dt, size_t n);
void zrt_dtype_narrow_avx512(uint16_t *dst, const float *src, zrt_dtype dt, size_t n,
                             int bf16_insn_ok);
void zrt_half_reduce_avx512(uint16_t *inout, const uint16_t *in, zrt_dtype dt, size_t n,
                            zrt_half_op op, int bf16_insn_ok);

/* AVX2 + FMA + F16C (amp/dtype_avx2.c). */
void zrt_dtype_widen_avx2(float *dst, const uint16_t *src, zrt_dtype dt, size_t n);
void zrt_dtype_narrow_avx2(uint16_t *dst, const float *src, zrt_dtype dt, size_t n);
void zrt_half_reduce_avx2(uint16_t *inout, const uint16_t *in, zrt_dtype dt, size_t n,
                          zrt_half_op op);

/* Scalar references (one element at a time through amp/dtype.h). */
void zrt_dtype_convert_scalar(void *dst, zrt_dtype dst_dt, const void *src, zrt_dtype src_dt,
                              size_t n);
void zrt_half_reduce_scalar(uint16_t *inout, const uint16_t *in, zrt_dtype dt, size_t n,
                            zrt_half_op op);

#endif
