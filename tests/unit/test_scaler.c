/*
 * test_scaler.c — the loss scaler against DeepSpeed's own tests, ported
 * with their inputs and asserted values: tests/unit/runtime/half_precision/
 * test_dynamic_loss_scale.py (TestFused / TestUnfused no, all and some
 * overflow; TestZeroStage0Hysteresis). Those drive FP16_Optimizer, whose
 * scale stays at the floor on an overflow at the minimum (zrt's stage 0:
 * raise_at_min 0); ZeRO's DynamicLossScaler (stages 1-3) raises there
 * instead, checked last. Growth follows DeepSpeed's current
 * update_scale: stable_interval = cur_iter - last_overflow_iter - 1 must be
 * positive and a multiple of the window. Exact (tolerance 0: scales are
 * powers of two). DeepSpeed's "random uniform(-0.1, 0.1)" gradients only
 * matter for being finite: a clean step is overflow 0.
 */
#include "internal.h"
#include "scaler.h"
#include "ztest.h"

/* DeepSpeedFP16Config defaults the ported tests leave unset */
#define DS_HYSTERESIS 2
#define DS_MIN_LOSS_SCALE 1.0
#define DS_WINDOW 1000

static void ds_init(zrt_scaler *s, int power, int window, int hysteresis, int consecutive,
                    double min_scale) {
  zrt_scaler_init_dynamic(s, power, window, hysteresis, consecutive, min_scale);
  s->raise_at_min = 0; /* FP16_Optimizer (zrt stage 0) */
}

/* test_no_overflow: scale 2^8, window 2, ten clean steps; after each the
 * scale is the expected one and cur_iter == i + 1, and the expected scale
 * doubles whenever cur_iter is a multiple of the window. */
static void no_overflow(void) {
  zrt_scaler s;
  ds_init(&s, 8, 2, DS_HYSTERESIS, 0, DS_MIN_LOSS_SCALE);
  double expected = 256;
  ZT_CHECK(s.cur_scale == expected && s.window == 2 && s.dynamic);
  for (int i = 0; i < 10; i++) {
    ZT_OK(zrt_scaler_update(&s, 0));
    if (s.cur_scale != expected || s.cur_iter != i + 1) {
      fprintf(stderr, "FAIL no_overflow step %d: scale %g iter %lld, want %g iter %d\n", i,
              s.cur_scale, (long long)s.cur_iter, expected, i + 1);
      zt_failures++;
    }
    if (s.cur_iter % 2 == 0) expected *= 2;
  }
  printf("no_overflow: final scale %g (want %g after the last doubling)\n", s.cur_scale,
         expected / 2);
}

/* test_all_overflow: scale 2^4, window 2, hysteresis 1; inf, -inf, six nan:
 * each step halves, floored at min_loss_scale (1 fused, 2 unfused). */
static void all_overflow(double min_scale) {
  zrt_scaler s;
  ds_init(&s, 4, 2, 1, 0, min_scale);
  double expected = 16;
  for (int i = 0; i < 8; i++) {
    ZT_OK(zrt_scaler_update(&s, 1));
    expected = expected / 2 > min_scale ? expected / 2 : min_scale;
    if (s.cur_scale != expected || s.cur_iter != i + 1) {
      fprintf(stderr, "FAIL all_overflow(min %g) step %d: scale %g iter %lld, want %g\n", min_scale,
              i, s.cur_scale, (long long)s.cur_iter, expected);
      zt_failures++;
    }
  }
  printf("all_overflow(min %g): final scale %g\n", min_scale, s.cur_scale);
}

/* test_some_overflow: 2^8, window 2, hysteresis 1. Two overflows -> /4 at
 * iteration 2; window + 1 clean steps -> x2 once at iteration 5; one
 * overflow -> /2 at iteration 6. */
static void some_overflow(void) {
  zrt_scaler s;
  ds_init(&s, 8, 2, 1, 0, DS_MIN_LOSS_SCALE);
  double expected = 256;
  int64_t it = 0;
  for (int i = 0; i < 2; i++) ZT_OK(zrt_scaler_update(&s, 1));
  it += 2;
  expected /= 4;
  ZT_CHECK(s.cur_scale == expected && s.cur_iter == it);
  for (int i = 0; i < 3; i++) ZT_OK(zrt_scaler_update(&s, 0));
  it += 3;
  expected *= 2;
  ZT_CHECK(s.cur_scale == expected && s.cur_iter == it);
  ZT_OK(zrt_scaler_update(&s, 1));
  it += 1;
  expected /= 2;
  ZT_CHECK(s.cur_scale == expected && s.cur_iter == it);
  printf("some_overflow: scale %g at iteration %lld\n", s.cur_scale, (long long)s.cur_iter);
}

/* TestZeroStage0Hysteresis (initial_scale_power 8, DeepSpeed's default
 * window): hysteresis 3 absorbs two overflows, then each halves; with
 * consecutive hysteresis 2 a clean step refills it, so isolated overflows
 * never lower the scale; one overflow leaves cur_hysteresis 2 (the counter
 * a checkpoint carries, saved by checkpoint.c). */
static void hysteresis(void) {
  zrt_scaler s;
  ds_init(&s, 8, DS_WINDOW, 3, 0, DS_MIN_LOSS_SCALE);
  double got[4], want[4] = {256, 256, 128, 64};
  for (int i = 0; i < 4; i++) {
    ZT_OK(zrt_scaler_update(&s, 1));
    got[i] = s.cur_scale;
  }
  ZT_CLOSE_ARRAY("test_hysteresis", got, want, 4, 0.0);
  ds_init(&s, 8, DS_WINDOW, 2, 1, DS_MIN_LOSS_SCALE);
  for (int i = 0; i < 4; i++) {
    ZT_OK(zrt_scaler_update(&s, 1));
    ZT_OK(zrt_scaler_update(&s, 0));
  }
  ZT_CHECK(s.cur_scale == 256);
  ds_init(&s, 8, DS_WINDOW, 3, 0, DS_MIN_LOSS_SCALE);
  ZT_OK(zrt_scaler_update(&s, 1));
  ZT_CHECK(s.cur_hysteresis == 2);
}

int main(void) {
  no_overflow();
  all_overflow(1.0); /* TestFused */
  all_overflow(2.0); /* TestUnfused, min_loss_scale 2.0 */
  some_overflow();
  hysteresis();

  /* the growth rule itself: window 3 after an overflow at iteration 0
   * grows at the update whose stable_interval (cur_iter - 0 - 1) is 3,
   * i.e. the 4th clean update (iteration 4), not the 3rd as the older
   * (cur_iter - last_overflow_iter) % window rule did */
  zrt_scaler s;
  zrt_scaler_init_dynamic(&s, 4, 3, 1, 0, 1.0);
  ZT_OK(zrt_scaler_update(&s, 1)); /* it0: 16 -> 8 */
  double got[5], want[5] = {8, 8, 8, 16, 16};
  for (int i = 0; i < 5; i++) {
    ZT_OK(zrt_scaler_update(&s, 0));
    got[i] = s.cur_scale;
  }
  ZT_CLOSE_ARRAY("window 3 after an overflow", got, want, 5, 0.0);

  /* ZeRO (raise_at_min 1, DynamicLossScaler's raise_error_at_min_scale):
   * an overflow at the minimum with hysteresis exhausted is an error */
  zrt_scaler_init_dynamic(&s, 4, 100, 1, 0, 4.0);
  ZT_OK(zrt_scaler_update(&s, 1));
  ZT_OK(zrt_scaler_update(&s, 1));
  ZT_CHECK(s.cur_scale == 4);
  ZT_CHECK(zrt_scaler_update(&s, 1) == ZRT_ERR_OVERFLOW);
  ZT_CONTAINS(zrt_last_error(), "minimum");
  /* ...but not while hysteresis still absorbs it */
  zrt_scaler_init_dynamic(&s, 2, 100, 2, 0, 4.0);
  ZT_OK(zrt_scaler_update(&s, 1));
  ZT_CHECK(s.cur_scale == 4 && s.cur_hysteresis == 1);

  /* the scaler's saved state (zrt_scaler_state, what a checkpoint keeps):
   * a scaler restored from it into a differently initialised one follows
   * the original update for update, through growth, hysteresis and
   * back-off (exact: the same double arithmetic) */
  {
    zrt_scaler a, b;
    zrt_scaler_init_dynamic(&a, 6, 2, 2, 1, 1.0);
    int pattern[] = {0, 1, 0, 0, 1, 1, 0, 0, 0, 0, 1, 0};
    for (int i = 0; i < 5; i++) ZT_OK(zrt_scaler_update(&a, pattern[i]));
    zrt_scaler_state sa;
    zrt_scaler_state_get(&a, &sa);
    zrt_scaler_init_dynamic(&b, 16, 1000, 5, 0, 0.5);
    zrt_scaler_state_set(&b, &sa);
    double ga[7], gb[7];
    for (int i = 5; i < 12; i++) {
      ZT_OK(zrt_scaler_update(&a, pattern[i]));
      ZT_OK(zrt_scaler_update(&b, pattern[i]));
      ga[i - 5] = a.cur_scale;
      gb[i - 5] = b.cur_scale;
    }
    ZT_CLOSE_ARRAY("scale after a state restore", gb, ga, 7, 0.0);
    ZT_CHECK(a.cur_iter == b.cur_iter && a.last_overflow_iter == b.last_overflow_iter &&
             a.cur_hysteresis == b.cur_hysteresis);
  }

  /* static scale never changes */
  zrt_scaler_init_static(&s, 128);
  for (int i = 0; i < 3; i++) ZT_OK(zrt_scaler_update(&s, i != 1));
  ZT_CHECK(s.cur_scale == 128 && s.cur_iter == 3);
  ZT_DONE();
}
