/*
 * nvme.h — NVMe swap files for offloaded fp32 master / optimizer state
 * (ZeRO-Infinity), used by the offload pipe (opts.nvme).
 *
 * One file per array (master, s1, s2) under a directory, each holding two
 * regions (generations) of the full shard. A step reads tiles from the
 * current generation and writes the updated tiles into the other one; only
 * after every tile is written and fsync'ed does zrt_nvme_commit flip the
 * current generation. A step that fails half-way (disk full, I/O error)
 * therefore leaves the current generation — the last completed step —
 * intact. I/O goes through liburing with O_DIRECT (4096-aligned offsets,
 * sizes and buffers); where the filesystem refuses O_DIRECT (tmpfs) the
 * files are reopened buffered and that is logged once.
 * Asynchronous reads (zrt_nvme_read_submit / _reap) have a ring of their
 * own, so they stay in flight across the blocking calls; the caller drains
 * them before it commits (a commit flips the generation they read).
 */
#ifndef ZRT_NVME_H
#define ZRT_NVME_H

#include "internal.h"

#define ZRT_NVME_ALIGN 4096
#define ZRT_NVME_MAX_ARRAYS 3

typedef struct zrt_nvme zrt_nvme;

/* Files for narrays arrays of n fp32 elements under dir (must exist).
 * queue_depth: requests in flight per tile I/O (buffer_count; >= 1). */
zrt_status zrt_nvme_create(const char *dir, size_t n, int narrays, int queue_depth, zrt_nvme **out);
/* Same, with file names "<dir>/<prefix>_<pid>.<host>_<id>_<array>.bin"
 * (prefix NULL = "zrt_swap", host zrt_safe_host_tag's): the engine passes
 * "zrt_rank<R>" so the files of ranks sharing a drive are told apart by
 * name. Creating sweeps dir first: the files of a killed process of this
 * machine (its pid gone, unmodified for a minute, a regular file of this
 * user: zrt_safe_is_stale) are removed, each named in a warning. */
zrt_status zrt_nvme_create_named(const char *dir, const char *prefix, size_t n, int narrays,
                                 int queue_depth, zrt_nvme **out);
void zrt_nvme_destroy(zrt_nvme *nv); /* removes the files; NULL ok */

/* Reads elements [off, off+len) of every array from the current generation
 * into bufs[a] (write = 0), or writes them into the next generation (write
 * = 1). off must be a multiple of 1024 elements; bufs 4096-aligned with room
 * for len rounded up to 1024. Blocking. */
zrt_status zrt_nvme_tile_io(zrt_nvme *nv, int write, size_t off, size_t len, float *const *bufs);
/* fsync every file and make the next generation current. */
zrt_status zrt_nvme_commit(zrt_nvme *nv);
/* Whole-array access to the current generation (initial values, checks). */
zrt_status zrt_nvme_store(zrt_nvme *nv, int array, const float *src);
zrt_status zrt_nvme_load(zrt_nvme *nv, int array, float *dst);
/* Zeros the whole current generation of one array (initial states). */
zrt_status zrt_nvme_zero(zrt_nvme *nv, int array);
/* Elements [off, off+len) of one array of the current generation: read into
 * buf (write = 0) or overwritten from buf (write = 1) in place, any offset
 * and length (unaligned edges go through a read-modify-write of their 4096
 * byte block). Not atomic across a crash: for get/set master and checkpoint
 * loads, which replace the state outright. Blocking; no fsync (see
 * zrt_nvme_sync). */
zrt_status zrt_nvme_range(zrt_nvme *nv, int array, int write, size_t off, size_t len, float *buf);
/* fsync every file without flipping the generation. */
zrt_status zrt_nvme_sync(zrt_nvme *nv);
/* Submits an asynchronous read of bytes [off, off+bytes) of one array's
 * current generation into buf (off, bytes and buf 4096-aligned); tag comes
 * back from zrt_nvme_read_reap. At most queue_depth reads are in flight. */
zrt_status zrt_nvme_read_submit(zrt_nvme *nv, int array, size_t off, size_t bytes, void *buf,
                                uint64_t tag);
/* Reaps one completed asynchronous read (completion order, not submission
 * order): *got = 1 and *tag set, or *got = 0 when none has completed (wait =
 * 0) or none is in flight. wait = 1 blocks until one completes. A failed or
 * short read is reaped too (no longer in flight) and returns ZRT_ERR_IO
 * naming the file and offset, with *got = 1 and its tag. */
zrt_status zrt_nvme_read_reap(zrt_nvme *nv, int wait, uint64_t *tag, int *got);
/* Asynchronous reads submitted and not yet reaped. */
int zrt_nvme_reads_in_flight(const zrt_nvme *nv);
/* Waits for every in-flight asynchronous read and discards the results
 * (their buffers may be reused once it returns). */
void zrt_nvme_read_drain(zrt_nvme *nv);
/* Generation (0 or 1) the reads see: the last committed one. */
int zrt_nvme_generation(const zrt_nvme *nv);
/* Path of one array's file (error messages, tests). */
const char *zrt_nvme_path(const zrt_nvme *nv, int array);
/* Bytes the files take on disk once both generations are written:
 * 2 generations x narrays x n*4 rounded up to 4096. */
size_t zrt_nvme_disk_bytes(const zrt_nvme *nv);
/* Adds the bytes this file set's completed requests have read / written
 * since creation (tile I/O, async reads, ranges, whole-array transfers)
 * into *rd / *wr; nv NULL adds nothing. */
void zrt_nvme_add_io_bytes(const zrt_nvme *nv, uint64_t *rd, uint64_t *wr);

#endif
