/*
 * test_fp16_accum.c — fp16 with gradient accumulation K > 1 skips exactly
 * the steps DeepSpeed skips (issue 26). DeepSpeed's engine.backward divides
 * the loss by gradient_accumulation_steps before the loss scaler multiplies
 * it, so each micro-batch's 16-bit gradient is fp16(g * scale / K); ZeRO
 * stage 0/1 add the K micro-batches in the 16-bit .grad (an fp16 sum that
 * overflows when a partial sum rounds to inf), stage 2/3 move each
 * micro-batch into fp32 (only a micro-batch's own fp16 value can overflow).
 * DeepSpeed's DynamicLossScaler.update_scale (loss_scaler.py) then decides
 * the next scale: on overflow, halve (floored at min_loss_scale) when
 * hysteresis is 1 or exhausted, else count the hysteresis down; on a clean
 * step, double when cur_iter - last_overflow_iter - 1 is a positive
 * multiple of loss_scale_window (and refill the hysteresis).
 *
 * The reference below is that rule written out here with the compiler's
 * own fp16 rounding (_Float16), independent of zrt's scaler and
 * conversions. The engine (one rank, comm self, CPU backend) runs fp16,
 * initial_scale_power 16, K = 4, micro-batch 16, loss_scale_window 2,
 * hysteresis 2, min_loss_scale 2^13, at stages 0-3, with a schedule of
 * per-step mean gradients g: the program adds g * zrt_engine_loss_scale()
 * into every element of the gradient buffer for each of the K micro-batches
 * (fp16 adds: stage 0/1 accumulate in the buffer). Each step's skipped flag
 * and loss scale must equal the reference's, exactly (powers of two and
 * flags). Before the fix zrt added g * scale K times: the first step at
 * 2^16 with g = 0.5 overflowed (131072) where DeepSpeed's sum is 32768.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtype.h"
#include "zt_engine.h"
#include "ztest.h"

#define K 4
#define N 64
#define NSTEP 12
/* per-step mean gradient: clean at 2^16 (0.5: DeepSpeed's stage 0/1 sum
 * 32768), overflowing only once the scale has grown, then 2.0 (K * 32768
 * overflows an fp16 sum but not one fp16 micro-batch: stages differ) */
static const float sched[NSTEP] = {0.5f, 0.5f, 0.5f, 0.5f, 0.5f,  2.0f,
                                   0.5f, 0.5f, 0.5f, 4.0f, 0.25f, 0.25f};

typedef struct ds_scaler {
  double scale, min_scale;
  int64_t window, hysteresis, cur_hysteresis, cur_iter, last_overflow_iter;
} ds_scaler;

/* DynamicLossScaler.update_scale, consecutive_hysteresis false */
static void ds_update(ds_scaler *s, int overflow) {
  if (overflow) {
    if (s->hysteresis == 1 || s->cur_hysteresis == 1)
      s->scale = fmax(s->scale / 2, s->min_scale);
    else
      s->cur_hysteresis--;
    s->last_overflow_iter = s->cur_iter;
  } else {
    int64_t stable = s->cur_iter - s->last_overflow_iter - 1;
    if (stable > 0 && stable % s->window == 0) {
      s->cur_hysteresis = s->hysteresis;
      s->scale *= 2;
    }
  }
  s->cur_iter++;
}

/* DeepSpeed's overflow check of one step's 16-bit gradients */
static int ds_overflow(int stage, float g, double scale) {
  _Float16 micro = (_Float16)(float)((double)g * (scale / K));
  if (stage >= 2) return !isfinite((float)micro);
  _Float16 acc = 0;
  for (int k = 0; k < K; k++) acc = (_Float16)((float)acc + (float)micro);
  return !isfinite((float)acc);
}

static void run(int stage) {
  zrt_config *cfg;
  ZT_OK(zrt_config_create(&cfg));
  char st[8];
  snprintf(st, sizeof st, "%d", stage);
  const char *kv[] = {"zrt.backend",
                      "cpu",
                      "train_micro_batch_size_per_gpu",
                      "16",
                      "gradient_accumulation_steps",
                      "4",
                      "zero_optimization.stage",
                      st,
                      "fp16.enabled",
                      "true",
                      "fp16.initial_scale_power",
                      "16",
                      "fp16.loss_scale_window",
                      "2",
                      "fp16.hysteresis",
                      "2",
                      "fp16.min_loss_scale",
                      "8192",
                      "optimizer.type",
                      "Adam",
                      "steps_per_print",
                      "1000",
                      NULL};
  for (int i = 0; kv[i]; i += 2) ZT_OK(zrt_config_set(cfg, kv[i], kv[i + 1], "test"));
  zrt_engine *eng;
  ZT_OK(zrt_engine_create(cfg, &eng));
  zrt_config_destroy(cfg);
  int mid, pid;
  ZT_OK(zrt_module_add(eng, "m", &mid));
  int64_t shape[1] = {N};
  zrt_init init = {ZRT_INIT_NORMAL, 0.02f};
  ZT_OK(zrt_param_add(eng, mid, "m.w", 1, shape, init, 0, &pid));
  ZT_OK(zrt_engine_build(eng));
  ZT_CHECK(zt_view(eng).dtype == ZRT_F16);

  ds_scaler ref = {.scale = 65536,
                   .min_scale = 8192,
                   .window = 2,
                   .hysteresis = 2,
                   .cur_hysteresis = 2,
                   .cur_iter = 0,
                   .last_overflow_iter = -1};
  uint16_t h[N];
  int mismatches = 0, skipped = 0;
  char got[NSTEP + 1] = {0}, want[NSTEP + 1] = {0};
  for (int s = 0; s < NSTEP; s++) {
    zrt_step_info info = {0};
    for (int k = 0; k < K; k++) {
      float bs;
      void *g;
      ZT_OK(zrt_engine_loss_scale(eng, &bs));
      ZT_OK(zrt_module_fetch(eng, mid));
      ZT_OK(zrt_module_release(eng, mid));
      ZT_OK(zrt_param_grad(eng, pid, &g));
      /* the backward ADDS into the buffer (fp16 add: round the sum) */
      ZT_OK(zrt_engine_memcpy(eng, h, g, sizeof h, ZRT_COPY_D2H));
      for (int i = 0; i < N; i++)
        zrt_store_f(h, ZRT_F16, (size_t)i, zrt_load_f(h, ZRT_F16, (size_t)i) + sched[s] * bs);
      ZT_OK(zrt_engine_memcpy(eng, g, h, sizeof h, ZRT_COPY_H2D));
      ZT_OK(zrt_module_grads_ready(eng, mid));
      ZT_OK(zrt_engine_step(eng, 1.0f, &info));
    }
    ZT_CHECK(info.boundary);
    double scale_used = ref.scale;
    int ovf = ds_overflow(stage, sched[s], ref.scale);
    ds_update(&ref, ovf);
    want[s] = ovf ? 'S' : '.';
    got[s] = info.skipped ? 'S' : '.';
    skipped += info.skipped;
    if (info.skipped != ovf || info.loss_scale != (float)scale_used ||
        zt_scaler(eng).cur_scale != ref.scale) {
      mismatches++;
      fprintf(stderr,
              "stage %d step %d (g %g): zrt skipped %d at scale %g, next %g; DeepSpeed skipped %d "
              "at scale %g, next %g\n",
              stage, s + 1, (double)sched[s], info.skipped, (double)info.loss_scale,
              zt_scaler(eng).cur_scale, ovf, scale_used, ref.scale);
    }
  }
  printf("stage %d: skips zrt %s DeepSpeed %s (S = skipped), final scale %g vs %g, %d mismatch\n",
         stage, got, want, zt_scaler(eng).cur_scale, ref.scale, mismatches);
  ZT_CHECK(mismatches == 0);
  ZT_CHECK(skipped > 0 && skipped < NSTEP); /* the schedule exercises both branches */
  zrt_engine_destroy(eng);
}

int main(void) {
  for (int stage = 0; stage <= 3; stage++) run(stage);
  ZT_DONE();
}
