/*
 * engine_state.c — the engine's run state for checkpoints (engine_state.h):
 * the counters, and the scaler's and scheduler's states through their own
 * accessors. Invariant: a get followed by a set of the same values leaves
 * the engine as it was (what a resume relies on to be bitwise).
 */
#include "engine_state.h"

#include "engine_internal.h"

void zrt_engine_counters_get(const zrt_engine *eng, zrt_engine_counters_state *out) {
  *out = (zrt_engine_counters_state){.global_step = eng->global_step,
                                     .micro_step = eng->micro_step,
                                     .applied_steps = eng->applied_steps,
                                     .skipped_total = eng->skipped_total,
                                     .last_grad_norm = eng->last_grad_norm};
}

void zrt_engine_counters_set(zrt_engine *eng, const zrt_engine_counters_state *in) {
  eng->global_step = in->global_step;
  eng->micro_step = in->micro_step;
  eng->applied_steps = in->applied_steps;
  eng->skipped_total = in->skipped_total;
  eng->last_grad_norm = in->last_grad_norm;
}

void zrt_engine_scaler_get(const zrt_engine *eng, zrt_scaler_state *out) {
  zrt_scaler_state_get(&eng->scaler, out);
}

void zrt_engine_scaler_set(zrt_engine *eng, const zrt_scaler_state *in) {
  zrt_scaler_state_set(&eng->scaler, in);
}

void zrt_engine_sched_get(const zrt_engine *eng, zrt_sched_state *out) {
  zrt_sched_state_get(&eng->sched, out);
}

void zrt_engine_sched_set(zrt_engine *eng, const zrt_sched_state *in) {
  zrt_sched_state_set(&eng->sched, in);
}
