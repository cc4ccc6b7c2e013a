/*
 * offload.h — the offloaded optimizer step (ZeRO-Offload / ZeRO-Infinity).
 *
 * A pipe moves one rank's gradient shard from backend memory to host
 * staging in tiles (double-buffered pinned staging; async copies on their own
 * streams on CUDA, the same pipeline on the CPU backend), runs the fused CPU
 * optimizer on the fp32 master / state tiles (host pool, or swapped in from
 * NVMe files under nvme_path with liburing + O_DIRECT, buffer_count buffers
 * in flight) and sends the new 16-bit parameter tiles back, so copies overlap
 * the update.
 *
 * Two modes, the same bits: on backends whose host functions run
 * synchronously (cpu, the twin with ZRT_TWIN_HOST_FN=sync) or with an
 * unregistered host pool, a step is blocking (a copy thread, one meeting
 * per tile); on backends whose host functions are stream ops (cuda through
 * cudaLaunchHostFunc, the twin) with the host pool registered, a step is queued on the pipe's
 * streams and returns without a host wait (stream mode): the backend's
 * stream is ordered after it (work queued there later sees the new
 * params), and the host sees masters, states, NVMe files and the timing
 * after zrt_offload_pipe_sync (which the pipe's own calls that read or
 * write them make first, and zrt_backend_synchronize(be, NULL) implies).
 */
#ifndef ZRT_OFFLOAD_H
#define ZRT_OFFLOAD_H

#include "cpu_optim.h"
#include "hostpool.h"

typedef struct zrt_offload_pipe zrt_offload_pipe;

typedef struct zrt_offload_opts {
  size_t tile_elems; /* elements per tile (0 = default) */
  int nvme;          /* 1 = master/state live in files under nvme_path */
  const char *nvme_path;
  int buffer_count; /* NVMe buffers in flight */
  /* file-name prefix of the swap files (NULL = "zrt_swap"); the engine uses
   * "zrt_rank<R>" */
  const char *nvme_prefix;
  /* 1 = the blocking copy-thread mode even where stream mode is possible
   * (what an unregistered host pool gets), so the twin can check it in the
   * same run (tests) */
  int blocking;
} zrt_offload_opts;

zrt_status zrt_offload_pipe_create(zrt_backend *be, zrt_hostpool *hp, const zrt_offload_opts *opts,
                                   zrt_offload_pipe **out);
void zrt_offload_pipe_destroy(zrt_offload_pipe *p);

/* One optimizer step over a shard of n elements. master/s1/s2 are host
 * (host pool) pointers, or NULL with opts.nvme where the pipe owns the
 * files (registered with zrt_offload_pipe_nvme_register). grad_dev and
 * param16_dev are backend pointers. Blocking, or queued in stream mode (hp
 * is copied; the host must not touch master/s1/s2 or the grads until
 * zrt_offload_pipe_sync or work ordered after the backend's stream). */
zrt_status zrt_offload_pipe_step(zrt_offload_pipe *p, const zrt_optim_hparams *hp, float *master,
                                 float *s1, float *s2, const void *grad_dev, zrt_dtype gdt,
                                 void *param16_dev, zrt_dtype pdt, size_t n);

/* The same step with the gradients already in host memory (grad_host, n
 * elements of gdt: ZeRO-Offload's fp32 gradient shard in the host pool,
 * filled by the gradient buckets as the backward ran): no gradient
 * copies, the update reads them in place; masters, states and the 16-bit
 * tiles move as in zrt_offload_pipe_step, and the results are its bits. */
zrt_status zrt_offload_pipe_step_host_grad(zrt_offload_pipe *p, const zrt_optim_hparams *hp,
                                           float *master, float *s1, float *s2,
                                           const void *grad_host, zrt_dtype gdt, void *param16_dev,
                                           zrt_dtype pdt, size_t n);

/* Stream mode: the host waits until every step queued so far is done and
 * returns its first failure; at once when nothing is queued (and in the
 * blocking mode). */
zrt_status zrt_offload_pipe_sync(zrt_offload_pipe *p);

/* The param16 destinations of later steps are host memory (offload_param
 * cpu: the 16-bit shards live in the host pool): the optimizer writes them
 * in place and no host->device copy is issued (a "H2D" copy into host
 * memory would only cost a pass and a stream). 0 (the default): backend
 * memory, copied from pinned staging on the pipe's H2D stream. 1 with an
 * unpinned host pool turns stream mode off: device copies of the shard
 * (pageable: read when queued) would not wait for the updates. */
zrt_status zrt_offload_pipe_set_param16_host(zrt_offload_pipe *p, int host);

/* The dtypes of the host-memory master and optimizer states that later
 * plain steps (zrt_offload_pipe_step, _step_host_grad) read and write:
 * ZRT_F32 (the default) or ZRT_BF16 each (bf16.bf16_master_weights_and_grads
 * / bf16_optimizer_states); their master/s1/s2 pointers then point at
 * elements of that dtype (zrt_cpu_optim_step_lp). NVMe mode keeps fp32:
 * anything else is ZRT_ERR_INVALID_ARG. */
zrt_status zrt_offload_pipe_set_state_dtypes(zrt_offload_pipe *p, zrt_dtype master,
                                             zrt_dtype states);

/* NVMe mode (opts.nvme): creates the swap files for a shard of n elements
 * with nstates optimizer states (2 for Adam/AdamW, 1 for SGD with momentum
 * and Lion, 0 for plain SGD) and writes the initial master / states into
 * them (s1/s2 NULL = zeros). After this, zrt_offload_pipe_step takes
 * master = s1 = s2 = NULL. Blocking. */
zrt_status zrt_offload_pipe_nvme_register(zrt_offload_pipe *p, size_t n, int nstates,
                                          const float *master, const float *s1, const float *s2);
/* Reads the current (last committed) master or state back from the files
 * (which: 0 master, 1 s1, 2 s2) into dst[n] — for checkpoints and tests. */
zrt_status zrt_offload_pipe_nvme_read(zrt_offload_pipe *p, int which, float *dst);

/* ---- NVMe file set stepped by segments (the engine's ZeRO-Infinity path)
 *
 * One file set of n elements holds every module's master (and states) back
 * to back; the caller picks each module's element offset in it. A step
 * covers the whole file set in tiles (read tile k+1 / update tile k / write
 * tile k-1, buffer_count requests in flight per tile I/O): elements outside
 * every segment (gaps, padding) are carried into the new generation
 * unchanged, and one commit (fsync + generation flip) ends the step, so a
 * failed step leaves the whole previous step on disk. */

/* Creates the files for n elements with nstates optimizer states and
 * zeroes master and states (the caller writes the initial master ranges
 * with zrt_offload_pipe_nvme_range). Needs opts.nvme. Blocking. */
zrt_status zrt_offload_pipe_nvme_open(zrt_offload_pipe *p, size_t n, int nstates);
/* Reads (write = 0) or overwrites (write = 1) elements [off, off+len) of
 * array `which` (0 master, 1 s1, 2 s2) of the last committed generation,
 * in place, any offset. Works on a file set from nvme_open or
 * nvme_register. Blocking; call zrt_offload_pipe_nvme_sync after writes
 * that must be durable. */
zrt_status zrt_offload_pipe_nvme_range(zrt_offload_pipe *p, int which, int write, size_t off,
                                       size_t len, float *buf);
zrt_status zrt_offload_pipe_nvme_sync(zrt_offload_pipe *p);
/* Bytes of the swap files on disk (both generations), 0 without a file set. */
size_t zrt_offload_pipe_nvme_disk_bytes(const zrt_offload_pipe *p);
/* Adds the swap files' bytes read / written so far (zrt_nvme_add_io_bytes);
 * nothing without NVMe. */
void zrt_offload_pipe_nvme_add_io_bytes(zrt_offload_pipe *p, uint64_t *rd, uint64_t *wr);

/* One piece of the file set stepped with its own hyper-parameters. */
typedef struct zrt_offload_segment {
  size_t file_off;             /* element offset in the file set */
  size_t n;                    /* elements */
  const void *grad_dev;        /* n grads (gdt), backend memory (host memory with grad_host) */
  void *param16_dev;           /* n new params (pdt) written here, backend memory; NULL = none */
  const zrt_optim_hparams *hp; /* NULL = the step's hp (e.g. weight_decay 0 for NO_DECAY) */
  int grad_host;               /* 1 = grad_dev is host memory, read in place (no copy) */
} zrt_offload_segment;

/* One optimizer step over the whole file set: segs sorted by file_off, not
 * overlapping, inside [0, n). Each element of a segment gets exactly the
 * update zrt_offload_pipe_step would give it for a call over that segment
 * alone (bitwise: same ISA body/tail split), so an engine that switches
 * from per-piece host steps to this gets identical results. Blocking, or
 * queued in stream mode (segs and their hp copied). */
zrt_status zrt_offload_pipe_nvme_step_segments(zrt_offload_pipe *p, const zrt_optim_hparams *hp,
                                               const zrt_offload_segment *segs, int nsegs,
                                               zrt_dtype gdt, zrt_dtype pdt);

/* Time of the last step: total, and how much of the copies hid behind the
 * update (stream mode: synchronizes first; copy_s is the NVMe I/O's time,
 * the device copies being stream ops the host does not time). */
typedef struct zrt_offload_timing {
  double total_s, copy_s, update_s, hidden_fraction;
} zrt_offload_timing;
void zrt_offload_pipe_timing(zrt_offload_pipe *p, zrt_offload_timing *out);

#endif
