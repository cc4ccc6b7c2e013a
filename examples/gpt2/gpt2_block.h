/*
 * gpt2_block.h — the phase macros of the GPT example's CUDA kernels that are
 * written once for two compilers (gpt2_flash_attn.h, gpt2_flash_tc.h,
 * gpt2_rows.h): nvcc
 * builds them as kernels, a C compiler as an emulation that runs a block's
 * threads one after the other, phase by phase, between barriers.
 *   GB_DEV             a block function (__device__ inline / static inline)
 *   GB_HD              a function of the launch's shape, for the host that
 *                      launches and the blocks alike (__host__ __device__
 *                      inline / static inline)
 *   GB_SYNC()          the block's barrier (__syncthreads / nothing: the
 *                      emulation's phases already run one after the other)
 *   GB_THREADS(tid, n) ... GB_END
 *                      one phase: every thread of the block (n of them)
 *                      runs the body once with its own tid (on CUDA n is
 *                      the launch's block size)
 *   GB_UNROLL          unroll the loop that follows (nvcc; nothing in C)
 *   gb_bf16(x)         x rounded to bf16 (nearest even), as its 16 bits:
 *                      CUDA's __float2bfloat16_rn, written out for the C
 *                      compiler; gb_from_bf16(bits) the value of such bits
 *   gb_f16(x)          x rounded to IEEE fp16 (nearest even, overflow to
 *                      inf), as its 16 bits: CUDA's __float2half_rn, the C
 *                      compiler's _Float16 conversion; gb_from_f16(bits)
 *                      the value of such bits
 */
#ifndef GPT2_BLOCK_H
#define GPT2_BLOCK_H

#include <math.h>
#include <stdint.h>
#ifdef __CUDACC__
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#else
#include <string.h>
#endif

#ifdef __CUDACC__
#define GB_DEV __device__ __forceinline__
#define GB_HD __host__ __device__ inline
#define GB_UNROLL _Pragma("unroll")
#define GB_SYNC() __syncthreads()
#define GB_THREADS(tid, n)                                                                         \
  {                                                                                                \
    const int tid = (int)threadIdx.x;
#define GB_END }
#else
#define GB_DEV static inline
#define GB_HD static inline
#define GB_UNROLL
#define GB_SYNC() ((void)0)
#define GB_THREADS(tid, n) for (int tid = 0; tid < (n); tid++) {
#define GB_END }
#endif

GB_DEV uint32_t gb_bf16(float x) {
#ifdef __CUDACC__
  return (uint32_t)__bfloat16_as_ushort(__float2bfloat16_rn(x));
#else
  union {
    float f;
    uint32_t u;
  } v = {x};
  if (isnan(x)) return 0x7fc0u;
  return (v.u + 0x7fffu + ((v.u >> 16) & 1u)) >> 16; /* round to nearest even */
#endif
}

GB_DEV uint32_t gb_f16(float x) {
#ifdef __CUDACC__
  return (uint32_t)__half_as_ushort(__float2half_rn(x));
#else
  _Float16 h = (_Float16)x;
  uint16_t u;
  memcpy(&u, &h, sizeof u);
  return u;
#endif
}

GB_DEV float gb_from_f16(uint32_t bits) {
#ifdef __CUDACC__
  return __half2float(__ushort_as_half((unsigned short)(bits & 0xffffu)));
#else
  uint16_t u = (uint16_t)(bits & 0xffffu);
  _Float16 h;
  memcpy(&h, &u, sizeof h);
  return (float)h;
#endif
}

GB_DEV float gb_from_bf16(uint32_t bits) {
  union {
    uint32_t u;
    float f;
  } v = {(bits & 0xffffu) << 16};
  return v.f;
}

#endif
