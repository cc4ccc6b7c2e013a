/* kernel.c — in-cache throughput of the shm comm SUM kernel (2 inputs of 256 KiB),
 * fp32 and bf16: gcc -O2 -Iinclude -Icomm perf/results/shm-session5/kernel.c build/libzrt.a
 * -lm -fopenmp -lpthread (the 16-lane bf16 figure came from the build before the 32-lane
 * kernel, whose zrt_shm_sum_avx512 took a bf16_insn argument). */
#include "comm_shm_kernels.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
static double now() {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}
int main() {
  size_t bytes = 256 << 10;
  char *a = aligned_alloc(4096, bytes), *b = aligned_alloc(4096, bytes),
       *o = aligned_alloc(4096, bytes);
  for (size_t i = 0; i < bytes; i++) {
    a[i] = i * 7;
    b[i] = i * 13;
  }
  memset(o, 0, bytes);
  for (int v = 0; v < 2; v++) {
    zrt_dtype d = v ? ZRT_BF16 : ZRT_F32;
    size_t es = v ? 2 : 4;
    size_t n = bytes / es;
    double best = 1e9;
    for (int rep = 0; rep < 200; rep++) {
      double t0 = now();
      const void *in[2] = {a, b};
      zrt_shm_sum_avx512(o, NULL, in, 2, n, d);
      double t = now() - t0;
      if (t < best) best = t;
    }
    printf("%s: %.1f GB/s of output (in cache), %.2f ns per 16 lanes\n", v == 0 ? "f32" : "bf16",
           bytes / best / 1e9, best * 1e9 / (n / 16));
  }
}
