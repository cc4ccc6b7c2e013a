/*
 * coordinator_sim.c — the replay (coordinator_sim.h): executes the stage-3
 * policy (coord_policy.h) as the coordinator does, with counters where the
 * coordinator has copies and all-gathers, and adds the 16-bit gradient
 * buffers. It decides nothing itself: every fetch, eviction, prefetch,
 * keep and boundary is the policy's answer, so the replay cannot drift
 * from the coordinator. Invariants: a copy counts from its allocation (as
 * in the pools), a prefetched copy is current at once (an optimizer step
 * waits for every gather before the copies are invalidated), and the peaks
 * are marked after every increase.
 */
#include <stdlib.h>
#include <string.h>

#include "coord_policy.h"
#include "coordinator_sim.h"

typedef struct sim {
  zrt_cpol pol;
  int *grad; /* per module: its 16-bit gradient buffer is allocated */
  int64_t grads;
  zrt_coord_sim_peaks peak;
} sim;

static void sim_mark(sim *s) {
  int64_t live = s->pol.live_elems;
  if (live > s->peak.live) s->peak.live = live;
  if (s->grads > s->peak.grads) s->peak.grads = s->grads;
  if (live + s->grads > s->peak.both) s->peak.both = live + s->grads;
}

/* m's copy, after the retained copies the policy evicts for it. */
static void sim_alloc(sim *s, int m, int blocking) {
  if (s->pol.mods[m].copy) return;
  for (int v; (v = zrt_cpol_evict_for(&s->pol, m, blocking)) >= 0;) zrt_cpol_on_free(&s->pol, v);
  zrt_cpol_on_alloc(&s->pol, m);
  sim_mark(s);
}

static int sim_fetch(sim *s, int m) {
  int pos = -1;
  if (zrt_cpol_fetch(&s->pol, m, &pos) != 0) return -1;
  if (!s->pol.mods[m].valid) {
    sim_alloc(s, m, 1);
    zrt_cpol_set_valid(&s->pol, m, 1);
  }
  zrt_cpol_on_use(&s->pol, m);
  zrt_cpol_cursor cur = zrt_cpol_prefetch_begin(&s->pol, pos);
  for (int i; (i = zrt_cpol_prefetch_next(&s->pol, &cur)) >= 0;) {
    int nx = s->pol.trace[i];
    sim_alloc(s, nx, 0);
    zrt_cpol_set_valid(&s->pol, nx, 1); /* gather in flight: the step waits for it */
  }
  return 0;
}

static void sim_release(sim *s, int m) {
  if (!zrt_cpol_on_release(&s->pol, m)) return;
  if (!s->pol.mods[m].copy) {
    zrt_cpol_set_valid(&s->pol, m, 0);
    return;
  }
  int64_t between;
  if (zrt_cpol_keep(&s->pol, m, &between))
    zrt_cpol_on_keep(&s->pol, m);
  else
    zrt_cpol_on_free(&s->pol, m);
}

/* The optimizer boundary: freeze the trace, then invalidate every copy. */
static void sim_boundary(sim *s) {
  zrt_cpol_freeze(&s->pol);
  for (int m = 0; m < s->pol.nmodules; m++)
    if (zrt_cpol_stale(&s->pol, m)) zrt_cpol_on_free(&s->pol, m);
  zrt_cpol_on_boundary(&s->pol);
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
  sim s = {0};
  zrt_cpol_settings ps = {.prefetch_elems = o->prefetch_elems,
                          .max_live_elems = o->max_live_elems,
                          .reuse_distance = o->reuse_distance,
                          .persist_threshold = o->persist_threshold};
  s.grad = calloc((size_t)(o->nmodules > 0 ? o->nmodules : 1), sizeof *s.grad);
  if (!s.grad || zrt_cpol_init(&s.pol, &ps, o->nmodules, o->numel, o->padded) != 0) {
    free(s.grad);
    zrt_cpol_fini(&s.pol);
    return -1;
  }
  int rc = 0;
  /* the first step records the trace; the second runs by it with every
   * persistent copy held but stale; from then on each step repeats it */
  for (int step = 0; step < 3 && rc == 0; step++) {
    for (int k = 0; k < o->nevents && rc == 0; k++) {
      const zrt_sim_event *e = &o->events[k];
      int m = e->module;
      int64_t padded = o->padded[m];
      switch (e->kind) {
      case ZRT_SIM_FETCH: rc = sim_fetch(&s, m); break;
      case ZRT_SIM_RELEASE: sim_release(&s, m); break;
      case ZRT_SIM_GRAD:
        if (!s.grad[m]) {
          s.grad[m] = 1;
          s.grads += padded;
          sim_mark(&s);
        }
        break;
      case ZRT_SIM_GRAD_DONE:
        /* grads_ready allocates the buffer if the program never wrote it */
        if (!s.grad[m]) {
          s.grads += padded;
          sim_mark(&s);
        }
        s.grads -= padded;
        s.grad[m] = 0;
        break;
      }
    }
    sim_boundary(&s);
  }
  if (rc == 0) *out = s.peak;
  free(s.grad);
  zrt_cpol_fini(&s.pol);
  return rc;
}
