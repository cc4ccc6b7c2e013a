/*
 * test_shm_kernel.c — the shared-memory comm's SUM kernels against the
 * scalar reference, bit for bit: every input widened exactly, added in fp32
 * in rank order, rounded once with amp/dtype_scalar.h's conversions. Every
 * path this CPU runs: the AVX2 kernel (comm/comm_shm_avx2.c), the AVX-512
 * one (comm/comm_shm_avx512.c; bf16 both with the integer rounding and,
 * where cpuid says avx512_bf16, with vcvtne2ps2bf16), and the comm's
 * dispatch (zrt_shm_reduce_into: the path zrt_isa_best() picks, the
 * portable loops under ZRT_CPU_ISA=scalar, which ctest runs as
 * unit.test_shm_kernel.scalar). fp32, fp16 and bf16, 1 to 5 inputs,
 * lengths 0..100 and 1000 (full vectors and every tail), out unaligned by
 * 0..3 elements, ordinary and non-temporal stores, a second output, and
 * out in place over an input; nothing past len may be written.
 *
 * Data: random bits of the type (NaN, Inf and denormals included), then
 * runs of denormal-sized values, so that some 32-element bf16 steps hold
 * denormal sums (the vcvtne2ps2bf16 path must redo them; a kernel that
 * flushed them to zero would fail here) and most do not. Never skipped:
 * the dispatch runs on every CPU.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm_shm_impl.h"
#include "comm_shm_kernels.h"
#include "copy_stream.h"
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

/* zrt_copy_stream's bodies (SSE2, AVX2, AVX-512, each this CPU runs)
 * against memcpy: every length to 300 and dst / src offsets around the
 * 64-byte boundary, bytes around dst untouched. */
static void test_copy_stream(void) {
  static unsigned char src[512 + 64] __attribute__((aligned(64)));
  static unsigned char dst[512 + 128] __attribute__((aligned(64)));
  void (*body[3])(void *, const void *, size_t) = {zrt_copy_stream_sse2, zrt_copy_stream_avx2,
                                                   zrt_copy_stream_avx512};
  const char *name[3] = {"sse2", "avx2", "avx512"};
  int can[3] = {1, zrt_isa_supported(ZRT_ISA_AVX2), zrt_isa_supported(ZRT_ISA_AVX512)};
  long cases = 0;
  for (size_t i = 0; i < sizeof src; i++) src[i] = (unsigned char)(rnd32() | 1);
  for (int b = 0; b < 3; b++) {
    if (!can[b]) continue;
    for (size_t len = 0; len <= 300; len++)
      for (size_t doff = 0; doff < 64; doff += 7)
        for (size_t soff = 0; soff < 3; soff++) {
          memset(dst, 0, sizeof dst);
          body[b](dst + 64 + doff, src + soff, len);
          zrt_store_fence();
          int bad = memcmp(dst + 64 + doff, src + soff, len) != 0;
          for (size_t i = 0; i < sizeof dst; i++)
            if ((i < 64 + doff || i >= 64 + doff + len) && dst[i]) bad = 1;
          if (bad && zt_failures < 20) {
            fprintf(stderr, "FAIL copy_stream_%s len %zu dst offset %zu src offset %zu\n", name[b],
                    len, doff, soff);
          }
          zt_failures += bad;
          cases++;
        }
  }
  printf("copy_stream: %ld cases (sse2%s%s)\n", cases, can[1] ? ", avx2" : "",
         can[2] ? ", avx512" : "");
}

/* The kernels under test: 0 the comm's dispatch, 1 AVX2, 2 AVX-512, 3
 * AVX-512 with vcvtne2ps2bf16 (bf16 only). */
enum { K_DISPATCH, K_AVX2, K_AVX512, K_AVX512_INSN, K_COUNT };
static const char *const kname[K_COUNT] = {"dispatch", "avx2", "avx512", "avx512+bf16insn"};

static void run_kernel(int k, void *out, void *out2, const void *const *in, int n, size_t len,
                       zrt_dtype dt, int nt) {
  switch (k) {
  case K_DISPATCH: zrt_shm_reduce_into(out, out2, in, n, len, dt, ZRT_RED_SUM, nt); break;
  case K_AVX2: zrt_shm_sum_avx2(out, out2, in, n, len, dt, nt); break;
  default: zrt_shm_sum_avx512(out, out2, in, n, len, dt, nt, k == K_AVX512_INSN); break;
  }
}

int main(void) {
  int can[K_COUNT] = {1, zrt_isa_supported(ZRT_ISA_AVX2), zrt_isa_supported(ZRT_ISA_AVX512),
                      zrt_isa_supported(ZRT_ISA_AVX512) && zrt_isa_has_avx512bf16()};
  printf("paths: dispatch (%s)", zrt_isa_name(zrt_isa_best()));
  for (int k = 1; k < K_COUNT; k++)
    printf(", %s %s", kname[k], can[k] ? "tested" : "not on this CPU");
  printf("\n");
  static float inbuf[MAXN][MAXLEN + 64] __attribute__((aligned(64)));
  static float outbuf[MAXLEN + 64] __attribute__((aligned(64)));
  static float out2buf[MAXLEN + 64] __attribute__((aligned(64)));
  static float refbuf[MAXLEN + 64];
  const zrt_dtype dts[3] = {ZRT_F32, ZRT_F16, ZRT_BF16};
  long cases = 0, denormal_steps = 0;
  for (int d = 0; d < 3; d++) {
    zrt_dtype dt = dts[d];
    size_t es = zrt_dtype_size(dt);
    for (int k = 0; k < K_COUNT; k++) {
      if (!can[k] || (k == K_AVX512_INSN && dt != ZRT_BF16)) continue;
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
              /* a guard element past len in every output */
              if (mode != 3) memset((char *)out + len * es, 0x5a, es);
              if (out2) memset((char *)out2 + len * es, 0x5a, es);
              run_kernel(k, out, out2, in, n, len, dt, mode == 1);
              if (mode == 1) zrt_store_fence();
              size_t at = 0;
              int guard = (mode == 3 || ((unsigned char *)out)[len * es] == 0x5a) &&
                          (!out2 || ((unsigned char *)out2)[len * es] == 0x5a);
              if (!same_bits(out, refbuf, dt, len, &at) ||
                  (out2 && !same_bits(out2, refbuf, dt, len, &at)) || !guard) {
                if (zt_failures < 20)
                  fprintf(stderr, "FAIL %s dtype %s n %d len %zu offset %d mode %d: %s %zu\n",
                          kname[k], zrt_dtype_name(dt), n, len, off, mode,
                          guard ? "differs from the reference at element" : "wrote past len",
                          guard ? at : len);
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
  test_copy_stream();
  return zt_failures ? 1 : 0;
}
