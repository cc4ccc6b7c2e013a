/*
 * cpu_optim_internal.h — what the ISA paths of the fused CPU optimizer share:
 * the per-step constants (computed once, in one translation unit, exactly as
 * the scalar reference computes them, so every path sees bit-identical
 * coefficients) and the per-ISA range kernels that cpu_optim.c threads over
 * tiles. Not a contract for other modules; tests use it to drive each
 * kernel directly (including the AVX-512 path without the BF16 instructions).
 *
 * Invariant: a range kernel performs, per element, the same IEEE operations
 * in the same order as zrt_cpu_optim_step_scalar (no FMA contraction), so the
 * fp32 results match the reference bit for bit on finite inputs; the only
 * licensed difference is documented in docs/offload.md.
 */
#ifndef ZRT_CPU_OPTIM_INTERNAL_H
#define ZRT_CPU_OPTIM_INTERNAL_H

#include "cpu_optim.h"

typedef struct zrt_optim_consts {
  zrt_optim_type type;
  float lr, b1, b2, omb1, omb2, eps, wd, mul;
  float step_size, inv_sqrt_bc2; /* Adam/AdamW bias correction folded in */
  float decay;                   /* 1 - lr*wd (AdamW, Lion) */
  float momentum;                /* SGD */
} zrt_optim_consts;

void zrt_optim_consts_init(const zrt_optim_hparams *hp, zrt_optim_consts *c);

/* One element range, single thread. pdt is ignored when param16 is NULL.
 * bf16_insn selects _mm512_cvtneps_pbh (1) or the shift-based rounding (0)
 * for bf16 stores. */
void zrt_cpu_optim_range_avx512(const zrt_optim_consts *c, float *master, float *s1, float *s2,
                                const void *grad, zrt_dtype gdt, void *param16, zrt_dtype pdt,
                                size_t n, int bf16_insn);
void zrt_cpu_optim_range_avx2(const zrt_optim_consts *c, float *master, float *s1, float *s2,
                              const void *grad, zrt_dtype gdt, void *param16, zrt_dtype pdt,
                              size_t n);

/* The AVX2 range of a bf16-master step (zrt_cpu_optim_step_lp): master
 * mdt bf16, states sdt fp32 or bf16, read and written in the kernel.
 * Returns 0 without doing anything for a case it does not cover (another
 * dtype, an optimizer other than Adam/AdamW): the caller then converts
 * through fp32 blocks. */
int zrt_cpu_optim_range_avx2_lp(const zrt_optim_consts *c, void *master, zrt_dtype mdt, void *s1,
                                void *s2, zrt_dtype sdt, const void *grad, zrt_dtype gdt,
                                void *param16, zrt_dtype pdt, size_t n);

/* Sum of squares in double of (g*scale) and a non-finite flag over a range. */
void zrt_cpu_sumsq_range_avx512(const void *grad, zrt_dtype gdt, size_t n, float scale,
                                double *sumsq, int *nonfinite);
void zrt_cpu_sumsq_range_avx2(const void *grad, zrt_dtype gdt, size_t n, float scale, double *sumsq,
                              int *nonfinite);

#endif
