/*
 * cpu_optim.c — run-time ISA dispatch and OpenMP tiling of the fused CPU
 * optimizer step and of the sum-of-squares / non-finite check.
 *
 * This file currently holds the scalar path threaded over tiles; the
 * AVX2 / AVX-512 paths plug in through zrt_cpu_optim_step_isa.
 */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "amp/dtype.h"
#include "offload/cpu_optim.h"

#define ZRT_OPTIM_TILE 16384

const char *zrt_isa_name(zrt_isa isa) {
  switch (isa) {
  case ZRT_ISA_AVX512: return "avx512";
  case ZRT_ISA_AVX2: return "avx2";
  default: return "scalar";
  }
}

int zrt_cpu_isa_supported(zrt_isa isa) { return isa == ZRT_ISA_SCALAR; }

zrt_isa zrt_cpu_isa_best(void) { return ZRT_ISA_SCALAR; }

zrt_status zrt_cpu_optim_step_isa(zrt_isa isa, const zrt_optim_hparams *hp, float *master,
                                  float *s1, float *s2, const void *grad, zrt_dtype gdt,
                                  void *param16, zrt_dtype pdt, size_t n) {
  if (!zrt_cpu_isa_supported(isa))
    return zrt_error(ZRT_ERR_UNSUPPORTED, "cpu optimizer: ISA %s is not available on this CPU",
                     zrt_isa_name(isa));
  size_t gsz = zrt_dtype_size(gdt), psz = zrt_dtype_size(pdt);
  long tiles = (long)ZRT_DIV_UP(n, (size_t)ZRT_OPTIM_TILE);
#pragma omp parallel for schedule(static)
  for (long t = 0; t < tiles; t++) {
    size_t off = (size_t)t * ZRT_OPTIM_TILE;
    size_t len = ZRT_MIN((size_t)ZRT_OPTIM_TILE, n - off);
    zrt_cpu_optim_step_scalar(hp, master + off, s1 ? s1 + off : NULL, s2 ? s2 + off : NULL,
                              (const char *)grad + off * gsz, gdt,
                              param16 ? (char *)param16 + off * psz : NULL, pdt, len);
  }
  return ZRT_OK;
}

zrt_status zrt_cpu_optim_step(const zrt_optim_hparams *hp, float *master, float *s1, float *s2,
                              const void *grad, zrt_dtype gdt, void *param16, zrt_dtype pdt,
                              size_t n) {
  return zrt_cpu_optim_step_isa(zrt_cpu_isa_best(), hp, master, s1, s2, grad, gdt, param16, pdt, n);
}

void zrt_cpu_sumsq_check(const void *grad, zrt_dtype gdt, size_t n, float scale, double *sumsq,
                         int *nonfinite) {
  double acc = 0.0;
  int bad = 0;
#pragma omp parallel for reduction(+ : acc) reduction(| : bad) schedule(static)
  for (long i = 0; i < (long)n; i++) {
    float g = zrt_load_f(grad, gdt, (size_t)i);
    if (!isfinite(g)) bad = 1;
    double x = (double)g * scale;
    acc += x * x;
  }
  *sumsq += acc;
  *nonfinite |= bad;
}
