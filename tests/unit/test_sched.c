/*
 * test_sched.c — learning-rate schedules against DeepSpeed's formulas
 * evaluated independently here (lr_schedules.py), tolerance 1e-12.
 */
#include <math.h>

#include "lr_sched.h"
#include "ztest.h"

int main(void) {
  zrt_cfg c;
  memset(&c, 0, sizeof c);
  c.lr = 0.01;
  c.warmup_min_lr = 0.001;
  c.warmup_max_lr = 0.01;
  c.warmup_num_steps = 10;
  c.warmup_type_log = 1;
  c.total_num_steps = 30;
  c.cos_min_ratio = 0.1;
  c.warmup_min_ratio = 0.0;
  zrt_sched s;
  double got[40], want[40];

  c.scheduler_type = ZRT_SCHED_WARMUP_LR;
  zrt_sched_init(&s, &c);
  ZT_CHECK(s.cur_lr == 0.0); /* before the first step, as DeepSpeed's get_lr at -1 */
  for (int it = 0; it < 15; it++) {
    zrt_sched_step(&s);
    got[it] = s.cur_lr;
    want[it] = it < 10 ? 0.001 + 0.009 * log(it + 1.0) / log(10.0) : 0.01;
  }
  ZT_CLOSE_ARRAY("WarmupLR log", got, want, 15, 1e-12);

  c.warmup_type_log = 0;
  c.scheduler_type = ZRT_SCHED_WARMUP_DECAY_LR;
  zrt_sched_init(&s, &c);
  for (int it = 0; it < 35; it++) {
    zrt_sched_step(&s);
    got[it] = s.cur_lr;
    double g = it < 10 ? it / 10.0 : fmax(0.0, (30.0 - it) / 20.0);
    want[it] = 0.001 + 0.009 * g;
  }
  ZT_CLOSE_ARRAY("WarmupDecayLR linear", got, want, 35, 1e-12);

  c.warmup_type_log = 1;
  c.scheduler_type = ZRT_SCHED_WARMUP_COSINE_LR;
  zrt_sched_init(&s, &c);
  for (int it = 0; it < 30; it++) {
    zrt_sched_step(&s);
    got[it] = s.cur_lr;
    double r;
    if (it < 10)
      r = log(it + 1.0) / log(10.0);
    else
      r = fmax(0.0, 0.1 + 0.9 * (1 + cos(M_PI * (it - 10 + 1) / 20.0)) / 2);
    want[it] = 0.01 * r;
  }
  ZT_CLOSE_ARRAY("WarmupCosineLR", got, want, 30, 1e-12);

  c.scheduler_type = ZRT_SCHED_NONE;
  zrt_sched_init(&s, &c);
  zrt_sched_step(&s);
  ZT_CHECK(s.cur_lr == 0.01);
  /* the scheduler's saved state (zrt_sched_state): restored into a fresh
   * schedule of the same kind it gives the saved iteration and lr; of
   * another kind the iteration, with that kind's own lr; without a saved
   * lr (NaN) the lr recomputed */
  {
    c.scheduler_type = ZRT_SCHED_WARMUP_DECAY_LR;
    zrt_sched a, b;
    zrt_sched_init(&a, &c);
    for (int it = 0; it < 7; it++) zrt_sched_step(&a);
    zrt_sched_state sa;
    zrt_sched_state_get(&a, &sa);
    ZT_CHECK(sa.last_batch_iteration == 6 && sa.type == (int)ZRT_SCHED_WARMUP_DECAY_LR);
    zrt_sched_init(&b, &c);
    sa.cur_lr = 0.125; /* a saved lr differing from the formula's: taken as saved */
    zrt_sched_state_set(&b, &sa);
    ZT_CHECK(b.last_batch_iteration == 6 && b.cur_lr == 0.125);
    zrt_sched_step(&a);
    zrt_sched_step(&b);
    ZT_CHECK(a.cur_lr == b.cur_lr);
    sa.cur_lr = NAN;
    zrt_sched_state_set(&b, &sa);
    ZT_CHECK(b.cur_lr == zrt_sched_lr_at(&b, 6));
    c.scheduler_type = ZRT_SCHED_WARMUP_LR;
    zrt_sched_init(&b, &c);
    sa.cur_lr = 0.125;
    zrt_sched_state_set(&b, &sa);
    ZT_CHECK(b.last_batch_iteration == 6 && b.cur_lr == zrt_sched_lr_at(&b, 6));
  }
  ZT_DONE();
}
