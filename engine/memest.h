/*
 * memest.h — the memory model shared by `zrt estimate-memory`, stage "auto",
 * the reuse fitting and the engine's OOM hint: per rank, the bytes the engine
 * allocates in each category, from the layout rules and stage table the
 * engine itself uses, so measured pool peaks of model states match it
 * (tests/mpi/test_engine_memory.c). The formulas: docs/memory.md, "The
 * model's formulas (memest.h)".
 */
#ifndef ZRT_MEMEST_H
#define ZRT_MEMEST_H

#include "coordinator_sim.h"
#include "internal.h"

typedef struct zrt_memest_layout {
  int world;
  int stage; /* 0..3 */
  int dtype_bytes, comm_bytes;
  /* the communication dtype rounds the working dtype's values (a 16-bit
   * type other than it): one rank keeps the fp32 accumulator */
  int comm_rounds;
  int optim_states;
  /* bytes per element of the master weights and gradient partitions
   * (bf16.bf16_master_weights_and_grads: 2) and of each optimizer state
   * (bf16.bf16_optimizer_states: 2); 0 means fp32's 4 */
  int master_bytes, state_bytes;
  int64_t padded_total;      /* sum of module padded sizes */
  int64_t max_module_padded; /* largest module */
  int64_t persistent_padded; /* stage 3 modules at or below the persistence threshold */
  int64_t reduce_bucket_size;
  int live_known; /* 1: live is the stage-3 replay over the program's fetch order
                     (zrt_coord_sim_run); 0: derive a figure from the settings without
                     the order: largest module + prefetch + reuse elements, at most
                     max_live elements and at most every non-persistent module */
  zrt_coord_sim_peaks live;
  int64_t prefetch_elems; /* stage3_prefetch_bucket_size */
  int64_t reuse_elems;    /* stage3_max_reuse_distance: released modules kept gathered */
  int64_t max_live_elems; /* stage3_max_live_parameters (0 = unlimited) */
  int offload_optimizer, offload_param;
  int offload_nvme;           /* with offload_optimizer: master + states in NVMe files */
  int offload_param_nvme;     /* with offload_param: 16-bit shards in an NVMe file */
  int64_t param_buffer_size;  /* offload_param.buffer_size (0 = no cap) */
  int64_t param_buffer_count; /* offload_param.buffer_count: staging slots (0 = 1) */
  int64_t sub_group_size;     /* zero_optimization.sub_group_size (offload tile cap) */
  int64_t twin_device_padded; /* Twin-Flow (offload_optimizer cpu, stage 3): padded elements of
                                 the modules whose optimizer stays on the device (those before
                                 zrt_layout_twin_split); 0 = every module offloaded */
  uint64_t activation_bytes;
  /* host memory the program allocates with zrt_engine_host_alloc (whole
   * pages), counted with the host pool's activations */
  uint64_t program_host_bytes;
  /* activation checkpoints (zrt_actckpt_declare): checkpointed blocks, bytes
   * each, 1 when they live in host memory (cpu_checkpointing) */
  int64_t actckpt_blocks;
  uint64_t actckpt_bytes;
  int actckpt_cpu;
  uint64_t device_capacity; /* bytes (0 = unlimited): caps the bucket chunk
                               (zrt_layout_bucket_chunk_capped) */
} zrt_memest_layout;

typedef struct zrt_memest_result {
  uint64_t device[ZRT_MEM_NCAT];
  uint64_t host[ZRT_MEM_NCAT];
  uint64_t device_total, host_total; /* device_total: the peak of the sum, which with a
                                        replayed stage 3 (live_known) is less than the sum of
                                        the categories' peaks when the gathered copies and the
                                        16-bit gradients peak at different moments */
  uint64_t model_states;             /* device params16 + grads + master32 + optim_state */
  uint64_t nvme_bytes;               /* offload_nvme: bytes of this rank's swap files on disk */
} zrt_memest_result;

void zrt_memest_predict(const zrt_memest_layout *lay, zrt_memest_result *out);

/* Activation checkpoints' bytes (in the activations category): on the
 * device n * bytes, or with cpu min(n, ZRT_ACTCKPT_SLOTS = 2) staging slots
 * of bytes each; on the host n * bytes with cpu, else 0. */
#define ZRT_MEMEST_ACTCKPT_SLOTS 2
void zrt_memest_actckpt(int64_t n, uint64_t bytes, int cpu, uint64_t *device, uint64_t *host);

/* The share of a device capacity the engine plans in (stage "auto" and the
 * reuse fitting): the rest is headroom for what no model predicts (the
 * backend's own allocations, fragmentation). */
#define ZRT_MEMEST_PLAN_NUM 9
#define ZRT_MEMEST_PLAN_DEN 10
uint64_t zrt_memest_plan_bytes(uint64_t capacity);

/* The stage3_max_reuse_distance the engine uses at build under a device
 * capacity (0 = unlimited: want unchanged): modules kept gathered for
 * reuse are a cache, so the distance is lowered to what model states,
 * buckets and activations (lay predicted with reuse 0) leave of
 * zrt_memest_plan_bytes(capacity), in working-dtype elements. Stages 0-2
 * and want <= 0 keep want. */
int64_t zrt_memest_fit_reuse(const zrt_memest_layout *lay, uint64_t capacity, int64_t want);

/* The stage-3 window the engine keeps from its second step on
 * (engine_memplan.c; estimate-memory applies it to a program's fetch
 * order, zrt_memest_program_plan): peak(ctx, prefetch, reuse) is the steady per-rank device peak
 * with that prefetch budget and reuse distance (0: it could not be
 * replayed). When the peak at (*prefetch, *reuse) exceeds target, the reuse
 * distance is lowered first (the largest value whose peak fits, bisected),
 * then, when no reuse at all does not fit, the prefetch budget; both end at
 * 0 when nothing fits. *want: the peak at the start, *got: at the result.
 * Returns 0, or -1 when a peak could not be replayed. */
typedef uint64_t (*zrt_memest_peak_fn)(void *ctx, int64_t prefetch, int64_t reuse);
int zrt_memest_fit_window(zrt_memest_peak_fn peak, void *ctx, uint64_t target, int64_t *prefetch,
                          int64_t *reuse, uint64_t *want, uint64_t *got);

/* DeepSpeed's own "cold" estimators of model-state memory per GPU / per
 * CPU node (stage_1_and_2.py estimate_zero2_model_states_mem_needs for
 * stages 1-2, stage3.py estimate_zero3_model_states_mem_needs for stage 3;
 * zero_init 1, additional_buffer_factor 1.5), reproduced so estimate-memory
 * can print its figure beside zrt's: stage 1/2 gpu = 2 Ψ with offload else
 * 4 Ψ + 16 Ψ / G; cpu = Ψ max(4 G, 16) 1.5 with offload else 4 Ψ g 1.5.
 * Stage 3 gpu = 4 L (+ 2 Ψ/G without param offload; + 18 Ψ/G without any);
 * cpu = 18 Ψ/n 1.5 (param offload), 16 Ψ/n 1.5 (optimizer only), 4 L g 1.5
 * (none). Ψ = total_params, L = largest layer's params, g = GPUs per node,
 * n = nodes, G = g n. Returns 0 for stage 0 (DeepSpeed has none). */
int zrt_memest_deepspeed(int stage, double total_params, double largest_layer, int gpus_per_node,
                         int nodes, int offload_optimizer, int offload_param, uint64_t *cpu_bytes,
                         uint64_t *gpu_bytes);

/* Elements per tile of the offload pipe the engine creates for this layout:
 * min(sub_group_size, 4 Mi, largest master extent), rounded up to 1024. The
 * pipe holds 4 tiles of fp32 staging in the host pool (host comm bytes). */
int64_t zrt_memest_offload_tile(const zrt_memest_layout *lay);

/* fp32 elements of the param swap file's host staging buffer (offload_param
 * nvme): min(offload tile, buffer_size) rounded up to 2048, so that a chunk
 * of that many master elements converts to a 16-bit tile the file takes at a
 * 4096-byte boundary. */
int64_t zrt_memest_param_stage(const zrt_memest_layout *lay);

/* A program as the memory model replays it: its modules' elements in
 * registration order and one optimizer step's fetch order over them
 * (every micro-batch). Programs describe themselves beside their code or
 * the estimate command (tools/model_layouts.h: the GPT example, the
 * Llama-family decoders); nothing here knows a model. */
typedef struct zrt_memest_program {
  int nmodules;
  const int64_t *numel;
  const zrt_sim_event *events;
  int nevents;
} zrt_memest_program;

/* The layout of the program's modules at world ranks: sets world,
 * padded_total, max_module_padded and persistent_padded (modules of at
 * most persist_threshold elements count as stage-3 persistent). */
void zrt_memest_program_layout(const zrt_memest_program *p, int world, int64_t persist_threshold,
                               zrt_memest_layout *lay);
/* twin_device_padded of the program's modules at world ranks: the padded
 * elements of the modules before the Twin-Flow split of
 * offload_optimizer.ratio with sub_group_size (sharding/layout.h's
 * zrt_layout_twin_split); *groups and *device_groups (may be NULL): the
 * sub-groups and how many of them stay on the device. */
int64_t zrt_memest_program_twin_device(const zrt_memest_program *p, int world,
                                       int64_t sub_group_size, double ratio, int *groups,
                                       int *device_groups);
/* The stage-3 replay (zrt_coord_sim_run) of the program's fetch order with
 * lay's world, prefetch, reuse and max_live (persist_threshold as for the
 * layout) into *out. 0, or -1 when an event is malformed or host memory
 * runs out. */
int zrt_memest_program_live(const zrt_memest_program *p, const zrt_memest_layout *lay,
                            int64_t persist_threshold, zrt_coord_sim_peaks *out);
/* estimate-memory's view of the window the engine keeps (lay: a stage-3
 * layout with the settings' prefetch and the reuse fitted at build):
 * lowers lay->prefetch_elems and lay->reuse_elems as the engine will at its
 * first boundary under capacity (0: unlimited, nothing lowered), and sets
 * lay->live (live_known) to the replay with the result. 0, or -1 when a
 * replay fails. */
int zrt_memest_program_plan(const zrt_memest_program *p, zrt_memest_layout *lay,
                            int64_t persist_threshold, uint64_t capacity);

#endif
