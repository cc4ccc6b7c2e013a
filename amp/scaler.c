/*
 * scaler.c — DeepSpeed's DynamicLossScaler.update_scale, step for step
 * (deepspeed/runtime/fp16/loss_scaler.py), and the static scaler.
 * Growth follows the current rule: stable_interval = cur_iter -
 * last_overflow_iter - 1 must be positive and a multiple of the window.
 * Invariant: cur_scale >= min_scale for a dynamic scaler; cur_iter counts
 * every update (overflowing ones included), as DeepSpeed's does.
 */
#include "scaler.h"

#include <math.h>

#include "internal.h"

void zrt_scaler_init_dynamic(zrt_scaler *s, int64_t initial_scale_power, int64_t window,
                             int64_t hysteresis, int consecutive_hysteresis, double min_scale) {
  s->dynamic = 1;
  s->cur_scale = ldexp(1.0, (int)initial_scale_power);
  s->min_scale = min_scale;
  s->factor = 2.0;
  s->window = window > 0 ? window : 1;
  s->delayed_shift = hysteresis > 0 ? hysteresis : 1;
  s->cur_hysteresis = s->delayed_shift;
  s->consecutive_hysteresis = consecutive_hysteresis;
  s->cur_iter = 0;
  s->last_overflow_iter = -1;
  s->raise_at_min = 1;
}

void zrt_scaler_init_static(zrt_scaler *s, double scale) {
  s->dynamic = 0;
  s->cur_scale = scale;
  s->min_scale = scale;
  s->factor = 2.0;
  s->window = 1;
  s->delayed_shift = s->cur_hysteresis = 1;
  s->consecutive_hysteresis = 0;
  s->cur_iter = 0;
  s->last_overflow_iter = -1;
}

zrt_status zrt_scaler_update(zrt_scaler *s, int overflow) {
  if (!s->dynamic) {
    s->cur_iter++;
    return ZRT_OK;
  }
  if (overflow) {
    if (s->delayed_shift == 1 || s->cur_hysteresis == 1) {
      if (s->raise_at_min && s->cur_scale <= s->min_scale) {
        s->cur_iter++;
        s->last_overflow_iter = s->cur_iter - 1;
        return zrt_error(ZRT_ERR_OVERFLOW,
                         "gradient overflow with the loss scale already at its minimum (%g, "
                         "fp16.min_loss_scale): training cannot make progress; lower the learning "
                         "rate, enable gradient_clipping, or use bf16",
                         s->min_scale);
      }
      s->cur_scale = fmax(s->cur_scale / s->factor, s->min_scale);
    } else {
      s->cur_hysteresis--;
    }
    s->last_overflow_iter = s->cur_iter;
  } else {
    if (s->consecutive_hysteresis) s->cur_hysteresis = s->delayed_shift;
    /* DeepSpeed's current rule: the clean iterations since the last overflow,
     * not counting this one, must be a positive multiple of the window (the
     * older (cur_iter - last_overflow_iter) % window grew one step early). */
    int64_t stable_interval = s->cur_iter - s->last_overflow_iter - 1;
    if (stable_interval > 0 && stable_interval % s->window == 0) {
      if (!s->consecutive_hysteresis) s->cur_hysteresis = s->delayed_shift;
      s->cur_scale *= s->factor;
    }
  }
  s->cur_iter++;
  return ZRT_OK;
}

void zrt_scaler_state_get(const zrt_scaler *s, zrt_scaler_state *out) {
  *out = (zrt_scaler_state){
      .dynamic = s->dynamic,
      .cur_scale = s->cur_scale,
      .min_scale = s->min_scale,
      .factor = s->factor,
      .window = s->window,
      .delayed_shift = s->delayed_shift,
      .cur_hysteresis = s->cur_hysteresis,
      .consecutive_hysteresis = s->consecutive_hysteresis,
      .cur_iter = s->cur_iter,
      .last_overflow_iter = s->last_overflow_iter,
  };
}

void zrt_scaler_state_set(zrt_scaler *s, const zrt_scaler_state *in) {
  s->dynamic = in->dynamic;
  s->cur_scale = in->cur_scale;
  s->min_scale = in->min_scale;
  s->factor = in->factor;
  s->window = in->window;
  s->delayed_shift = in->delayed_shift;
  s->cur_hysteresis = in->cur_hysteresis;
  s->consecutive_hysteresis = in->consecutive_hysteresis;
  s->cur_iter = in->cur_iter;
  s->last_overflow_iter = in->last_overflow_iter;
}
