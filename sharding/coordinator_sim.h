/*
 * coordinator_sim.h — the stage-3 coordinator's decisions (the policy of
 * coord_policy.h, which coordinator.c executes) replayed without memory or
 * comms: given the modules' sizes, the options
 * and the program's fetch/release sequence of one optimizer step, it
 * returns the most non-persistent elements the coordinator holds gathered
 * at once, and with the engine's 16-bit gradient buffers (one per module
 * from its first gradient access to grads_ready) the peak of both at the
 * same moment. The memory model uses it so that a prediction made from the
 * program's fetch order equals the pools' measured peak; a unit test runs
 * the real coordinator and this replay over the same random sequences and
 * requires the same peak (the two executors of one policy agree).
 */
#ifndef ZRT_COORDINATOR_SIM_H
#define ZRT_COORDINATOR_SIM_H

#include <stdint.h>

typedef enum {
  ZRT_SIM_FETCH = 0, /* zrt_module_fetch */
  ZRT_SIM_RELEASE,   /* zrt_module_release */
  ZRT_SIM_GRAD,      /* the module's first zrt_param_grad: its 16-bit gradient buffer */
  ZRT_SIM_GRAD_DONE  /* zrt_module_grads_ready: the buffer goes to the buckets and is freed */
} zrt_sim_kind;

typedef struct zrt_sim_event {
  zrt_sim_kind kind;
  int module;
} zrt_sim_event;

typedef struct zrt_coord_sim {
  int nmodules;
  const int64_t *numel;  /* per module: parameter elements */
  const int64_t *padded; /* per module: padded flat size */
  int64_t persist_threshold, prefetch_elems, max_live_elems, reuse_distance;
  const zrt_sim_event *events; /* one optimizer step (every micro-batch) */
  int nevents;
} zrt_coord_sim;

/* Peaks in elements of the working dtype over the first steps (the first
 * records the trace; later ones prefetch and reuse by it; an optimizer step
 * invalidates the copies in between). */
typedef struct zrt_coord_sim_peaks {
  int64_t live;  /* gathered non-persistent copies */
  int64_t grads; /* 16-bit gradient buffers */
  int64_t both;  /* the two together, at the same moment (<= live + grads) */
} zrt_coord_sim_peaks;

/* 0, or -1 when an event names a module out of range or an unknown kind,
 * or host memory runs out. A release of a module not fetched does what
 * the coordinator does with it (nothing). */
int zrt_coord_sim_run(const zrt_coord_sim *s, zrt_coord_sim_peaks *out);

#endif
