/*
 * test_cpu_optim.c — every vector path of the fused CPU optimizer against the
 * scalar reference (zrt_cpu_optim_step_scalar): Adam, AdamW, SGD (with and
 * without momentum), Lion × grad fp32/fp16/bf16 × param16 none/fp32/fp16/bf16
 * × odd lengths (tails, multi-tile), over three consecutive steps so the
 * states evolve. Paths: scalar threaded, AVX2, AVX-512 with the BF16
 * conversion instruction, AVX-512 with the shift-based bf16 rounding.
 *
 * Bounds (docs/offload.md): fp32 master / m / v within 2 ulp of the
 * reference (the paths do the same IEEE ops in the same order, so 0 is what
 * we expect and what we print); the 16-bit param within 1 ulp (expected 0:
 * both round-to-nearest-even from the same fp32 value). Also the vectorised
 * sum-of-squares check against a double reference (relative 1e-12) and its
 * non-finite detection, argument errors and the ZRT_CPU_ISA override.
 * test_lp: the bf16 master / state step (zrt_cpu_optim_step_lp) of every
 * ISA against the widen / scalar / round reference, bit for bit, and the
 * bf16 gradient accumulation against round(a + b).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_optim_internal.h"
#include "dtype.h"
#include "zt_optim.h"
#include "ztest.h"

enum { PATH_SCALAR_MT, PATH_AVX2, PATH_AVX512_BF16, PATH_AVX512_SHIFT, NPATH };
static const char *path_name[NPATH] = {"scalar-mt", "avx2", "avx512+bf16insn", "avx512-shift"};

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float frand(void) { /* [-1, 1) */
  rng = rng * 6364136223846793005ull + 1442695040888963407ull;
  return (float)((int64_t)(rng >> 11) - (1ll << 52)) / (float)(1ll << 52);
}

/* ulp distance between two floats; NaN==NaN counts as 0, NaN vs number huge. */
static int64_t ulp_dist(float a, float b) {
  if (isnan(a) || isnan(b)) return (isnan(a) && isnan(b)) ? 0 : INT64_MAX / 2;
  int32_t ia, ib;
  memcpy(&ia, &a, 4);
  memcpy(&ib, &b, 4);
  int64_t la = ia < 0 ? (int64_t)INT32_MIN - ia : ia, lb = ib < 0 ? (int64_t)INT32_MIN - ib : ib;
  return la > lb ? la - lb : lb - la;
}
static int64_t ulp16(uint16_t a, uint16_t b, zrt_dtype dt) {
  float fa = dt == ZRT_F16 ? zrt_f16_to_f32(a) : zrt_bf16_to_f32(a);
  float fb = dt == ZRT_F16 ? zrt_f16_to_f32(b) : zrt_bf16_to_f32(b);
  if (isnan(fa) || isnan(fb)) return (isnan(fa) && isnan(fb)) ? 0 : INT64_MAX / 2;
  int32_t ia = (int16_t)a, ib = (int16_t)b; /* sign-magnitude -> ordered */
  int64_t la = ia < 0 ? -32768 - ia : ia, lb = ib < 0 ? -32768 - ib : ib;
  return la > lb ? la - lb : lb - la;
}

static int path_ok(int path) {
  switch (path) {
  case PATH_AVX2: return zrt_isa_supported(ZRT_ISA_AVX2);
  case PATH_AVX512_BF16: return zrt_isa_supported(ZRT_ISA_AVX512) && zrt_isa_has_avx512bf16();
  case PATH_AVX512_SHIFT: return zrt_isa_supported(ZRT_ISA_AVX512);
  default: return 1;
  }
}

static void run_path(int path, const zrt_optim_hparams *hp, float *m, float *s1, float *s2,
                     const void *g, zrt_dtype gdt, void *p16, zrt_dtype pdt, size_t n) {
  zrt_optim_consts c;
  zrt_optim_consts_init(hp, &c);
  switch (path) {
  case PATH_SCALAR_MT:
    ZT_OK(zrt_cpu_optim_step_isa(ZRT_ISA_SCALAR, hp, m, s1, s2, g, gdt, p16, pdt, n));
    break;
  case PATH_AVX2:
    /* through the threaded entry point too, so tiling is covered */
    ZT_OK(zrt_cpu_optim_step_isa(ZRT_ISA_AVX2, hp, m, s1, s2, g, gdt, p16, pdt, n));
    break;
  case PATH_AVX512_BF16:
    ZT_OK(zrt_cpu_optim_step_isa(ZRT_ISA_AVX512, hp, m, s1, s2, g, gdt, p16, pdt, n));
    break;
  default: zrt_cpu_optim_range_avx512(&c, m, s1, s2, g, gdt, p16, pdt, n, 0); break;
  }
}

static int64_t worst_master = 0, worst_p16 = 0;

static void one_case(int path, zrt_optim_hparams hp, zrt_dtype gdt, int pdt_or_none, size_t n) {
  size_t gsz = zrt_dtype_size(gdt);
  zrt_dtype pdt = pdt_or_none < 0 ? ZRT_BF16 : (zrt_dtype)pdt_or_none;
  float *m[2], *a[2], *b[2];
  void *p[2];
  void *g = malloc(n * gsz);
  for (int k = 0; k < 2; k++) {
    m[k] = malloc(n * 4);
    a[k] = malloc(n * 4);
    b[k] = malloc(n * 4);
    p[k] = pdt_or_none < 0 ? NULL : calloc(n, 4);
  }
  for (size_t i = 0; i < n; i++) {
    float x = frand();
    /* a few special masters: denormal (bf16 instruction flushes them), zero */
    if (i % 97 == 3) x = 3.0e-39f * (x < 0 ? -1.0f : 1.0f);
    if (i % 89 == 5) x = 0.0f;
    m[0][i] = m[1][i] = x;
    a[0][i] = a[1][i] = 0.01f * frand();
    b[0][i] = b[1][i] = 1e-4f * fabsf(frand());
  }
  int64_t wm = 0, wp = 0;
  for (int step = 1; step <= 3; step++) {
    hp.step = step;
    for (size_t i = 0; i < n; i++) {
      float x = 8.0f * frand();
      if (i % 53 == 7) x = 0.0f; /* Lion: sign(0) */
      zrt_store_f(g, gdt, i, x);
    }
    zrt_cpu_optim_step_scalar(&hp, m[0], a[0], b[0], g, gdt, p[0], pdt, n);
    run_path(path, &hp, m[1], hp.type == ZRT_OPTIM_SGD && hp.momentum == 0.0f ? NULL : a[1], b[1],
             g, gdt, p[1], pdt, n);
    for (size_t i = 0; i < n; i++) {
      wm = ZRT_MAX(wm, ulp_dist(m[0][i], m[1][i]));
      wm = ZRT_MAX(wm, ulp_dist(a[0][i], a[1][i]));
      if (hp.type <= ZRT_OPTIM_ADAMW) wm = ZRT_MAX(wm, ulp_dist(b[0][i], b[1][i]));
      if (p[0]) {
        if (pdt == ZRT_F32)
          wp = ZRT_MAX(wp, ulp_dist(((float *)p[0])[i], ((float *)p[1])[i]));
        else
          wp = ZRT_MAX(wp, ulp16(((uint16_t *)p[0])[i], ((uint16_t *)p[1])[i], pdt));
      }
    }
  }
  if (wm > 2 || wp > 1) {
    fprintf(stderr,
            "FAIL %s type=%d grad=%s param=%s n=%zu: master/state %lld ulp (bound 2), param16 "
            "%lld ulp (bound 1)\n",
            path_name[path], (int)hp.type, zrt_dtype_name(gdt),
            pdt_or_none < 0 ? "none" : zrt_dtype_name(pdt), n, (long long)wm, (long long)wp);
    zt_failures++;
  }
  worst_master = ZRT_MAX(worst_master, wm);
  worst_p16 = ZRT_MAX(worst_p16, wp);
  free(g);
  for (int k = 0; k < 2; k++) {
    free(m[k]);
    free(a[k]);
    free(b[k]);
    free(p[k]);
  }
}

static void test_paths(void) {
  static const size_t lens[] = {1, 7, 15, 16, 17, 31, 33, 1000, 16384 + 5, 3 * 16384 + 13};
  zrt_optim_hparams base = {.lr = 1e-3f,
                            .beta1 = 0.9f,
                            .beta2 = 0.999f,
                            .eps = 1e-8f,
                            .weight_decay = 0.01f,
                            .momentum = 0.9f,
                            .bias_correction = 1,
                            .step = 1,
                            .grad_mul = 0.5f};
  for (int path = 0; path < NPATH; path++) {
    if (!path_ok(path)) {
      printf("path %s: not supported by this CPU, skipped\n", path_name[path]);
      continue;
    }
    worst_master = worst_p16 = 0;
    int cases = 0;
    for (int t = 0; t < 6; t++) {
      zrt_optim_hparams hp = base;
      hp.type = t < 4 ? (zrt_optim_type)t : t == 4 ? ZRT_OPTIM_SGD : ZRT_OPTIM_ADAMW;
      if (t == 4) hp.momentum = 0.0f; /* plain SGD, no state */
      /* lr 0 keeps the denormal masters denormal, so the bf16 cast of a
       * denormal (which vcvtneps2bf16 would flush) is exercised */
      if (t == 5) hp.lr = 0.0f;
      if (hp.type == ZRT_OPTIM_LION) hp.beta2 = 0.99f;
      for (int gdt = 0; gdt < 3; gdt++)
        for (int pdt = -1; pdt < 3; pdt++)
          for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
            one_case(path, hp, (zrt_dtype)gdt, pdt, lens[li]);
            cases++;
          }
    }
    printf("path %-16s %4d cases: max ulp master/m/v %lld (bound 2), param16 %lld (bound 1)\n",
           path_name[path], cases, (long long)worst_master, (long long)worst_p16);
  }
}

static void test_sumsq(void) {
  size_t n = 3 * 16384 + 77;
  for (int gdt = 0; gdt < 3; gdt++) {
    size_t gsz = zrt_dtype_size((zrt_dtype)gdt);
    void *g = malloc(n * gsz);
    double ref = 0;
    for (size_t i = 0; i < n; i++) {
      zrt_store_f(g, (zrt_dtype)gdt, i, 100.0f * frand());
      double x = (double)zrt_load_f(g, (zrt_dtype)gdt, i) * 0.25f;
      ref += x * x;
    }
    for (int isa = 0; isa < 3; isa++) {
      if (!zrt_isa_supported((zrt_isa)isa)) continue;
      for (size_t len = 1; len <= n; len = len < 40 ? len + 13 : len == 40 ? n : n + 1) {
        /* ranges with tails, direct */
        double s = 0, r = 0;
        int nf = 0;
        for (size_t i = 0; i < len; i++) {
          double x = (double)zrt_load_f(g, (zrt_dtype)gdt, i) * 0.25f;
          r += x * x;
        }
        if (isa == ZRT_ISA_AVX512)
          zrt_cpu_sumsq_range_avx512(g, (zrt_dtype)gdt, len, 0.25f, &s, &nf);
        else if (isa == ZRT_ISA_AVX2)
          zrt_cpu_sumsq_range_avx2(g, (zrt_dtype)gdt, len, 0.25f, &s, &nf);
        else
          s = r;
        ZT_CHECK(fabs(s - r) <= 1e-12 * r);
        ZT_CHECK(nf == 0);
      }
    }
    double s = 0;
    int nf = 0;
    zrt_cpu_sumsq_check(g, (zrt_dtype)gdt, n, 0.25f, &s, &nf);
    printf("sumsq %s (%s): rel diff %.3g (tolerance 1e-12)\n", zrt_dtype_name((zrt_dtype)gdt),
           zrt_isa_name(zrt_isa_best()), fabs(s - ref) / ref);
    ZT_CHECK(fabs(s - ref) <= 1e-12 * ref);
    ZT_CHECK(nf == 0);
    /* one non-finite anywhere, including the tail, is seen */
    size_t where[] = {0, 16384 + 3, n - 1};
    float bad[] = {INFINITY, -INFINITY, NAN};
    for (int w = 0; w < 3; w++)
      for (int k = 0; k < 3; k++) {
        void *h = malloc(n * gsz);
        memcpy(h, g, n * gsz);
        zrt_store_f(h, (zrt_dtype)gdt, where[w], bad[k]);
        double s2 = 0;
        int nf2 = 0;
        zrt_cpu_sumsq_check(h, (zrt_dtype)gdt, n, 1.0f, &s2, &nf2);
        ZT_CHECK(nf2 == 1);
        free(h);
      }
    free(g);
  }
}

/* bf16 masters / states (bf16.bf16_master_weights_and_grads,
 * bf16_optimizer_states): every ISA through zrt_cpu_optim_step_lp_isa
 * against the reference written out: widen the bf16 arrays, the scalar
 * step, narrow with round-to-nearest-even (zrt_store_f). Bound: 0 ulp in
 * every array (the lp step is those same operations); the bf16 param equals
 * the new bf16 master bit for bit. Over 3 steps, lengths across the block
 * (1024) and tile (16384) edges. */
static void test_lp(void) {
  static const size_t lens[] = {1, 7, 1000, 1024, 1025, 16384 + 5, 3 * 16384 + 13};
  static const zrt_isa isas[] = {ZRT_ISA_SCALAR, ZRT_ISA_AVX2, ZRT_ISA_AVX512};
  long long diffs = 0, cases = 0;
  for (size_t ii = 0; ii < 3; ii++) {
    if (!zrt_isa_supported(isas[ii])) {
      printf("lp path %s: not supported by this CPU, skipped\n", zrt_isa_name(isas[ii]));
      continue;
    }
    for (int sdti = 0; sdti < 2; sdti++)
      for (int t = ZRT_OPTIM_ADAM; t <= ZRT_OPTIM_ADAMW; t++)
        for (int gdt = 0; gdt < 3; gdt += 2) /* fp32 grads, bf16 grads */
          for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
            size_t n = lens[li];
            zrt_dtype sdt = sdti ? ZRT_BF16 : ZRT_F32;
            size_t ssz = zrt_dtype_size(sdt), gsz = zrt_dtype_size((zrt_dtype)gdt);
            uint16_t *m = malloc(n * 2), *p16 = malloc(n * 2);
            void *a = malloc(n * ssz), *b = malloc(n * ssz), *g = malloc(n * gsz);
            float *rm = malloc(n * 4), *ra = malloc(n * 4), *rb = malloc(n * 4);
            uint16_t *rm16 = malloc(n * 2);
            unsigned char *ra_s = malloc(n * ssz), *rb_s = malloc(n * ssz);
            ZT_CHECK(m && p16 && a && b && g && rm && ra && rb && rm16 && ra_s && rb_s);
            for (size_t i = 0; i < n; i++) {
              zrt_store_f(m, ZRT_BF16, i, frand());
              zrt_store_f(a, sdt, i, 0.1f * frand());
              zrt_store_f(b, sdt, i, 0.01f * (frand() + 1.0f));
            }
            memcpy(rm16, m, n * 2);
            memcpy(ra_s, a, n * ssz);
            memcpy(rb_s, b, n * ssz);
            zrt_optim_hparams hp = {.type = (zrt_optim_type)t,
                                    .lr = 1e-2f,
                                    .beta1 = 0.9f,
                                    .beta2 = 0.999f,
                                    .eps = 1e-8f,
                                    .weight_decay = 0.01f,
                                    .bias_correction = 1,
                                    .grad_mul = 0.5f};
            for (int step = 1; step <= 3; step++) {
              hp.step = step;
              for (size_t i = 0; i < n; i++) zrt_store_f(g, (zrt_dtype)gdt, i, frand());
              ZT_OK(zrt_cpu_optim_step_lp_isa(isas[ii], &hp, m, ZRT_BF16, a, b, sdt, g,
                                              (zrt_dtype)gdt, p16, ZRT_BF16, n));
              for (size_t i = 0; i < n; i++) {
                rm[i] = zrt_bf16_to_f32(rm16[i]);
                ra[i] = zrt_load_f(ra_s, sdt, i);
                rb[i] = zrt_load_f(rb_s, sdt, i);
              }
              zrt_cpu_optim_step_scalar(&hp, rm, ra, rb, g, (zrt_dtype)gdt, NULL, ZRT_F32, n);
              for (size_t i = 0; i < n; i++) {
                zrt_store_f(rm16, ZRT_BF16, i, rm[i]);
                zrt_store_f(ra_s, sdt, i, ra[i]);
                zrt_store_f(rb_s, sdt, i, rb[i]);
              }
              for (size_t i = 0; i < n; i++) diffs += m[i] != rm16[i] || p16[i] != m[i];
              diffs += memcmp(a, ra_s, n * ssz) != 0;
              diffs += memcmp(b, rb_s, n * ssz) != 0;
              cases++;
            }
            free(m), free(p16), free(a), free(b), free(g), free(rm), free(ra), free(rb);
            free(rm16), free(ra_s), free(rb_s);
          }
  }
  printf("lp (bf16 master, fp32|bf16 states) %lld step cases: %lld elements or arrays differ "
         "from the widen/scalar/round reference (bound 0)\n",
         cases, diffs);
  ZT_CHECK(cases > 0 && diffs == 0);

  /* fp32/fp32 through the lp entry is the fp32 path, bit for bit */
  {
    size_t n = 3 * 16384 + 13;
    float *m0 = malloc(n * 4), *m1 = malloc(n * 4), *s[4], *g = malloc(n * 4);
    for (int k = 0; k < 4; k++) s[k] = calloc(n, 4);
    ZT_CHECK(m0 && m1 && g && s[0] && s[1] && s[2] && s[3]);
    for (size_t i = 0; i < n; i++) m0[i] = m1[i] = frand(), g[i] = frand();
    zrt_optim_hparams hp = zt_adam_step1(ZRT_OPTIM_ADAMW, 1e-3f);
    ZT_OK(zrt_cpu_optim_step(&hp, m0, s[0], s[1], g, ZRT_F32, NULL, ZRT_BF16, n));
    ZT_OK(zrt_cpu_optim_step_lp(&hp, m1, ZRT_F32, s[2], s[3], ZRT_F32, g, ZRT_F32, NULL, ZRT_BF16,
                                n));
    ZT_CHECK(!memcmp(m0, m1, n * 4) && !memcmp(s[0], s[2], n * 4) && !memcmp(s[1], s[3], n * 4));
    free(m0), free(m1), free(g);
    for (int k = 0; k < 4; k++) free(s[k]);
  }

  /* the bf16 gradient partition's accumulation: fp32 add, one rounding */
  {
    size_t n = 2 * 16384 + 77;
    uint16_t *d = malloc(n * 2), *ref = malloc(n * 2), *src = malloc(n * 2);
    ZT_CHECK(d && ref && src);
    for (size_t i = 0; i < n; i++) {
      zrt_store_f(d, ZRT_BF16, i, frand());
      zrt_store_f(src, ZRT_BF16, i, frand());
      ref[i] = d[i];
    }
    zrt_cpu_grad_accumulate_to(d, ZRT_BF16, src, ZRT_BF16, n);
    long long bad = 0;
    for (size_t i = 0; i < n; i++) {
      zrt_store_f(ref, ZRT_BF16, i, zrt_bf16_to_f32(ref[i]) + zrt_bf16_to_f32(src[i]));
      bad += d[i] != ref[i];
    }
    printf("bf16 gradient accumulation: %lld of %zu elements differ from round(a + b)\n", bad, n);
    ZT_CHECK(bad == 0);
    free(d), free(ref), free(src);
  }

  float mm[4] = {0}, gg[4] = {0};
  zrt_optim_hparams hp = {.type = ZRT_OPTIM_ADAMW, .lr = 1e-3f, .step = 1, .grad_mul = 1.0f};
  ZT_CHECK(zrt_cpu_optim_step_lp(&hp, mm, ZRT_F16, mm, mm, ZRT_F32, gg, ZRT_F32, NULL, ZRT_BF16,
                                 4) == ZRT_ERR_INVALID_ARG);
  ZT_CONTAINS(zrt_last_error(), "is not fp32 or bf16");
}

static void test_errors(void) {
  float m[4] = {0}, g[4] = {0};
  zrt_optim_hparams hp = {.type = ZRT_OPTIM_ADAMW,
                          .lr = 1e-3f,
                          .beta1 = 0.9f,
                          .beta2 = 0.999f,
                          .eps = 1e-8f,
                          .step = 1,
                          .grad_mul = 1.0f};
  zrt_status st = zrt_cpu_optim_step(&hp, m, NULL, NULL, g, ZRT_F32, NULL, ZRT_BF16, 4);
  ZT_CHECK(st == ZRT_ERR_INVALID_ARG);
  ZT_CONTAINS(zrt_last_error(), "s1 (m / momentum)");
  hp.type = (zrt_optim_type)42;
  st = zrt_cpu_optim_step(&hp, m, m, m, g, ZRT_F32, NULL, ZRT_BF16, 4);
  ZT_CHECK(st == ZRT_ERR_INVALID_ARG);
  ZT_CONTAINS(zrt_last_error(), "unknown optimizer type 42");
}

int main(void) {
  /* the override is read once, on first use */
  setenv("ZRT_CPU_ISA", "avx2", 1);
  if (zrt_isa_supported(ZRT_ISA_AVX2)) ZT_CHECK(zrt_isa_best() == ZRT_ISA_AVX2);
  printf("cpu: avx2 %d avx512 %d avx512bf16 %d\n", zrt_isa_supported(ZRT_ISA_AVX2),
         zrt_isa_supported(ZRT_ISA_AVX512), zrt_isa_has_avx512bf16());
  test_paths();
  test_sumsq();
  test_lp();
  test_errors();
  ZT_DONE();
}
