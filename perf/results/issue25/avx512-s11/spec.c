/*
 * spec.c: issue 25's busy-core experiment (not product code). A region of
 * NCH chunks of WORK dependent multiply-adds, each chunk writing 1 KiB, run
 * R times by: 0 one thread; 1 an OpenMP team, schedule(dynamic, 1); 2 a
 * claim pool (master + one helper take chunks from a counter; the master
 * waits for the chunks the helper took); 3 a speculative pool: the helper
 * computes into its own scratch and commits with a compare-and-swap, the
 * master takes every chunk nobody holds and, at the end, steals the ones
 * the helper still holds (recomputes them in place; the helper's late
 * result is dropped), so the master never waits for a descheduled helper.
 * AFF=1 (6th argument) keeps the helper off the master's current CPU
 * (pthread_setaffinity_np, re-checked per region with sched_getcpu), so
 * the scheduler moves the master to the free core and the helper shares
 * the busy one. Mode 4 is mode 3 where a master that took a chunk back
 * then waits until the helper has left it (so that no helper reads the
 * inputs after the region returns). Usage: spec MODE NCH WORK R [SPIN [AFF]]; prints us/region.
 */
#define _GNU_SOURCE
#include <linux/futex.h>
#include <omp.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
static double now() {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}
static int NCH = 8;
static long WORK = 20000;
static int SPIN = 200000;
static int MODE;
#define OUTN 256
static float out[64][OUTN];
static float scratch[OUTN];
static void chunk(int i, float *o) {
  float x = i;
  for (long k = 0; k < WORK; k++) x = x * 1.0000001f + 0.5f;
  for (int j = 0; j < OUTN; j++) o[j] = x + j;
}
static atomic_int gen, nextc, doneN, inchunk;
static atomic_int state[64];
static int total;
static void helper_region(void) {
  if (MODE == 2) {
    int c;
    while ((c = atomic_fetch_add(&nextc, 1)) < total) {
      chunk(c, out[c]);
      atomic_fetch_add(&doneN, 1);
    }
    return;
  }
  for (int c = 0; c < total; c++) {
    int z = 0;
    if (!atomic_compare_exchange_strong(&state[c], &z, 1)) continue;
    atomic_store(&inchunk, 1);
    chunk(c, scratch);
    atomic_store(&inchunk, 0);
    int one = 1;
    if (atomic_compare_exchange_strong(&state[c], &one, 2)) {
      memcpy(out[c], scratch, sizeof scratch);
      atomic_store(&state[c], 3);
    }
  }
}
static void *helper(void *a) {
  int seen = 0;
  for (;;) {
    int g;
    int spins = 0;
    while ((g = atomic_load(&gen)) == seen) {
      if (++spins > SPIN) {
        syscall(SYS_futex, &gen, FUTEX_WAIT_PRIVATE, seen, NULL, NULL, 0);
        spins = 0;
      }
    }
    seen = g;
    helper_region();
  }
  return 0;
}
static long stolen;
static pthread_t helper_t;
static int helper_excl = -1, AFF = 0, repins = 0;
static void place(void) {
  if (!AFF) return;
  int me = sched_getcpu();
  if (me == helper_excl) return;
  cpu_set_t m;
  CPU_ZERO(&m);
  int n = sysconf(_SC_NPROCESSORS_ONLN);
  for (int i = 0; i < n; i++)
    if (i != me) CPU_SET(i, &m);
  pthread_setaffinity_np(helper_t, sizeof m, &m);
  helper_excl = me;
  repins++;
}
static void region() {
  place();
  total = NCH;
  if (MODE == 2) {
    atomic_store(&nextc, 0);
    atomic_store(&doneN, 0);
  } else
    for (int c = 0; c < NCH; c++) atomic_store(&state[c], 0);
  atomic_fetch_add(&gen, 1);
  syscall(SYS_futex, &gen, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
  if (MODE == 2) {
    int c;
    while ((c = atomic_fetch_add(&nextc, 1)) < total) {
      chunk(c, out[c]);
      atomic_fetch_add(&doneN, 1);
    }
    while (atomic_load(&doneN) < total)
      ;
    return;
  }
  for (int c = NCH - 1; c >= 0; c--) {
    int z = 0;
    if (atomic_compare_exchange_strong(&state[c], &z, 4)) chunk(c, out[c]);
  }
  int st = 0;
  for (int c = 0; c < NCH; c++) {
    for (;;) {
      int s = atomic_load(&state[c]);
      if (s == 3 || s == 4 || s == 5) break;
      if (s == 1) {
        if (atomic_compare_exchange_strong(&state[c], &s, 5)) {
          stolen++;
          st = 1;
          chunk(c, out[c]);
          break;
        }
      }
    }
  }
  if (MODE == 4 && st)
    while (atomic_load(&inchunk)) __builtin_ia32_pause();
}
int main(int argc, char **argv) {
  MODE = atoi(argv[1]);
  NCH = atoi(argv[2]);
  WORK = atol(argv[3]);
  int R = atoi(argv[4]);
  if (argc > 5) SPIN = atoi(argv[5]);
  if (argc > 6) AFF = atoi(argv[6]);
  if (MODE >= 2) pthread_create(&helper_t, 0, helper, 0);
  double t0 = now();
  for (int r = 0; r < R; r++) {
    if (MODE == 0) {
      for (int c = 0; c < NCH; c++) chunk(c, out[c]);
    } else if (MODE == 1) {
#pragma omp parallel for schedule(dynamic, 1)
      for (int c = 0; c < NCH; c++) chunk(c, out[c]);
    } else
      region();
  }
  double dt = now() - t0;
  printf("mode %d %.1f us/region stolen %ld master on cpu %d aff %d repins %d\n", MODE,
         dt / R * 1e6, stolen, sched_getcpu(), AFF, repins);
  return 0;
}
