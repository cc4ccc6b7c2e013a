/*
 * test_dtype.c — the host conversions of amp/dtype.h, the reference every
 * backend's convert is held to, checked against an independent reference
 * built from exact (double) arithmetic: the rounded value must be the
 * representable neighbour nearest to x, ties going to the even mantissa,
 * with IEEE overflow (a value at or past max + half an ulp becomes Inf).
 *
 * Coverage: every fp16 and every bf16 bit pattern widened; every fp16
 * value, every midpoint between neighbours and the floats either side of
 * it narrowed; for bf16 the round-off bits 0x0000/0x7fff/0x8000/0x8001/
 * 0xffff under every upper half plus a strided sweep of all floats;
 * hand-picked edges (±0, subnormals, max finite, overflow, NaN payloads).
 * Tolerance: exact (bit equality; NaN compared as "is NaN, quiet, sign").
 *
 * Bulk paths (test_bulk, test_half_reduce): every vector kernel this CPU
 * runs (AVX2 + F16C; AVX-512 with and without the AVX512_BF16
 * instruction) and the dispatching
 * zrt_dtype_convert_host / zrt_half_reduce must give the scalar
 * reference's bits exactly — NaN payloads, ±Inf, fp32 and 16-bit
 * denormals, round-to-nearest-even ties of both types, overflow — at every
 * length 0..40 (tails) and on 2^16+ element sweeps, nothing written past
 * n; narrowing also in place. Tolerance: bit equality (memcmp).
 */
#include <math.h>
#include <stdint.h>

#include "cpu_optim.h"
#include "cpu_optim_internal.h"
#include "dtype.h"
#include "dtype_kernels.h"
#include "ztest.h"

static long n_checked;

/* Exact value of an fp16 pattern (finite). */
static double f16_value(uint16_t h) {
  int e = (h >> 10) & 0x1f, m = h & 0x3ff;
  double v = e ? ldexp(1024 + m, e - 25) : ldexp(m, -24);
  return (h & 0x8000) ? -v : v;
}

/* Reference fp32 -> fp16: pick the nearest of the two neighbours by exact
 * distance; 0x7c00 (Inf) stands for 2^16 when rounding, as IEEE's
 * unbounded-exponent rule says. */
static uint16_t ref_f32_to_f16(float x) {
  uint32_t u = zrt_f32_to_bits(x);
  uint16_t sign = (u >> 31) ? 0x8000 : 0;
  if (isnan(x)) return 0; /* not used: NaNs are checked separately */
  double a = fabs((double)x);
  if (isinf(x)) return sign | 0x7c00;
  /* largest magnitude pattern lo with value <= a (0..0x7bff), or 0x7c00 */
  uint16_t lo = 0, hi = 0x7c00;
  while (hi - lo > 1) { /* binary search over ordered magnitudes */
    uint16_t mid = (uint16_t)((lo + hi) / 2);
    if (f16_value(mid) <= a)
      lo = mid;
    else
      hi = mid;
  }
  if (f16_value(lo) == a) return sign | lo;
  double vhi = lo == 0x7bff ? 65536.0 : f16_value((uint16_t)(lo + 1));
  double dlo = a - f16_value(lo), dhi = vhi - a;
  uint16_t r;
  if (dlo < dhi)
    r = lo;
  else if (dhi < dlo)
    r = (uint16_t)(lo + 1);
  else
    r = (lo & 1) ? (uint16_t)(lo + 1) : lo;
  return sign | r;
}

static uint16_t ref_f32_to_bf16(float x) {
  uint32_t u = zrt_f32_to_bits(x);
  uint32_t sign = u & 0x80000000u, mag = u & 0x7fffffffu;
  if (mag == 0x7f800000u) return (uint16_t)((sign | mag) >> 16);
  uint32_t lo = mag & 0xffff0000u;
  if (lo == mag) return (uint16_t)((sign | lo) >> 16);
  double a = (double)zrt_bits_to_f32(mag);
  double vlo = (double)zrt_bits_to_f32(lo);
  double vhi =
      (lo + 0x10000u == 0x7f800000u) ? ldexp(1.0, 128) : (double)zrt_bits_to_f32(lo + 0x10000u);
  uint32_t r;
  if (a - vlo < vhi - a)
    r = lo;
  else if (vhi - a < a - vlo)
    r = lo + 0x10000u;
  else
    r = ((lo >> 16) & 1u) ? lo + 0x10000u : lo;
  return (uint16_t)((sign | r) >> 16);
}

static void check_f16(float x) {
  n_checked++;
  uint16_t got = zrt_f32_to_f16(x);
  if (isnan(x)) {
    /* NaN stays NaN, quiet, sign kept */
    if ((got & 0x7c00) != 0x7c00 || !(got & 0x0200) ||
        ((got >> 15) != (zrt_f32_to_bits(x) >> 31))) {
      fprintf(stderr, "FAIL f32->f16 NaN %08x -> %04x\n", zrt_f32_to_bits(x), got);
      zt_failures++;
    }
    return;
  }
  uint16_t want = ref_f32_to_f16(x);
  if (got != want) {
    if (zt_failures < 20)
      fprintf(stderr, "FAIL f32->f16 %.9g (%08x): got %04x want %04x\n", x, zrt_f32_to_bits(x), got,
              want);
    zt_failures++;
  }
}

static void check_bf16(float x) {
  n_checked++;
  uint16_t got = zrt_f32_to_bf16(x);
  if (isnan(x)) {
    if ((got & 0x7f80) != 0x7f80 || !(got & 0x0040) ||
        ((got >> 15) != (zrt_f32_to_bits(x) >> 31))) {
      fprintf(stderr, "FAIL f32->bf16 NaN %08x -> %04x\n", zrt_f32_to_bits(x), got);
      zt_failures++;
    }
    return;
  }
  uint16_t want = ref_f32_to_bf16(x);
  if (got != want) {
    if (zt_failures < 20)
      fprintf(stderr, "FAIL f32->bf16 %.9g (%08x): got %04x want %04x\n", x, zrt_f32_to_bits(x),
              got, want);
    zt_failures++;
  }
}

static void test_widen(void) {
  for (uint32_t h = 0; h < 65536; h++) {
    float f = zrt_f16_to_f32((uint16_t)h);
    int e = (h >> 10) & 0x1f;
    if (e == 31) {
      if (h & 0x3ff) {
        ZT_CHECK(isnan(f));
        /* payload kept: narrowing back gives the same pattern (quiet bit set) */
        ZT_CHECK(zrt_f32_to_f16(f) == (uint16_t)(h | 0x200));
      } else {
        ZT_CHECK(isinf(f) && ((h & 0x8000) ? f < 0 : f > 0));
      }
      continue;
    }
    if ((double)f != f16_value((uint16_t)h)) {
      fprintf(stderr, "FAIL f16->f32 %04x: %.9g want %.9g\n", h, f, f16_value((uint16_t)h));
      zt_failures++;
    }
    /* signed zero survives */
    if ((h & 0x7fff) == 0) ZT_CHECK(!!signbit(f) == !!(h & 0x8000));
    /* exact round trip */
    if (zrt_f32_to_f16(f) != h) {
      fprintf(stderr, "FAIL f16 round trip %04x -> %04x\n", h, zrt_f32_to_f16(f));
      zt_failures++;
    }
  }
  for (uint32_t h = 0; h < 65536; h++) {
    float f = zrt_bf16_to_f32((uint16_t)h);
    ZT_CHECK(zrt_f32_to_bits(f) == h << 16);
    if (!isnan(f)) ZT_CHECK(zrt_f32_to_bf16(f) == h);
  }
  printf("widen: all 65536 fp16 and bf16 patterns exact\n");
}

static void test_narrow_f16(void) {
  /* every fp16 value, each midpoint to its neighbour and the floats either
   * side of the midpoint (ties and near-ties, including the subnormal range
   * and the overflow threshold 65520) */
  for (uint32_t h = 0; h < 0x7c00; h++) {
    for (int s = 0; s < 2; s++) {
      double v = f16_value((uint16_t)h);
      double next = h == 0x7bff ? 65536.0 : f16_value((uint16_t)(h + 1));
      float mid = (float)((v + next) / 2); /* exact in fp32 */
      float x[] = {(float)v, mid, nextafterf(mid, 0.0f), nextafterf(mid, INFINITY)};
      for (int i = 0; i < 4; i++) check_f16(s ? -x[i] : x[i]);
    }
  }
  /* strided sweep of all float patterns */
  for (uint64_t u = 0; u < 0x100000000ull; u += 4099) check_f16(zrt_bits_to_f32((uint32_t)u));
  printf("f32->f16: %ld values checked against the exact reference\n", n_checked);
}

static void test_narrow_bf16(void) {
  long before = n_checked;
  static const uint32_t lows[] = {0x0000, 0x0001, 0x7fff, 0x8000, 0x8001, 0xffff, 0x4000, 0xc000};
  for (uint32_t hi = 0; hi < 65536; hi++)
    for (size_t i = 0; i < sizeof lows / sizeof lows[0]; i++)
      check_bf16(zrt_bits_to_f32((hi << 16) | lows[i]));
  for (uint64_t u = 0; u < 0x100000000ull; u += 4093) check_bf16(zrt_bits_to_f32((uint32_t)u));
  printf("f32->bf16: %ld values checked against the exact reference\n", n_checked - before);
}

static void test_edges(void) {
  /* hand-picked: the value, the fp16 and bf16 patterns IEEE RNE gives */
  struct {
    float x;
    uint16_t h, b;
  } e[] = {
      {0.0f, 0x0000, 0x0000},
      {-0.0f, 0x8000, 0x8000},
      {1.0f, 0x3c00, 0x3f80},
      {-2.0f, 0xc000, 0xc000},
      {65504.0f, 0x7bff, 0x4780},   /* fp16 max finite */
      {65519.996f, 0x7bff, 0x4780}, /* just below the fp16 overflow threshold */
      {65520.0f, 0x7c00, 0x4780},   /* tie at max + half ulp: even is Inf */
      {1e6f, 0x7c00, 0x4974},       /* fp16 overflow */
      {-1e6f, 0xfc00, 0xc974},
      {INFINITY, 0x7c00, 0x7f80},
      {-INFINITY, 0xfc00, 0xff80},
      {5.9604644775390625e-8f, 0x0001, 0x3380},  /* smallest fp16 subnormal */
      {2.98023223876953125e-8f, 0x0000, 0x3300}, /* half of it: tie to even = 0 */
      {2.98023259e-8f, 0x0001, 0x3300},          /* just above the tie */
      {8.940696716308594e-8f, 0x0002, 0x33c0},   /* 1.5 * min subnormal: tie to even = 2 */
      {6.097555160522461e-5f, 0x03ff, 0x3880},   /* largest fp16 subnormal */
      {6.103515625e-5f, 0x0400, 0x3880},         /* smallest fp16 normal */
      {1.00048828125f, 0x3c00, 0x3f80},          /* 1 + 2^-11: fp16 tie to even (down) */
      {1.00146484375f, 0x3c02, 0x3f80},          /* 1 + 3*2^-11: fp16 tie to even (up) */
      {1.00390625f, 0x3c04, 0x3f80},             /* 1 + 2^-8: bf16 tie to even (down) */
      {1.01171875f, 0x3c0c, 0x3f82},             /* 1 + 3*2^-8: bf16 tie to even (up) */
      {3.3895314e38f, 0x7c00, 0x7f7f},           /* bf16 max finite */
      {3.4028235e38f, 0x7c00, 0x7f80},           /* fp32 max: bf16 rounds to Inf */
      {1e-45f, 0x0000, 0x0000},                  /* fp32 subnormal min: bf16 keeps 0 */
      {9.18355e-41f, 0x0000, 0x0001},            /* bf16 subnormal 0x0001 */
  };
  for (size_t i = 0; i < sizeof e / sizeof e[0]; i++) {
    uint16_t h = zrt_f32_to_f16(e[i].x), b = zrt_f32_to_bf16(e[i].x);
    if (h != e[i].h || b != e[i].b) {
      fprintf(stderr, "FAIL edge %.9g: fp16 %04x (want %04x) bf16 %04x (want %04x)\n", e[i].x, h,
              e[i].h, b, e[i].b);
      zt_failures++;
    }
    /* the independent reference agrees with the hand-picked value */
    ZT_CHECK(ref_f32_to_f16(e[i].x) == e[i].h);
    ZT_CHECK(ref_f32_to_bf16(e[i].x) == e[i].b);
  }
  /* NaN: quiet, sign and top payload bits kept */
  float qnan = zrt_bits_to_f32(0x7fc00000u), snan = zrt_bits_to_f32(0x7f800001u);
  float nnan = zrt_bits_to_f32(0xffd23456u);
  ZT_CHECK(zrt_f32_to_f16(qnan) == 0x7e00);
  ZT_CHECK(zrt_f32_to_bf16(qnan) == 0x7fc0);
  ZT_CHECK(isnan(zrt_f16_to_f32(zrt_f32_to_f16(snan)))); /* low payload must not become Inf */
  ZT_CHECK(isnan(zrt_bf16_to_f32(zrt_f32_to_bf16(snan))));
  ZT_CHECK(zrt_f32_to_bf16(nnan) == 0xffd2);
  ZT_CHECK(zrt_f32_to_f16(nnan) == (0xfe00 | (0x523456u >> 13)));
  printf("edges: %zu hand-picked values + NaNs\n", sizeof e / sizeof e[0]);
}

static void test_load_store(void) {
  float f32[3] = {0};
  uint16_t h[3] = {0}, b[3] = {0};
  const float v[3] = {1.5f, -0.333333343f, 1e5f};
  for (size_t i = 0; i < 3; i++) {
    zrt_store_f(f32, ZRT_F32, i, v[i]);
    zrt_store_f(h, ZRT_F16, i, v[i]);
    zrt_store_f(b, ZRT_BF16, i, v[i]);
    ZT_CHECK(zrt_load_f(f32, ZRT_F32, i) == v[i]);
    ZT_CHECK(zrt_load_f(h, ZRT_F16, i) == zrt_f16_to_f32(zrt_f32_to_f16(v[i])));
    ZT_CHECK(zrt_load_f(b, ZRT_BF16, i) == zrt_bf16_to_f32(zrt_f32_to_bf16(v[i])));
  }
  ZT_CHECK(isinf(zrt_load_f(h, ZRT_F16, 2)));
  ZT_CHECK(zrt_dtype_size(ZRT_F32) == 4 && zrt_dtype_size(ZRT_F16) == 2 &&
           zrt_dtype_size(ZRT_BF16) == 2);
  ZT_CHECK(!strcmp(zrt_dtype_name(ZRT_F32), "fp32") && !strcmp(zrt_dtype_name(ZRT_F16), "fp16") &&
           !strcmp(zrt_dtype_name(ZRT_BF16), "bf16"));
}

/* fp32 inputs for the bulk checks: edges, then a strided sweep of all bit
 * patterns. */
static size_t bulk_inputs(float *x, size_t cap) {
  static const uint32_t edge[] = {
      0x00000000u, 0x80000000u, 0x00000001u, 0x80000001u, 0x007fffffu, 0x00400000u, 0x807fffffu,
      0x00800000u, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0x7f800001u, 0xffd23456u, 0x7fbfffffu,
      0x7f7fffffu, 0xff7fffffu, 0x7f7f8000u, 0x7f7f7fffu, 0x3f808000u, 0x3f818000u, 0x3f808001u,
      0x3f80ffffu, 0xbf808000u, 0xbf818000u, 0x3f801000u, 0x3f803000u, 0x3f801001u, 0x477ff000u,
      0x477fefffu, 0x477fe000u, 0x33000000u, 0x33000001u, 0x33c00000u, 0x387fc000u, 0x38800000u,
      0x337fffffu, 0x477fffffu, 0x47800000u, 0xc77ff000u, 0x00010000u, 0x00018000u, 0x00008000u};
  size_t n = 0;
  for (size_t i = 0; i < sizeof edge / sizeof edge[0] && n < cap; i++)
    x[n++] = zrt_bits_to_f32(edge[i]);
  for (uint64_t u = 0; u <= 0xffffffffu && n < cap; u += 65521)
    x[n++] = zrt_bits_to_f32((uint32_t)u);
  for (uint32_t i = 0; n < cap; i++) x[n++] = zrt_bits_to_f32(i * 2654435761u ^ (i >> 3));
  return n;
}

static void expect_same(const char *what, const void *got, const void *want, size_t bytes,
                        size_t n) {
  if (memcmp(got, want, bytes) != 0) {
    size_t es = bytes / (n ? n : 1), i = 0;
    while (i < n && !memcmp((const char *)got + i * es, (const char *)want + i * es, es)) i++;
    fprintf(stderr, "FAIL %s: first differing element %zu of %zu\n", what, i, n);
    zt_failures++;
  }
}

/* The vector kernels this CPU runs: 0 AVX2, 1 AVX-512, 2 AVX-512 with the
 * AVX512_BF16 instructions. */
enum { VK_AVX2, VK_AVX512, VK_AVX512_INSN, VK_COUNT };
static const char *const vk_name[VK_COUNT] = {"avx2", "avx512", "avx512+bf16insn"};

static int vk_can(int k) {
  switch (k) {
  case VK_AVX2: return zrt_isa_supported(ZRT_ISA_AVX2);
  case VK_AVX512: return zrt_isa_supported(ZRT_ISA_AVX512);
  default: return zrt_isa_supported(ZRT_ISA_AVX512) && zrt_isa_has_avx512bf16();
  }
}

static void vk_narrow(int k, uint16_t *dst, const float *src, zrt_dtype dt, size_t n) {
  if (k == VK_AVX2)
    zrt_dtype_narrow_avx2(dst, src, dt, n);
  else
    zrt_dtype_narrow_avx512(dst, src, dt, n, k == VK_AVX512_INSN);
}

static void vk_widen(int k, float *dst, const uint16_t *src, zrt_dtype dt, size_t n) {
  if (k == VK_AVX2)
    zrt_dtype_widen_avx2(dst, src, dt, n);
  else
    zrt_dtype_widen_avx512(dst, src, dt, n);
}

static void vk_reduce(int k, uint16_t *inout, const uint16_t *in, zrt_dtype dt, size_t n,
                      zrt_half_op op) {
  if (k == VK_AVX2)
    zrt_half_reduce_avx2(inout, in, dt, n, op);
  else
    zrt_half_reduce_avx512(inout, in, dt, n, op, k == VK_AVX512_INSN);
}

/* "avx2, avx512" etc.: the kernels a test ran */
static const char *vk_list(void) {
  static char buf[64];
  buf[0] = 0;
  for (int k = 0; k < VK_COUNT; k++)
    if (vk_can(k))
      snprintf(buf + strlen(buf), sizeof buf - strlen(buf), "%s%s", *buf ? ", " : "", vk_name[k]);
  return *buf ? buf : "no vector kernel on this CPU: dispatch only";
}

static void test_bulk(void) {
  enum { CAP = 70000 };
  static float x[CAP], wide_ref[65536], wide_got[65536 + 1], f[CAP];
  static uint16_t ref[CAP], got[CAP + 1], h[65536];
  size_t n = bulk_inputs(x, CAP);
  const zrt_dtype dts[2] = {ZRT_F16, ZRT_BF16};
  long cases = 0;
  for (int d = 0; d < 2; d++) {
    zrt_dtype dt = dts[d];
    char what[96];
    /* narrow: every tail length, then the whole sweep */
    for (size_t len = 0; len <= 41; len++) {
      size_t m = len == 41 ? n : len;
      zrt_dtype_convert_scalar(ref, dt, x, ZRT_F32, m);
      memset(got, 0xab, sizeof got);
      zrt_dtype_convert_host(got, dt, x, ZRT_F32, m);
      snprintf(what, sizeof what, "convert_host f32->%s n=%zu", zrt_dtype_name(dt), m);
      expect_same(what, got, ref, m * 2, m);
      ZT_CHECK(got[m] == 0xabab); /* nothing past n written */
      for (int k = 0; k < VK_COUNT; k++) {
        if (!vk_can(k)) continue;
        memset(got, 0xab, sizeof got);
        vk_narrow(k, got, x, dt, m);
        snprintf(what, sizeof what, "narrow %s %s n=%zu", vk_name[k], zrt_dtype_name(dt), m);
        expect_same(what, got, ref, m * 2, m);
        ZT_CHECK(got[m] == 0xabab);
        /* in place: the fp32 buffer becomes the 16-bit one */
        memcpy(f, x, m * sizeof(float));
        vk_narrow(k, (uint16_t *)f, f, dt, m);
        snprintf(what, sizeof what, "narrow %s in place %s n=%zu", vk_name[k], zrt_dtype_name(dt),
                 m);
        expect_same(what, f, ref, m * 2, m);
        cases += 2 * (long)m;
      }
    }
    /* widen: every 16-bit pattern */
    for (uint32_t i = 0; i < 65536; i++) h[i] = (uint16_t)i;
    zrt_dtype_convert_scalar(wide_ref, ZRT_F32, h, dt, 65536);
    zrt_dtype_convert_host(wide_got, ZRT_F32, h, dt, 65536);
    snprintf(what, sizeof what, "convert_host %s->f32", zrt_dtype_name(dt));
    expect_same(what, wide_got, wide_ref, sizeof wide_ref, 65536);
    for (int k = 0; k < VK_AVX512_INSN; k++) {
      if (!vk_can(k)) continue;
      for (size_t len = 0; len <= 40; len++) {
        memset(wide_got, 0xab, sizeof wide_got);
        vk_widen(k, wide_got, h + 65536 - 40, dt, len);
        snprintf(what, sizeof what, "widen %s %s n=%zu", vk_name[k], zrt_dtype_name(dt), len);
        expect_same(what, wide_got, wide_ref + 65536 - 40, len * 4, len);
        ZT_CHECK(zrt_f32_to_bits(wide_got[len]) == 0xababababu);
      }
      vk_widen(k, wide_got, h, dt, 65536);
      snprintf(what, sizeof what, "widen %s %s all patterns", vk_name[k], zrt_dtype_name(dt));
      expect_same(what, wide_got, wide_ref, sizeof wide_ref, 65536);
      cases += 65536;
    }
    /* fp16 <-> bf16 through the bulk path */
    zrt_dtype convert_to = dt == ZRT_F16 ? ZRT_BF16 : ZRT_F16;
    zrt_dtype_convert_scalar(ref, convert_to, h, dt, 65536);
    zrt_dtype_convert_host(got, convert_to, h, dt, 65536);
    snprintf(what, sizeof what, "convert_host %s->%s", zrt_dtype_name(dt),
             zrt_dtype_name(convert_to));
    expect_same(what, got, ref, 65536 * 2, 65536);
    cases += 3 * 65536;
  }
  printf("bulk conversions: %ld elements bitwise vs scalar (dispatch: %s; kernels: %s)\n", cases,
         zrt_isa_name(zrt_isa_best()), vk_list());
}

/* Pairwise reduction: all 2^16 patterns against a scrambled partner, plus
 * pairs whose fp32 sum is a rounding tie, at tail lengths and in full. */
static void test_half_reduce(void) {
  enum { M = 65536 + 64 };
  static uint16_t a[M], b[M], ref[M], got[M + 1];
  const zrt_dtype dts[2] = {ZRT_F16, ZRT_BF16};
  const char *opn[3] = {"sum", "max", "min"};
  long cases = 0;
  for (int d = 0; d < 2; d++) {
    zrt_dtype dt = dts[d];
    for (uint32_t i = 0; i < 65536; i++) {
      a[i] = (uint16_t)i;
      b[i] = (uint16_t)(i * 40503u + 12345u);
    }
    /* ties: 1.0 + (1 ulp / 2) -> a = 1.0, b = half an ulp of 1.0 */
    for (uint32_t i = 65536; i < M; i++) {
      a[i] = dt == ZRT_F16 ? (uint16_t)(0x3c00 + (i & 7)) : (uint16_t)(0x3f80 + (i & 7));
      b[i] = dt == ZRT_F16 ? (uint16_t)0x1000 : (uint16_t)0x3b80; /* 2^-11 / 2^-8 */
    }
    for (int op = 0; op < 3; op++) {
      char what[96];
      for (size_t len = 0; len <= 41; len++) {
        size_t m = len == 41 ? M : len, o = len == 41 ? 0 : 65536 + 3;
        memcpy(ref, a + o, m * 2);
        zrt_half_reduce_scalar(ref, b + o, dt, m, (zrt_half_op)op);
        memcpy(got, a + o, m * 2);
        got[m] = 0xabab;
        zrt_half_reduce(got, b + o, dt, m, (zrt_half_op)op);
        snprintf(what, sizeof what, "half_reduce %s %s n=%zu", opn[op], zrt_dtype_name(dt), m);
        expect_same(what, got, ref, m * 2, m);
        ZT_CHECK(got[m] == 0xabab);
        for (int k = 0; k < VK_COUNT; k++) {
          if (!vk_can(k)) continue;
          memcpy(got, a + o, m * 2);
          got[m] = 0xabab;
          vk_reduce(k, got, b + o, dt, m, (zrt_half_op)op);
          snprintf(what, sizeof what, "half_reduce %s %s %s n=%zu", vk_name[k], opn[op],
                   zrt_dtype_name(dt), m);
          expect_same(what, got, ref, m * 2, m);
          ZT_CHECK(got[m] == 0xabab);
          cases += (long)m;
        }
      }
    }
    /* the scalar reference itself: SUM is one fp32 add rounded once; a
     * NaN operand wins MAX/MIN */
    uint16_t one = dt == ZRT_F16 ? 0x3c00 : 0x3f80, nan = dt == ZRT_F16 ? 0x7e01 : 0x7fc1;
    uint16_t x = one, y = one;
    zrt_half_reduce_scalar(&x, &y, dt, 1, ZRT_HALF_SUM);
    ZT_CHECK((dt == ZRT_F16 ? zrt_f16_to_f32(x) : zrt_bf16_to_f32(x)) == 2.0f);
    x = one, y = nan;
    zrt_half_reduce_scalar(&x, &y, dt, 1, ZRT_HALF_MAX);
    ZT_CHECK(x == nan);
    x = nan, y = one;
    zrt_half_reduce_scalar(&x, &y, dt, 1, ZRT_HALF_MIN);
    ZT_CHECK(x == nan);
  }
  printf("half reduce: %ld pairs bitwise vs scalar (dispatch: %s; kernels: %s)\n", cases,
         zrt_isa_name(zrt_isa_best()), vk_list());
}

int main(void) {
  test_bulk();
  test_half_reduce();
  test_widen();
  test_edges();
  test_narrow_f16();
  test_narrow_bf16();
  test_load_store();
  ZT_DONE();
}
