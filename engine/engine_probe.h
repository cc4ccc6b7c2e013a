/*
 * engine_probe.h — for white-box tests only (tests/, never library code):
 * what the suites check about the engine's build decisions and parts that
 * no program sees, read through one snapshot (zrt_engine_probe) instead of
 * the engine's private struct, plus the engine's pure placement and layout
 * queries the tests compare with their own predictions. The engine/ sources use the
 * queries too (engine_internal.h includes this header); checkpoint/ and
 * tools/ use engine_state.h and nothing here.
 *
 * Invariant: a probe only reads; the pointers it hands out stay the
 * engine's (valid until zrt_engine_destroy, not to be freed).
 */
#ifndef ZRT_ENGINE_PROBE_H
#define ZRT_ENGINE_PROBE_H

#include <stdint.h>

#include "bucket.h"
#include "coordinator.h"
#include "offload.h"
#include "param_swap.h"
#include "pool.h"
#include "zrt.h"

/* The engine's decisions and parts as the tests read them (after build
 * unless noted): the declared activation bytes, the stage-3 plan's steady
 * device bytes, prefetch budget and reuse distance in force, the resolved
 * offload choice (ZRT_OFFLOAD_*), the stage-3 coordinator, the offload
 * pipe, the parameter swapper, the shard arena, the host pool and the
 * gradient buckets (NULL where the configuration has none), the
 * activation checkpoints' block counts, mode and copy stream (NULL
 * without checkpoints), and the NVMe swap bytes read and written when the
 * current step window opened. */
typedef struct zrt_engine_probe {
  uint64_t activation_bytes, plan_device_bytes;
  int64_t prefetch_elems, reuse_distance;
  int offload_opt, offload_par;
  zrt_coord *coord;
  zrt_offload_pipe *offload;
  zrt_pswap *pswap;
  const void *shard_arena;
  zrt_pool *host_pool;
  zrt_buckets *buckets;
  int ack_nblocks, ack_n, ack_cpu;
  zrt_stream ack_copy_stream;
  uint64_t nvme_rd0, nvme_wr0;
} zrt_engine_probe;
void zrt_engine_probe_get(const zrt_engine *eng, zrt_engine_probe *out);

/* Where this process sits on its machine, before the backend picks a
 * device: when the launcher announces more than one rank
 * (zrt_comm_env_world), an MPI bootstrap gives the local rank and local
 * world as MPI derived them (the same under Open MPI's mpiexec, MPICH's and
 * srun, whichever variables they set); *boot is that bootstrap, to be
 * destroyed only after the comm exists (destroying the last MPI user
 * finalizes MPI). One process: local rank 0 of 1, *boot NULL. Logged at
 * debug level ("placement: local rank R of W (from MPI)"). */
struct zrt_bootstrap;
zrt_status zrt_engine_placement(struct zrt_bootstrap **boot, int *local_rank, int *local_world);

/* Parameter covering flat element `elem` of module `module`, or -1 in the
 * padding. */
int zrt_engine_param_at(const zrt_engine *eng, int module, int64_t elem);

/* Twin-Flow (offload_optimizer.ratio < 1 at stage 3): the first module whose
 * optimizer is offloaded, by zrt_layout_twin_split over the modules' parts
 * in registration order with zero_optimization.sub_group_size (0 at stages
 * 0-2 or ratio 1: every module); and the padded elements of the modules
 * before it (the memory model's twin_device_padded). Pure. */
int zrt_engine_twin_split(const zrt_engine *eng);
int64_t zrt_engine_twin_device_padded(const zrt_engine *eng);

#endif
