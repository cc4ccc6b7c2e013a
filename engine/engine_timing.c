/*
 * engine_timing.c — the step breakdown (zrt_step_timing): where one
 * optimizer step's wall time went on this rank.
 *
 * A window runs from the end of the previous boundary (or of build) to the
 * end of the next one. Inside it the time is partitioned by phase —
 * outside the passes (ZRT_PHASE_OTHER), forward, backward — plus the
 * boundary's zrt_engine_step; the phase switches on zrt_engine_mark or, for
 * a program that never marks, on the implicit marks (first fetch after a
 * step = forward, first grad request after that = backward). Engine calls
 * add their own durations (fetch, reduce, optimizer, gather) on top: those
 * are contained in the phases, not added to them. Communication comes from
 * the comm's busy/wait counters (comm/comm.h), differenced over the
 * window.
 *
 * Invariant: other_s + forward_s + backward_s + boundary_s == step_s up to
 * floating-point rounding, because every switch closes the running phase at
 * the same timestamp that opens the next.
 */
#include <string.h>

#include "engine_internal.h"

void zrt_engine_phase_enter(zrt_engine *eng, int phase, double now) {
  zrt_engine_phase_acc *a = &eng->ph;
  a->pass_s[a->phase] += now - a->mark;
  a->phase = phase;
  a->mark = now;
}

void zrt_engine_phase_infer(zrt_engine *eng, int phase) {
  int cur = eng->ph.phase;
  if (eng->ph.explicit_marks) return;
  if ((phase == ZRT_PHASE_FORWARD && cur == ZRT_PHASE_OTHER) ||
      (phase == ZRT_PHASE_BACKWARD && cur == ZRT_PHASE_FORWARD))
    zrt_engine_phase_enter(eng, phase, zrt_now_s());
}

double zrt_engine_timing_charge(double *acc, double since, double excluded) {
  double now = zrt_now_s();
  *acc += now - since - excluded;
  return now;
}

int64_t zrt_engine_accum_steps(const zrt_engine *eng) {
  int64_t k = eng->cfg->gradient_accumulation_steps;
  return k > 0 ? k : 1;
}

void zrt_engine_timing_open(zrt_engine *eng, double now) {
  zrt_engine_phase_acc *a = &eng->ph;
  int explicit_marks = a->explicit_marks;
  memset(a, 0, sizeof *a);
  a->explicit_marks = explicit_marks;
  a->phase = ZRT_PHASE_OTHER;
  a->mark = now;
  a->t_window = now;
  a->busy0 = eng->comm->busy_s;
  a->wait0 = eng->comm->wait_s;
  zrt_engine_counters_open(eng); /* the backend's counters share the window */
}

void zrt_engine_timing_close(zrt_engine *eng, double boundary_start, double now) {
  zrt_engine_phase_acc *a = &eng->ph;
  zrt_step_timing *t = &eng->timing;
  /* the boundary is its own share: close the running phase where it began */
  zrt_engine_phase_enter(eng, ZRT_PHASE_OTHER, boundary_start);
  memset(t, 0, sizeof *t);
  t->step = eng->global_step;
  t->step_s = now - a->t_window;
  t->other_s = a->pass_s[ZRT_PHASE_OTHER];
  t->forward_s = a->pass_s[ZRT_PHASE_FORWARD];
  t->backward_s = a->pass_s[ZRT_PHASE_BACKWARD];
  t->boundary_s = now - boundary_start;
  t->fetch_s = a->fetch_s;
  t->reduce_s = a->reduce_s;
  t->optimizer_s = a->optimizer_s;
  t->gather_s = a->gather_s;
  t->comm_busy_s = eng->comm->busy_s - a->busy0;
  t->comm_wait_s = eng->comm->wait_s - a->wait0;
  if (t->comm_busy_s > 0) {
    double f = 1.0 - t->comm_wait_s / t->comm_busy_s;
    t->overlap_fraction = f < 0 ? 0 : f;
  }
  zrt_engine_timing_open(eng, now);
}

zrt_status zrt_engine_mark(zrt_engine *eng, zrt_phase phase) {
  if (!eng) return zrt_error(ZRT_ERR_INVALID_ARG, "zrt_engine_mark: NULL engine");
  if (!eng->built)
    return zrt_error(ZRT_ERR_INVALID_ARG, "zrt_engine_mark: call zrt_engine_build first");
  if (phase != ZRT_PHASE_FORWARD && phase != ZRT_PHASE_BACKWARD && phase != ZRT_PHASE_OTHER)
    return zrt_error(ZRT_ERR_INVALID_ARG,
                     "zrt_engine_mark: phase %d is not ZRT_PHASE_FORWARD (0), ZRT_PHASE_BACKWARD "
                     "(1) or ZRT_PHASE_OTHER (2)",
                     (int)phase);
  eng->ph.explicit_marks = 1;
  zrt_engine_phase_enter(eng, (int)phase, zrt_now_s());
  return ZRT_OK;
}

zrt_status zrt_engine_step_timing(const zrt_engine *eng, zrt_step_timing *out) {
  if (!eng || !out) return zrt_error(ZRT_ERR_INVALID_ARG, "zrt_engine_step_timing: NULL argument");
  *out = eng->timing;
  return ZRT_OK;
}
