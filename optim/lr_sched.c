/*
 * lr_sched.c — WarmupLR, WarmupDecayLR and WarmupCosineLR with DeepSpeed's
 * formulas (lr_schedules.py): log warmup gamma = log(it+1)/log(W), linear
 * it/W, W = max(2, warmup_num_steps); decay (T-it)/max(1,T-W) floored at 0;
 * cosine ratio on real step it-W+1 of T-W. Iteration -1 (before the first
 * step) gives lr 0 for all three, as DeepSpeed's get_lr() does.
 */
#include "lr_sched.h"

#include <math.h>

void zrt_sched_init(zrt_sched *s, const zrt_cfg *cfg) {
  s->type = cfg->scheduler_type;
  s->base_lr = cfg->lr;
  s->min_lr = cfg->warmup_min_lr;
  s->max_lr = cfg->warmup_max_lr;
  s->warmup_num_steps = cfg->warmup_num_steps < 2 ? 2 : cfg->warmup_num_steps;
  s->warmup_log = cfg->warmup_type_log;
  s->total_num_steps = cfg->total_num_steps;
  s->cos_min_ratio = cfg->cos_min_ratio;
  s->warmup_min_ratio = cfg->warmup_min_ratio;
  zrt_sched_set_iteration(s, -1);
}

static double zrt_sched_warm_gamma(const zrt_sched *s, int64_t it) {
  if (s->warmup_log) return log((double)it + 1.0) / log((double)s->warmup_num_steps);
  return (double)it / (double)s->warmup_num_steps;
}

double zrt_sched_lr_at(const zrt_sched *s, int64_t it) {
  if (s->type == ZRT_SCHED_NONE) return s->base_lr;
  if (it < 0) return 0.0;
  switch (s->type) {
  case ZRT_SCHED_WARMUP_LR: {
    double g = it < s->warmup_num_steps ? zrt_sched_warm_gamma(s, it) : 1.0;
    return s->min_lr + (s->max_lr - s->min_lr) * g;
  }
  case ZRT_SCHED_WARMUP_DECAY_LR: {
    double g;
    if (it < s->warmup_num_steps)
      g = zrt_sched_warm_gamma(s, it);
    else {
      double den = (double)(s->total_num_steps - s->warmup_num_steps);
      if (den < 1.0) den = 1.0;
      g = fmax(0.0, (double)(s->total_num_steps - it) / den);
    }
    return s->min_lr + (s->max_lr - s->min_lr) * g;
  }
  case ZRT_SCHED_WARMUP_COSINE_LR: {
    double ratio;
    if (it < s->warmup_num_steps) {
      ratio = zrt_sched_warm_gamma(s, it);
      ratio = s->warmup_min_ratio + ratio * (1.0 - s->warmup_min_ratio);
    } else {
      double real_last = (double)(it - s->warmup_num_steps + 1);
      double real_total = (double)(s->total_num_steps - s->warmup_num_steps);
      ratio = (1.0 + cos(M_PI * real_last / real_total)) / 2.0;
      ratio = fmax(0.0, s->cos_min_ratio + (1.0 - s->cos_min_ratio) * ratio);
    }
    return s->base_lr * ratio;
  }
  default: return s->base_lr;
  }
}

void zrt_sched_set_iteration(zrt_sched *s, int64_t it) {
  s->last_batch_iteration = it;
  s->cur_lr = zrt_sched_lr_at(s, it);
}

void zrt_sched_step(zrt_sched *s) { zrt_sched_set_iteration(s, s->last_batch_iteration + 1); }

void zrt_sched_state_get(const zrt_sched *s, zrt_sched_state *out) {
  *out = (zrt_sched_state){
      .type = (int)s->type, .last_batch_iteration = s->last_batch_iteration, .cur_lr = s->cur_lr};
}

void zrt_sched_state_set(zrt_sched *s, const zrt_sched_state *in) {
  zrt_sched_set_iteration(s, in->last_batch_iteration);
  if (in->type == (int)s->type && !isnan(in->cur_lr)) s->cur_lr = in->cur_lr;
}
