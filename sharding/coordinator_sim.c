/*
 * coordinator_sim.c — coordinator.c's fetch, release, prefetch, reuse and
 * eviction rules over counters instead of copies (coordinator_sim.h). Each
 * function here mirrors the one of coordinator.c with the same name
 * suffix; a change to a rule there must be made here too, and
 * unit.test_coordinator_sim fails until it is. A prefetched copy counts
 * from its allocation (as in the pools), and an optimizer step waits for
 * every gather before the copies are invalidated.
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator_sim.h"

typedef struct sim_mod {
  int64_t numel, padded;
  int persistent, copy, valid, in_use, retained, trace_at, grad;
} sim_mod;

typedef struct sim {
  const zrt_coord_sim *o;
  sim_mod *mods;
  int *trace;
  int ntrace, trace_done, trace_pos;
  int64_t live, grads;
  zrt_coord_sim_peaks peak;
} sim;

static void sim_mark(sim *s) {
  if (s->live > s->peak.live) s->peak.live = s->live;
  if (s->grads > s->peak.grads) s->peak.grads = s->grads;
  if (s->live + s->grads > s->peak.both) s->peak.both = s->live + s->grads;
}

static int sim_next_use(const sim *s, int m, int from, int64_t limit, int64_t *between) {
  int64_t d = 0;
  for (int i = from + 1; i < s->ntrace; i++) {
    int t = s->trace[i];
    if (t == m) {
      if (between) *between = d;
      return i;
    }
    if (!s->mods[t].persistent) d += s->mods[t].padded;
    if (d >= limit) break;
  }
  if (between) *between = d;
  return INT_MAX;
}

static void sim_free_copy(sim *s, sim_mod *me) {
  me->copy = 0;
  s->live -= me->padded;
  me->valid = 0;
  me->retained = 0;
}

static void sim_evict(sim *s, int64_t need) {
  while (s->live + need > s->o->max_live_elems) {
    int victim = -1, far = -1;
    for (int k = 0; k < s->o->nmodules; k++) {
      if (!s->mods[k].retained) continue;
      int at = sim_next_use(s, k, s->trace_pos, INT64_MAX, NULL);
      if (at > far) {
        far = at;
        victim = k;
      }
    }
    if (victim < 0) return;
    sim_free_copy(s, &s->mods[victim]);
  }
}

static void sim_alloc(sim *s, int m, int async) {
  sim_mod *me = &s->mods[m];
  if (me->copy) return;
  if (!me->persistent && !async) sim_evict(s, me->padded);
  me->copy = 1;
  if (!me->persistent) {
    s->live += me->padded;
    sim_mark(s);
  }
}

static int sim_locate(const sim *s, int m) {
  for (int k = 0; k < s->ntrace; k++) {
    int i = (s->trace_pos + 1 + k) % s->ntrace;
    if (s->trace[i] == m) return i;
  }
  return -1;
}

static void sim_prefetch(sim *s, int pos) {
  if (pos < 0 || s->o->prefetch_elems <= 0) return;
  int64_t budget = s->o->prefetch_elems;
  for (int k = 1; k < s->ntrace && budget > 0; k++) {
    int i = pos + k;
    if (i >= s->ntrace) break;
    sim_mod *nx = &s->mods[s->trace[i]];
    if (nx->valid) continue;
    if (nx->numel > budget) break;
    if (s->live + nx->padded > s->o->max_live_elems) break;
    sim_alloc(s, s->trace[i], 1);
    nx->valid = 1; /* gather in flight: the step waits for it */
    budget -= nx->numel;
  }
}

static void sim_fetch(sim *s, int m) {
  sim_mod *me = &s->mods[m];
  int pos = -1;
  if (!s->trace_done) {
    s->trace[s->ntrace++] = m;
  } else if (s->ntrace > 0) {
    pos = sim_locate(s, m);
    if (pos >= 0) s->trace_pos = pos;
  }
  me->trace_at = pos;
  if (!me->valid) {
    sim_alloc(s, m, 0);
    me->valid = 1;
  }
  me->retained = 0;
  me->in_use++;
  sim_prefetch(s, pos);
}

static void sim_release(sim *s, int m) {
  sim_mod *me = &s->mods[m];
  if (me->in_use > 0) me->in_use--;
  if (me->persistent || me->in_use > 0) return;
  if (!me->copy) {
    me->valid = 0;
    return;
  }
  int64_t reuse = s->o->reuse_distance, between = 0;
  if (me->valid && reuse > 0 && me->trace_at >= 0 && s->live <= s->o->max_live_elems &&
      sim_next_use(s, m, me->trace_at, reuse, &between) != INT_MAX && between < reuse) {
    me->retained = 1;
    return;
  }
  sim_free_copy(s, me);
}

/* The optimizer boundary: freeze the trace, then invalidate every copy. */
static void sim_boundary(sim *s) {
  if (!s->trace_done && s->ntrace > 0) s->trace_done = 1;
  for (int m = 0; m < s->o->nmodules; m++) {
    sim_mod *me = &s->mods[m];
    if (me->copy && !me->persistent && me->in_use == 0) sim_free_copy(s, me);
    me->valid = 0;
  }
  s->trace_pos = -1;
}

int zrt_coord_sim_run(const zrt_coord_sim *o, zrt_coord_sim_peaks *out) {
  memset(out, 0, sizeof *out);
  if (!o || o->nmodules < 0 || o->nevents < 0 || (o->nevents > 0 && !o->events)) return -1;
  for (int k = 0; k < o->nevents; k++) {
    const zrt_sim_event *e = &o->events[k];
    if (e->module < 0 || e->module >= o->nmodules || e->kind < ZRT_SIM_FETCH ||
        e->kind > ZRT_SIM_GRAD_DONE)
      return -1;
  }
  sim s = {.o = o, .trace_pos = -1};
  s.mods = calloc((size_t)(o->nmodules > 0 ? o->nmodules : 1), sizeof *s.mods);
  s.trace = malloc((size_t)(o->nevents > 0 ? o->nevents : 1) * sizeof(int));
  if (!s.mods || !s.trace) {
    free(s.mods);
    free(s.trace);
    return -1;
  }
  for (int m = 0; m < o->nmodules; m++) {
    s.mods[m].numel = o->numel[m];
    s.mods[m].padded = o->padded[m];
    s.mods[m].persistent = o->numel[m] <= o->persist_threshold;
    s.mods[m].trace_at = -1;
  }
  /* the first step records the trace; the second runs by it with every
   * persistent copy held but stale; from then on each step repeats it */
  for (int step = 0; step < 3; step++) {
    for (int k = 0; k < o->nevents; k++) {
      const zrt_sim_event *e = &o->events[k];
      sim_mod *me = &s.mods[e->module];
      switch (e->kind) {
      case ZRT_SIM_FETCH: sim_fetch(&s, e->module); break;
      case ZRT_SIM_RELEASE: sim_release(&s, e->module); break;
      case ZRT_SIM_GRAD:
        if (!me->grad) {
          me->grad = 1;
          s.grads += me->padded;
          sim_mark(&s);
        }
        break;
      case ZRT_SIM_GRAD_DONE:
        /* grads_ready allocates the buffer if the program never wrote it */
        if (!me->grad) {
          s.grads += me->padded;
          sim_mark(&s);
        }
        s.grads -= me->padded;
        me->grad = 0;
        break;
      }
    }
    sim_boundary(&s);
  }
  *out = s.peak;
  free(s.mods);
  free(s.trace);
  return 0;
}
