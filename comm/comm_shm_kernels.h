/*
 * comm_shm_kernels.h — the reduction kernels of the shared-memory comm
 * (comm/comm_shm.c): SUM of n inputs in rank order into one output, one
 * pass over memory. Private to the shm comm.
 *
 * Bits: fp32 adds in rank order (((x0 + x1) + x2) + ...); fp16 / bf16 widen
 * every input exactly, add in fp32 in rank order and round once to the
 * 16-bit type — the same bits as comm_shm.c's portable loops, which the
 * tests hold it to (the MPI comm at N = 2, the references at any N).
 */
#ifndef ZRT_COMM_SHM_KERNELS_H
#define ZRT_COMM_SHM_KERNELS_H

#include <stddef.h>

#include "zrt.h"

/* Most inputs (ranks) a call sums. */
#define ZRT_SHM_MAX_INPUTS 64

/* AVX-512 (F/BW/VL/DQ + F16C). Call only when zrt_isa_best() says avx512.
 * out2 (may be NULL) gets the same bits in the same pass (all_reduce: recv
 * and the result region). out may be exactly one of the inputs (in place:
 * each step is loaded from every input before it is stored); no other
 * overlap. nt: the full 64-byte stores to out (from its first 64-byte
 * boundary) are non-temporal; the caller fences (sfence) before another
 * rank or thread may look. bf16_insn (only when cpuid says avx512_bf16):
 * bf16 rounds with vcvtne2ps2bf16 (steps holding a denormal sum fall back
 * to the integer rounding); the bits are the same either way. */
void zrt_shm_sum_avx512(void *out, void *out2, const void *const *in, int n, size_t len,
                        zrt_dtype dt, int nt, int bf16_insn);

/* AVX2 + FMA + F16C: the same contract and bits as zrt_shm_sum_avx512
 * (out2, in place, nt with the caller's sfence), any n. Call only when
 * zrt_isa_supported(ZRT_ISA_AVX2). */
void zrt_shm_sum_avx2(void *out, void *out2, const void *const *in, int n, size_t len, zrt_dtype dt,
                      int nt);

#endif
