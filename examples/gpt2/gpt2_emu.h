/*
 * gpt2_emu.h — train_gpt2 --emulate_cuda: the CUDA path's numbers on the
 * host. An ops table wrapping the CPU one that computes what the CUDA
 * kernels compute in a 16-bit run, where they differ from the CPU's: every
 * GEMM's two operands rounded to the run's dtype (round to nearest even,
 * as cu_gemm's conversion, the 16-bit weights and a 16-bit run's 16-bit
 * activations hold them), products and sums in fp32; the attention through
 * the tensor-core kernels' C emulation (gpt2_flash_tc.h: q, k, v, dO, P and
 * dS in the run's dtype, the logsumexp in att, D from the forward's output)
 * with the output rounded where the run keeps it in 16 bits (gpt2_act16.h's
 * registry). What stays the host's: the order of each sum (OpenBLAS vs
 * cuBLAS, the CPU's vs the CUDA kernels' reductions) and the elementwise
 * kernels' fp32 arithmetic (host vs device expf, tanhf). So a run with it differs from the same run
 * on a GPU only by summation order: tests/gpu/test_engine_cuda.sh's GPU-side tolerances are
 * measured against it before a GPU runs them (cli.test_gpu_harness).
 * Slow (the attention emulates a warp lane by lane); for tests and
 * predictions on small models.
 */
#ifndef GPT2_EMU_H
#define GPT2_EMU_H

#include "gpt2_model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Wraps *cpu (kept by pointer) for a run in dtype dt into *out: one per
 * process. fp32: *out is *cpu (the CUDA kernels compute in fp32 then). */
void gpt2_emu_cuda_ops(const gpt2_ops_f32 *cpu, zrt_dtype dt, gpt2_ops_f32 *out);
/* Frees the emulation's buffers. */
void gpt2_emu_cuda_done(void);

#ifdef __cplusplus
}
#endif
#endif
