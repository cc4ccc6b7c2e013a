/*
 * zrt.h — the one public header of zrt, a ZeRO-style mixed-precision and
 * memory-optimization training runtime.
 *
 * A training program creates a config (defaults, then the file the launcher
 * chose, then environment and program overrides), creates an engine from it,
 * registers its parameters grouped in modules, builds the engine, and then
 * for every micro-batch runs forward/backward module by module, calling
 * fetch / release around each module's use and grads_ready after its
 * backward, and zrt_engine_step after every micro-batch (the engine steps the
 * optimizer only at the accumulation boundary).
 *
 * Conventions (shared/DESIGN.md rules 1, 4): every function returns a
 * zrt_status; outputs go through pointer arguments; zrt_last_error() gives the
 * human message of the last failure on the calling thread. Handles are opaque;
 * _destroy functions accept NULL. The library never calls exit().
 */
#ifndef ZRT_H
#define ZRT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The API and ABI version. The build reads these lines (CMakeLists.txt): the
 * shared library is libzrt.so.MAJOR, and MAJOR changes whenever a program
 * built against an older zrt.h could misbehave with this library. A program
 * compares zrt_version() (the library it runs with) with these (the header
 * it was compiled with). */
#define ZRT_VERSION_MAJOR 0
#define ZRT_VERSION_MINOR 1
#define ZRT_VERSION_PATCH 0
#define ZRT_VERSION_STRING "0.1.0"

/* Marks the public functions: the shared library exports these and hides
 * every other symbol (it is built with -fvisibility=hidden). */
#if defined(__GNUC__)
#define ZRT_API __attribute__((visibility("default")))
#else
#define ZRT_API
#endif

/* ---------------------------------------------------------------- status */

typedef enum zrt_status {
  ZRT_OK = 0,
  ZRT_ERR_INVALID_ARG = 1, /* a caller passed something the API forbids */
  ZRT_ERR_CONFIG = 2,      /* a config file, key or value is wrong */
  ZRT_ERR_OOM = 3,         /* a pool (device or host) ran out of capacity */
  ZRT_ERR_COMM = 4,        /* a collective failed or timed out */
  ZRT_ERR_CUDA = 5,        /* a CUDA / cuBLAS call failed */
  ZRT_ERR_IO = 6,          /* a file could not be read or written */
  ZRT_ERR_INTERNAL = 7,    /* an invariant of zrt itself broke */
  ZRT_ERR_OVERFLOW = 8,    /* training went non-finite: overflow at the minimum loss scale, a
                            * NaN loss, non-finite grads applied (zrt.stop_on_nonfinite) */
  ZRT_ERR_UNSUPPORTED = 9  /* valid request this build/backend cannot serve */
} zrt_status;

/* The version of the library the program runs with (each output may be
 * NULL): compare with ZRT_VERSION_* (the header it was compiled with). A
 * different major means the program was built for another ABI. Never fails:
 * ZRT_OK. */
ZRT_API zrt_status zrt_version(int *major, int *minor, int *patch);

/* Static name of a status ("ZRT_ERR_OOM"). Never NULL. */
ZRT_API const char *zrt_status_string(zrt_status st);
/* Message of the last error set on this thread ("" when none). The string
 * stays valid until the next failing zrt call on the same thread. */
ZRT_API const char *zrt_last_error(void);
/* Where the calling thread's last error came from: "file:line" of the call
 * that set it, then " <- file:line" for every library call site that passed
 * it up (NCCL's file:line trail), e.g. "comm_mpi.c:412 <- bucket.c:97 <-
 * engine_step.c:231". For bug reports; empty when no error was set. */
ZRT_API const char *zrt_last_error_trace(void);

/* ----------------------------------------------------------------- types */

typedef enum zrt_dtype { ZRT_F32 = 0, ZRT_F16 = 1, ZRT_BF16 = 2 } zrt_dtype;

/* Bytes per element of a dtype (4 or 2). */
ZRT_API size_t zrt_dtype_size(zrt_dtype dt);
/* "fp32", "fp16", "bf16". */
ZRT_API const char *zrt_dtype_name(zrt_dtype dt);

/* Memory categories every pool accounts separately (DESIGN.md rule 6). */
typedef enum zrt_mem_category {
  ZRT_MEM_PARAMS16 = 0, /* 16-bit (or working-precision) parameters */
  ZRT_MEM_GRADS,        /* gradients: working-precision and fp32 accumulation */
  ZRT_MEM_MASTER32,     /* fp32 master weights */
  ZRT_MEM_OPTIM_STATE,  /* optimizer moments */
  ZRT_MEM_ACTIVATIONS,  /* the program's activations and workspaces */
  ZRT_MEM_COMM,         /* communication / staging buffers */
  ZRT_MEM_OTHER,
  ZRT_MEM_NCAT
} zrt_mem_category;

/* "params16", "grads", "master32", "optim_state", "activations", "comm",
 * "other" — the names the metrics file uses. */
ZRT_API const char *zrt_mem_category_name(zrt_mem_category c);

typedef struct zrt_mem_stats {
  size_t current[ZRT_MEM_NCAT];
  size_t peak[ZRT_MEM_NCAT];
  size_t current_total;
  size_t peak_total;
  size_t capacity; /* 0 = unlimited */
} zrt_mem_stats;

/* ---------------------------------------------------------------- config */

/* A config: the schema's defaults overlaid by files, environment variables
 * and explicit sets, each value remembering where it came from. */
typedef struct zrt_config zrt_config;

/* A config holding every schema default. */
ZRT_API zrt_status zrt_config_create(zrt_config **out);
ZRT_API void zrt_config_destroy(zrt_config *cfg);

/* Overlays a file: DeepSpeed JSON, a zrt/DeepSpeed YAML, or a launch YAML
 * (accelerate-style, with deepspeed_config: or deepspeed_config_file:). The
 * format is detected from content. On error nothing in cfg changes and
 * zrt_last_error() names file, line, column, key path and what was
 * expected; every error found is reported, one per line. */
ZRT_API zrt_status zrt_config_load_file(zrt_config *cfg, const char *path);

/* Overlays ZRT_<KEY> environment variables (zrt section keys). */
ZRT_API zrt_status zrt_config_load_env(zrt_config *cfg);

/* What a rank calls: defaults, then the file named by $ZRT_CONFIG_FILE
 * (written by `zrt launch`) when set, then the environment. */
ZRT_API zrt_status zrt_config_from_env(zrt_config **out);

/* Sets one value by dotted key path ("zero_optimization.stage") from its
 * text form. `origin` names the source: "--flag..." is a flag, "ZRT_..."
 * the environment, anything else the program. A program value outranks a
 * file, except for the batch size: a program micro-batch, accumulation or
 * train batch that contradicts one the user gave (file, environment, flag)
 * is ZRT_ERR_CONFIG naming both (Hugging Face's Trainer raises on the same
 * mismatch), and one that agrees changes nothing. An origin starting with
 * "program default" fills only what the config leaves to the program: a
 * key that says "auto", and the micro-batch when the config gives no batch
 * size at all; elsewhere it is a no-op (ZRT_OK). */
ZRT_API zrt_status zrt_config_set(zrt_config *cfg, const char *key_path, const char *value,
                                  const char *origin);

/* Text form of a resolved value into buf. */
ZRT_API zrt_status zrt_config_get(const zrt_config *cfg, const char *key_path, char *buf,
                                  size_t len);

/* Resolves "auto" values and derived values (batch triple) for a world
 * size and validates cross-key rules. Idempotent. An "auto" the program did
 * not fill takes DeepSpeed's default for that key; the batch size left
 * "auto" with nothing to derive it from is an error. */
ZRT_API zrt_status zrt_config_resolve(zrt_config *cfg, int world_size);

/* ---------------------------------------------------------------- engine */

typedef struct zrt_engine zrt_engine;

/* How a parameter's initial values are produced. Every element's value is a
 * pure function of (seed, parameter name, element index), so any rank can
 * initialise just its shard and the model is identical at every world size
 * and stage. */
typedef enum zrt_init_kind {
  ZRT_INIT_ZEROS = 0,
  ZRT_INIT_ONES,
  ZRT_INIT_CONST,  /* value = a */
  ZRT_INIT_NORMAL, /* mean 0, std a */
  ZRT_INIT_UNIFORM /* uniform in [-a, a] */
} zrt_init_kind;

typedef struct zrt_init {
  zrt_init_kind kind;
  float a;
} zrt_init;

/* Flags of zrt_param_add. */
#define ZRT_PARAM_NO_DECAY 1u /* exclude from weight decay (biases, norms) */

typedef struct zrt_engine_info {
  int rank, world_size, local_rank, local_world_size;
  const char *backend; /* "cpu" or "cuda" */
  const char *comm;    /* "self", "mpi" or "nccl" */
  zrt_dtype dtype;     /* working precision of params and grads */
  int zero_stage;
  int64_t micro_batch; /* per rank */
  int64_t grad_accum;
  int64_t train_batch; /* micro * accum * world */
  uint64_t seed;
} zrt_engine_info;

typedef struct zrt_step_info {
  int64_t step;          /* optimizer steps taken so far, skipped included */
  int boundary;          /* 1 when this call was an accumulation boundary */
  int skipped;           /* 1 when the boundary step was skipped (overflow) */
  float loss;            /* mean loss over the global batch of this step */
  float lr;              /* learning rate the step used */
  float loss_scale;      /* the step's loss scale (fp16; the backward used it / accumulation) */
  float grad_norm;       /* global norm of the unscaled gradient (pre-clip) */
  int64_t skipped_total; /* skipped steps so far */
  int stop;              /* boundary: 1 on every rank when any rank called
                            zrt_engine_request_stop in this window */
} zrt_step_info;

/* Creates an engine from a resolved-or-not config (it is copied and resolved
 * against the world size). Picks the backend (CUDA when built and a GPU is
 * present, else CPU) and the comm (NCCL on GPU, MPI on CPU, self when the
 * world size is 1) and logs the choice once. Initialises MPI when needed.
 * The program may set "train_micro_batch_size_per_gpu" etc. on cfg first
 * so that "auto" values resolve from it. */
ZRT_API zrt_status zrt_engine_create(const zrt_config *cfg, zrt_engine **out);
/* Frees everything, finalises the comm. Accepts NULL. */
ZRT_API void zrt_engine_destroy(zrt_engine *eng);
ZRT_API zrt_status zrt_engine_get_info(const zrt_engine *eng, zrt_engine_info *out);

/* Registers a module (the unit of stage-3 gather/release) before build. */
ZRT_API zrt_status zrt_module_add(zrt_engine *eng, const char *name, int *module_id);
/* Registers a parameter of module_id before build. Names must be unique. */
ZRT_API zrt_status zrt_param_add(zrt_engine *eng, int module_id, const char *name, int ndim,
                                 const int64_t *shape, zrt_init init, unsigned flags,
                                 int *param_id);
/* Bytes of backend memory the program will allocate per rank after build
 * (activations and workspaces: what it passes to zrt_engine_alloc), so
 * that zero_optimization.stage "auto" picks a configuration where model
 * states AND these bytes fit, and an OOM at build says what the program
 * still needs. Before build; 0 (the default) = not declared, and auto then
 * logs that activations were not counted. */
ZRT_API zrt_status zrt_engine_set_activation_bytes(zrt_engine *eng, uint64_t bytes);
/* Lays out, partitions, allocates and initialises (each rank only its
 * shard). Fails with ZRT_ERR_OOM and a hint when model states do not fit. */
ZRT_API zrt_status zrt_engine_build(zrt_engine *eng);
/* Overwrites initial weights (after build) from path: a safetensors file, a
 * sharded checkpoint's model.safetensors.index.json, or a Hugging Face
 * directory holding model.safetensors or that index. Tensor names are the
 * parameter names, or those with the "transformer." prefix of HF's task
 * heads; F32, F16 or BF16. A tensor no parameter uses is an error naming
 * it (a few, then "and N more"): a config with fewer layers than the
 * weights never loads silently. Every tensor must be
 * finite: a NaN or Inf is an error naming the tensor and nothing is
 * loaded (every rank checks whole tensors, so all ranks agree); then each
 * rank reads only its shard. Collective (the working weights are refreshed). */
ZRT_API zrt_status zrt_engine_load_safetensors(zrt_engine *eng, const char *path);
/* The same, allowing the unused tensors whose names match a pattern of
 * unused_ok (fnmatch(3) patterns, NULL-terminated; matched against the name
 * and the name without "transformer."), e.g. a model's non-parameter
 * buffers ("h.*.attn.bias") or a tied head checked separately. */
ZRT_API zrt_status zrt_engine_load_safetensors_ex(zrt_engine *eng, const char *path,
                                                  const char *const *unused_ok);
/* Compares tensors a and b of the weights at path (same forms as
 * zrt_engine_load_safetensors, same name resolution) after conversion to
 * fp32: *result 1 when equal element for element, 0 when they differ (or
 * differ in shape), -1 when either is absent. No engine; reads only. */
ZRT_API zrt_status zrt_weights_compare(const char *path, const char *a, const char *b, int *result);

/* Makes a module's working weights available (stage 3: all-gather unless
 * the gathered copy is still valid, and prefetch of the modules that
 * follow in the recorded order). Blocking for this module. Fetches nest: a
 * module fetched again before its release (tied weights) is not gathered
 * again and needs one release per fetch. Fetch only to read weights: a
 * backward that only writes grads (an embedding's) needs no fetch, and at
 * stage 3 each fetch after a release costs one all-gather of the module. */
ZRT_API zrt_status zrt_module_fetch(zrt_engine *eng, int module_id);
/* Ends one use of a module's weights (stage 3: the release that ends the
 * outermost fetch frees the gathered copy unless persistent). */
ZRT_API zrt_status zrt_module_release(zrt_engine *eng, int module_id);
/* Declares the module's gradients complete for this micro-batch (the
 * program has accumulated into zrt_param_grad). Stage 2/3 may start the
 * bucket's reduce-scatter asynchronously. */
ZRT_API zrt_status zrt_module_grads_ready(zrt_engine *eng, int module_id);

/* Working weights (dtype of engine info) of a fetched module's parameter,
 * in backend memory. */
ZRT_API zrt_status zrt_param_data(zrt_engine *eng, int param_id, void **ptr);
/* Gradient buffer of a parameter (working dtype, backend memory) that the
 * program's backward ADDS into; the module need not be fetched. Stage 2/3: zero at the start of
 * each micro-batch (allocated on first use, freed by grads_ready). Stage 0/1: zero at the start of
 * each accumulation window — the program's adds of successive micro-batches accumulate in it, as in
 * DeepSpeed. */
ZRT_API zrt_status zrt_param_grad(zrt_engine *eng, int param_id, void **ptr);
/* Element count of a parameter. */
ZRT_API zrt_status zrt_param_numel(const zrt_engine *eng, int param_id, int64_t *numel);

/* The factor the program multiplies its loss gradient by in the current
 * accumulation window. Under fp16: the dynamic (or static) loss scale
 * divided by gradient_accumulation_steps, as DeepSpeed's backward divides
 * the loss by the accumulation steps before scaling it (the 16-bit
 * gradient buffers hold the window's mean, not its sum); zrt_step_info's
 * loss_scale is the undivided scale. 1 under bf16 and fp32. */
ZRT_API zrt_status zrt_engine_loss_scale(const zrt_engine *eng, float *scale);

/* Ends a micro-batch. `loss` is this rank's mean micro-batch loss. At the
 * accumulation boundary: reduces, checks overflow, clips, steps the
 * optimizer and scheduler, writes metrics; info->boundary says which. The
 * engine only adds the window's losses up (in float, from 0, in call
 * order): a program that reads its losses back from the device once per
 * window (no host wait per micro-batch) passes 0 for the earlier
 * micro-batches and their float sum with the last, and gets the same
 * boundary loss to the bit; info->loss of those earlier calls is then 0. */
ZRT_API zrt_status zrt_engine_step(zrt_engine *eng, float loss, zrt_step_info *info);

/* Asks every rank to stop: the request rides on the next accumulation
 * boundary's one all-reduce of the gradient statistics (no collective and
 * no host wait of its own), and that boundary's zrt_step_info.stop is 1 on
 * every rank when any rank asked since the previous boundary. Call it from
 * the program's thread (a signal handler sets a flag the loop reads). */
ZRT_API zrt_status zrt_engine_request_stop(zrt_engine *eng);

/* Phases of a training step the program may mark for the step breakdown. */
typedef enum zrt_phase {
  ZRT_PHASE_FORWARD = 0,
  ZRT_PHASE_BACKWARD = 1,
  ZRT_PHASE_OTHER = 2 /* outside the passes: data loading, evaluation, saving */
} zrt_phase;

/* Marks the start of a phase of the current micro-batch (host time, no
 * synchronisation); each zrt_engine_step returns in ZRT_PHASE_OTHER.
 * Optional: until a program calls it, the engine infers the marks —
 * forward starts at the first zrt_module_fetch after a zrt_engine_step,
 * backward at the first zrt_param_grad or zrt_module_grads_ready after
 * that. After the first explicit mark only explicit marks count, so a
 * program that evaluates between steps marks ZRT_PHASE_OTHER around it
 * and the figures stay exact. */
ZRT_API zrt_status zrt_engine_mark(zrt_engine *eng, zrt_phase phase);

/* Where the time of the last optimizer step went (this rank, host clock,
 * seconds). The window runs from the end of the previous boundary (or of
 * zrt_engine_build) to the end of this one, so
 *   other_s + forward_s + backward_s + boundary_s == step_s.
 * fetch_s, reduce_s, optimizer_s and gather_s are time spent inside engine
 * calls, contained in the phase they happened in; comm_busy_s / comm_wait_s
 * cover every collective of the window (see comm/comm.h). */
typedef struct zrt_step_timing {
  int64_t step;            /* optimizer step these figures belong to (0: none yet) */
  double step_s;           /* the whole window (= metrics step_time_s) */
  double other_s;          /* outside the passes: data, evaluation, checkpoints */
  double forward_s;        /* forward passes of the window's micro-batches */
  double backward_s;       /* backward passes, non-boundary zrt_engine_step calls included */
  double boundary_s;       /* the boundary's zrt_engine_step */
  double fetch_s;          /* blocked in zrt_module_fetch (stage-3 gathers not hidden) */
  double reduce_s;         /* issuing / waiting for gradient reductions */
  double optimizer_s;      /* norm + overflow agreement + optimizer update (offload included) */
  double gather_s;         /* stage 1/2: all-gather of the updated 16-bit params */
  double comm_busy_s;      /* collectives' issue-to-completion time, summed */
  double comm_wait_s;      /* part of it spent blocked in comm calls */
  double overlap_fraction; /* 1 - comm_wait_s / comm_busy_s: comm hidden behind
                            * compute (0 when no collective ran) */
} zrt_step_timing;
ZRT_API zrt_status zrt_engine_step_timing(const zrt_engine *eng, zrt_step_timing *out);

/* Tokens (or samples) one rank processes per micro-batch, for the metrics'
 * tokens_per_s (= tokens * grad_accum * world / step time). 0 = unknown. */
ZRT_API zrt_status zrt_engine_set_tokens_per_micro(zrt_engine *eng, int64_t tokens);

/* Which pool zrt_engine_memory reports (the values 0 and 1 are stable). */
typedef enum zrt_mem_where { ZRT_MEM_DEVICE = 0, ZRT_MEM_HOST_PINNED = 1 } zrt_mem_where;
/* Memory accounting of the device pool or the pinned host pool. Local
 * rank only. */
ZRT_API zrt_status zrt_engine_memory(const zrt_engine *eng, zrt_mem_where where,
                                     zrt_mem_stats *out);

/* Backend memory for the program (activations, workspaces), accounted in
 * the device pool under `cat`. */
ZRT_API zrt_status zrt_engine_alloc(zrt_engine *eng, size_t bytes, zrt_mem_category cat,
                                    void **ptr);
ZRT_API void zrt_engine_free(zrt_engine *eng, void *ptr);

/* Host memory for the program's copies to and from backend memory (a
 * token batch uploaded every step) that the backend copies asynchronously:
 * `bytes` rounded up to whole pages, page-aligned, registered with the
 * backend (cudaHostRegister on cuda, the twin's registration; the cpu
 * backend copies synchronously and has nothing to register: plain memory)
 * and accounted under `cat` in the engine's host pool, whole pages and all
 * (zrt_engine_memory(ZRT_MEM_HOST_PINNED); the pool the offload or cpu
 * checkpoints use when build made one, else one made on first use). Its
 * first contents are unspecified. After zrt_engine_build; not from inside
 * a launched host function.
 *
 * The contract (zrt_engine_memcpy on the engine's stream, cuda and twin):
 *  - H2D from it returns once queued, no host wait; the copy reads the
 *    buffer when it runs. The host may rewrite the bytes it copies only
 *    after a later host wait that covers the copy: zrt_engine_synchronize,
 *    or a D2H zrt_engine_memcpy into memory NOT from this call (which
 *    returns when it, and everything queued before it on the engine's
 *    stream, is done). A program that uploads each micro-batch and reads
 *    the loss back once per step keeps one slice per micro-batch of the
 *    window (examples/gpt2/train_gpt2.c). The twin backend catches a
 *    rewrite made before the copy ran, as it does when the copy waits
 *    behind other work (ZRT_TWIN_SLOW_OP=memcpy:US makes it wait): the
 *    process dies with a message naming the buffer (its copy guard,
 *    ZRT_TWIN_COPY_GUARD).
 *  - D2H into it returns once queued; its bytes are the copy's only after
 *    such a later host wait; neither read nor write them before (the twin
 *    fills them with 0xFF bytes, NaN, until the copy runs, from when the
 *    work queued before the copy that may read them is done).
 * On cpu every copy is done when zrt_engine_memcpy returns.
 * Errors (*ptr NULL, zrt_last_error says which): ZRT_ERR_INVALID_ARG for a
 * NULL engine or ptr, 0 bytes, a bad category, a call before build;
 * ZRT_ERR_OOM when the host refuses the pages (the bytes asked for and
 * what the pool holds); the backend's registration error (ZRT_ERR_CUDA). */
ZRT_API zrt_status zrt_engine_host_alloc(zrt_engine *eng, size_t bytes, zrt_mem_category cat,
                                         void **ptr);
/* Returns a zrt_engine_host_alloc block: waits first for the work queued on
 * the backend (as zrt_engine_synchronize: a copy may still use the block,
 * so not a call for the step path; nothing to wait for on cpu), then
 * unregisters it and returns its pages to the host pool. NULL: ZRT_OK,
 * nothing done. A pointer this engine's zrt_engine_host_alloc did not
 * return, or one freed already: ZRT_ERR_INVALID_ARG, nothing is freed.
 * zrt_engine_destroy returns the blocks still held. */
ZRT_API zrt_status zrt_engine_host_free(zrt_engine *eng, void *ptr);

/* Backend compute helpers for programs written only against this header. */
typedef enum zrt_copy_kind {
  ZRT_COPY_H2D = 0,
  ZRT_COPY_D2H,
  ZRT_COPY_D2D,
  ZRT_COPY_H2H
} zrt_copy_kind;
/* Copies bytes on the engine's stream, after the work queued on it (the
 * direction comes from where the pointers live: cudaMemcpyDefault's rule).
 * Host memory from zrt_engine_host_alloc: asynchronous, see its contract.
 * Other host memory: H2D takes the bytes before it returns (the host may
 * reuse the buffer at once; on cuda a copy from pageable memory may make
 * the host wait), D2H into pageable memory returns when the copy and the
 * work before it are done (a host wait: how the program reads results
 * back). Host memory the program pinned or registered itself on cuda
 * (cudaMallocHost, cudaHostRegister) is copied asynchronously, as the
 * runtime copies it: zrt_engine_synchronize before reading a D2H result
 * there. Device to device: queued. cpu: done on return. */
ZRT_API zrt_status zrt_engine_memcpy(zrt_engine *eng, void *dst, const void *src, size_t bytes,
                                     zrt_copy_kind kind);
/* C = alpha * op(A) op(B) + beta * C, row-major, fp32 accumulation; A, B in
 * dtype ab, C in dtype c. op = transpose when trans_* is nonzero. */
ZRT_API zrt_status zrt_engine_gemm(zrt_engine *eng, int trans_a, int trans_b, int64_t m, int64_t n,
                                   int64_t k, float alpha, const void *a, int64_t lda,
                                   const void *b, int64_t ldb, zrt_dtype ab, float beta, void *c,
                                   int64_t ldc, zrt_dtype c_dtype);
/* Blocks until the backend has finished all work issued so far. */
ZRT_API zrt_status zrt_engine_synchronize(zrt_engine *eng);
/* A host function launched on a stream: it gets a copy of the launch's
 * argument bytes (valid during the call) and returns ZRT_OK or an error. */
typedef zrt_status (*zrt_host_fn)(void *args);
/* Launches a program's CPU compute on the engine's compute stream, as a
 * CUDA program launches a kernel (cudaLaunchHostFunc's idea): fn runs with
 * a copy of the `bytes` bytes at `args` (copied before this returns), after
 * the work queued on the stream so far and before the work queued after.
 * Inside fn the program may read and write backend memory (zrt_param_data,
 * zrt_param_grad, zrt_engine_alloc) and call zrt_engine_memcpy / _gemm,
 * which run in place on the stream; it must not call other engine functions
 * (fetch, release, grads_ready, step) nor read host memory the host still
 * writes. A value the host needs back (a loss) comes back by a D2H
 * zrt_engine_memcpy after the launch. Where it runs: the twin backend, a
 * stream worker (asynchronously: fn's error comes back from a later call
 * that waits for the stream); cpu, at once on the calling thread; cuda,
 * at once on the calling thread after a synchronize of the stream (a CUDA
 * program launches kernels instead; host functions suit its host-side
 * work). */
ZRT_API zrt_status zrt_engine_launch(zrt_engine *eng, zrt_host_fn fn, const void *args,
                                     size_t bytes);
/* The stream the engine computes on, as the device API's handle
 * (cudaStream_t on the CUDA backend; NULL on the CPU backend, whose work is
 * synchronous). A program launches its own kernels, memsets and copies on
 * it (never on CUDA's legacy default stream, which a non-blocking stream
 * does not wait for), so they are ordered with the engine's work; the
 * engine orders its other streams against it with events. */
ZRT_API void *zrt_engine_stream(const zrt_engine *eng);

/* Collectives over the engine's comm for program data (e.g. losses). */
ZRT_API zrt_status zrt_engine_all_reduce_sum(zrt_engine *eng, float *host_vals, size_t n);
ZRT_API zrt_status zrt_engine_barrier(zrt_engine *eng);

/* ------------------------------------------- activation checkpoints (ZeRO-R) */

/* A program whose forward is a chain of blocks (transformer layers) may
 * keep only each block's input and recompute the block's forward in its
 * backward. The engine holds the inputs, in the accounted activations pool
 * or, with activation_checkpointing.cpu_checkpointing, in pinned host
 * memory: copied out on a copy stream as the forward saves them and
 * prefetched back one block ahead in backward order, ordered with events
 * (docs/memory.md, "Activation checkpoints"). The memory model, stage
 * "auto", the build's plan and estimate-memory count them to the byte.
 *
 * Use:  before build   zrt_actckpt_wanted, zrt_actckpt_declare, zrt_actckpt_is_on
 *       forward, b     zrt_actckpt_save(b, input) before the block overwrites its input
 *       backward, b    zrt_actckpt_fetch(b, &input), recompute the block's forward
 *                      from it, the block's backward, zrt_actckpt_release(b)
 * Blocks are fetched in the reverse order of their saves, one at a time. */

/* *on = 1 when the config asks for checkpointing (zrt.activation_checkpointing,
 * which a DeepSpeed activation_checkpointing section sets). The program
 * decides: a program with a flag of its own may checkpoint either way. */
ZRT_API zrt_status zrt_actckpt_wanted(const zrt_engine *eng, int *on);
/* Before build: the forward has nblocks blocks in order, each block's input
 * is `bytes` bytes of backend memory, and offer[b] != 0 for the blocks the
 * program can recompute (NULL = every block). The engine checkpoints the
 * first activation_checkpointing.number_checkpoints offered blocks (every
 * offered block when null) and allocates their storage at build, held
 * until destroy. Calling it again replaces the declaration; nblocks 0
 * turns checkpointing off. */
ZRT_API zrt_status zrt_actckpt_declare(zrt_engine *eng, int nblocks, size_t bytes,
                                       const unsigned char *offer);
/* *on = 1 when block is checkpointed (after declare). *count (may be
 * NULL): the checkpointed blocks in all. */
ZRT_API zrt_status zrt_actckpt_is_on(const zrt_engine *eng, int block, int *on, int *count);
/* Forward: copies the block's input (`bytes` of backend memory at src) into
 * its checkpoint, ordered on the engine stream after the work that wrote src;
 * the program may overwrite src with work it issues after the call. With
 * cpu_checkpointing the copy to the host runs on the copy stream. After build. */
ZRT_API zrt_status zrt_actckpt_save(zrt_engine *eng, int block, const void *src);
/* Backward: *input = the block's saved input in backend memory (read-only),
 * valid until zrt_actckpt_release(block); work issued on the engine stream
 * after the call sees it (the stream waits for the prefetch's event; the host
 * does not). Starts the prefetch of the next checkpointed block in backward
 * order. ZRT_ERR_INVALID_ARG for a block that was not saved this pass or is
 * still fetched. */
ZRT_API zrt_status zrt_actckpt_fetch(zrt_engine *eng, int block, const void **input);
/* Ends the block's backward: its staging slot may be refilled once the work
 * issued so far on the engine stream is done. */
ZRT_API zrt_status zrt_actckpt_release(zrt_engine *eng, int block);

/* Counters since build. bytes_out / bytes_in: copied to / from the host
 * (cpu_checkpointing). fetches: zrt_actckpt_fetch calls; of them, resident:
 * the input was still in a device slot (device checkpoints, or the last
 * blocks saved), prefetched: its copy-in was issued ahead by the fetch of
 * the block after it, on_demand: issued by the fetch itself (a wait the
 * prefetch did not hide). */
typedef struct zrt_actckpt_stats {
  uint64_t bytes_out, bytes_in;
  int64_t saves, fetches, resident, prefetched, on_demand;
  /* cpu_checkpointing on a backend with timing events (twin, cuda; 0 on
   * cpu, whose copies complete before they return): copy_s, the copy
   * stream's time in the copies to and from the host; stall_s, the engine
   * stream's time waiting for them (at saves: a staging slot's copy-out; at
   * fetches: its copy-in). 1 - stall_s / copy_s is the share of the
   * transfers hidden behind compute. timed: copies and waits measured so far;
   * untimed: those whose events were overwritten before they completed
   * (counted, never guessed). Read from events that completed, never
   * waiting: the last pass's figures arrive once its work is done (the next
   * zrt_engine_step or get_stats call after it). */
  double copy_s, stall_s;
  int64_t timed, untimed;
} zrt_actckpt_stats;
ZRT_API zrt_status zrt_actckpt_get_stats(const zrt_engine *eng, zrt_actckpt_stats *out);

/* ---------------------------------------------------------- checkpoints */

/* Writes a checkpoint under dir/step_<N>/: every rank its shards, rank 0 the
 * metadata (including user_json, an optional JSON object string owned by
 * the caller, e.g. data position) and then dir/latest. Atomic: temporary
 * files, fsync, rename, pointer last. Collective. */
ZRT_API zrt_status zrt_engine_save(zrt_engine *eng, const char *dir, const char *user_json);
/* Claims dir for this engine's saves: creates it and checks it as
 * zrt_engine_save does, and takes its lock (rank 0: flock on dir/zrt.lock,
 * held until zrt_engine_destroy), so a second job saving into the same
 * directory fails, naming the process and host that hold it, instead of
 * removing the first's temporaries; then removes the temporaries of killed
 * saves there. zrt_engine_save claims its directory itself on its first
 * call; call this at start to fail before training. Collective. */
ZRT_API zrt_status zrt_engine_save_claim(zrt_engine *eng, const char *dir);
/* Loads dir/latest (or dir itself when it is a step directory) into a built
 * engine, resharding when the world size or stage differ. On any error the
 * engine is unchanged. *user_json (may be NULL) receives a malloc'd copy of
 * the saved user JSON. Collective. */
ZRT_API zrt_status zrt_engine_load(zrt_engine *eng, const char *dir, char **user_json);
/* Reads, without an engine, the step and user JSON of the checkpoint
 * zrt_engine_load(dir) would load: metadata only (rank files are neither
 * opened nor checked), no collective, no write. Lets a program compare its
 * own configuration (e.g. model shape) with the checkpoint's before building.
 * *user_json (may be NULL): malloc'd, "{}" when none was saved. Same errors
 * as zrt_engine_load for a missing or malformed checkpoint. */
ZRT_API zrt_status zrt_ckpt_peek(const char *dir, int64_t *step, char **user_json);
/* Removes the checkpoint dir/step_<step> the way zrt removes files
 * (docs/security.md): only regular files owned by this user whose names
 * zrt's saves give (meta.json, rank<R>.bin, rank<R>.g<G>.bin and their
 * temporaries), relative to the directory's descriptor, never through a
 * link; the directory itself only once empty. Anything else in it (a
 * user's notes.txt) stays with the directory, *kept (may be NULL) counts
 * it and a warning names it. Refuses the step dir/latest names, and stops
 * when `latest` cannot be read (a link, a FIFO). Not collective: one
 * process (rank 0) after zrt_engine_save returned. */
ZRT_API zrt_status zrt_ckpt_remove(const char *dir, int64_t step, int *kept);
/* The spelling of zrt 0.1 (checkpoints now use the one prefix zrt_ckpt_). */
#define zrt_checkpoint_peek zrt_ckpt_peek

/* ----------------------------------------------------------------- files */

/* Opens an existing file for reading the way zrt opens every file it reads
 * (docs/security.md): without blocking (a FIFO never hangs the open), and
 * only a regular file is accepted; otherwise the error (zrt_last_error)
 * names `what` ("--data file"), the path and what it is instead (a FIFO, a
 * directory, missing, ...). *fd is a blocking read-only descriptor, or -1
 * on failure; the caller closes it. Errors: ZRT_ERR_IO. For programs that
 * read their own inputs (datasets, model configs) by the same rule. */
ZRT_API zrt_status zrt_file_open_read(const char *path, const char *what, int *fd);

/* -------------------------------------------------------------- logging */

typedef enum zrt_log_level {
  ZRT_LOG_ERROR = 0,
  ZRT_LOG_WARN,
  ZRT_LOG_INFO,
  ZRT_LOG_DEBUG
} zrt_log_level;
/* Log to stderr prefixed with "[zrt rank R]". Level from ZRT_LOG_LEVEL. */
ZRT_API void zrt_log(zrt_log_level level, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

#ifdef __cplusplus
}
#endif
#endif /* ZRT_H */
