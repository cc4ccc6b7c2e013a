/*
 * test_shm_kernel.c — the shared-memory comm's AVX-512 SUM kernel
 * (comm/comm_shm_avx512.c) against the scalar reference, bit for bit:
 * every input widened exactly, added in fp32 in rank order, rounded once
 * with amp/dtype_scalar.h's conversions. fp32, fp16 and bf16 (bf16 both
 * with the integer rounding and, where cpuid says avx512_bf16, with
 * vcvtne2ps2bf16), 1 to 5 inputs, lengths 0..100 and 1000 (full vectors
 * and every tail), out unaligned by 0..3 elements, ordinary and
 * non-temporal stores, a second output, and out in place over an input.
 *
 * Data: random bits of the type (NaN, Inf and denormals included), then
 * runs of denormal-sized values, so that some 32-element bf16 steps hold
 * denormal sums (the vcvtne2ps2bf16 path must redo them; a kernel that
 * flushed them to zero would fail here) and most do not. Skipped (77) on
 * a CPU without AVX-512.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm_shm_kernels.h"
#include "cpu_features.h"
#include "dtype.h"
#include "ztest.h"

#define MAXN 5
#define MAXLEN 1000

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint32_t rnd32(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return (uint32_t)(rng_state >> 16);
}

/* Element i of an input: random bits, or (one block of 64 in three) a
 * small value whose sums are denormal in fp32. */
static void fill(void *p, zrt_dtype dt, size_t len) {
  for (size_t i = 0; i < len; i++) {
    int tiny = (i / 64) % 3 == 1;
    uint32_t b = rnd32();
    if (dt == ZRT_F32)
      ((uint32_t *)p)[i] = tiny ? (b & 0x803fffffu) : b;
    else if (dt == ZRT_BF16)
      ((uint16_t *)p)[i] = (uint16_t)(tiny ? (b & 0x807f) : b);
    else
      ((uint16_t *)p)[i] = (uint16_t)(tiny ? (b & 0x83ff) : b);
  }
}

static int same_bits(const void *a, const void *b, zrt_dtype dt, size_t len, size_t *at) {
  size_t es = zrt_dtype_size(dt);
  for (size_t i = 0; i < len; i++) {
    float x = zrt_load_f(a, dt, i), y = zrt_load_f(b, dt, i);
    if (memcmp((const char *)a + i * es, (const char *)b + i * es, es) && !(x != x && y != y)) {
      *at = i;
      return 0;
    }
  }
  return 1;
}

static void reference(void *out, const void *const *in, int n, size_t len, zrt_dtype dt) {
  for (size_t i = 0; i < len; i++) {
    float acc = zrt_load_f(in[0], dt, i);
    for (int r = 1; r < n; r++) acc += zrt_load_f(in[r], dt, i);
    zrt_store_f(out, dt, i, acc);
  }
}

int main(void) {
  if (zrt_isa_best() != ZRT_ISA_AVX512) {
    printf("no AVX-512 on this CPU: skipped\n");
    return 77;
  }
  int has_insn = zrt_isa_has_avx512bf16();
  printf("avx512_bf16: %d\n", !!has_insn);
  static float inbuf[MAXN][MAXLEN + 64] __attribute__((aligned(64)));
  static float outbuf[MAXLEN + 64] __attribute__((aligned(64)));
  static float out2buf[MAXLEN + 64] __attribute__((aligned(64)));
  static float refbuf[MAXLEN + 64];
  const zrt_dtype dts[3] = {ZRT_F32, ZRT_F16, ZRT_BF16};
  long cases = 0, denormal_steps = 0;
  for (int d = 0; d < 3; d++) {
    zrt_dtype dt = dts[d];
    size_t es = zrt_dtype_size(dt);
    for (int insn = 0; insn <= (dt == ZRT_BF16 && has_insn); insn++) {
      for (int n = 1; n <= MAXN; n++) {
        for (size_t len = 0; len <= MAXLEN; len = len < 100 ? len + 1 : len + 900) {
          for (int off = 0; off < 4; off++) {
            for (int mode = 0; mode < 4; mode++) { /* 0 plain, 1 nt, 2 out2, 3 in place */
              const void *in[MAXN];
              for (int r = 0; r < n; r++) {
                fill((char *)inbuf[r] + off * es, dt, len);
                in[r] = (char *)inbuf[r] + off * es;
              }
              reference(refbuf, in, n, len, dt);
              if (dt == ZRT_BF16)
                for (size_t i = 0; i < len; i++) {
                  float v = zrt_load_f(refbuf, dt, i);
                  if (v != 0 && v > -1.1754944e-38f && v < 1.1754944e-38f) denormal_steps++;
                }
              void *out = mode == 3 ? (void *)in[n - 1] : (char *)outbuf + off * es;
              void *out2 = mode == 2 ? (char *)out2buf + off * es : NULL;
              zrt_shm_sum_avx512(out, out2, in, n, len, dt, mode == 1, insn);
              size_t at = 0;
              if (!same_bits(out, refbuf, dt, len, &at) ||
                  (out2 && !same_bits(out2, refbuf, dt, len, &at))) {
                fprintf(stderr,
                        "FAIL dtype %s insn %d n %d len %zu offset %d mode %d: element %zu "
                        "differs from the reference\n",
                        zrt_dtype_name(dt), insn, n, len, off, mode, at);
                zt_failures++;
              }
              cases++;
            }
          }
        }
      }
    }
  }
  printf("%ld cases, %ld denormal bf16 sums\n", cases, denormal_steps);
  ZT_CHECK(denormal_steps > 0);
  return zt_failures ? 1 : 0;
}
