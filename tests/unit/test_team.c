/*
 * test_team.c — the adaptive OpenMP team policy (engine/engine_team.c),
 * driven by step-time models instead of a clock:
 *   - quiet 2-core machine (1 thread takes 1.9x as long): the team stays at
 *     2 and the probes cost at most 2% over 3000 steps;
 *   - a core taken from step 500 to 2500 (2 threads 50x slower, 1 thread
 *     1.1x): the team drops to 1 within 10 steps of the change, stays there
 *     while the core is taken (failed probes cost at most 3% of that time),
 *     and is back at 2 within the probe period after the core is free;
 *   - a busy core from the start: 1 thread within the first 12 steps;
 *   - 8 threads with one core taken (8: 3x slower, 7: 1.15x): settles at 7,
 *     not lower;
 *   - a team of 1 is never probed; warm-up steps are ignored.
 * Also: the engine changes no numerics with the team size (that is
 * cli.test_threads_bits, on the GPT example).
 */
#include <stdio.h>
#include <string.h>

#include "engine_team.h"
#include "ztest.h"

/* step time at team size n: work / n on free cores; with `taken` cores
 * busy the team runs at the speed of a thread that shares one */
typedef double (*model_fn)(int n, long long step);

static double quiet2(int n, long long step) {
  (void)step;
  return n == 2 ? 1.0 : 1.9;
}
static double taken_500_2500(int n, long long step) {
  int busy = step >= 500 && step < 2500;
  if (!busy) return quiet2(n, step);
  return n == 2 ? 50.0 : 1.1 * 1.9;
}
static double busy_always(int n, long long step) {
  (void)step;
  return n == 2 ? 50.0 : 1.9;
}
static double eight_one_taken(int n, long long step) {
  (void)step;
  if (n == 8) return 3.0;
  return (8.0 / n) * 1.15; /* 7 threads on 7 free cores: 8/7 of the quiet time */
}

typedef struct run {
  double total, ideal;
  int size_at[4000];
} run;

static void drive(zrt_team *t, model_fn f, long long steps, double (*best)(long long), run *r) {
  memset(r, 0, sizeof *r);
  int size = t->size;
  for (long long s = 0; s < steps; s++) {
    double dt = f(size, s);
    r->total += dt;
    r->ideal += best(s);
    if (s < 4000) r->size_at[s] = size;
    size = zrt_team_step(t, dt, NULL);
    ZT_CHECK(size >= 1 && size <= t->max);
  }
}

static double best_quiet(long long s) {
  (void)s;
  return 1.0;
}
static double best_taken(long long s) { return s >= 500 && s < 2500 ? 1.1 * 1.9 : 1.0; }
static double best_busy(long long s) {
  (void)s;
  return 1.9;
}
static double best_eight(long long s) {
  (void)s;
  return (8.0 / 7) * 1.15;
}

int main(void) {
  static run r;
  zrt_team t;

  zrt_team_init(&t, 2);
  drive(&t, quiet2, 3000, best_quiet, &r);
  printf("quiet: size %d, %lld probes, cost %.2f%%\n", t.size, t.probes,
         100 * (r.total / r.ideal - 1));
  ZT_CHECK(t.size == 2 && t.changes == 0);
  ZT_CHECK(r.total / r.ideal <= 1.02);
  ZT_CHECK(t.probes >= 2); /* it did look */

  zrt_team_init(&t, 2);
  drive(&t, taken_500_2500, 4000, best_taken, &r);
  int down = -1, up = -1;
  for (int s = 500; s < 2500 && down < 0; s++)
    if (r.size_at[s] == 1) down = s;
  for (int s = 2500; s < 4000 && up < 0; s++)
    if (r.size_at[s] == 2) up = s;
  double busy_total = 0, busy_ideal = 0;
  for (int s = 520; s < 2500; s++) {
    busy_total += taken_500_2500(r.size_at[s], s);
    busy_ideal += best_taken(s);
  }
  printf("taken 500..2500: down at step %d, back up at %d, %lld changes, busy-time cost %.2f%%\n",
         down, up, t.changes, 100 * (busy_total / busy_ideal - 1));
  ZT_CHECK(down >= 500 && down <= 510);
  ZT_CHECK(busy_total / busy_ideal <= 1.03);
  /* back up within one probe period after an aborted up-probe:
   * BUDGET * 1 step * (50 / 2.09) ~ 1196 steps */
  ZT_CHECK(up >= 2500 && up <= 2500 + ZRT_TEAM_BUDGET * 50.0 / (1.1 * 1.9) + 2 * ZRT_TEAM_WIN);
  ZT_CHECK(r.size_at[3999] == 2);

  zrt_team_init(&t, 2);
  drive(&t, busy_always, 200, best_busy, &r);
  int first1 = -1;
  for (int s = 0; s < 200 && first1 < 0; s++)
    if (r.size_at[s] == 1) first1 = s;
  printf("busy from the start: 1 thread from step %d\n", first1);
  ZT_CHECK(first1 >= 0 && first1 <= 12);
  ZT_CHECK(t.cur == 1);

  zrt_team_init(&t, 8);
  drive(&t, eight_one_taken, 2000, best_eight, &r);
  printf("8 threads, one core taken: settled at %d after %lld changes\n", t.cur, t.changes);
  ZT_CHECK(t.cur == 7);

  zrt_team_init(&t, 1);
  for (int s = 0; s < 500; s++) ZT_CHECK(zrt_team_step(&t, 1.0, NULL) == 1);
  ZT_CHECK(t.probes == 0);

  /* warm-up steps (slow first steps) are not measured */
  zrt_team_init(&t, 2);
  for (int s = 0; s < ZRT_TEAM_WARMUP; s++) ZT_CHECK(zrt_team_step(&t, 1000.0, NULL) == 2);
  ZT_CHECK(t.n == 0 && t.probes == 0);
  ZT_DONE();
}
