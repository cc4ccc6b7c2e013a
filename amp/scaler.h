/*
 * scaler.h — the loss scaler (DeepSpeed's ZeRO DynamicLossScaler semantics).
 *
 * Dynamic: the scale starts at 2^initial_scale_power. On an overflow step the
 * hysteresis counter counts down; only when it is exhausted (or hysteresis
 * is 1) does the scale halve, never below min_loss_scale. After
 * loss_scale_window consecutive clean iterations since the last overflow
 * the scale doubles and hysteresis refills; with consecutive_hysteresis
 * every clean step refills it. Static when loss_scale > 0 (never changes).
 * Disabled (bf16/fp32): scale 1, never changes.
 */
#ifndef ZRT_SCALER_H
#define ZRT_SCALER_H

#include <stdint.h>

#include "zrt.h"

typedef struct zrt_scaler {
  int dynamic;           /* 1 = dynamic, 0 = static or disabled */
  double cur_scale;      /* scale the next backward uses */
  double min_scale;      /* floor */
  double factor;         /* 2 */
  int64_t window;        /* loss_scale_window */
  int64_t delayed_shift; /* hysteresis */
  int64_t cur_hysteresis;
  int consecutive_hysteresis;
  int64_t cur_iter;
  int64_t last_overflow_iter;
  /* 1 (ZeRO stages 1-3, DeepSpeed's DynamicLossScaler): an overflow at the
   * minimum scale with hysteresis exhausted is an error. 0 (stage 0,
   * DeepSpeed's FP16_Optimizer): the scale stays at the floor and the step
   * is skipped. */
  int raise_at_min;
} zrt_scaler;

/* Dynamic scaler (raise_at_min = 1; the engine clears it at stage 0). */
/* The scaler's state as a checkpoint keeps it (DeepSpeed's
 * loss_scaler.state_dict): every field but raise_at_min, which the stage's
 * rule sets at init. Callers read and write a scaler's state only through
 * zrt_scaler_state_get / _set, never its fields. */
typedef struct zrt_scaler_state {
  int dynamic;
  double cur_scale, min_scale, factor;
  int64_t window, delayed_shift, cur_hysteresis;
  int consecutive_hysteresis;
  int64_t cur_iter, last_overflow_iter;
} zrt_scaler_state;

void zrt_scaler_state_get(const zrt_scaler *s, zrt_scaler_state *out);
void zrt_scaler_state_set(zrt_scaler *s, const zrt_scaler_state *in);

void zrt_scaler_init_dynamic(zrt_scaler *s, int64_t initial_scale_power, int64_t window,
                             int64_t hysteresis, int consecutive_hysteresis, double min_scale);
/* Static scale (fp16 loss_scale > 0), or scale 1 (bf16 / fp32). */
void zrt_scaler_init_static(zrt_scaler *s, double scale);
/* Records one optimizer step's outcome. Returns ZRT_ERR_OVERFLOW (message
 * set) when a dynamic scaler with raise_at_min overflows while already at
 * the minimum scale and its hysteresis is exhausted — the run cannot make
 * progress. */
zrt_status zrt_scaler_update(zrt_scaler *s, int overflow);
static inline float zrt_scaler_scale(const zrt_scaler *s) { return (float)s->cur_scale; }

#endif
