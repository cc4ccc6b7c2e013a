/*
 * engine_internal.h — the engine's internal state (the struct behind the
 * opaque zrt_engine of include/zrt.h), included only by the engine/ sources: the
 * layers above (checkpoint/, tools/) go through engine_state.h, white-box
 * tests through engine_state.h and engine_probe.h (tests/unit/test_layout.c,
 * the unit test of engine_layout.c over hand-built engines, is the one test
 * that includes this header).
 *
 * Layout invariants (sharding/layout.h):
 *  - Every module is one flat buffer of `numel` elements: its parameters in
 *    registration order, each at `offset` (elements) inside the module,
 *    packed back to back (no per-parameter padding).
 *  - The flat buffer is padded with zeros to `padded` elements, a multiple
 *    of world * ZRT_LAYOUT_ALIGN_ELEMS, so that every rank's partition is
 *    `part = padded / world` elements and starts 64-byte aligned for any
 *    dtype. Rank r owns elements [r*part, (r+1)*part) of every module.
 *  - Padding elements are zero in every buffer (params, grads, master,
 *    states) and never updated.
 *
 * Which buffers exist (per module, per rank; P = padded, S = part):
 *   buffer      stage 0      stage 1     stage 2          stage 3
 *   full16      P persistent P persist.  P persistent     - (the coordinator's gathered copies)
 *   shard16     -            -           -                S (device, or host pool with
 * offload_param) grad16      P persistent P persist.  P from first zrt_param_grad until grads_ready
 *   grad_acc    P fp32       S fp32      S fp32           S fp32     (host pool with
 * offload_optimizer: grad_host)
 *   master      P fp32       S fp32      S fp32           S fp32     (host pool with
 * offload_optimizer) s1 / s2     P fp32       S fp32      S fp32           S fp32     (s2 only
 * Adam/AdamW) At stages 0-2 the rank's 16-bit shard is full16 + r*S. Stage 0 keeps master and
 * optimizer state replicated (every rank runs the whole update). 16-bit means the working dtype
 * (fp32 when neither fp16 nor bf16). master and grad_acc are bf16 instead of fp32 with
 * bf16.bf16_master_weights_and_grads, s1/s2 with bf16.bf16_optimizer_states (host pool only).
 * With offload_optimizer.ratio < 1 (Twin-Flow, stage 3) only the modules from
 * zrt_engine_twin_split on are offloaded (optim_host, grad_host); the others
 * keep master, states and grad_acc on the device.
 * With offload_optimizer nvme, master / s1 / s2 are NULL: the rank's extents
 * live back to back in one swap-file set (module m at nvme_off), read and
 * written through zrt_engine_state_io. With offload_param nvme, shard16 is
 * NULL: the 16-bit shards live in one param swap file (pswap, module m at
 * 16-bit element nvme_off), read into this rank's slot of full16 at each
 * stage-3 gather and rewritten from the masters after each step.
 */
#ifndef ZRT_ENGINE_INTERNAL_H
#define ZRT_ENGINE_INTERNAL_H

#include "bucket.h"
#include "comm.h"
#include "config.h"
#include "coordinator.h"
#include "coordinator_sim.h"
#include "engine_probe.h"
#include "engine_state.h"
#include "engine_team.h"
#include "gradstats.h"
#include "hostpool.h"
#include "layout.h"
#include "lr_sched.h"
#include "nvme.h"
#include "offload.h"
#include "param_swap.h"
#include "scaler.h"
#include "stage_policy.h"

typedef struct zrt_module_entry {
  char name[ZRT_ENGINE_NAME_MAX];
  int *params; /* param ids of this module, registration order */
  int nparams, cap_params;
  int64_t numel;  /* sum of parameter numels */
  int64_t padded; /* flat size after padding (multiple of world * ALIGN) */
  int64_t part;   /* padded / world: elements each rank owns */

  void *full16;     /* working weights, full flat buffer (see table above) */
  void *shard16;    /* stage 3 owned shard of the working weights */
  int shard16_host; /* 1 when shard16 lives in the host pool (offload_param cpu) */
  int shard16_nvme; /* 1 when the shard lives in the param swap file at 16-bit element
                       nvme_off (offload_param nvme): shard16 is NULL */
  void *grad16;     /* working-dtype grads the program adds into */
  float *grad_acc;  /* fp32 reduced-gradient accumulation (shard; full at stage 0) */
  float *master;    /* fp32 master (shard; full at stage 0) */
  float *s1, *s2;   /* optimizer moments, like master */
  int optim_host;   /* 1 when master/s1/s2 live in the host pool (offload_optimizer cpu; with
                       Twin-Flow only modules from zrt_engine_twin_split on) */
  int optim_nvme;   /* 1 when master/s1/s2 live in the NVMe file set (offload_optimizer nvme):
                       master/s1/s2 are NULL, the extent is at nvme_off in the files */
  int64_t nvme_off; /* element offset of this module's extent in the NVMe file set */

  int fetched;       /* stages 0-2: full16 holds the current weights (after build) */
  int in_use;        /* stages 0-2: fetches not yet released (stage 3: the coordinator's) */
  int grads_pending; /* grad16 allocated this micro-batch, not yet reduced */
  int grads_reduced; /* stage 2/3: grads_ready already ran this micro-batch */
  int grad_host;     /* 1 when grad_acc lives in the host pool (zrt_layout_grad_acc_host: the
                        optimizer is offloaded): the buckets land reduced gradients there and
                        the norm pass and the CPU optimizer read it in place */
} zrt_module_entry;

/* Activation checkpoints (engine_actckpt.c). Storage is allocated at
 * build for the checkpointed blocks and held until destroy, so the device
 * and host figures are constants the memory model counts to the byte:
 * device mode n * bytes (one allocation per block, or one buffer with
 * contiguous), cpu mode n * bytes of host pool plus ZRT_ACTCKPT_SLOTS
 * (at most n) device staging slots. A slot holds one block's input
 * (holds[s], -1 none); ev_ready[s]: its fill (D2D on the engine stream, or
 * H2D on the copy stream) is done; ev_out[s]: its copy to the host is done;
 * ev_free[s]: the engine stream's reads of it are done. */
#define ZRT_ACTCKPT_SLOTS 2
typedef struct zrt_actckpt_state {
  int nblocks, n;       /* declared blocks, checkpointed ones */
  size_t bytes;         /* per block */
  unsigned char *on;    /* per block: checkpointed */
  unsigned char *saved; /* per block: saved this pass, not yet released */
  void **store;         /* per block: device checkpoint, or host copy (cpu) */
  unsigned char *reg;   /* cpu, per block: its host copy registered by zrt_hostpool_stage_alloc */
  void *buf;            /* contiguous: the one buffer */
  int buf_reg;          /* cpu, contiguous: buf registered likewise */
  int cpu, contiguous, sync, profile;
  void *slot[ZRT_ACTCKPT_SLOTS];
  int holds[ZRT_ACTCKPT_SLOTS], busy[ZRT_ACTCKPT_SLOTS], next_slot;
  void *ev_ready[ZRT_ACTCKPT_SLOTS], *ev_out[ZRT_ACTCKPT_SLOTS], *ev_free[ZRT_ACTCKPT_SLOTS];
  void *copy_stream;      /* cpu mode; NULL on backends without streams */
  int fetched;            /* block fetched and not yet released (-1 none) */
  double t_save, t_fetch; /* profile: when the open forward / backward began */
  int prof_block;         /* profile: block whose forward is open (-1 none) */
  zrt_actckpt_stats stats;
  /* cpu mode, timing events (twin, cuda): a ring of event pairs, each the
   * span of one copy (on the copy stream) or one stall (the engine stream's
   * waits for a slot); read back when done (zrt_engine_actckpt_harvest) */
  struct zrt_actckpt_span {
    void *e0, *e1;
    int stall, pending;
  } * span;
  int nspan, next_span;
  double rep_copy_s, rep_stall_s; /* what the metrics reported so far */
  int64_t rep_untimed;
} zrt_actckpt_state;

/* Per-step measurements feeding metrics and zrt_step_info. */
typedef struct zrt_engine_stepstats {
  double t_start;              /* time of the first micro-step of this step */
  double loss_sum;             /* sum of per-micro-batch losses (this rank) */
  int64_t micro_count;         /* micro-batches in this step so far */
  uint64_t comm_bytes0;        /* comm->bytes_moved at step start */
  uint64_t nvme_rd0, nvme_wr0; /* NVMe swap bytes read / written at step start */
  zrt_backend_counters ctr0;   /* backend counters at step start (host waits, ...) */
} zrt_engine_stepstats;

/* Accumulators of the step breakdown (zrt_step_timing) for the open
 * window; closed at each boundary into engine->timing. phase: the running
 * ZRT_PHASE_*; mark: when it began; explicit: the program has called
 * zrt_engine_mark (inference off; survives windows). */
typedef struct zrt_engine_phase_acc {
  int phase;
  int explicit_marks;
  double mark;
  double t_window;  /* window start */
  double pass_s[3]; /* by ZRT_PHASE_* */
  double fetch_s, reduce_s, optimizer_s, gather_s;
  double busy0, wait0; /* comm->busy_s / wait_s at window start */
} zrt_engine_phase_acc;

/* A block of zrt_engine_host_alloc: its accounted (whole-page) bytes and
 * whether zrt_hostpool_stage_alloc registered it. */
typedef struct zrt_engine_hostbuf {
  void *ptr;
  size_t bytes;
  int registered;
} zrt_engine_hostbuf;

struct zrt_engine {
  zrt_config *config; /* private resolved copy */
  const zrt_cfg *cfg; /* zrt_config_values(config) */
  zrt_backend *backend;
  zrt_comm *comm;
  zrt_hostpool *hostpool;    /* NULL unless some offload, cpu checkpoints or host_alloc is on */
  zrt_pool *host_pool;       /* zrt_hostpool_pool(hostpool), or NULL */
  zrt_engine_hostbuf *hbufs; /* the program's zrt_engine_host_alloc blocks (engine_hostmem.c) */
  int nhbufs, caphbufs;
  zrt_offload_pipe *offload; /* NULL unless offload_optimizer is cpu/nvme */
  int rank, world;
  zrt_dtype dtype;      /* working precision */
  zrt_dtype comm_dtype; /* reduction dtype (communication_data_type) */
  /* bf16.bf16_master_weights_and_grads: master and grad_acc hold bf16
   * elements (else fp32); bf16.bf16_optimizer_states: s1/s2 hold bf16. The
   * fields stay typed float *: index them with zrt_engine_at. Only where
   * the optimizer is offloaded to host memory (the config rule refuses the
   * rest), so every such array is host memory the CPU reads in place. */
  zrt_dtype master_dtype, state_dtype;
  int stage;                      /* 0..3 after auto resolution */
  const zrt_stage_policy *policy; /* zrt_stage_policy_of(stage): read instead of stage numbers */
  /* resolved offload choice: the config's offload_optimizer / offload_param
   * device (ZRT_OFFLOAD_*), or what stage "auto" picked */
  int offload_opt, offload_par;
  int built;
  /* offload_optimizer nvme: the segment table of one step (one entry per
   * parameter piece this rank owns; metadata, refilled every step) */
  zrt_offload_segment *nvme_segs;
  int nvme_nsegs;
  int64_t nvme_elems; /* elements of the file set (sum of master extents) */
  /* offload_param nvme: the parameter swapper (offload/param_swap.h) that
   * owns the param swap file (module m at 16-bit element nvme_off), its
   * staging slots and its read queue; NULL otherwise */
  zrt_pswap *pswap;

  zrt_param_entry *params;
  int nparams, cap_params;
  zrt_module_entry *modules;
  int nmodules, cap_modules;

  zrt_buckets *buckets; /* the gradient buckets (sharding/bucket.h) */

  /* stage 3: the parameter coordinator (sharding/coordinator.h: gathered
   * copies, trace, prefetch, reuse, max-live); NULL at stages 0-2.
   * coord_names: the module names it logs (pointers into modules). */
  zrt_coord *coord;
  const char **coord_names;
  /* stage 3 on the host: every module's 16-bit shard in one allocation of
   * the comm's memory (zrt_comm_mem_alloc), so the coordinator's gathers
   * read the peers' shards in place; each slice counted in the pool the
   * shard belongs to. NULL when the shards come from the pools. */
  char *shard_arena;
  size_t shard_arena_used;

  zrt_scaler scaler;
  zrt_sched sched;
  int64_t micro_step;  /* zrt_engine_step calls so far */
  int64_t global_step; /* optimizer steps (boundaries) so far, skipped included */
  /* rank 0: the checkpoint directory lock checkpoint.c keeps here
   * (engine_state.h's zrt_engine_ckpt_lock; fd -1 before the first save) */
  zrt_engine_ckpt_lock ckpt_lock;
  int plan_refused; /* the build plan found the device too small (a device OOM, no allocation) */
  int64_t applied_steps; /* non-skipped steps: optimizer bias-correction count */
  int64_t skipped_total;
  int64_t tokens_per_micro;
  zrt_engine_stepstats st;
  float last_grad_norm;
  /* The boundary's statistics record (zrt_gradstats_pack: sum of squares,
   * non-finite flag, loss) that the one all-reduce agrees on. Where host
   * functions are stream ops (the twin) a host function on the engine's
   * stream fills it and the comm stream reduces it in turn, so it lives
   * here rather than in the step's frame. One more element carries the
   * ranks' stop requests (zrt_engine_request_stop) in the same all-reduce. */
  float stats_rec[ZRT_GRADSTATS_REC + 1];
  int stop_requested; /* zrt_engine_request_stop since the last boundary */
  int host_freeing;   /* teardown: queued work was waited for (zrt_engine_offload_free) */

  /* fault injection: 1-based optimizer step numbers (ZRT_INJECT_NONFINITE_GRADS) */
  int64_t *inject_steps;
  int ninject;
  /* test hooks (ZRT_TEST_HOOKS=1, engine.c): a deliberately wrong factor on
   * the gradients' unscale (1 = none), and the fp32 masters' sums in every
   * metrics row */
  float test_grad_factor;
  int test_master_sums;

  FILE *metrics;               /* rank 0 only */
  struct zrt_monitor *monitor; /* tensorboard / csv_monitor, rank 0 only */
  char backend_name[16], comm_name[16];

  zrt_engine_phase_acc ph;
  zrt_step_timing timing;    /* last closed window */
  zrt_team team;             /* the adaptive OpenMP team (engine_team.c) */
  int team_on;               /* zrt.adaptive_threads and not built inside a parallel region */
  int team_flip;             /* ZRT_TEST_TEAM_FLIP: the team alternates every this many steps */
  uint64_t activation_bytes; /* zrt_engine_set_activation_bytes (0 = not declared) */
  /* Effective stage3_max_reuse_distance: the config's, lowered at build
   * when the device has a capacity so that copies kept for reuse fit in
   * what model states and declared activations leave of 90% of it (a
   * cache, sized identically on every rank, so retention never causes an
   * OOM and never diverges between ranks). */
  int64_t reuse_distance;
  /* Effective stage3_prefetch_bucket_size (the config's until the memory
   * plan lowers it at the first boundary). */
  int64_t prefetch_elems;
  /* engine_memplan.c: the program's stage-3 calls of the first optimizer
   * step (fetch, release, first gradient access, grads_ready), recorded
   * while plan_recording, replayed at the first boundary; and the steady
   * per-rank device peak the plan promises from then on (0 = none yet). */
  zrt_actckpt_state ack; /* activation checkpoints (engine_actckpt.c) */
  zrt_sim_event *plan_events;
  int plan_nevents, plan_cap_events, plan_recording;
  uint64_t plan_device_bytes;
};

/* engine_timing.c: the step breakdown. _enter switches the phase
 * (ZRT_PHASE_*) at time now; _infer applies the implicit marks of
 * zrt_engine_mark's contract; _open starts a window; _close ends it into
 * eng->timing (boundary_s = now - boundary_start). */
void zrt_engine_phase_enter(zrt_engine *eng, int phase, double now);
void zrt_engine_phase_infer(zrt_engine *eng, int phase);
void zrt_engine_timing_open(zrt_engine *eng, double now);
/* Opens the window of the backend's counters (host waits, allocations,
 * scalar D2H reads) reported per step in the metrics (engine_step.c). */
void zrt_engine_counters_open(zrt_engine *eng);
void zrt_engine_timing_close(zrt_engine *eng, double boundary_start, double now);
/* Adds now - since - excluded to *acc (one of eng->ph's engine-call
 * shares: fetch, reduce, optimizer, gather) and returns now, so the next
 * share can start where this one ended. */
double zrt_engine_timing_charge(double *acc, double since, double excluded);
/* The window's micro-steps: gradient_accumulation_steps, at least 1. */
int64_t zrt_engine_accum_steps(const zrt_engine *eng);
zrt_status zrt_engine_team_open(zrt_engine *eng);
void zrt_engine_team_step(zrt_engine *eng, double step_s);

/* ------------------------------------------------ documented internals */

/* engine_memplan.c: the device memory plan (docs/memory.md, "A plan the
 * engine keeps").
 * _check_build: before any allocation, the least any program needs on the
 * device in this configuration (memest with one module gathered, one
 * module's 16-bit gradients, no prefetch or reuse, the declared
 * activations); ZRT_ERR_OOM naming the figure and what to change when it
 * exceeds the device. Starts the recording at stage 3.
 * _record: one stage-3 call of the program while recording.
 * _first_boundary: after the first optimizer step (stage 3): replays the
 * recorded step with the coordinator's rules (coordinator_sim.h) beside
 * what the pools hold besides the gathered copies and 16-bit gradients,
 * lowers the prefetch budget and the reuse distance until the steady state
 * fits 90% of the device, logs what changed once, sets plan_device_bytes;
 * ZRT_ERR_OOM when even no prefetch and no reuse cannot fit. Collective
 * (the ranks agree on the bytes). */
struct zrt_memest_layout;
zrt_status zrt_engine_plan_check_build(zrt_engine *eng, const struct zrt_memest_layout *lay);
void zrt_engine_plan_record(zrt_engine *eng, zrt_sim_kind kind, int module);
zrt_status zrt_engine_plan_first_boundary(zrt_engine *eng);
void zrt_engine_plan_free(zrt_engine *eng);

/* engine.c: sets the stage and the policy read instead of it
 * (sharding/stage_policy.h). */
void zrt_engine_set_stage(zrt_engine *eng, int stage);

/* engine_fit.c: the build's decisions from the memory model.
 * _layout_totals: the memory model's layout of this engine (padded totals,
 * dtypes, stage, offload, windows, activations, capacity).
 * _choose_stage: the resolved offload choice, and for stage "auto" the
 * first candidate, fastest first, whose predicted device bytes fit 90% of
 * the device (logged). _fit_reuse: stage 3 with a device capacity: the
 * largest reuse distance (at most the config's) that fits (logged when
 * lowered). _oom_hint: st, or for a device OOM during build the
 * model-states figures and what to change, prefixed to the error. */
void zrt_engine_layout_totals(const zrt_engine *eng, struct zrt_memest_layout *lay);
zrt_status zrt_engine_choose_stage(zrt_engine *eng);
void zrt_engine_fit_reuse(zrt_engine *eng);
zrt_status zrt_engine_oom_hint(zrt_engine *eng, zrt_status st, size_t device_ooms);

/* engine_actckpt.c: allocates the declared checkpoints' storage (build, after
 * the stage and the pools are set; the host pool is created when
 * cpu_checkpointing needs it and no offload did) and frees it. */
zrt_status zrt_engine_actckpt_build(zrt_engine *eng);
void zrt_engine_actckpt_free(zrt_engine *eng);
/* Ends any open profile interval (the forward's last block) and logs it. */
void zrt_engine_actckpt_forward_end(zrt_engine *eng);
/* engine_memplan.c: the checkpointing change to suggest in an out-of-memory
 * message when the activations (acts) are more than half of the total
 * device bytes it names: activation checkpointing when the program
 * checkpoints nothing, cpu_checkpointing when its checkpoints stay on the
 * device; "" otherwise. Writes buf (ends with ", " when not empty). */
const char *zrt_engine_actckpt_hint(const zrt_engine *eng, uint64_t acts, uint64_t total, char *buf,
                                    size_t len);
/* Reads the timing spans whose events completed into the stats (never
 * waits); a no-op without cpu_checkpointing or timing events. */
void zrt_engine_actckpt_harvest(zrt_engine *eng);

/* engine_layout.c: offsets, padded and part of every module for the
 * engine's world size (sharding/layout.h's rules). */
void zrt_engine_layout(zrt_engine *eng);
/* Fills dst[0..len) (host fp32) with the initial values of module flat
 * elements [flat_off, flat_off+len) (zeros in the padding). */
void zrt_engine_init_values(const zrt_engine *eng, int module, int64_t flat_off, int64_t len,
                            float *dst);

/* engine_layout.c: stage 3 on a host backend whose comm allocates shared
 * buffers: one collective allocation for every module's 16-bit shard
 * (not the NVMe-swapped ones), with the capacity of both pools checked
 * first. A no-op elsewhere. */
zrt_status zrt_engine_shard_arena_create(zrt_engine *eng);
/* Module m's shard16 (part elements): the next slice of the arena,
 * adopted by the host pool or the backend's, or a pool allocation when
 * there is no arena. */
zrt_status zrt_engine_alloc_shard16(zrt_engine *eng, int m);
/* Frees the arena (after the modules' shards stopped being counted). */
void zrt_engine_shard_arena_free(zrt_engine *eng);

/* Rank `rank`'s owned slice of module `module`: *off = rank * part (element
 * offset into the module's flat buffer), *len = part. Pure layout, valid
 * after build, for any rank. */
zrt_status zrt_engine_shard_range(const zrt_engine *eng, int module, int rank, int64_t *off,
                                  int64_t *len);

/* Initial value of element `index` of parameter `param` (a pure function of
 * (seed, name, index) and the param's init). */
float zrt_engine_param_init_value(const zrt_engine *eng, int param, int64_t index);

/* offload_param without offload_optimizer: writes n 16-bit elements of a
 * host shard (dst16) from fp32 masters in device memory, through a
 * transient host chunk. Synchronises the backend first. */
zrt_status zrt_engine_host16_from_master(zrt_engine *eng, const float *master, void *dst16,
                                         int64_t n);

/* The factor the program multiplies its loss gradient by in this
 * accumulation window (zrt_engine_loss_scale): under fp16 the loss scale
 * divided by gradient_accumulation_steps, as DeepSpeed's backward divides
 * the loss by it before scaling, so the 16-bit gradient buffers hold the
 * window's mean (stage 0/1 accumulate the micro-batches there) and
 * overflow exactly where DeepSpeed's do; 1 under bf16 and fp32 (no loss
 * scale: the division by the accumulation steps stays in the unscale).
 * Constant within a window: the scaler changes only at the boundary. */
float zrt_engine_backward_scale(const zrt_engine *eng);

/* Stage 1/2: all-gathers the rank's slice of full16 in place. Collective. */
zrt_status zrt_engine_gather_module(zrt_engine *eng, int m);
/* 1 when the step reads module m's gradient from grad16 itself (one rank,
 * stages 0/1, the optimizer on the device: the reduce is the identity);
 * the module then has no grad_acc (engine_step.c). */
int zrt_engine_grad_direct(const zrt_engine *eng, const zrt_module_entry *me);
/* Stage 2/3: reduces module m's grad16 (zeros when the program never asked
 * for it) into grad_acc and frees grad16. Collective. */
zrt_status zrt_engine_reduce_pending(zrt_engine *eng, int m, int async);

/* engine_offload.c: host pool + offload pipe creation (build), allocation
 * (marks modules optim_host / shard16_host / shard16_nvme), the offloaded optimizer step of one
 * piece, and teardown. */
zrt_status zrt_engine_offload_setup(zrt_engine *eng);
zrt_status zrt_engine_offload_step(zrt_engine *eng, const zrt_optim_hparams *hp, float *master,
                                   float *s1, float *s2, const float *grad, void *param16,
                                   size_t n);
void zrt_engine_offload_free(zrt_engine *eng, void *host_ptr);
/* The step's host writes of host gradient shards (the boundary's zeroing,
 * the test hook's NaN): val NULL zeroes bytes at dst, else copies val
 * (bytes <= 16). In stream order on the backend's stream where host
 * functions are stream ops (the buckets' additions and the offload pipe
 * may still use dst), at once elsewhere. */
zrt_status zrt_engine_host_set(zrt_engine *eng, void *dst, const void *val, size_t bytes);
void zrt_engine_offload_teardown(zrt_engine *eng);
/* engine_hostmem.c: returns every zrt_engine_host_alloc block the program
 * still holds (after the queued work), before the host pool goes. */
void zrt_engine_host_free_all(zrt_engine *eng);
/* offload_optimizer nvme: the whole optimizer step of every module in one
 * segmented pipe step (one commit), NO_DECAY pieces with weight_decay 0. */
zrt_status zrt_engine_offload_step_nvme(zrt_engine *eng, const zrt_optim_hparams *hp);
/* Build finished writing the initial masters: make the files durable. */
zrt_status zrt_engine_offload_built(zrt_engine *eng);
/* offload_optimizer nvme: rewrites module m's 16-bit extent (this rank's
 * shard) from the master in the files (host conversion). No gather. */
zrt_status zrt_engine_nvme_refresh_module(zrt_engine *eng, int module);
/* offload_param nvme: rewrites the whole param swap file's next generation
 * from the committed masters (16-bit = round(master), what the optimizer
 * step writes) and commits it. Called after build, after every optimizer
 * step and by zrt_engine_refresh_params. */
zrt_status zrt_engine_param_nvme_write(zrt_engine *eng);
/* offload_param nvme: copies module m's 16-bit shard (part elements) from
 * the file's current generation into host memory dst (checkpoints).
 * Blocking. */
zrt_status zrt_engine_param_nvme_read(zrt_engine *eng, int module, void *dst);

/* Element k of a master-extent array whose elements are of dtype dt
 * (master, grad_acc: eng->master_dtype; s1, s2: eng->state_dtype); NULL
 * stays NULL. */
static inline void *zrt_engine_at(const void *base, size_t k, zrt_dtype dt) {
  return base ? (char *)base + k * zrt_dtype_size(dt) : NULL;
}

/* One parameter's piece of module `module`'s master extent on this rank:
 * the unit the optimizer steps (NO_DECAY params get weight decay 0). */
typedef struct zrt_engine_piece {
  int module;
  const zrt_param_entry *param;
  size_t k;  /* element offset of the piece inside the module's master extent */
  size_t n;  /* elements */
  void *w16; /* the piece's working weights (full16, or shard16 at stage 3) */
} zrt_engine_piece;
/* Calls fn on every piece of module m in parameter order; stops at the
 * first status that is not ZRT_OK and returns it. */
zrt_status zrt_engine_each_piece(zrt_engine *eng, int m,
                                 zrt_status (*fn)(zrt_engine *, const zrt_engine_piece *, void *),
                                 void *arg);

#endif
