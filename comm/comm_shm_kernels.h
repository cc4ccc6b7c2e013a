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

/* AVX-512 (F/BW/VL/DQ + F16C). Call only when zrt_isa_best() says avx512. out2 (may be NULL) gets
 * the same bits in the same pass (all_reduce: recv and the result region). out may be exactly one
 * of the inputs (in place: each 16 lanes are loaded from every input before they are stored); no
 * other overlap. */
void zrt_shm_sum_avx512(void *out, void *out2, const void *const *in, int n, size_t len,
                        zrt_dtype dt);

#endif
