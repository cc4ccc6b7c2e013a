/*
 * coord_policy.c — the stage-3 decisions over counters (coord_policy.h):
 * trace record and lookup, next use, eviction victim, prefetch candidates,
 * reuse keep, boundary staleness. Invariants: live_elems is the sum of
 * `padded` over non-persistent modules with a copy; a retained module has a
 * current copy, no use and is not persistent; trace_pos only moves to a
 * position of the frozen trace. The rules are described in docs/engine.md,
 * "Stage 3"; both executors (coordinator.c, coordinator_sim.c) ask here.
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "coord_policy.h"

int zrt_cpol_init(zrt_cpol *p, const zrt_cpol_settings *s, int nmodules, const int64_t *numel,
                  const int64_t *padded) {
  memset(p, 0, sizeof *p);
  p->mods = calloc((size_t)(nmodules > 0 ? nmodules : 1), sizeof *p->mods);
  if (!p->mods) return -1;
  p->s = *s;
  p->nmodules = nmodules;
  p->trace_pos = -1;
  for (int m = 0; m < nmodules; m++) {
    zrt_cpol_mod *me = &p->mods[m];
    me->numel = numel[m];
    me->padded = padded[m];
    me->persistent = numel[m] <= s->persist_threshold;
    me->trace_at = -1;
  }
  return 0;
}

void zrt_cpol_fini(zrt_cpol *p) {
  if (!p) return;
  free(p->mods);
  free(p->trace);
  memset(p, 0, sizeof *p);
}

/* Position of m's fetch in the frozen trace: at or after the expected
 * position, wrapping, or -1. */
static int zrt_cpol_locate(const zrt_cpol *p, int m) {
  for (int k = 0; k < p->ntrace; k++) {
    int i = (p->trace_pos + 1 + k) % p->ntrace;
    if (p->trace[i] == m) return i;
  }
  return -1;
}

int zrt_cpol_fetch(zrt_cpol *p, int m, int *pos) {
  *pos = -1;
  if (!p->trace_done) {
    if (p->ntrace == p->cap_trace) {
      int nc = p->cap_trace ? p->cap_trace * 2 : 16;
      int *t = realloc(p->trace, (size_t)nc * sizeof(int));
      if (!t) return -1;
      p->trace = t;
      p->cap_trace = nc;
    }
    p->trace[p->ntrace++] = m;
  } else if (p->ntrace > 0) {
    *pos = zrt_cpol_locate(p, m);
    if (*pos >= 0) p->trace_pos = *pos;
  }
  p->mods[m].trace_at = *pos;
  return 0;
}

void zrt_cpol_freeze(zrt_cpol *p) {
  if (!p->trace_done && p->ntrace > 0) p->trace_done = 1;
}

void zrt_cpol_set_window(zrt_cpol *p, int64_t prefetch_elems, int64_t reuse_distance) {
  p->s.prefetch_elems = prefetch_elems;
  p->s.reuse_distance = reuse_distance;
}

/* Trace position of m's next fetch after position `from` within this
 * step's trace, or INT_MAX. *between: non-persistent elements fetched
 * strictly in between (counted up to `limit`, then the search stops). */
static int zrt_cpol_next_use(const zrt_cpol *p, int m, int from, int64_t limit, int64_t *between) {
  int64_t d = 0;
  for (int i = from + 1; i < p->ntrace; i++) {
    int t = p->trace[i];
    if (t == m) {
      if (between) *between = d;
      return i;
    }
    if (!p->mods[t].persistent) d += p->mods[t].padded;
    if (d >= limit) break;
  }
  if (between) *between = d;
  return INT_MAX;
}

int zrt_cpol_evict_for(const zrt_cpol *p, int m, int blocking) {
  const zrt_cpol_mod *me = &p->mods[m];
  if (me->copy || me->persistent || !blocking) return -1;
  if (p->live_elems + me->padded <= p->s.max_live_elems) return -1;
  int victim = -1, far = -1;
  for (int k = 0; k < p->nmodules; k++) {
    if (!p->mods[k].retained) continue;
    int at = zrt_cpol_next_use(p, k, p->trace_pos, INT64_MAX, NULL);
    if (at > far) {
      far = at;
      victim = k;
    }
  }
  return victim;
}

zrt_cpol_cursor zrt_cpol_prefetch_begin(const zrt_cpol *p, int pos) {
  zrt_cpol_cursor cur = {.at = pos, .budget = pos < 0 ? 0 : p->s.prefetch_elems};
  return cur;
}

int zrt_cpol_prefetch_next(const zrt_cpol *p, zrt_cpol_cursor *cur) {
  if (cur->at < 0) return -1;
  /* i < ntrace: do not prefetch across the optimizer step */
  for (int i = cur->at + 1; i < p->ntrace && cur->budget > 0; i++) {
    const zrt_cpol_mod *nx = &p->mods[p->trace[i]];
    if (nx->valid) continue;
    if (nx->numel > cur->budget) return -1;
    if (p->live_elems + nx->padded > p->s.max_live_elems) return -1;
    cur->at = i;
    cur->budget -= nx->numel;
    return i;
  }
  return -1;
}

int zrt_cpol_keep(const zrt_cpol *p, int m, int64_t *between) {
  const zrt_cpol_mod *me = &p->mods[m];
  int64_t reuse = p->s.reuse_distance;
  *between = 0;
  return me->valid && reuse > 0 && me->trace_at >= 0 && p->live_elems <= p->s.max_live_elems &&
         zrt_cpol_next_use(p, m, me->trace_at, reuse, between) != INT_MAX && *between < reuse;
}

int zrt_cpol_stale(const zrt_cpol *p, int m) {
  const zrt_cpol_mod *me = &p->mods[m];
  return me->copy && !me->persistent && me->in_use == 0;
}

void zrt_cpol_on_alloc(zrt_cpol *p, int m) {
  zrt_cpol_mod *me = &p->mods[m];
  if (me->copy) return;
  me->copy = 1;
  if (!me->persistent) {
    p->live_modules++;
    p->live_elems += me->padded;
  }
}

void zrt_cpol_on_free(zrt_cpol *p, int m) {
  zrt_cpol_mod *me = &p->mods[m];
  if (me->copy && !me->persistent) {
    p->live_modules--;
    p->live_elems -= me->padded;
  }
  me->copy = 0;
  me->valid = 0;
  me->retained = 0;
}

void zrt_cpol_set_valid(zrt_cpol *p, int m, int valid) { p->mods[m].valid = valid; }

void zrt_cpol_on_use(zrt_cpol *p, int m) {
  p->mods[m].retained = 0;
  p->mods[m].in_use++;
}

int zrt_cpol_on_release(zrt_cpol *p, int m) {
  zrt_cpol_mod *me = &p->mods[m];
  if (me->in_use > 0) me->in_use--;
  /* a nested use (a tied module fetched again inside its own fetch) keeps
   * the gathered copy until the outermost release */
  return !me->persistent && me->in_use == 0;
}

void zrt_cpol_on_keep(zrt_cpol *p, int m) { p->mods[m].retained = 1; }

void zrt_cpol_on_boundary(zrt_cpol *p) {
  for (int m = 0; m < p->nmodules; m++) p->mods[m].valid = 0;
  p->trace_pos = -1;
}
