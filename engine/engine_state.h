/*
 * engine_state.h — the engine as the layers above it see it: the named
 * accessor surface checkpoint/ and tools/ use instead of the engine's
 * private struct (engine_internal.h, which stays inside engine/). It holds
 * the engine's shape after build (zrt_engine_view), each module's and
 * parameter's descriptor, the run state a checkpoint saves and loads (the
 * step counters, and the loss scaler's and the LR scheduler's own state,
 * each part's state struct: amp/scaler.h, optim/lr_sched.h), the master
 * and optimizer-state extents wherever they live, and the slot where the
 * checkpoint code keeps its directory lock.
 *
 * Invariants: everything here reads or writes through the engine's own
 * functions (engine_state.c, engine.c, engine_offload.c); a get followed by
 * a set of the same values leaves the engine as it was (what a bitwise
 * resume relies on). The views are valid until the engine is destroyed;
 * shapes and descriptors do not change after zrt_engine_build.
 */
#ifndef ZRT_ENGINE_STATE_H
#define ZRT_ENGINE_STATE_H

#include <stdint.h>

#include "backend.h"
#include "comm.h"
#include "config.h"
#include "lr_sched.h"
#include "scaler.h"
#include "zrt.h"

#define ZRT_ENGINE_MAX_NDIM 8
#define ZRT_ENGINE_NAME_MAX 256

/* One registered parameter (zrt_param_add), in registration order. */
typedef struct zrt_param_entry {
  char name[ZRT_ENGINE_NAME_MAX];
  uint64_t name_hash; /* zrt_rng_name_hash(name): the RNG stream of this param */
  int module;         /* owning module id */
  int ndim;
  int64_t shape[ZRT_ENGINE_MAX_NDIM];
  int64_t numel;
  zrt_init init;
  unsigned flags; /* ZRT_PARAM_* */
  int64_t offset; /* element offset inside the module's flat buffer */
} zrt_param_entry;

/* The engine's shape: rank and world, the stage after "auto" resolved
 * (valid after build), the dtypes of the working weights, masters and
 * optimizer states, the resolved config (values and the store the
 * checkpoint's config.json is written from), the backend and the comm. */
typedef struct zrt_engine_view {
  int rank, world, stage, built;
  zrt_dtype dtype, comm_dtype, master_dtype, state_dtype;
  int nmodules, nparams;
  const zrt_cfg *cfg;
  const zrt_config *config;
  zrt_backend *backend;
  zrt_comm *comm;
  const char *comm_name;
} zrt_engine_view;
void zrt_engine_view_get(const zrt_engine *eng, zrt_engine_view *out);

/* Module m's descriptor (0 <= m < nmodules): its name, its elements, its
 * padded flat size and each rank's part (valid after build), its parameter
 * ids in registration order, and where its optimizer side lives
 * (optim_host: master and states in the host pool; grad_host: the reduced
 * gradient accumulator in the host pool). */
typedef struct zrt_engine_module_view {
  const char *name;
  int64_t numel, padded, part;
  int nparams;
  const int *params;
  int optim_host, grad_host;
} zrt_engine_module_view;
void zrt_engine_module_view_get(const zrt_engine *eng, int m, zrt_engine_module_view *out);
/* Parameter p's descriptor (0 <= p < nparams). */
const zrt_param_entry *zrt_engine_param_entry(const zrt_engine *eng, int p);

/* The engine's counters (the checkpoint's "counters" object). */
typedef struct zrt_engine_counters_state {
  int64_t global_step;   /* optimizer steps, skipped included */
  int64_t micro_step;    /* zrt_engine_step calls */
  int64_t applied_steps; /* non-skipped steps: the optimizer's bias-correction count */
  int64_t skipped_total;
  float last_grad_norm;
} zrt_engine_counters_state;

void zrt_engine_counters_get(const zrt_engine *eng, zrt_engine_counters_state *out);
void zrt_engine_counters_set(zrt_engine *eng, const zrt_engine_counters_state *in);
void zrt_engine_scaler_get(const zrt_engine *eng, zrt_scaler_state *out);
void zrt_engine_scaler_set(zrt_engine *eng, const zrt_scaler_state *in);
void zrt_engine_sched_get(const zrt_engine *eng, zrt_sched_state *out);
void zrt_engine_sched_set(zrt_engine *eng, const zrt_sched_state *in);

/* The checkpoint directory lock the engine holds for checkpoint.c (rank 0:
 * the flock on DIR/zrt.lock of the directory it saves into; fd -1 before
 * the first save or claim). The engine closes fd at destroy, which
 * releases the flock; checkpoint.c takes and replaces it. */
typedef struct zrt_engine_ckpt_lock {
  int fd;
  unsigned long long dev, ino; /* the locked directory's identity */
} zrt_engine_ckpt_lock;
zrt_engine_ckpt_lock *zrt_engine_ckpt_lock_slot(zrt_engine *eng);

/* Elements of a module's master/state buffers on this rank (part, or
 * padded at stage 0) and the element offset of element 0 in the flat
 * buffer (rank*part, or 0 at stage 0). */
void zrt_engine_master_extent(const zrt_engine *eng, int module, int64_t *flat_off, int64_t *len);

/* Copies the rank's fp32 master shard of a module into dst (host memory,
 * module part elements, or padded at stage 0) / from src, and re-derives
 * the 16-bit working weights from it (stage 0-2: all-gather is the caller's
 * job through zrt_engine_refresh_params). Collective only through
 * refresh. */
zrt_status zrt_engine_get_master(zrt_engine *eng, int module, float *dst);
zrt_status zrt_engine_set_master(zrt_engine *eng, int module, const float *src);
/* Rewrites every module's 16-bit working weights from the fp32 masters
 * (stage 1/2 all-gather, stage 3 marks gathered copies stale). Collective. */
zrt_status zrt_engine_refresh_params(zrt_engine *eng);

/* Optimizer state arrays of the configured optimizer (2 Adam/AdamW, 1
 * SGD-momentum/Lion, 0 plain SGD). */
int zrt_engine_optim_states(const zrt_engine *eng);
/* The fp32 arrays of a master extent, and the direction of a transfer. */
typedef enum zrt_state_array {
  ZRT_STATE_MASTER = 0,
  ZRT_STATE_S1 = 1, /* first moment (Adam/AdamW), momentum (SGD, Lion) */
  ZRT_STATE_S2 = 2  /* second moment (Adam/AdamW) */
} zrt_state_array;
typedef enum zrt_io_dir { ZRT_IO_READ = 0, ZRT_IO_WRITE = 1 } zrt_io_dir;
/* Reads or writes a module's whole master extent of array `which` from/to
 * host memory buf, wherever it lives (device, host pool, NVMe files). No
 * 16-bit refresh. */
zrt_status zrt_engine_state_io(zrt_engine *eng, int module, zrt_state_array which, zrt_io_dir dir,
                               float *buf);

/* 1 when the stage keeps each rank's 16-bit shard of the working weights
 * (stage 3 with shard16 in device or host memory or the param swap file):
 * what a checkpoint's param16 section holds. */
int zrt_engine_has_shard16(const zrt_engine *eng);
/* Copies module m's 16-bit shard (part elements of the working dtype) into
 * host memory dst, wherever it lives; asynchronous on the backend's stream
 * (synchronise before reading dst), blocking from the param swap file. */
zrt_status zrt_engine_shard16_read(zrt_engine *eng, int module, void *dst);

#endif
