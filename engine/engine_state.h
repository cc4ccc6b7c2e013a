/*
 * engine_state.h — the engine's run state as a checkpoint saves and loads
 * it: the step counters, and the loss scaler's and the LR scheduler's own
 * state (each part's state struct, amp/scaler.h, optim/lr_sched.h). The
 * narrow accessor checkpoint/ uses instead of the engine's fields.
 */
#ifndef ZRT_ENGINE_STATE_H
#define ZRT_ENGINE_STATE_H

#include <stdint.h>

#include "lr_sched.h"
#include "scaler.h"
#include "zrt.h"

/* The engine's counters (the checkpoint's "counters" object). */
typedef struct zrt_engine_counters_state {
  int64_t global_step;   /* optimizer steps, skipped included */
  int64_t micro_step;    /* zrt_engine_step calls */
  int64_t applied_steps; /* non-skipped steps: the optimizer's bias-correction count */
  int64_t skipped_total;
  float last_grad_norm;
} zrt_engine_counters_state;

void zrt_engine_counters_get(const zrt_engine *eng, zrt_engine_counters_state *out);
void zrt_engine_counters_set(zrt_engine *eng, const zrt_engine_counters_state *in);
void zrt_engine_scaler_get(const zrt_engine *eng, zrt_scaler_state *out);
void zrt_engine_scaler_set(zrt_engine *eng, const zrt_scaler_state *in);
void zrt_engine_sched_get(const zrt_engine *eng, zrt_sched_state *out);
void zrt_engine_sched_set(zrt_engine *eng, const zrt_sched_state *in);

#endif
