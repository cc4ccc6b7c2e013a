/* physics.c — memcpy / non-temporal copy / read / memset / a+b->c bandwidth of 1 or N
 * processes at once, each on its own buffers (perf/RESULTS.md, "shm comm, session 5").
 * Build: gcc -O2 -mavx512f physics.c -o physics; run: ./physics <MiB> <procs> <reps>. */
#define _GNU_SOURCE
#include <immintrin.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
static double now() {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}
static volatile long *bar;
static void barrier(int n, long *gen) {
  long g = ++*gen;
  __atomic_add_fetch(&bar[0], 1, __ATOMIC_SEQ_CST);
  while (__atomic_load_n(&bar[0], __ATOMIC_SEQ_CST) < g * n) sched_yield();
}
static void ntcopy(char *d, const char *s, size_t n) {
  for (size_t i = 0; i < n; i += 64) {
    _mm512_stream_si512((void *)(d + i), _mm512_loadu_si512(s + i));
  }
  _mm_sfence();
}
static double rd(const char *s, size_t n) {
  __m512 a = _mm512_setzero_ps();
  for (size_t i = 0; i < n; i += 64) a = _mm512_add_ps(a, _mm512_loadu_ps((const float *)(s + i)));
  return _mm512_reduce_add_ps(a);
}
static void add3(float *o, const float *a, const float *b, size_t n) {
  for (size_t i = 0; i < n; i += 16)
    _mm512_storeu_ps(o + i, _mm512_add_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i)));
}
int main(int argc, char **argv) {
  size_t MB = atol(argv[1]);
  int n = atoi(argv[2]);
  int reps = atoi(argv[3]);
  size_t bytes = MB << 20;
  bar = mmap(0, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  double *res = (double *)(bar + 64);
  for (int r = 0; r < n; r++)
    if (fork() == 0) {
      char *s = aligned_alloc(4096, bytes), *d = aligned_alloc(4096, bytes),
           *e = aligned_alloc(4096, bytes);
      memset(s, 1, bytes);
      memset(d, 2, bytes);
      memset(e, 3, bytes);
      long gen = 0;
      double best[5] = {1e9, 1e9, 1e9, 1e9, 1e9};
      double sink = 0;
      for (int k = 0; k < reps; k++) {
        for (int t = 0; t < 5; t++) {
          barrier(n, &gen);
          double t0 = now();
          if (t == 0)
            memcpy(d, s, bytes);
          else if (t == 1)
            ntcopy(d, s, bytes);
          else if (t == 2)
            sink += rd(s, bytes);
          else if (t == 3)
            memset(d, k, bytes);
          else
            add3((float *)e, (float *)s, (float *)d, bytes / 4);
          double dt = now() - t0;
          if (dt < best[t]) best[t] = dt;
        }
      }
      for (int t = 0; t < 5; t++) res[r * 5 + t] = bytes / best[t] / 1e9;
      if (sink == 1.2345) printf("x");
      _exit(0);
    }
  for (int r = 0; r < n; r++) wait(0);
  const char *nm[5] = {"memcpy", "nt-copy", "read", "memset", "a+b->c"};
  printf("%zu MiB x %d procs:", MB, n);
  for (int t = 0; t < 5; t++) {
    double mn = 1e9;
    for (int r = 0; r < n; r++)
      if (res[r * 5 + t] < mn) mn = res[r * 5 + t];
    printf(" %s %.1f", nm[t], mn);
  }
  printf(" GB/s (per proc, slowest)\n");
}
