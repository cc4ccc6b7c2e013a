/*
 * gpt2_cuda.h — the CUDA side of the GPT-2 example (gpt2_cuda.cu): an ops
 * table of CUDA C kernels with the same contract as the CPU one, and the
 * working-dtype staging kernels. Only compiled and linked when CMake found
 * CUDA (GPT2_HAVE_CUDA); the trainer picks it when the engine's backend is
 * "cuda". All pointers are device pointers; kernels and memsets run on the
 * engine's stream (zrt_engine_stream, given with gpt2_cuda_set_stream), and
 * errors surface through ops->check.
 */
#ifndef GPT2_CUDA_H
#define GPT2_CUDA_H

#include "gpt2_model.h"
#include "gpt2_prof.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The CUDA ops (gemm through zrt_engine_gemm, i.e. cuBLAS; ctx = engine). */
extern const gpt2_ops_f32 gpt2_cuda_ops_f32;
/* The stream every kernel of this file launches on: zrt_engine_stream(eng). */
void gpt2_cuda_set_stream(void *stream);
/* Before the first op: GEMMs in dtype dt (ZRT_F32: fp32 cuBLAS as given;
 * ZRT_BF16 / ZRT_F16: tensor cores, fp32 accumulate and C) and the scratch
 * (device memory of gpt2_cuda_scratch_bytes, owned by the caller). */
void gpt2_cuda_gemm_setup(zrt_dtype dt, void *scratch, size_t bytes);
/* Marks [raw, raw + n elements) as a 16-bit weight of the GEMM dtype: a GEMM
 * operand pointing into it is used as is (its fp32-typed pointer is the raw
 * tensor). Up to 8 at a time; 0, or -1 when full or the dtype is fp32.
 * _clear forgets them (each module's staging starts with it), and the bf16
 * copy of the cross-entropy's gradient that a bf16 run's head holds in the
 * scratch for its two backward GEMMs. */
int gpt2_cuda_weight16(const void *raw, int64_t n);
void gpt2_cuda_weight16_clear(void);
/* Marks [raw, raw + n elements) as a 16-bit gradient of the GEMM dtype that
 * a GEMM's C adds into as it is (the engine's gradient of a weight matrix:
 * C = alpha op(A) op(B) + beta C in fp32, rounded once to 16 bits, with no
 * fp32 staging). Up to 8 at a time; 0, or -1 when full or the dtype is
 * fp32. _clear forgets them (each module's gradient staging starts with
 * it). */
int gpt2_cuda_grad16(void *raw, int64_t n);
void gpt2_cuda_grad16_clear(void);
/* n elements of dtype dt (bf16 / fp16) filled with values in [-1, 1). */
void gpt2_cuda_fill16(void *dst, zrt_dtype dt, int64_t n);
void gpt2_cuda_to_f32(float *dst, const void *src, zrt_dtype dt, int64_t n);
void gpt2_cuda_add_from_f32(void *dst, const float *src, zrt_dtype dt, int64_t n);
/* The op profile's clock on CUDA (gpt2_prof.h): a pair of timing events on
 * the stream around each call (4096 pairs, drained with a synchronize when
 * full), read at flush. Its events live as long as the process. */
zrt_status gpt2_cuda_prof_clock(gpt2_prof_clock *out);

#ifdef __cplusplus
}
#endif
#endif
