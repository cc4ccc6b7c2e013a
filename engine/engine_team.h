/*
 * engine_team.h — the adaptive OpenMP team of a rank (zrt.adaptive_threads).
 *
 * A pure policy over measured step times: it never reads a clock or calls
 * OpenMP itself, so a unit test drives it with any timing model. The engine
 * feeds it each optimizer step's wall time and applies the team size it
 * returns (omp_set_num_threads on the calling thread, and OpenBLAS's count
 * when the program left that to zrt).
 *
 * Why: every parallel loop is statically split, so a team of n threads on n
 * cores runs at the speed of its slowest thread. When another process takes
 * one of the cores, the whole team waits for the thread that shares it at
 * every barrier (measured on a 2-core machine: steps 2-50x slower; one
 * thread fewer keeps 0.6-0.75 of the quiet speed). A sleeping wait policy
 * avoids the collapse but costs half the quiet speed (perf/RESULTS.md,
 * "Issue 25"). The policy:
 *   - settle: WIN steps at the current size give its median step time;
 *   - probe: after `period` settled steps, or at once when a settle window
 *     is JUMP times slower than the last, up to WIN steps at a neighbour (one
 *     thread fewer first, then one more up to the start size); a probe step
 *     ABORT times slower than the settled median ends the probe there;
 *   - a probe whose WIN-step median beats the settled one by MARGIN is kept
 *     (period back to MIN_PERIOD); otherwise the team goes back and the
 *     period is set so that failed probes cost at most 1/BUDGET of the run:
 *     period = BUDGET * (probe steps) * (slowdown), at least 2 * MIN_PERIOD
 *     (a taken core: 2 threads 25x slower than 1, an aborted one-step probe
 *     every ~1200 steps; a quiet machine: 3 steps at 1.9x every ~300).
 * Cost on a quiet 2-core machine: about 1% (3 steps at half speed every
 * ~300 steps). The team size changes no bits: every zrt kernel and the
 * example's ops split work so that each element's arithmetic does not depend
 * on the team (cli.test_threads_bits checks the GPT's losses across sizes).
 */
#ifndef ZRT_ENGINE_TEAM_H
#define ZRT_ENGINE_TEAM_H

#define ZRT_TEAM_WIN 3
#define ZRT_TEAM_WARMUP 4
#define ZRT_TEAM_MIN_PERIOD 8
#define ZRT_TEAM_MAX_PERIOD 100000
#define ZRT_TEAM_MARGIN 0.08
#define ZRT_TEAM_ABORT 2.0
#define ZRT_TEAM_JUMP 1.5
#define ZRT_TEAM_BUDGET 50

typedef struct zrt_team {
  int max;           /* the team the run started with (the thread plan's) */
  int cur;           /* the size the run settles on */
  int size;          /* the size in force now (cur, or a probe) */
  int probing;       /* the window being filled is a probe of `size` */
  int next_down;     /* the next probe goes down (1) or up (0) */
  int n;             /* samples in the window */
  int period;        /* steps between probes */
  long long since;   /* steps at cur since the last probe */
  long long seen;    /* steps fed */
  long long changes; /* sizes kept after a probe */
  long long probes;  /* probes started */
  int prev;          /* the settled size before the last change */
  double win[ZRT_TEAM_WIN];
  int have_med;   /* cur_med is from a settle window at cur */
  double cur_med; /* median step time at cur (the last settle window) */
  double last_probe_med;
} zrt_team;

/* A team of `max` threads (max >= 1; with 1 nothing is ever probed). */
void zrt_team_init(zrt_team *t, int max);

/* Feeds one step's wall time (seconds, measured at size t->size) and
 * returns the size for the next step. Sets *changed when the settled size
 * changed at this step (for the log). */
int zrt_team_step(zrt_team *t, double step_s, int *changed);

#endif
