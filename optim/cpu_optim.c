/*
 * cpu_optim.c — run-time ISA dispatch and OpenMP tiling of the fused CPU
 * optimizer step and of the sum-of-squares / non-finite check.
 *
 * The ISA is chosen by cpuid (__builtin_cpu_supports) once per process and
 * cached (a cached env/cpu parameter, DESIGN.md rule 5); $ZRT_CPU_ISA =
 * scalar|avx2|avx512 forces a path (a request this CPU cannot run is logged
 * and the best path is used instead). Work is split into fixed tiles of
 * ZRT_OPTIM_TILE elements handed to OpenMP threads statically, so which
 * thread updates which element never changes the result: every path is
 * elementwise and the result is independent of the thread count.
 */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cpu_optim_internal.h"
#include "dtype.h"

/* 64 KiB of fp32 master per tile: big enough to amortise the OpenMP hand-out,
 * small enough to balance 2..64 threads on shards of a few M elements. */
#define ZRT_OPTIM_TILE 16384

/* The same expressions, in the same types, as zrt_cpu_optim_step_scalar's
 * prologue; this file is compiled without FMA so nothing is fused. */
void zrt_optim_consts_init(const zrt_optim_hparams *hp, zrt_optim_consts *c) {
  c->type = hp->type;
  c->lr = hp->lr;
  c->b1 = hp->beta1;
  c->b2 = hp->beta2;
  c->omb1 = 1.0f - hp->beta1;
  c->omb2 = 1.0f - hp->beta2;
  c->eps = hp->eps;
  c->wd = hp->weight_decay;
  c->mul = hp->grad_mul;
  c->momentum = hp->momentum;
  c->decay = 1.0f - hp->lr * hp->weight_decay;
  float bc1 = 1.0f, bc2 = 1.0f;
  if (hp->bias_correction && (hp->type == ZRT_OPTIM_ADAM || hp->type == ZRT_OPTIM_ADAMW)) {
    bc1 = 1.0f - powf(hp->beta1, (float)hp->step);
    bc2 = 1.0f - powf(hp->beta2, (float)hp->step);
  }
  c->step_size = hp->lr / bc1;
  c->inv_sqrt_bc2 = 1.0f / sqrtf(bc2);
}

static zrt_status zrt_optim_check_args(const zrt_optim_hparams *hp, float *master, float *s1,
                                       float *s2, const void *grad, zrt_dtype gdt, zrt_dtype pdt,
                                       size_t n) {
  if (!hp) return zrt_error(ZRT_ERR_INVALID_ARG, "cpu optimizer: hyper-parameters are NULL");
  if ((int)hp->type < ZRT_OPTIM_ADAM || hp->type > ZRT_OPTIM_LION)
    return zrt_error(ZRT_ERR_INVALID_ARG, "cpu optimizer: unknown optimizer type %d",
                     (int)hp->type);
  if ((int)gdt < ZRT_F32 || gdt > ZRT_BF16 || (int)pdt < ZRT_F32 || pdt > ZRT_BF16)
    return zrt_error(ZRT_ERR_INVALID_ARG,
                     "cpu optimizer: grad dtype %d / param dtype %d is not fp32|fp16|bf16",
                     (int)gdt, (int)pdt);
  if (n == 0) return ZRT_OK;
  if (!master || !grad)
    return zrt_error(ZRT_ERR_INVALID_ARG, "cpu optimizer: master or grad pointer is NULL (n=%zu)",
                     n);
  int needs_s1 = hp->type != ZRT_OPTIM_SGD || hp->momentum != 0.0f;
  int needs_s2 = hp->type == ZRT_OPTIM_ADAM || hp->type == ZRT_OPTIM_ADAMW;
  if ((needs_s1 && !s1) || (needs_s2 && !s2))
    return zrt_error(ZRT_ERR_INVALID_ARG,
                     "cpu optimizer: optimizer state %s is NULL but optimizer type %d needs it",
                     needs_s1 && !s1 ? "s1 (m / momentum)" : "s2 (v)", (int)hp->type);
  return ZRT_OK;
}

/* What every step entry checks before its tiles: the ISA runs here, the
 * arguments are sound; then the step's constants. */
static zrt_status zrt_optim_begin(zrt_isa isa, const zrt_optim_hparams *hp, void *master, void *s1,
                                  void *s2, const void *grad, zrt_dtype gdt, zrt_dtype pdt,
                                  size_t n, zrt_optim_consts *c) {
  if (!zrt_isa_supported(isa))
    return zrt_error(ZRT_ERR_UNSUPPORTED, "cpu optimizer: ISA %s is not available on this CPU",
                     zrt_isa_name(isa));
  ZRT_CHECK(zrt_optim_check_args(hp, master, s1, s2, grad, gdt, pdt, n));
  if (n > 0) zrt_optim_consts_init(hp, c);
  return ZRT_OK;
}

zrt_status zrt_cpu_optim_step_isa(zrt_isa isa, const zrt_optim_hparams *hp, float *master,
                                  float *s1, float *s2, const void *grad, zrt_dtype gdt,
                                  void *param16, zrt_dtype pdt, size_t n) {
  zrt_optim_consts c;
  ZRT_CHECK(zrt_optim_begin(isa, hp, master, s1, s2, grad, gdt, pdt, n, &c));
  if (n == 0) return ZRT_OK;
  const int bf16_insn = isa == ZRT_ISA_AVX512 && zrt_isa_has_avx512bf16();
  size_t gsz = zrt_dtype_size(gdt), psz = zrt_dtype_size(pdt);
  long tiles = (long)ZRT_DIV_UP(n, (size_t)ZRT_OPTIM_TILE);
#pragma omp parallel for schedule(static) if (tiles > 1)
  for (long t = 0; t < tiles; t++) {
    size_t off = (size_t)t * ZRT_OPTIM_TILE;
    size_t len = ZRT_MIN((size_t)ZRT_OPTIM_TILE, n - off);
    float *ms = master + off, *a = s1 ? s1 + off : NULL, *b = s2 ? s2 + off : NULL;
    const void *g = (const char *)grad + off * gsz;
    void *p16 = param16 ? (char *)param16 + off * psz : NULL;
    switch (isa) {
    case ZRT_ISA_AVX512:
      zrt_cpu_optim_range_avx512(&c, ms, a, b, g, gdt, p16, pdt, len, bf16_insn);
      break;
    case ZRT_ISA_AVX2: zrt_cpu_optim_range_avx2(&c, ms, a, b, g, gdt, p16, pdt, len); break;
    default: zrt_cpu_optim_step_scalar(hp, ms, a, b, g, gdt, p16, pdt, len); break;
    }
  }
  return ZRT_OK;
}

zrt_status zrt_cpu_optim_step(const zrt_optim_hparams *hp, float *master, float *s1, float *s2,
                              const void *grad, zrt_dtype gdt, void *param16, zrt_dtype pdt,
                              size_t n) {
  return zrt_cpu_optim_step_isa(zrt_isa_best(), hp, master, s1, s2, grad, gdt, param16, pdt, n);
}

/* One block of a low-precision step: widen, the fp32 kernel, narrow. */
static void zrt_optim_lp_block(zrt_isa isa, const zrt_optim_hparams *hp, const zrt_optim_consts *c,
                               int bf16_insn, void *master, zrt_dtype mdt, void *s1, void *s2,
                               zrt_dtype sdt, const void *grad, zrt_dtype gdt, void *param16,
                               zrt_dtype pdt, size_t len) {
  float mb[ZRT_OPTIM_LP_BLOCK] __attribute__((aligned(64)));
  float ab[ZRT_OPTIM_LP_BLOCK] __attribute__((aligned(64)));
  float bb[ZRT_OPTIM_LP_BLOCK] __attribute__((aligned(64)));
  float *m = mdt == ZRT_F32 ? (float *)master : mb;
  float *a = !s1 ? NULL : sdt == ZRT_F32 ? (float *)s1 : ab;
  float *b = !s2 ? NULL : sdt == ZRT_F32 ? (float *)s2 : bb;
  if (m != master) zrt_dtype_convert_host(m, ZRT_F32, master, mdt, len);
  if (a && a != s1) zrt_dtype_convert_host(a, ZRT_F32, s1, sdt, len);
  if (b && b != s2) zrt_dtype_convert_host(b, ZRT_F32, s2, sdt, len);
  switch (isa) {
  case ZRT_ISA_AVX512:
    zrt_cpu_optim_range_avx512(c, m, a, b, grad, gdt, param16, pdt, len, bf16_insn);
    break;
  case ZRT_ISA_AVX2: zrt_cpu_optim_range_avx2(c, m, a, b, grad, gdt, param16, pdt, len); break;
  default: zrt_cpu_optim_step_scalar(hp, m, a, b, grad, gdt, param16, pdt, len); break;
  }
  if (m != master) zrt_dtype_convert_host(master, mdt, m, ZRT_F32, len);
  if (a && a != s1) zrt_dtype_convert_host(s1, sdt, a, ZRT_F32, len);
  if (b && b != s2) zrt_dtype_convert_host(s2, sdt, b, ZRT_F32, len);
}

zrt_status zrt_cpu_optim_step_lp_isa(zrt_isa isa, const zrt_optim_hparams *hp, void *master,
                                     zrt_dtype mdt, void *s1, void *s2, zrt_dtype sdt,
                                     const void *grad, zrt_dtype gdt, void *param16, zrt_dtype pdt,
                                     size_t n) {
  if ((mdt != ZRT_F32 && mdt != ZRT_BF16) || (sdt != ZRT_F32 && sdt != ZRT_BF16))
    return zrt_error(ZRT_ERR_INVALID_ARG,
                     "cpu optimizer: master dtype %d / state dtype %d is not fp32 or bf16",
                     (int)mdt, (int)sdt);
  if (mdt == ZRT_F32 && sdt == ZRT_F32) /* the fp32 path, untouched */
    return zrt_cpu_optim_step_isa(isa, hp, master, s1, s2, grad, gdt, param16, pdt, n);
  zrt_optim_consts c;
  ZRT_CHECK(zrt_optim_begin(isa, hp, master, s1, s2, grad, gdt, pdt, n, &c));
  if (n == 0) return ZRT_OK;
  const int bf16_insn = isa == ZRT_ISA_AVX512 && zrt_isa_has_avx512bf16();
  size_t gsz = zrt_dtype_size(gdt), psz = zrt_dtype_size(pdt);
  size_t msz = zrt_dtype_size(mdt), ssz = zrt_dtype_size(sdt);
  long tiles = (long)ZRT_DIV_UP(n, (size_t)ZRT_OPTIM_TILE);
#pragma omp parallel for schedule(static) if (tiles > 1)
  for (long t = 0; t < tiles; t++) {
    size_t off0 = (size_t)t * ZRT_OPTIM_TILE;
    size_t end = ZRT_MIN(off0 + (size_t)ZRT_OPTIM_TILE, n);
    /* AVX2 reads and writes bf16 in its kernel (the same bits) */
    if (isa == ZRT_ISA_AVX2 &&
        zrt_cpu_optim_range_avx2_lp(
            &c, (char *)master + off0 * msz, mdt, s1 ? (char *)s1 + off0 * ssz : NULL,
            s2 ? (char *)s2 + off0 * ssz : NULL, sdt, (const char *)grad + off0 * gsz, gdt,
            param16 ? (char *)param16 + off0 * psz : NULL, pdt, end - off0))
      continue;
    for (size_t off = off0; off < end; off += ZRT_OPTIM_LP_BLOCK) {
      size_t len = ZRT_MIN((size_t)ZRT_OPTIM_LP_BLOCK, end - off);
      zrt_optim_lp_block(isa, hp, &c, bf16_insn, (char *)master + off * msz, mdt,
                         s1 ? (char *)s1 + off * ssz : NULL, s2 ? (char *)s2 + off * ssz : NULL,
                         sdt, (const char *)grad + off * gsz, gdt,
                         param16 ? (char *)param16 + off * psz : NULL, pdt, len);
    }
  }
  return ZRT_OK;
}

zrt_status zrt_cpu_optim_step_lp(const zrt_optim_hparams *hp, void *master, zrt_dtype mdt, void *s1,
                                 void *s2, zrt_dtype sdt, const void *grad, zrt_dtype gdt,
                                 void *param16, zrt_dtype pdt, size_t n) {
  return zrt_cpu_optim_step_lp_isa(zrt_isa_best(), hp, master, mdt, s1, s2, sdt, grad, gdt, param16,
                                   pdt, n);
}

void zrt_cpu_grad_accumulate_to(void *dst, zrt_dtype ddt, const void *src, zrt_dtype sdt,
                                size_t n) {
  if (ddt == ZRT_F32) {
    zrt_cpu_grad_accumulate(dst, src, sdt, n);
    return;
  }
  size_t ssz = zrt_dtype_size(sdt), dsz = zrt_dtype_size(ddt);
  long tiles = (long)ZRT_DIV_UP(n, (size_t)ZRT_OPTIM_TILE);
#pragma omp parallel for schedule(static) if (tiles > 1)
  for (long t = 0; t < tiles; t++) {
    size_t off0 = (size_t)t * ZRT_OPTIM_TILE;
    size_t end = ZRT_MIN(off0 + (size_t)ZRT_OPTIM_TILE, n);
    float acc[ZRT_OPTIM_LP_BLOCK] __attribute__((aligned(64)));
    for (size_t off = off0; off < end; off += ZRT_OPTIM_LP_BLOCK) {
      size_t len = ZRT_MIN((size_t)ZRT_OPTIM_LP_BLOCK, end - off);
      char *d = (char *)dst + off * dsz;
      zrt_dtype_convert_host(acc, ZRT_F32, d, ddt, len);
      zrt_cpu_grad_accumulate(acc, (const char *)src + off * ssz, sdt, len);
      zrt_dtype_convert_host(d, ddt, acc, ZRT_F32, len);
    }
  }
}

void zrt_cpu_grad_accumulate(float *dst, const void *src, zrt_dtype sdt, size_t n) {
  long tiles = (long)ZRT_DIV_UP(n, (size_t)ZRT_OPTIM_TILE);
#pragma omp parallel for schedule(static) if (tiles > 1)
  for (long t = 0; t < tiles; t++) {
    size_t off = (size_t)t * ZRT_OPTIM_TILE;
    size_t len = ZRT_MIN((size_t)ZRT_OPTIM_TILE, n - off);
    float *d = dst + off;
    if (sdt == ZRT_F32) {
      const float *s = (const float *)src + off;
      for (size_t i = 0; i < len; i++) d[i] += s[i];
    } else {
      const uint16_t *s = (const uint16_t *)src + off;
      if (sdt == ZRT_BF16)
        for (size_t i = 0; i < len; i++) d[i] += zrt_bf16_to_f32(s[i]);
      else
        for (size_t i = 0; i < len; i++) d[i] += zrt_f16_to_f32(s[i]);
    }
  }
}

/* Tiles per group of zrt_cpu_sumsq_check: each tile's sum lands in its own
 * slot and the slots are added in tile order, so the result does not depend
 * on the OpenMP team (the adaptive team, engine_team.c, changes its size
 * mid-run) — a reduction clause would group tiles by thread. */
#define ZRT_SUMSQ_GROUP 256

void zrt_cpu_sumsq_check(const void *grad, zrt_dtype gdt, size_t n, float scale, double *sumsq,
                         int *nonfinite) {
  zrt_isa isa = zrt_isa_best();
  size_t gsz = zrt_dtype_size(gdt);
  long tiles = (long)ZRT_DIV_UP(n, (size_t)ZRT_OPTIM_TILE);
  double acc = 0.0;
  int bad = 0;
  double part[ZRT_SUMSQ_GROUP];
  int partbad[ZRT_SUMSQ_GROUP];
  for (long t0 = 0; t0 < tiles; t0 += ZRT_SUMSQ_GROUP) {
    long nt = ZRT_MIN((long)ZRT_SUMSQ_GROUP, tiles - t0);
#pragma omp parallel for schedule(static) if (nt > 1)
    for (long k = 0; k < nt; k++) {
      size_t off = (size_t)(t0 + k) * ZRT_OPTIM_TILE;
      size_t len = ZRT_MIN((size_t)ZRT_OPTIM_TILE, n - off);
      const void *g = (const char *)grad + off * gsz;
      double s = 0.0;
      int nf = 0;
      if (isa == ZRT_ISA_AVX512) {
        zrt_cpu_sumsq_range_avx512(g, gdt, len, scale, &s, &nf);
      } else if (isa == ZRT_ISA_AVX2) {
        zrt_cpu_sumsq_range_avx2(g, gdt, len, scale, &s, &nf);
      } else {
        for (size_t i = 0; i < len; i++) {
          float x = zrt_load_f(g, gdt, i);
          if (!isfinite(x)) nf = 1;
          double d = (double)x * scale;
          s += d * d;
        }
      }
      part[k] = s;
      partbad[k] = nf;
    }
    for (long k = 0; k < nt; k++) {
      acc += part[k];
      bad |= partbad[k];
    }
  }
  *sumsq += acc;
  *nonfinite |= bad;
}
