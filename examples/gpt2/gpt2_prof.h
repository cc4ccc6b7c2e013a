/*
 * gpt2_prof.h — per-kind timing of the GPT example's model kernels
 * (train_gpt2 --profile_ops PATH): an ops table that wraps the run's own
 * (CPU or CUDA) and times every call by kind (GEMM, LayerNorm forward, the
 * attention's backward, ...) with the backend's clock: the wall clock where
 * ops run synchronously (cpu; on the twin inside the launched task), events
 * on the stream on CUDA (gpt2_cuda_prof_clock). At each optimizer step's
 * end the clock is flushed (a host wait on CUDA and the twin: profiling
 * changes the step's host waits) and the step's per-kind milliseconds and
 * call counts are kept; gpt2_prof_write puts the medians over the steps in
 * a JSON file, with the step's wall time, so that the model kernels' share
 * of a step and each kind's distance from its floor (perf/gpt2_cuda_budget.py)
 * can be read off. Kernels outside the ops table (the weights' staging, the
 * engine's optimizer, comms and copies) are not counted.
 */
#ifndef GPT2_PROF_H
#define GPT2_PROF_H

#include "gpt2_model.h"

typedef enum gpt2_prof_kind {
  GPT2_PROF_GEMM = 0,
  GPT2_PROF_ZERO,
  GPT2_PROF_ENCODER_FWD,
  GPT2_PROF_ENCODER_BWD,
  GPT2_PROF_LAYERNORM_FWD,
  GPT2_PROF_LAYERNORM_BWD,
  GPT2_PROF_BIAS_BWD,
  GPT2_PROF_ATTENTION_FWD,
  GPT2_PROF_ATTENTION_BWD,
  GPT2_PROF_GELU_FWD,
  GPT2_PROF_GELU_BWD,
  GPT2_PROF_RESIDUAL,
  GPT2_PROF_CROSSENTROPY,
  GPT2_PROF_KINDS
} gpt2_prof_kind;

/* The JSON names of the kinds, in enum order. */
extern const char *const gpt2_prof_names[GPT2_PROF_KINDS];

/* A clock: mark(kind, 0) before a call, mark(kind, 1) after it; flush adds
 * each kind's milliseconds since the last flush into ms[GPT2_PROF_KINDS],
 * after waiting for the calls to finish. */
typedef struct gpt2_prof_clock {
  void *ctx;
  void (*mark)(void *ctx, int kind, int end);
  zrt_status (*flush)(void *ctx, double *ms);
} gpt2_prof_clock;

/* The wall clock of synchronous ops; eng (may be NULL) is synchronized at
 * flush (the twin runs the tasks on a stream worker). */
void gpt2_prof_wall_clock(gpt2_prof_clock *out, zrt_engine *eng);

/* Wraps *ops (kept by pointer, as the clock) into *out: one profiler per
 * process (the wrappers find it in static storage). */
zrt_status gpt2_prof_start(const gpt2_ops_f32 *ops, const gpt2_prof_clock *clock,
                           gpt2_ops_f32 *out);
/* One optimizer step ended after step_s seconds of wall time: flushes the
 * clock and keeps the step's figures. */
zrt_status gpt2_prof_step_end(double step_s);
/* Writes the JSON (medians over the steps after the first `skip`, or over
 * all when there are no more) to path and prints a table on stdout when
 * print is set; frees the records. */
zrt_status gpt2_prof_finish(const char *path, int skip, int print);

#endif
