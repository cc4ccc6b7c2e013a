/*
 * lr_sched.h — learning-rate schedulers exactly as DeepSpeed defines them
 * (deepspeed/runtime/lr_schedules.py): WarmupLR, WarmupDecayLR,
 * WarmupCosineLR, or none (constant optimizer lr).
 *
 * The scheduler counts applied optimizer steps: last_batch_iteration starts
 * at -1 and zrt_sched_step advances it after every non-skipped step, so the
 * n-th applied step uses the lr of iteration n-2 (the first uses the value
 * set at construction, which DeepSpeed defines as get_lr() at iteration -1:
 * 0 for the warmup schedulers).
 */
#ifndef ZRT_LR_SCHED_H
#define ZRT_LR_SCHED_H

#include <stdint.h>

#include "config.h"

typedef struct zrt_sched {
  zrt_sched_type type;
  double base_lr; /* optimizer lr (WarmupCosineLR's org_lr; constant lr when none) */
  double min_lr, max_lr;
  int64_t warmup_num_steps; /* max(2, configured) */
  int warmup_log;
  int64_t total_num_steps;
  double cos_min_ratio, warmup_min_ratio;
  int64_t last_batch_iteration;
  double cur_lr; /* lr the next optimizer step uses */
} zrt_sched;

/* The scheduler's state as a checkpoint keeps it (DeepSpeed's
 * lr_scheduler.state_dict): the schedule's kind, the iteration and the lr
 * the next step uses. The shape of the schedule comes from the config. */
typedef struct zrt_sched_state {
  int type; /* zrt_sched_type; -1 = unknown (a checkpoint without it) */
  int64_t last_batch_iteration;
  double cur_lr; /* NaN = not saved */
} zrt_sched_state;

void zrt_sched_state_get(const zrt_sched *s, zrt_sched_state *out);
/* Restores the iteration (the lr recomputed from this schedule), then the
 * saved lr where the saved kind is this schedule's and an lr was saved. */
void zrt_sched_state_set(zrt_sched *s, const zrt_sched_state *in);

void zrt_sched_init(zrt_sched *s, const zrt_cfg *cfg);
/* lr of a given iteration (pure). */
double zrt_sched_lr_at(const zrt_sched *s, int64_t last_batch_iteration);
/* After an applied optimizer step. */
void zrt_sched_step(zrt_sched *s);
/* Sets the iteration (checkpoint restore). */
void zrt_sched_set_iteration(zrt_sched *s, int64_t last_batch_iteration);

#endif
