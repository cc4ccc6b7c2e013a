/*
 * backend.h — the compute backend vtable (ggml-backend style, DESIGN.md
 * rule 3): { iface, ctx }, designated initialisers, optional slots NULL with
 * a generic fallback in backend.c.
 *
 * Backends: "cpu" (always built; enforces device_memory_limit as a device
 * capacity through its pool), "twin" (always built: the CPU's kernels with
 * a GPU's streams, events and memory rules, backend_twin.c) and "cuda"
 * (built when nvcc is found, chosen when a GPU is present). Every op is
 * tested against the CPU backend.
 *
 * Memory: every allocation goes through b->pool (zrt_backend_alloc), so the
 * device pool accounts all device bytes by category.
 *
 * Streams: ops take a zrt_stream (NULL = the backend's default stream). On
 * the CPU backend ops complete before they return and streams/events are
 * no-ops. On the twin and on CUDA ops are asynchronous w.r.t. the host
 * unless stated.
 */
#ifndef ZRT_BACKEND_H
#define ZRT_BACKEND_H

#include "optim.h"
#include "pool.h"

typedef void *zrt_stream;
typedef void *zrt_event;

typedef struct zrt_backend_iface {
  const char *name; /* "cpu", "twin", "cuda" */

  /* raw device memory (wrapped by the pool) */
  zrt_status (*alloc)(void *ctx, size_t bytes, void **out);
  void (*free)(void *ctx, void *ptr, size_t bytes);
  /* Returns the block in stream order on s alone (cudaFreeAsync's idea):
   * the caller vouches that s is ordered after every use of it. Optional:
   * NULL = free. */
  void (*free_on)(void *ctx, void *ptr, size_t bytes, zrt_stream s);

  zrt_status (*memcpy)(void *ctx, void *dst, const void *src, size_t bytes, zrt_copy_kind kind,
                       zrt_stream s);
  zrt_status (*memset)(void *ctx, void *dst, int value, size_t bytes, zrt_stream s);

  /* dst[i] = (dst_dt) src[i]; round-to-nearest-even, NaN/Inf preserved. */
  zrt_status (*convert)(void *ctx, void *dst, zrt_dtype dst_dt, const void *src, zrt_dtype src_dt,
                        size_t n, zrt_stream s);
  /* dst[i] += (float)src[i] * alpha (fp32 dst, any src dtype). Optional. */
  zrt_status (*accumulate)(void *ctx, float *dst, const void *src, zrt_dtype src_dt, float alpha,
                           size_t n, zrt_stream s);
  /* One pass: *sumsq += sum((x*scale)^2) in double, *nonfinite |= any
   * non-finite x. Results are host values, complete on return (syncs). */
  zrt_status (*scale_check)(void *ctx, const void *x, zrt_dtype dt, size_t n, float scale,
                            double *sumsq, int *nonfinite, zrt_stream s);
  /* scale_check over k buffers in order with one host wait for all: for
   * i = 0..k-1, *sumsq += (buffer i's sum, formed as scale_check forms it),
   * *nonfinite |= its flag; the same bits as k scale_check calls. Entries
   * with n[i] == 0 are skipped. Optional (NULL: scale_check per buffer). */
  zrt_status (*scale_check_list)(void *ctx, const void *const *x, const size_t *n, int k,
                                 zrt_dtype dt, float scale, double *sumsq, int *nonfinite,
                                 zrt_stream s);
  /* Row-major GEMM with fp32 accumulation, C = alpha op(A) op(B) + beta C. */
  zrt_status (*gemm)(void *ctx, int trans_a, int trans_b, int64_t m, int64_t n, int64_t k,
                     float alpha, const void *a, int64_t lda, const void *b, int64_t ldb,
                     zrt_dtype ab_dt, float beta, void *c, int64_t ldc, zrt_dtype c_dt,
                     zrt_stream s);
  /* Fused optimizer step over n elements of an fp32 master shard with
   * state s1 (m / momentum), s2 (v; NULL for SGD/Lion): g = grad*grad_mul,
   * update master, write param16 (dtype pdt; NULL = skip). */
  zrt_status (*optim_step)(void *ctx, const zrt_optim_hparams *hp, float *master, float *s1,
                           float *s2, const void *grad, zrt_dtype gdt, void *param16, zrt_dtype pdt,
                           size_t n, zrt_stream s);

  zrt_status (*stream_create)(void *ctx, zrt_stream *out);               /* optional */
  void (*stream_destroy)(void *ctx, zrt_stream s);                       /* optional */
  zrt_status (*event_create)(void *ctx, zrt_event *out);                 /* optional */
  void (*event_destroy)(void *ctx, zrt_event e);                         /* optional */
  zrt_status (*event_record)(void *ctx, zrt_event e, zrt_stream s);      /* optional */
  zrt_status (*stream_wait_event)(void *ctx, zrt_stream s, zrt_event e); /* optional */
  zrt_status (*synchronize)(void *ctx, zrt_stream s);                    /* s NULL = whole device */
  /* Orders s after all work queued so far on every stream of this backend
   * (no host wait). Optional: a no-op where streams are synchronous. */
  zrt_status (*stream_join)(void *ctx, zrt_stream s);
  /* Host waits until the work before the event's last record is done.
   * Optional: a no-op where streams are synchronous. */
  zrt_status (*event_synchronize)(void *ctx, zrt_event e);
  /* *done = 1 when the work before e's last record is done (an event never
   * recorded: 1), else 0; never waits (cudaEventQuery). A failure of that
   * work is returned, as event_synchronize returns it. Optional: NULL = 1
   * (streams synchronous). */
  zrt_status (*event_query)(void *ctx, zrt_event e, int *done);
  /* Timing (cudaEventElapsedTime's idea). event_create_timed: an event whose
   * records carry the time the stream reached them. event_elapsed: *ready = 1
   * when both events' last records are done, and then *seconds = end's time
   * less start's (the two may be on different streams); *ready = 0 otherwise.
   * Never waits. Optional (both or neither): NULL where nothing is
   * asynchronous to time (cpu). */
  zrt_status (*event_create_timed)(void *ctx, zrt_event *out);
  zrt_status (*event_elapsed)(void *ctx, zrt_event start, zrt_event end, int *ready,
                              double *seconds);

  /* Registers host memory as pinned for fast async copies (CUDA:
   * cudaHostRegister). Optional; CPU backend: NULL (mlock is the host
   * pool's job). */
  zrt_status (*host_register)(void *ctx, void *ptr, size_t bytes);
  void (*host_unregister)(void *ctx, void *ptr);

  /* Queues fn(copy of args) on s after the work queued there so far
   * (cudaLaunchHostFunc's idea; the copy is made before the call returns).
   * what: a static label (the twin's op trace names it). Optional: NULL =
   * synchronize s, then run fn on the calling thread. */
  zrt_status (*launch_host)(void *ctx, zrt_host_fn fn, const void *args, size_t bytes, zrt_stream s,
                            const char *what);
  /* Queues fn(copy of args) on s after the work queued there, for host-side
   * work on host memory only (cudaLaunchHostFunc's rules: fn touches no
   * device memory and issues no backend op); fn's error is sticky and comes
   * back from the next synchronize or event_synchronize. Optional: NULL =
   * launch_host, where it is missing too synchronize s and run fn at once
   * (cpu). The twin queues both; its copy guard takes an enqueue_host
   * function for one that may write registered host memory, a launch_host
   * one for one that may read it. */
  zrt_status (*enqueue_host)(void *ctx, zrt_host_fn fn, const void *args, size_t bytes,
                             zrt_stream s, const char *what);

  void (*destroy)(void *ctx);
} zrt_backend_iface;

/* Host-side costs of the ordering, counted where they happen (backend.c's
 * dispatch, the twin's blocking copies): host_waits = synchronize,
 * event_synchronize, copies that block the host (pageable memory on twin
 * and CUDA) and ops whose results are host values (scale_check);
 * d2h_reads = device-to-host reads of scalars (copies of at most
 * ZRT_BACKEND_SCALAR_BYTES, scale_check); allocs = zrt_backend_alloc calls.
 * Monotonic; the engine reports per-step differences (engine/monitor.c). */
#define ZRT_BACKEND_SCALAR_BYTES 64
typedef struct zrt_backend_counters {
  uint64_t host_waits, d2h_reads, allocs; /* updated with ZRT_BACKEND_COUNT (atomic) */
} zrt_backend_counters;
#define ZRT_BACKEND_COUNT(b, field) __atomic_fetch_add(&(b)->counters.field, 1, __ATOMIC_RELAXED)
#define ZRT_BACKEND_COUNTER(b, field) __atomic_load_n(&(b)->counters.field, __ATOMIC_RELAXED)

typedef struct zrt_backend {
  const zrt_backend_iface *iface;
  void *ctx;
  zrt_pool *pool;         /* device pool: accounting + capacity */
  int device_id;          /* CUDA device ordinal; -1 on CPU */
  int numa_node;          /* NUMA node of the device (GPU from sysfs); -1 unknown */
  char description[256];  /* e.g. "NVIDIA H100 80GB HBM3 (sm_90, 79.1 GiB)" */
  void *native_stream;    /* what a NULL zrt_stream means, as the device API's handle
                             (cudaStream_t); NULL on CPU (zrt_engine_stream) */
  size_t device_capacity; /* what this rank may plan for on its device: the free memory
                             its init found, less a reserve, divided among the local ranks
                             that share the device (device_rules.h; 0 = unbounded: CPU);
                             the pool's capacity is device_memory_limit when set, else this */
  zrt_backend_counters counters;
  /* Set by the backend's init. host_fn_async: enqueue_host (launch_host
   * where it is missing) queues the function behind its stream's work and
   * the caller does not wait (cuda; the twin unless ZRT_TWIN_HOST_FN=sync).
   * host_fn_device: launch_host functions queued so may touch device
   * memory, so comms run on a stream that way, as NCCL's kernels do (the
   * twin's stream and cuda modes). host_fn_kernels: the engine's own small
   * device passes (the gradient statistics) run that way too (the twin's
   * default mode only; CUDA runs them on the host). */
  int host_fn_async;
  int host_fn_device;
  int host_fn_kernels;
} zrt_backend;

/* want: "auto" | "cpu" | "twin" | "cuda" (device_rules.h: zrt_backend_decide).
 * device_memory_limit 0 = this rank's share of the device's free memory
 * (unlimited on CPU). local_rank picks the GPU (local_rank % count); the
 * local world size ($OMPI_COMM_WORLD_LOCAL_SIZE / $LOCAL_WORLD_SIZE) says
 * how many ranks share it. */
zrt_status zrt_backend_create(const char *want, size_t device_memory_limit, int local_rank,
                              zrt_backend **out);
/* The same with the placement given: local_rank of local_world ranks on
 * this machine (as MPI derived them); local_world <= 0 reads it from the
 * launcher's variables, as zrt_backend_create does. */
zrt_status zrt_backend_create_placed(const char *want, size_t device_memory_limit, int local_rank,
                                     int local_world, zrt_backend **out);
void zrt_backend_destroy(zrt_backend *b);

/* 1 when the CUDA backend is compiled in; number of usable GPUs (0 when
 * none or not built). */
int zrt_backend_cuda_built(void);
int zrt_backend_cuda_device_count(void);
/* The device probe with its reason (device_rules.h): no GPU, a driver
 * problem with CUDA's message, or not built. */
struct zrt_cuda_probe;
void zrt_backend_cuda_probe_devices(struct zrt_cuda_probe *out);
/* Threads OpenBLAS uses in the CPU backend's GEMM (process-wide; n >= 1). */
void zrt_backend_cpu_blas_threads(int n);
/* Versions of the CUDA runtime, driver and cuBLAS this process loaded
 * ("not built" without CUDA). No device needed. */
void zrt_backend_cuda_versions(char *buf, size_t n);

/* Accounted allocation in the device pool. */
zrt_status zrt_backend_alloc(zrt_backend *b, size_t bytes, zrt_mem_category cat, void **out);
void zrt_backend_free(zrt_backend *b, void *ptr);
/* The same for a block that only stream s (NULL = the backend's stream)
 * used, or whose other users s is already ordered after: it is returned
 * after the work queued on s so far, without waiting for the other streams
 * (a free waits only for the streams that used the block). Where the slot
 * is missing it is zrt_backend_free. */
void zrt_backend_free_on(zrt_backend *b, void *ptr, zrt_stream s);

/* Dispatch helpers (fall back to generic code where a slot is NULL). */
zrt_status zrt_backend_memcpy(zrt_backend *b, void *dst, const void *src, size_t bytes,
                              zrt_copy_kind kind, zrt_stream s);
zrt_status zrt_backend_memset(zrt_backend *b, void *dst, int value, size_t bytes, zrt_stream s);
zrt_status zrt_backend_convert(zrt_backend *b, void *dst, zrt_dtype dst_dt, const void *src,
                               zrt_dtype src_dt, size_t n, zrt_stream s);
zrt_status zrt_backend_accumulate(zrt_backend *b, float *dst, const void *src, zrt_dtype src_dt,
                                  float alpha, size_t n, zrt_stream s);
zrt_status zrt_backend_scale_check(zrt_backend *b, const void *x, zrt_dtype dt, size_t n,
                                   float scale, double *sumsq, int *nonfinite, zrt_stream s);
zrt_status zrt_backend_scale_check_list(zrt_backend *b, const void *const *x, const size_t *n,
                                        int k, zrt_dtype dt, float scale, double *sumsq,
                                        int *nonfinite, zrt_stream s);
zrt_status zrt_backend_gemm(zrt_backend *b, int trans_a, int trans_b, int64_t m, int64_t n,
                            int64_t k, float alpha, const void *a, int64_t lda, const void *bm,
                            int64_t ldb, zrt_dtype ab_dt, float beta, void *c, int64_t ldc,
                            zrt_dtype c_dt, zrt_stream s);
zrt_status zrt_backend_optim_step(zrt_backend *b, const zrt_optim_hparams *hp, float *master,
                                  float *s1, float *s2, const void *grad, zrt_dtype gdt,
                                  void *param16, zrt_dtype pdt, size_t n, zrt_stream s);
zrt_status zrt_backend_synchronize(zrt_backend *b, zrt_stream s);
zrt_status zrt_backend_stream_create(zrt_backend *b, zrt_stream *out);
/* The host waits for the work queued on s, then s goes (CUDA: cudaStreamSynchronize
 * before cudaStreamDestroy; twin: the worker runs its queue out and is joined), so
 * memory s's queued ops touch may be freed after it returns. */
void zrt_backend_stream_destroy(zrt_backend *b, zrt_stream s);
zrt_status zrt_backend_event_create(zrt_backend *b, zrt_event *out);
void zrt_backend_event_destroy(zrt_backend *b, zrt_event e);
zrt_status zrt_backend_event_record(zrt_backend *b, zrt_event e, zrt_stream s);
zrt_status zrt_backend_stream_wait_event(zrt_backend *b, zrt_stream s, zrt_event e);
/* s (NULL = the backend's stream) waits for all work queued so far on every
 * stream this backend created or owns; the host does not wait. */
zrt_status zrt_backend_stream_join(zrt_backend *b, zrt_stream s);
/* The host waits for e's last record (an event never recorded: at once). */
zrt_status zrt_backend_event_synchronize(zrt_backend *b, zrt_event e);
/* Whether e's last record is reached, without waiting (iface event_query):
 * *done = 1 when it is, or e was never recorded, or e is NULL. Not a host
 * wait (the comms' non-blocking tests poll it). */
zrt_status zrt_backend_event_query(zrt_backend *b, zrt_event e, int *done);
/* A timing event (see the iface); ZRT_ERR_UNSUPPORTED on backends that
 * cannot time their streams (cpu: every op completes before it returns). */
zrt_status zrt_backend_event_create_timed(zrt_backend *b, zrt_event *out);
/* Time between two timed events' last records (iface event_elapsed); never
 * waits: *ready = 0 while either is pending. ZRT_ERR_UNSUPPORTED without the
 * slot. */
zrt_status zrt_backend_event_elapsed(zrt_backend *b, zrt_event start, zrt_event end, int *ready,
                                     double *seconds);
/* "<host>/<PCI bus id>" of CUDA device `device` (the key NCCL's shared-GPU
 * check compares, nccl_rules.h); ZRT_ERR_UNSUPPORTED without CUDA. */
zrt_status zrt_backend_cuda_gpu_key(int device, char *buf, size_t n);
/* Pins host memory for async copies where the backend can (CUDA); a no-op
 * on backends without the slot. unregister accepts memory never registered
 * only on backends without the slot. */
zrt_status zrt_backend_host_register(zrt_backend *b, void *ptr, size_t bytes);
void zrt_backend_host_unregister(zrt_backend *b, void *ptr);
/* fn(copy of args, bytes) on stream s, ordered after the work queued there:
 * on the twin a stream worker runs it (it may touch device memory and issue
 * backend ops, which then run in place on that stream); on backends without
 * the slot (cpu, cuda) the host synchronizes s and runs it at once. An
 * error fn returns is reported by this call where fn ran at once, else by
 * the next call that touches the stream (sticky, as a CUDA kernel's). */
zrt_status zrt_backend_launch_host(zrt_backend *b, zrt_host_fn fn, const void *args, size_t bytes,
                                   zrt_stream s);
/* The same with a label for the op (a static string: the twin's op trace,
 * ZRT_TWIN_TRACE, names the op by it; "host function" otherwise). */
zrt_status zrt_backend_launch_host_named(zrt_backend *b, zrt_host_fn fn, const void *args,
                                         size_t bytes, zrt_stream s, const char *what);
/* Host-side work (host memory only, no backend ops inside fn) ordered on
 * stream s, cudaLaunchHostFunc's idea: queued behind s's work where
 * zrt_backend_host_fn_async says so, else s is synchronized and fn runs at
 * once on the calling thread (cpu; the twin in sync mode waits for it). An
 * error fn returns is reported by this call where fn ran at once, else by
 * the next call that waits for the stream. */
zrt_status zrt_backend_enqueue_host_named(zrt_backend *b, zrt_host_fn fn, const void *args,
                                          size_t bytes, zrt_stream s, const char *what);
/* 1 when zrt_backend_enqueue_host_named queues fn behind the stream's work
 * and the caller does not wait: cuda (cudaLaunchHostFunc) and the twin
 * unless ZRT_TWIN_HOST_FN=sync. 0 on cpu. */
int zrt_backend_host_fn_async(const zrt_backend *b);
/* 1 when zrt_backend_launch_host queues fn behind the stream's work and fn
 * may read and write device memory, so comms run on a stream as host
 * functions (NCCL's shape): the twin, unless ZRT_TWIN_HOST_FN=sync. 0 on
 * cpu and cuda (whose comms stage, or are NCCL). */
int zrt_backend_host_fn_device(const zrt_backend *b);
/* 1 when, beyond that, the engine runs its gradient statistics as a host
 * function on the stream: the twin's default mode only (CUDA computes them
 * on the host). */
int zrt_backend_host_fn_kernels(const zrt_backend *b);

/* Backend constructors (registry in backend.c). They fill iface, ctx,
 * device_id, numa_node, description and device_capacity of a zeroed b; the
 * registry then creates b->pool over iface->alloc/free. */
zrt_status zrt_backend_cpu_init(zrt_backend *b);
/* The twin's device mapping is device_memory_limit (plus slack for the
 * pool's rounding) when set, else physical memory's size, reserved. */
zrt_status zrt_backend_twin_init(zrt_backend *b, size_t device_memory_limit);
/* 1 when this CPU and kernel give the twin protection keys (PKU). */
int zrt_backend_twin_pku(void);
#ifdef ZRT_HAVE_CUDA
/* sharing: local ranks using this device (device_rules.h); the capacity is
 * this rank's share of the free memory. */
zrt_status zrt_backend_cuda_init(zrt_backend *b, int device, int sharing);
#endif

#endif
