/*
 * engine_team.c — the adaptive team policy (engine_team.h) and the engine's
 * use of it: zrt_engine_team_step, called at each optimizer-step boundary,
 * applies the chosen size to the calling thread's OpenMP team and, when the
 * program left zrt.blas_threads at 0, to OpenBLAS. The policy owns no
 * clock and no threads; the engine owns the timing (engine_timing.c).
 */
#include "engine_team.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "engine_internal.h"
#include "env.h"

void zrt_team_init(zrt_team *t, int max) {
  memset(t, 0, sizeof *t);
  t->max = max < 1 ? 1 : max;
  t->cur = t->size = t->max;
  t->next_down = 1;
  t->period = ZRT_TEAM_WIN; /* the first probe right after the first settle window */
}

static double win_median(const double *w, int n) {
  double s[ZRT_TEAM_WIN];
  memcpy(s, w, (size_t)n * sizeof *s);
  for (int i = 1; i < n; i++)
    for (int j = i; j > 0 && s[j] < s[j - 1]; j--) {
      double x = s[j];
      s[j] = s[j - 1];
      s[j - 1] = x;
    }
  return s[n / 2];
}

/* The neighbour to probe next, or 0 when there is none (a team of 1 that
 * started at 1). Alternates down and up where both exist. */
static int pick_probe(zrt_team *t) {
  int down = t->cur > 1 ? t->cur - 1 : 0, up = t->cur < t->max ? t->cur + 1 : 0;
  int p = t->next_down ? (down ? down : up) : (up ? up : down);
  t->next_down = !t->next_down;
  return p;
}

/* The probe of t->size ends after n steps with median med: keep it, or go
 * back to cur and space the next probe by what this one cost. */
static void probe_end(zrt_team *t, int n, double med, int *changed) {
  t->probing = 0;
  t->last_probe_med = med;
  if (n == ZRT_TEAM_WIN && med < t->cur_med * (1.0 - ZRT_TEAM_MARGIN)) {
    t->prev = t->cur;
    t->cur = t->size;
    t->changes++;
    t->period = ZRT_TEAM_MIN_PERIOD;
    if (changed) *changed = 1;
  } else {
    double slow = med / t->cur_med, need = ZRT_TEAM_BUDGET * n * (slow > 1 ? slow : 1);
    if (need < 2.0 * ZRT_TEAM_MIN_PERIOD) need = 2.0 * ZRT_TEAM_MIN_PERIOD;
    t->period = need < ZRT_TEAM_MAX_PERIOD ? (int)need : ZRT_TEAM_MAX_PERIOD;
    t->size = t->cur;
  }
  t->since = 0;
  t->have_med = 0; /* settle the size in force afresh: the load may have moved */
}

int zrt_team_step(zrt_team *t, double step_s, int *changed) {
  if (changed) *changed = 0;
  t->seen++;
  if (t->max <= 1 || t->seen <= ZRT_TEAM_WARMUP || !(step_s > 0)) return t->size;
  t->win[t->n++] = step_s;
  if (t->probing) {
    if (t->n == ZRT_TEAM_WIN || step_s > ZRT_TEAM_ABORT * t->cur_med) {
      int n = t->n;
      t->n = 0;
      probe_end(t, n, win_median(t->win, n), changed);
    }
    return t->size;
  }
  t->since++;
  if (t->n < ZRT_TEAM_WIN) return t->size;
  double med = win_median(t->win, t->n);
  t->n = 0;
  int jumped = t->have_med && med > ZRT_TEAM_JUMP * t->cur_med;
  t->cur_med = med;
  t->have_med = 1;
  if (jumped) {
    t->next_down = 1; /* slower at the same size: most likely a core was taken */
    t->period = ZRT_TEAM_MIN_PERIOD;
  }
  if (jumped || t->since >= t->period) {
    int p = pick_probe(t);
    if (p) {
      t->size = p;
      t->probing = 1;
      t->probes++;
    }
    t->since = 0;
  }
  return t->size;
}

/* On the twin the program's compute runs on stream workers, whose teams
 * the calling thread's setting does not reach: the policy stays off there. */
zrt_status zrt_engine_team_open(zrt_engine *eng) {
  const zrt_cfg *c = zrt_config_values(eng->config);
  eng->team_on =
      c->adaptive_threads && !omp_in_parallel() && strcmp(eng->backend->iface->name, "twin") != 0;
  zrt_team_init(&eng->team, eng->team_on ? omp_get_max_threads() : 1);
  eng->team_flip = 0;
  const char *v = zrt_env_hooks_on() ? zrt_env("ZRT_TEST_TEAM_FLIP") : NULL;
  if (v && *v) {
    char *end = NULL;
    long n = strtol(v, &end, 10);
    if (end == v || *end || n < 1 || n > 1000000)
      return zrt_error(ZRT_ERR_CONFIG,
                       "ZRT_TEST_TEAM_FLIP='%s': expected optimizer steps from 1 to 1000000 (the "
                       "adaptive team alternates between its size and one thread fewer every "
                       "this many steps)",
                       v);
    eng->team_flip = (int)n;
  }
  return ZRT_OK;
}

/* ZRT_TEST_TEAM_FLIP: the size the schedule gives after `steps` steps. */
static int zrt_team_flip_size(const zrt_team *t, int flip, long long steps) {
  return (steps / flip) % 2 ? (t->max > 1 ? t->max - 1 : 1) : t->max;
}

void zrt_engine_team_step(zrt_engine *eng, double step_s) {
  if (!eng->team_on || eng->team.max <= 1) return;
  int before = eng->team.size, changed = 0;
  int n;
  if (eng->team_flip) { /* the test schedule in place of the policy */
    zrt_team *t = &eng->team;
    n = zrt_team_flip_size(t, eng->team_flip, (long long)eng->global_step + 1);
    if (n != t->size) {
      t->prev = t->size;
      t->cur = t->size = n;
      changed = 1;
    }
  } else {
    n = zrt_team_step(&eng->team, step_s, &changed);
  }
  if (n != before) {
    omp_set_num_threads(n);
    if (zrt_config_values(eng->config)->blas_threads == 0 &&
        !strcmp(eng->backend->iface->name, "cpu"))
      zrt_backend_cpu_blas_threads(n);
  }
  if (changed && eng->team_flip) {
    zrt_log(ZRT_LOG_INFO, "step %lld: OpenMP team %d -> %d thread%s (ZRT_TEST_TEAM_FLIP=%d)",
            (long long)eng->global_step + 1, eng->team.prev, eng->team.cur,
            eng->team.cur == 1 ? "" : "s", eng->team_flip);
  } else if (changed) {
    const zrt_team *t = &eng->team;
    zrt_log(ZRT_LOG_INFO,
            "step %lld: OpenMP team %d -> %d thread%s (median step %.3g ms at %d, %.3g ms at %d: "
            "%s; zrt.adaptive_threads)",
            (long long)eng->global_step + 1, t->prev, t->cur, t->cur == 1 ? "" : "s",
            1e3 * t->last_probe_med, t->cur, 1e3 * t->cur_med, t->prev,
            t->cur < t->prev ? "a core is taken by another process" : "the cores are free again");
  }
}
