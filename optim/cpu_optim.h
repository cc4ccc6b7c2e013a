/*
 * cpu_optim.h — the fused CPU optimizer step and gradient-check pass over
 * fp32 master shards in host memory (offload, and the CPU backend's
 * optim_step / scale_check slots).
 *
 * One pass per element: g = grad * grad_mul (unscale * clip coefficient),
 * the optimizer update of master and states, and the cast of the new master
 * value into the 16-bit parameter copy (param16 may be NULL). The only other
 * pass over the gradients is zrt_cpu_sumsq_check.
 *
 * Paths: scalar (the reference), AVX2+F16C, AVX-512 (+BF16 conversion
 * instructions when present), chosen at run time (zrt_isa_best, or
 * $ZRT_CPU_ISA=scalar|avx2|avx512 to force one); OpenMP threads over tiles.
 */
#ifndef ZRT_CPU_OPTIM_H
#define ZRT_CPU_OPTIM_H

#include "cpu_features.h"
#include "internal.h"
#include "optim.h"

/* Fused step with the best (or forced) ISA. s2 is NULL for SGD and Lion. */
zrt_status zrt_cpu_optim_step(const zrt_optim_hparams *hp, float *master, float *s1, float *s2,
                              const void *grad, zrt_dtype gdt, void *param16, zrt_dtype pdt,
                              size_t n);
zrt_status zrt_cpu_optim_step_isa(zrt_isa isa, const zrt_optim_hparams *hp, float *master,
                                  float *s1, float *s2, const void *grad, zrt_dtype gdt,
                                  void *param16, zrt_dtype pdt, size_t n);

/* The same fused step with the master weights in mdt and the optimizer
 * states in sdt, each ZRT_F32 or ZRT_BF16 (bf16.bf16_master_weights_and_grads
 * / bf16_optimizer_states). Both fp32: exactly zrt_cpu_optim_step. AVX2
 * with Adam/AdamW: the bf16 arrays read and written in the kernel itself.
 * Else, per block of ZRT_OPTIM_LP_BLOCK elements in the thread's cache: the bf16
 * arrays widen to fp32 (exact), the fp32 range kernel of the ISA runs, and
 * the results narrow back rounding to nearest even; param16 gets the fp32
 * result's rounding, so with pdt bf16 it equals the new bf16 master. Bit for
 * bit what zrt_cpu_optim_step_scalar gives between those two conversions. */
#define ZRT_OPTIM_LP_BLOCK 1024
zrt_status zrt_cpu_optim_step_lp(const zrt_optim_hparams *hp, void *master, zrt_dtype mdt, void *s1,
                                 void *s2, zrt_dtype sdt, const void *grad, zrt_dtype gdt,
                                 void *param16, zrt_dtype pdt, size_t n);
zrt_status zrt_cpu_optim_step_lp_isa(zrt_isa isa, const zrt_optim_hparams *hp, void *master,
                                     zrt_dtype mdt, void *s1, void *s2, zrt_dtype sdt,
                                     const void *grad, zrt_dtype gdt, void *param16, zrt_dtype pdt,
                                     size_t n);

/* dst[i] += src[i] with dst in ddt: ZRT_F32 is zrt_cpu_grad_accumulate;
 * ZRT_BF16 (the bf16 gradient partition of bf16_master_weights_and_grads)
 * adds in fp32 and rounds each sum to nearest even, as a bf16 tensor's add_
 * does. */
void zrt_cpu_grad_accumulate_to(void *dst, zrt_dtype ddt, const void *src, zrt_dtype sdt, size_t n);

/* *sumsq += sum((g*scale)^2) (double accumulation), *nonfinite |= any
 * non-finite g. */
void zrt_cpu_sumsq_check(const void *grad, zrt_dtype gdt, size_t n, float scale, double *sumsq,
                         int *nonfinite);

/* dst[i] += src[i] (src of dtype sdt widened to fp32), n elements: the
 * host side of a gradient accumulation (the fp32 gradient shard of
 * ZeRO-Offload lives in the host pool). OpenMP threads over tiles; each
 * element is one fp32 add, so the result is the CPU backend's
 * accumulate with alpha 1 bit for bit. */
void zrt_cpu_grad_accumulate(float *dst, const void *src, zrt_dtype sdt, size_t n);

/* Scalar reference of one element range (no threads); every ISA path is
 * tested against it. */
void zrt_cpu_optim_step_scalar(const zrt_optim_hparams *hp, float *master, float *s1, float *s2,
                               const void *grad, zrt_dtype gdt, void *param16, zrt_dtype pdt,
                               size_t n);

#endif
