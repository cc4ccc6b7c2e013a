/*
 * bench_train_util.h — what the training benchmarks (step, comm_volume,
 * memory, sweep) share: running build/bin/train_gpt2 on N ranks under
 * mpiexec for a few steps and reading back what it reported (its per-step
 * "tok/s" lines on stdout, the engine's metrics JSONL, the engine's build
 * log line on stderr).
 *
 * Runs are cached per exact command inside one zrt-perf process, so
 * `zrt-perf all` does not train the same configuration twice (the sweep's
 * stage runs serve the memory bench, for instance); a cached run says so
 * in its JSON ("reused": true). Nothing here asserts: a failed run is a
 * result with ok = 0 and the tail of its stderr.
 */
#ifndef ZRT_BENCH_TRAIN_UTIL_H
#define ZRT_BENCH_TRAIN_UTIL_H

#include "perf.h"

/* Offload modes of the sweep. */
enum { ZRT_PT_OFFLOAD_NONE = 0, ZRT_PT_OFFLOAD_OPT = 1, ZRT_PT_OFFLOAD_OPT_PARAM = 2 };

typedef struct zrt_pt_model {
  char model[32];                       /* --model preset */
  int n_layer, n_head, n_embd, seq_len; /* 0 = the preset's */
  int batch;                            /* micro-batch per rank */
  char dtype[8];                        /* "bf16", "fp16" or "fp32" */
  int steps;
  char extra[512]; /* " --set k=v ..." passed through from the bench's options */
} zrt_pt_model;

typedef struct zrt_pt_opts {
  int ranks;
  int stage;
  int offload; /* ZRT_PT_OFFLOAD_* */
  int overlap; /* -1 = config default, 0 = off, 1 = on */
  int threads; /* OMP_NUM_THREADS per rank */
} zrt_pt_opts;

typedef struct zrt_pt_run {
  int ok;
  int reused;
  char command[2048];
  char error[1024];
  int nsteps;             /* metrics records read */
  double wall_tok_s;      /* median of train_gpt2's per-step tok/s, first step dropped */
  double wall_step_s;     /* global batch tokens / wall_tok_s */
  double engine_step_s;   /* median metrics step_time_s (first step dropped) */
  double engine_tok_s;    /* median metrics tokens_per_s */
  double comm_bytes;      /* median metrics comm_bytes (rank 0) */
  double padded_elements; /* from the engine's "built:" log line; 0 if absent */
  double params;          /* "X.XXM params" of train_gpt2's banner, in elements */
  double step_gflop;      /* "X GFLOP per rank per step" of the banner; 0 if absent */
  char backend[16];       /* "backend X" of the banner; "" if absent */
  cJSON *last;            /* last metrics record (owned by the cache) */
  cJSON *records;         /* every metrics record, in order (owned by the cache) */
} zrt_pt_run;

/* Model options common to the training benches: --model --n_layer
 * --n_head --n_embd --seq_len --batch_size --dtype --steps --set K=V
 * (one, comma-separated K=V list). quick shortens --steps' default. */
void zrt_pt_model_from_args(const zrt_perf_args *a, zrt_pt_model *m);
/* Ranks/threads defaults: --ranks (2), OMP threads = online cpus / ranks. */
void zrt_pt_opts_default(const zrt_perf_args *a, zrt_pt_opts *o);
/* Runs (or returns the cached) training run; never NULL. */
const zrt_pt_run *zrt_pt_train(const zrt_pt_model *m, const zrt_pt_opts *o);
/* The run as a JSON object (figures, command, peaks by category). */
cJSON *zrt_pt_run_json(const zrt_pt_run *r);
/* A numeric field of the run's last metrics record, or -1. */
double zrt_pt_metric(const zrt_pt_run *r, const char *key);
/* Median of a numeric field over the run's metrics records, the first
 * (warm-up) record dropped when there are several; -1 when no record has it. */
double zrt_pt_metric_median(const zrt_pt_run *r, const char *key);
/* Directory of the running zrt-perf (where train_gpt2 and zrt live). */
const char *zrt_pt_bindir(void);
/* Adds the model description to a result. */
void zrt_pt_model_json(const zrt_pt_model *m, cJSON *result);
const char *zrt_pt_offload_name(int offload);
/* Median of n values (sorts a copy); 0 when n == 0. */
double zrt_pt_median(const double *v, int n);

#endif
