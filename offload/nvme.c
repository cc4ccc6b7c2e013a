/*
 * nvme.c — NVMe swap files for offloaded master / optimizer state (see
 * nvme.h): two generations per file, liburing + O_DIRECT tile I/O split
 * into queue_depth requests in flight, fsync + generation flip on commit.
 *
 * Invariants: all offsets, lengths and buffers of direct I/O are multiples
 * of ZRT_NVME_ALIGN; region g of every file holds generation g; nv->cur is
 * the generation of the last committed step and is never written by a
 * step. A failed step leaves nv->cur untouched, so the state on disk is the
 * last completed step's (the next step simply rewrites the other region).
 * Asynchronous reads use a second ring (aring, created at the first
 * submit) and a table of qd request records (the cqe's user_data is the
 * record index), so reaping never consumes a tile I/O completion and a
 * failure names the file and offset of the very request.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "nvme.h"
#include "safe_file.h"

struct zrt_nvme {
  int narrays, qd, cur, direct;
  int fd[ZRT_NVME_MAX_ARRAYS];
  char path[ZRT_NVME_MAX_ARRAYS][1024];
  char name[ZRT_NVME_MAX_ARRAYS][512]; /* path's last component, in dfd */
  int dfd;                             /* the swap directory (safe_file.h) */
  size_t n, region;                    /* elements; bytes per generation (aligned) */
  struct io_uring ring;
  int ring_ok;
  struct io_uring aring; /* asynchronous reads */
  int aring_ok, ainflight;
  uint64_t rd_bytes, wr_bytes; /* moved by completed requests, for the metrics */
  struct zrt_nvme_areq {
    uint64_t tag;
    off_t off; /* absolute file offset */
    size_t bytes;
    int array, busy;
  } * areq; /* qd records */
};

static const char *zrt_nvme_names[ZRT_NVME_MAX_ARRAYS] = {"master", "state1", "state2"};

void zrt_nvme_destroy(zrt_nvme *nv) {
  if (!nv) return;
  if (nv->ring_ok) io_uring_queue_exit(&nv->ring);
  zrt_nvme_read_drain(nv);
  if (nv->aring_ok) io_uring_queue_exit(&nv->aring);
  free(nv->areq);
  for (int a = 0; a < nv->narrays; a++) {
    if (nv->fd[a] >= 0) close(nv->fd[a]);
    if (nv->path[a][0] && nv->dfd >= 0) unlinkat(nv->dfd, nv->name[a], 0);
  }
  if (nv->dfd >= 0) close(nv->dfd);
  free(nv);
}

/* "<prefix>_<pid>.<host>_<id>_<array>.bin" with prefix "zrt_...", host
 * this machine's tag: the pid of the process that made it, else 0 (not
 * one of ours, or another machine's on a shared disk). */
/* What the sweep at create needs: this machine's tag, the directory (named
 * in the warnings). */
typedef struct {
  const char *host, *dir;
} zrt_nvme_sweep_ctx;

static long zrt_nvme_name_pid(const char *name, void *arg) {
  const char *host = ((const zrt_nvme_sweep_ctx *)arg)->host;
  size_t n = strlen(name);
  if (strncmp(name, "zrt_", 4) || n < 4 + 4) return 0;
  const char *end = name + n - 4; /* ".bin" */
  if (strcmp(end, ".bin")) return 0;
  int arr = -1;
  for (int a = 0; a < ZRT_NVME_MAX_ARRAYS && arr < 0; a++) {
    size_t k = strlen(zrt_nvme_names[a]);
    if ((size_t)(end - name) > k + 1 && !strncmp(end - k, zrt_nvme_names[a], k) &&
        end[-k - 1] == '_')
      arr = a, end -= k + 1;
  }
  if (arr < 0) return 0;
  const char *p = end; /* "_<id>" before it */
  while (p > name && p[-1] >= '0' && p[-1] <= '9') p--;
  if (p == end || p <= name || p[-1] != '_') return 0;
  end = p - 1; /* "_<pid>.<host>" before it */
  size_t hl = strlen(host);
  if ((size_t)(end - name) < hl + 2 || strncmp(end - hl, host, hl) || end[-hl - 1] != '.') return 0;
  end -= hl + 1;
  p = end;
  while (p > name && p[-1] >= '0' && p[-1] <= '9') p--;
  if (p == end || p - name < 5 || p[-1] != '_' || end - p > 9) return 0;
  return strtol(p, NULL, 10);
}

/* Names each swap file of a killed rank as zrt_safe_sweep removes it. */
static void zrt_nvme_swept(const char *name, long pid, long long bytes, void *arg) {
  zrt_log(ZRT_LOG_WARN,
          "nvme swap: removed %s/%s (%lld bytes): left by process %ld, which was killed before "
          "it could remove its swap files",
          ((const zrt_nvme_sweep_ctx *)arg)->dir, name, bytes, pid);
}

zrt_status zrt_nvme_create(const char *dir, size_t n, int narrays, int queue_depth,
                           zrt_nvme **out) {
  return zrt_nvme_create_named(dir, NULL, n, narrays, queue_depth, out);
}

zrt_status zrt_nvme_create_named(const char *dir, const char *prefix, size_t n, int narrays,
                                 int queue_depth, zrt_nvme **out) {
  zrt_status st = ZRT_OK;
  static int counter; /* distinct file names within one process */
  if (!prefix || !*prefix) prefix = "zrt_swap";
  if (!dir || !out || narrays < 1 || narrays > ZRT_NVME_MAX_ARRAYS)
    return zrt_error(ZRT_ERR_INVALID_ARG, "zrt_nvme_create: bad arguments");
  *out = NULL;
  struct stat sb;
  if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
    return zrt_error(
        ZRT_ERR_CONFIG,
        "nvme_path '%s' %s — create the directory on the NVMe drive or point "
        "zero_optimization.offload_optimizer.nvme_path at an existing one",
        dir, errno == ENOENT || stat(dir, &sb) != 0 ? "does not exist" : "is not a directory");
  /* Swap files are created new (O_EXCL|O_NOFOLLOW) relative to the
   * directory's descriptor, which is refused when others may write to it and
   * it is not sticky: a planted name can never redirect the swap data. */
  int dfd;
  ZRT_CHECK(zrt_safe_dir_open(dir, ZRT_DIR_NAMED, "nvme_path", &dfd));
  zrt_nvme *nv = calloc(1, sizeof *nv);
  if (!nv) {
    close(dfd);
    return zrt_error(ZRT_ERR_OOM, "nvme swap: out of host memory");
  }
  nv->dfd = dfd;
  nv->narrays = narrays;
  nv->qd = queue_depth > 0 ? queue_depth : 1;
  nv->n = n;
  nv->region = ZRT_ALIGN_UP(n * 4, (size_t)ZRT_NVME_ALIGN);
  nv->direct = 1;
  for (int a = 0; a < ZRT_NVME_MAX_ARRAYS; a++) nv->fd[a] = -1;
  char host[9];
  zrt_safe_host_tag(host);
  /* swap files of ranks that were killed (SIGKILL, OOM: no destroy ran)
   * hold their whole optimizer state: removed at the next start, each named */
  zrt_nvme_sweep_ctx sw = {host, dir};
  zrt_safe_sweep(dfd, zrt_nvme_name_pid, zrt_nvme_swept, &sw);
  int id = __atomic_fetch_add(&counter, 1, __ATOMIC_RELAXED);
  for (int a = 0; a < narrays; a++) {
    char name[512];
    snprintf(name, sizeof name, "%s_%d.%s_%d_%s.bin", prefix, (int)getpid(), host, id,
             zrt_nvme_names[a]);
    snprintf(nv->path[a], sizeof nv->path[a], "%s/%s", dir, name);
    snprintf(nv->name[a], sizeof nv->name[a], "%s", name);
    int flags = O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
    int fd = nv->direct ? openat(dfd, name, flags | O_DIRECT, 0600) : -1;
    if (fd < 0 && nv->direct && errno == EINVAL) {
      unlinkat(dfd, name, 0); /* some filesystems create the name, then refuse O_DIRECT */
      zrt_log_once("nvme_direct_fallback", ZRT_LOG_WARN,
                   "nvme swap: the filesystem of %s does not support O_DIRECT (tmpfs?); "
                   "falling back to buffered I/O (page cache, slower and uses host memory)",
                   dir);
      nv->direct = 0;
    }
    if (fd < 0 && !nv->direct) fd = openat(dfd, name, flags, 0600);
    if (fd < 0) {
      int e = errno;
      st = zrt_error(ZRT_ERR_IO,
                     "nvme swap: cannot create %s: %s — nvme_path '%s' must be a writable "
                     "directory (zero_optimization.offload_optimizer.nvme_path)%s",
                     nv->path[a], e == EEXIST ? "a file or link of that name exists" : strerror(e),
                     dir,
                     e == EEXIST ? "; zrt never writes through an existing name — remove it" : "");
      nv->path[a][0] = 0;
      goto fail;
    }
    nv->fd[a] = fd;
  }
  int rc = io_uring_queue_init((unsigned)ZRT_MIN(4096, 2 * nv->qd * narrays), &nv->ring, 0);
  if (rc < 0) {
    st = zrt_error(ZRT_ERR_IO, "nvme swap: io_uring_queue_init failed: %s", strerror(-rc));
    goto fail;
  }
  nv->ring_ok = 1;
  *out = nv;
  return ZRT_OK;
fail:
  zrt_nvme_destroy(nv);
  return st;
}

static zrt_status zrt_nvme_io_error(const zrt_nvme *nv, int a, int write, off_t off, long res,
                                    size_t want) {
  if (res < 0)
    return zrt_error(ZRT_ERR_IO, "nvme swap: %s of %zu bytes at offset %lld of %s failed: %s%s",
                     write ? "write" : "read", want, (long long)off, nv->path[a],
                     strerror((int)-res),
                     write ? " — free space on nvme_path (or lower the shard size); the last "
                             "completed step is kept intact in the other generation"
                           : "");
  return zrt_error(ZRT_ERR_IO, "nvme swap: short %s at offset %lld of %s: %ld of %zu bytes%s",
                   write ? "write" : "read", (long long)off, nv->path[a], res, want,
                   write ? " (disk full?) — free space on nvme_path; the last completed step is "
                           "kept intact in the other generation"
                         : " (file truncated or removed behind zrt's back?)");
}

zrt_status zrt_nvme_tile_io(zrt_nvme *nv, int write, size_t off, size_t len, float *const *bufs) {
  if (!nv || !bufs || off % 1024)
    return zrt_error(ZRT_ERR_INVALID_ARG, "zrt_nvme_tile_io: bad arguments (offset %zu)", off);
  if (len == 0) return ZRT_OK;
  int gen = write ? nv->cur ^ 1 : nv->cur;
  size_t bytes = ZRT_ALIGN_UP(len * 4, (size_t)ZRT_NVME_ALIGN);
  size_t chunk = ZRT_ALIGN_UP(ZRT_DIV_UP(bytes, (size_t)nv->qd), (size_t)ZRT_NVME_ALIGN);
  int inflight = 0;
  for (int a = 0; a < nv->narrays; a++) {
    off_t base = (off_t)(gen * nv->region + off * 4);
    for (size_t c = 0; c < bytes; c += chunk) {
      size_t sz = ZRT_MIN(chunk, bytes - c);
      struct io_uring_sqe *sqe = io_uring_get_sqe(&nv->ring);
      if (!sqe) {
        io_uring_submit(&nv->ring);
        sqe = io_uring_get_sqe(&nv->ring);
      }
      if (!sqe) return zrt_error(ZRT_ERR_INTERNAL, "nvme swap: io_uring queue full");
      char *buf = (char *)bufs[a] + c;
      if (write)
        io_uring_prep_write(sqe, nv->fd[a], buf, (unsigned)sz, base + (off_t)c);
      else
        io_uring_prep_read(sqe, nv->fd[a], buf, (unsigned)sz, base + (off_t)c);
      /* user_data: array and file offset, so a failure names both */
      io_uring_sqe_set_data64(sqe, ((uint64_t)a << 56) | (uint64_t)(base + (off_t)c));
      inflight++;
    }
  }
  int rc = io_uring_submit(&nv->ring);
  zrt_status st = ZRT_OK;
  if (rc < 0) return zrt_error(ZRT_ERR_IO, "nvme swap: io_uring_submit: %s", strerror(-rc));
  for (int i = 0; i < inflight; i++) {
    struct io_uring_cqe *cqe;
    rc = io_uring_wait_cqe(&nv->ring, &cqe);
    if (rc < 0) return zrt_error(ZRT_ERR_IO, "nvme swap: io_uring_wait_cqe: %s", strerror(-rc));
    long res = cqe->res;
    uint64_t ud = cqe->user_data;
    io_uring_cqe_seen(&nv->ring, cqe);
    int a = (int)(ud >> 56);
    off_t o = (off_t)(ud & ((1ull << 56) - 1));
    size_t want = ZRT_MIN(chunk, bytes - (size_t)(o - (off_t)(gen * nv->region + off * 4)));
    if (res > 0) *(write ? &nv->wr_bytes : &nv->rd_bytes) += (uint64_t)res;
    if (st == ZRT_OK && (res < 0 || (size_t)res != want))
      st = zrt_nvme_io_error(nv, a, write, o, res, want);
  }
  return st;
}

zrt_status zrt_nvme_commit(zrt_nvme *nv) {
  for (int a = 0; a < nv->narrays; a++)
    if (fsync(nv->fd[a]) != 0)
      return zrt_error(ZRT_ERR_IO, "nvme swap: fsync of %s failed: %s", nv->path[a],
                       strerror(errno));
  nv->cur ^= 1;
  return ZRT_OK;
}

/* Whole-array transfer of the current generation through an aligned bounce
 * buffer (plain pread/pwrite: used once at registration and by tests).
 * zero = 1 writes zeros (dst and src unused). */
static zrt_status zrt_nvme_whole(zrt_nvme *nv, int a, float *dst, const float *src, int zero) {
  if (!nv || a < 0 || a >= nv->narrays)
    return zrt_error(ZRT_ERR_INVALID_ARG, "nvme swap: array %d out of range", a);
  size_t step = 4u << 20;
  void *bounce = NULL;
  if (posix_memalign(&bounce, ZRT_NVME_ALIGN, step) != 0)
    return zrt_error(ZRT_ERR_OOM, "nvme swap: out of host memory");
  zrt_status st = ZRT_OK;
  for (size_t o = 0; o < nv->region; o += step) {
    size_t sz = ZRT_MIN(step, nv->region - o);
    size_t valid = o < nv->n * 4 ? ZRT_MIN(sz, nv->n * 4 - o) : 0;
    off_t fo = (off_t)(nv->cur * nv->region + o);
    if (src || zero) {
      memset(bounce, 0, sz);
      if (src) memcpy(bounce, (const char *)src + o, valid);
      ssize_t r = pwrite(nv->fd[a], bounce, sz, fo);
      if (r > 0) nv->wr_bytes += (uint64_t)r;
      if (r != (ssize_t)sz) {
        st = zrt_nvme_io_error(nv, a, 1, fo, r < 0 ? -errno : r, sz);
        break;
      }
    } else {
      ssize_t r = pread(nv->fd[a], bounce, sz, fo);
      if (r > 0) nv->rd_bytes += (uint64_t)r;
      if (r != (ssize_t)sz) {
        st = zrt_nvme_io_error(nv, a, 0, fo, r < 0 ? -errno : r, sz);
        break;
      }
      memcpy((char *)dst + o, bounce, valid);
    }
  }
  free(bounce);
  if (st == ZRT_OK && (src || zero) && fsync(nv->fd[a]) != 0)
    st = zrt_error(ZRT_ERR_IO, "nvme swap: fsync of %s failed: %s", nv->path[a], strerror(errno));
  return st;
}

zrt_status zrt_nvme_store(zrt_nvme *nv, int array, const float *src) {
  return zrt_nvme_whole(nv, array, NULL, src, 0);
}
zrt_status zrt_nvme_load(zrt_nvme *nv, int array, float *dst) {
  return zrt_nvme_whole(nv, array, dst, NULL, 0);
}
zrt_status zrt_nvme_zero(zrt_nvme *nv, int array) {
  return zrt_nvme_whole(nv, array, NULL, NULL, 1);
}

/* Element range of the current generation through an aligned bounce buffer:
 * the covering 4096-byte blocks are read, patched and (write) written back,
 * so edges that are not block aligned keep their neighbours' bytes. */
zrt_status zrt_nvme_range(zrt_nvme *nv, int array, int write, size_t off, size_t len, float *buf) {
  if (!nv || array < 0 || array >= nv->narrays || (len && !buf) || off + len > nv->n)
    return zrt_error(ZRT_ERR_INVALID_ARG,
                     "nvme swap: range [%zu, +%zu) of array %d is outside the %zu-element file",
                     off, len, array, nv ? nv->n : 0);
  if (len == 0) return ZRT_OK;
  const size_t step = 4u << 20;
  void *bounce = NULL;
  if (posix_memalign(&bounce, ZRT_NVME_ALIGN, step) != 0)
    return zrt_error(ZRT_ERR_OOM, "nvme swap: out of host memory");
  zrt_status st = ZRT_OK;
  size_t b0 = off * 4, b1 = (off + len) * 4; /* bytes wanted, in the region */
  for (size_t blk = b0 / ZRT_NVME_ALIGN * ZRT_NVME_ALIGN; blk < b1; blk += step) {
    size_t sz = ZRT_MIN(step, ZRT_ALIGN_UP(b1, (size_t)ZRT_NVME_ALIGN) - blk);
    size_t lo = ZRT_MAX(blk, b0), hi = ZRT_MIN(blk + sz, b1);
    off_t fo = (off_t)(nv->cur * nv->region + blk);
    int whole = write && lo == blk && hi == blk + sz;
    if (!whole) {
      ssize_t r = pread(nv->fd[array], bounce, sz, fo);
      if (r > 0) nv->rd_bytes += (uint64_t)r;
      if (r < 0) {
        st = zrt_nvme_io_error(nv, array, 0, fo, -errno, sz);
        break;
      }
      /* past the end of a file that was never written there: zeros */
      if ((size_t)r < sz) memset((char *)bounce + r, 0, sz - (size_t)r);
    }
    char *user = (char *)buf + (lo - b0);
    if (!write) {
      memcpy(user, (char *)bounce + (lo - blk), hi - lo);
      continue;
    }
    memcpy((char *)bounce + (lo - blk), user, hi - lo);
    ssize_t r = pwrite(nv->fd[array], bounce, sz, fo);
    if (r > 0) nv->wr_bytes += (uint64_t)r;
    if (r != (ssize_t)sz) {
      st = zrt_nvme_io_error(nv, array, 1, fo, r < 0 ? -errno : r, sz);
      break;
    }
  }
  free(bounce);
  return st;
}

zrt_status zrt_nvme_sync(zrt_nvme *nv) {
  for (int a = 0; a < nv->narrays; a++)
    if (fsync(nv->fd[a]) != 0)
      return zrt_error(ZRT_ERR_IO, "nvme swap: fsync of %s failed: %s", nv->path[a],
                       strerror(errno));
  return ZRT_OK;
}

size_t zrt_nvme_disk_bytes(const zrt_nvme *nv) {
  return nv ? 2 * nv->region * (size_t)nv->narrays : 0;
}

const char *zrt_nvme_path(const zrt_nvme *nv, int array) {
  return nv && array >= 0 && array < nv->narrays ? nv->path[array] : "";
}

int zrt_nvme_generation(const zrt_nvme *nv) { return nv ? nv->cur : 0; }

int zrt_nvme_reads_in_flight(const zrt_nvme *nv) { return nv ? nv->ainflight : 0; }

zrt_status zrt_nvme_read_submit(zrt_nvme *nv, int array, size_t off, size_t bytes, void *buf,
                                uint64_t tag) {
  if (!nv || array < 0 || array >= nv->narrays || !buf || off % ZRT_NVME_ALIGN ||
      bytes % ZRT_NVME_ALIGN || (uintptr_t)buf % ZRT_NVME_ALIGN || off + bytes > nv->region ||
      bytes == 0 || bytes > UINT_MAX)
    return zrt_error(ZRT_ERR_INVALID_ARG,
                     "zrt_nvme_read_submit: bad arguments (array %d, offset %zu, %zu bytes; "
                     "offset, size and buffer must be %d-aligned and within the %zu-byte region)",
                     array, off, bytes, ZRT_NVME_ALIGN, nv ? nv->region : 0);
  if (!nv->aring_ok) {
    nv->areq = calloc((size_t)nv->qd, sizeof *nv->areq);
    if (!nv->areq) return zrt_error(ZRT_ERR_OOM, "nvme swap: out of host memory");
    int rc = io_uring_queue_init((unsigned)ZRT_MIN(4096, nv->qd), &nv->aring, 0);
    if (rc < 0) {
      free(nv->areq);
      nv->areq = NULL;
      return zrt_error(ZRT_ERR_IO, "nvme swap: io_uring_queue_init failed: %s", strerror(-rc));
    }
    nv->aring_ok = 1;
  }
  int slot = -1;
  for (int i = 0; i < nv->qd && slot < 0; i++)
    if (!nv->areq[i].busy) slot = i;
  if (slot < 0)
    return zrt_error(ZRT_ERR_INTERNAL,
                     "nvme swap: %d asynchronous reads already in flight on %s (the queue depth); "
                     "reap one first",
                     nv->qd, nv->path[array]);
  struct io_uring_sqe *sqe = io_uring_get_sqe(&nv->aring);
  if (!sqe) return zrt_error(ZRT_ERR_INTERNAL, "nvme swap: io_uring queue full");
  off_t fo = (off_t)(nv->cur * nv->region + off);
  io_uring_prep_read(sqe, nv->fd[array], buf, (unsigned)bytes, fo);
  io_uring_sqe_set_data64(sqe, (uint64_t)slot);
  int rc = io_uring_submit(&nv->aring);
  if (rc < 0) return zrt_error(ZRT_ERR_IO, "nvme swap: io_uring_submit: %s", strerror(-rc));
  nv->areq[slot] =
      (struct zrt_nvme_areq){.tag = tag, .off = fo, .bytes = bytes, .array = array, .busy = 1};
  nv->ainflight++;
  return ZRT_OK;
}

zrt_status zrt_nvme_read_reap(zrt_nvme *nv, int wait, uint64_t *tag, int *got) {
  if (!nv || !tag || !got) return zrt_error(ZRT_ERR_INVALID_ARG, "zrt_nvme_read_reap: NULL");
  *got = 0;
  if (nv->ainflight == 0) return ZRT_OK;
  struct io_uring_cqe *cqe = NULL;
  int rc = wait ? io_uring_wait_cqe(&nv->aring, &cqe) : io_uring_peek_cqe(&nv->aring, &cqe);
  if (rc == -EAGAIN && !wait) return ZRT_OK;
  if (rc < 0) return zrt_error(ZRT_ERR_IO, "nvme swap: io_uring_wait_cqe: %s", strerror(-rc));
  long res = cqe->res;
  uint64_t slot = io_uring_cqe_get_data64(cqe);
  io_uring_cqe_seen(&nv->aring, cqe);
  if (slot >= (uint64_t)nv->qd || !nv->areq[slot].busy)
    return zrt_error(ZRT_ERR_INTERNAL, "nvme swap: completion of an unknown read (%llu)",
                     (unsigned long long)slot);
  struct zrt_nvme_areq *r = &nv->areq[slot];
  r->busy = 0;
  nv->ainflight--;
  *tag = r->tag;
  *got = 1;
  if (res > 0) nv->rd_bytes += (uint64_t)res;
  if (res < 0 || (size_t)res != r->bytes)
    return zrt_nvme_io_error(nv, r->array, 0, r->off, res, r->bytes);
  return ZRT_OK;
}

void zrt_nvme_read_drain(zrt_nvme *nv) {
  while (nv && nv->ainflight > 0) {
    struct io_uring_cqe *cqe = NULL;
    int rc;
    do rc = io_uring_wait_cqe(&nv->aring, &cqe);
    while (rc == -EINTR);
    if (rc < 0) {
      /* the ring is unusable: nothing more can complete into the buffers */
      nv->ainflight = 0;
      break;
    }
    uint64_t slot = io_uring_cqe_get_data64(cqe);
    io_uring_cqe_seen(&nv->aring, cqe);
    if (slot < (uint64_t)nv->qd && nv->areq[slot].busy) {
      nv->areq[slot].busy = 0;
      nv->ainflight--;
    }
  }
}

void zrt_nvme_add_io_bytes(const zrt_nvme *nv, uint64_t *rd, uint64_t *wr) {
  if (!nv) return;
  *rd += nv->rd_bytes;
  *wr += nv->wr_bytes;
}
