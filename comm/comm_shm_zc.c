/*
 * comm_shm_zc.c — zero-copy collectives of the shared-memory comm: buffers
 * allocated through the comm (zrt_comm_mem_alloc: one POSIX shared-memory
 * segment per allocation per rank, mapped by every local rank, like
 * MPI_Win_allocate_shared), and reduce_scatter / all_gather / all_reduce
 * that read the peers' buffers in place when every rank's buffers are
 * such memory. A request with a publish phase first writes where its
 * buffers are into this rank's control line; before the next phase every
 * rank reads all descriptors and takes the same branch: zero-copy, or the
 * copy path (comm/comm_shm.c) when any rank's buffer is private. The last
 * zero-copy phase does nothing: it starts only once every rank finished
 * reading, so a request completes when no peer reads its buffers any more.
 * Also the sweep of names that ranks killed between creating and unlinking
 * a segment left behind (zrt_shm_sweep_stale). Protocol, ordering and
 * limits: docs/comms.md, "Zero-copy collectives".
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "comm_shm_impl.h"
#include "dtype.h"
#include "env.h"
#include "safe_file.h"

/* One collective allocation: every rank's segment, mapped here. */
struct shm_zc_alloc {
  shm_zc_alloc *next;
  uint32_t id;               /* 1, 2, ... in allocation order: equal on every rank */
  size_t bytes;              /* mapped bytes of each rank's segment (whole pages) */
  char *base[SHM_MAX_RANKS]; /* rank r's segment in this process (base[rank]: ours) */
};

/* Where /dev/shm is: glibc's shm_open creates its files there. */
#define SHM_ZC_DIR "/dev/shm"

static void seg_name(char *buf, size_t n, int pid, uint32_t id) {
  snprintf(buf, n, "/zrt-zc-%d-%d-%u", (int)getuid(), pid, (unsigned)id);
}

static void unmap_all(shm_ctx *s, shm_zc_alloc *a) {
  for (int r = 0; r < s->nranks; r++)
    if (a->base[r]) munmap(a->base[r], a->bytes);
  free(a);
}

/* ZRT_COMM_SHM_ZC: unset or "1" shared buffers, "0" private ones; read
 * at the first allocation and agreed over the ranks (private if any rank
 * says so, an error on every rank if any rank's value is malformed), so
 * every rank takes the same branch of every later allocation and
 * collective. */
static zrt_status zc_env(shm_ctx *s) {
  if (s->zc_env_ready) return ZRT_OK;
  const char *e = zrt_env("ZRT_COMM_SHM_ZC");
  float v = !e || !*e || !strcmp(e, "1") ? 1.0f : !strcmp(e, "0") ? 0.0f : -1.0f;
  float all = v;
  ZRT_CHECK(s->mpi.iface->all_reduce(s->mpi.ctx, &v, &all, 1, ZRT_F32, ZRT_RED_MIN, NULL));
  if (v < 0)
    return zrt_error(ZRT_ERR_CONFIG,
                     "ZRT_COMM_SHM_ZC=\"%s\": expected 1 (collective buffers in shared memory, "
                     "zero-copy collectives) or 0 (private buffers, the copy path); unset it for 1",
                     e);
  if (all < 0)
    return zrt_error(ZRT_ERR_CONFIG,
                     "ZRT_COMM_SHM_ZC is malformed on another rank (its message says how); give "
                     "every rank the same value");
  s->zc_plain = all == 0.0f;
  s->zc_env_ready = 1;
  return ZRT_OK;
}

typedef struct {
  int uid;
  unsigned long long bytes; /* of the segments removed */
} stale_sweep;

/* Parses "zrt-zc-<uid>-<pid>-<id>" / "zrt-shm-<uid>-<pid>-<hex>"; the
 * creator's pid, or 0 when the name is not one of ours. */
static long stale_pid(const char *name, void *arg) {
  int uid = ((const stale_sweep *)arg)->uid, u = -1, pid = 0, used = 0;
  if (sscanf(name, "zrt-zc-%d-%d-%*x%n", &u, &pid, &used) == 2 && !name[used] && u == uid)
    return pid;
  used = 0;
  if (sscanf(name, "zrt-shm-%d-%d-%*x%n", &u, &pid, &used) == 2 && !name[used] && u == uid)
    return pid;
  return 0;
}

static void stale_removed(const char *name, long pid, long long bytes, void *arg) {
  ((stale_sweep *)arg)->bytes += (unsigned long long)bytes;
  zrt_log(ZRT_LOG_WARN,
          "shm comm: removed %s/%s (%lld bytes): left by process %ld, which died between "
          "creating and unlinking it",
          SHM_ZC_DIR, name, bytes, pid);
}

/* Only a creator that no longer exists, and only an old name: one in its
 * handshake window is seconds old (safe_file.h). Removing the name from
 * SHM_ZC_DIR is what shm_unlink does. */
void zrt_shm_sweep_stale(void) {
  int dfd = open(SHM_ZC_DIR, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return;
  stale_sweep sw = {(int)getuid(), 0};
  int n = zrt_safe_sweep(dfd, stale_pid, stale_removed, &sw);
  close(dfd);
  if (n > 1)
    zrt_log(ZRT_LOG_WARN, "shm comm: %d stale segments removed, %llu bytes of %s given back", n,
            sw.bytes, SHM_ZC_DIR);
}

/* Creates, reserves and maps this rank's segment. why on failure. */
static int create_own(shm_ctx *s, shm_zc_alloc *a, const char *name, char *why, size_t n) {
  struct statvfs vf;
  if (statvfs(SHM_ZC_DIR, &vf) == 0) {
    unsigned long long avail = (unsigned long long)vf.f_bavail * vf.f_frsize;
    if (a->bytes > avail) {
      snprintf(why, n, "%s has %llu bytes free, this rank needs %zu", SHM_ZC_DIR, avail, a->bytes);
      return -1;
    }
  }
  int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
  if (fd < 0) {
    snprintf(why, n, "shm_open(%s): %s", name, strerror(errno));
    return -1;
  }
  /* reserve the pages now: a full /dev/shm fails here, not with SIGBUS in
   * the middle of a collective */
  int e = ftruncate(fd, (off_t)a->bytes) != 0 ? errno : posix_fallocate(fd, 0, (off_t)a->bytes);
  if (e) {
    snprintf(why, n, "reserving %zu bytes in %s: %s", a->bytes, SHM_ZC_DIR, strerror(e));
    close(fd);
    shm_unlink(name);
    return -1;
  }
  void *p = mmap(NULL, a->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) {
    snprintf(why, n, "mmap of %zu shared bytes: %s", a->bytes, strerror(errno));
    shm_unlink(name);
    return -1;
  }
  a->base[s->rank] = p;
  return 0;
}

static int map_peers(shm_ctx *s, shm_zc_alloc *a, char *why, size_t n) {
  for (int r = 0; r < s->nranks; r++) {
    if (r == s->rank) continue;
    char name[64];
    seg_name(name, sizeof name, s->hdr->ctl[r].pid, a->id);
    int fd = shm_open(name, O_RDWR, 0600);
    if (fd < 0) {
      snprintf(why, n, "shm_open(%s) of rank %d's segment: %s", name, r, strerror(errno));
      return -1;
    }
    void *p = mmap(NULL, a->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) {
      snprintf(why, n, "mmap of rank %d's %zu shared bytes: %s", r, a->bytes, strerror(errno));
      return -1;
    }
    a->base[r] = p;
  }
  return 0;
}

/* The lowest rank whose step failed (nranks: none), over MPI. */
static zrt_status agree(shm_ctx *s, int ok, int *first_bad) {
  float v = ok ? (float)s->nranks : (float)s->rank;
  ZRT_CHECK(s->mpi.iface->all_reduce(s->mpi.ctx, &v, &v, 1, ZRT_F32, ZRT_RED_MIN, NULL));
  *first_bad = (int)v;
  return ZRT_OK;
}

zrt_status zrt_shm_zc_alloc(void *ctx, size_t bytes, void **out) {
  shm_ctx *s = ctx;
  zrt_status st = ZRT_OK;
  *out = NULL;
  if (s->broken != ZRT_OK) return zrt_error(s->broken, "%s", s->broken_msg);
  if (!bytes) return ZRT_OK;
  /* the issued collectives first: the handshakes below are MPI */
  ZRT_CHECK(zrt_shm_drain(s));
  ZRT_CHECK(zc_env(s));
  if (s->zc_plain) {
    int rc = posix_memalign(out, 64, bytes);
    if (rc) {
      *out = NULL;
      return zrt_error(ZRT_ERR_OOM, "zrt_comm_mem_alloc: %zu bytes of host memory: %s", bytes,
                       strerror(rc));
    }
    return ZRT_OK;
  }
  long page = sysconf(_SC_PAGESIZE);
  size_t pg = page > 0 ? (size_t)page : 4096;
  shm_zc_alloc *a = calloc(1, sizeof *a);
  int ok = a != NULL, bad = 0;
  char why[256] = "out of host memory", name[64] = "";
  /* ids stay equal on every rank: each call takes the next, success or not */
  uint32_t id = ++s->zc_made;
  if (a) {
    a->id = id;
    a->bytes = (bytes + pg - 1) / pg * pg;
    seg_name(name, sizeof name, (int)getpid(), id);
    ok = create_own(s, a, name, why, sizeof why) == 0;
  }
  ZRT_CHECK_GOTO(agree(s, ok, &bad), st, fail);
  if (bad == s->nranks) {
    ok = map_peers(s, a, why, sizeof why) == 0;
    ZRT_CHECK_GOTO(agree(s, ok, &bad), st, fail);
  }
  /* every rank mapped every segment (or gave up): the names can go */
  if (a && a->base[s->rank]) shm_unlink(name);
  name[0] = 0;
  if (bad != s->nranks) {
    if (bad == s->rank)
      st = zrt_error(ZRT_ERR_OOM,
                     "zrt_comm_mem_alloc: %zu bytes of shared memory for collective buffers on "
                     "rank %d (every local rank maps its own): %s. Enlarge %s (docker run "
                     "--shm-size=<size>, or mount -o remount,size=<size> %s) or set "
                     "ZRT_COMM_SHM_ZC=0 for private buffers (collectives then copy through the "
                     "comm's segment)",
                     bytes, s->rank, why, SHM_ZC_DIR, SHM_ZC_DIR);
    else
      st = zrt_error(ZRT_ERR_OOM,
                     "zrt_comm_mem_alloc: rank %d could not allocate its %zu bytes of shared "
                     "memory (its message says why and what to do)",
                     bad, bytes);
    goto fail;
  }
  a->next = s->zc_list;
  s->zc_list = a;
  *out = a->base[s->rank];
  return ZRT_OK;
fail:
  if (name[0]) shm_unlink(name);
  if (a) unmap_all(s, a);
  return st;
}

void zrt_shm_zc_free(void *ctx, void *p) {
  shm_ctx *s = ctx;
  for (shm_zc_alloc **pp = &s->zc_list; *pp; pp = &(*pp)->next)
    if ((*pp)->base[s->rank] == p) {
      shm_zc_alloc *a = *pp;
      *pp = a->next;
      unmap_all(s, a);
      return;
    }
  free(p); /* ZRT_COMM_SHM_ZC=0: private memory */
}

void zrt_shm_zc_release(shm_ctx *s) {
  while (s->zc_list) {
    shm_zc_alloc *a = s->zc_list;
    s->zc_list = a->next;
    unmap_all(s, a);
  }
}

/* [p, p + len) inside one of our segments: its id and offset (0: none). */
static uint32_t resolve(const shm_ctx *s, const void *p, size_t len, uint64_t *off) {
  *off = 0;
  const char *c = p;
  for (const shm_zc_alloc *a = s->zc_list; a; a = a->next) {
    const char *b = a->base[s->rank];
    if (c >= b && c <= b + a->bytes && len <= (size_t)(b + a->bytes - c)) {
      *off = (uint64_t)(c - b);
      return a->id;
    }
  }
  return 0;
}

static const shm_zc_alloc *by_id(const shm_ctx *s, uint32_t id) {
  for (const shm_zc_alloc *a = s->zc_list; a; a = a->next)
    if (a->id == id) return a;
  return NULL;
}

/* Bytes of send every peer reads, and of recv (0: recv need not be
 * shared: only all_reduce's gather reads the peers' recv). */
static void zc_extent(const shm_ctx *s, const shm_req *q, size_t *sl, size_t *rl) {
  size_t es = zrt_dtype_size(q->dt), N = (size_t)s->nranks;
  size_t total = q->offs[N - 1] + q->counts[N - 1];
  *sl = (q->op == SHM_AG ? q->counts[s->rank] : total) * es;
  *rl = q->op == SHM_AR ? total * es : 0;
}

void zrt_shm_zc_publish(shm_ctx *s, shm_req *q) {
  shm_ctl *c = &s->hdr->ctl[s->rank];
  size_t sl, rl;
  zc_extent(s, q, &sl, &rl);
  uint64_t soff = 0, roff = 0;
  uint32_t sid = sl ? resolve(s, q->send, sl, &soff) : 0;
  uint32_t rid = rl ? resolve(s, q->recv, rl, &roff) : 0;
  c->zc_ok = (!sl || sid ? SHM_ZC_SEND : 0u) | (!rl || rid ? SHM_ZC_RECV : 0u);
  c->zc_sid = sid;
  c->zc_rid = rid;
  c->zc_soff = soff;
  c->zc_roff = roff;
  /* the phase store after this phase publishes it (release) */
}

void zrt_shm_zc_decide(shm_ctx *s, shm_req *q) {
  uint32_t all = SHM_ZC_SEND | SHM_ZC_RECV;
  for (int r = 0; r < s->nranks; r++) all &= s->hdr->ctl[r].zc_ok;
  if (all != (SHM_ZC_SEND | SHM_ZC_RECV)) {
    q->zc = SHM_ZC_OFF;
    return;
  }
  for (int r = 0; r < s->nranks; r++) {
    const shm_ctl *c = &s->hdr->ctl[r];
    if (r == s->rank) {
      s->zc_send[r] = q->send;
      s->zc_recv[r] = q->recv;
      continue;
    }
    const shm_zc_alloc *sa = c->zc_sid ? by_id(s, c->zc_sid) : NULL;
    const shm_zc_alloc *ra = c->zc_rid ? by_id(s, c->zc_rid) : NULL;
    if ((c->zc_sid && !sa) || (c->zc_rid && !ra)) {
      snprintf(s->broken_msg, sizeof s->broken_msg,
               "shm comm: rank %d's buffers for collective #%llu %s lie in comm allocation #%u, "
               "which rank %d already freed: every rank must call zrt_comm_mem_free for an "
               "allocation only after its last collective on it",
               r, (unsigned long long)q->base.seq, q->base.op ? q->base.op : "",
               (unsigned)(c->zc_sid && !sa ? c->zc_sid : c->zc_rid), s->rank);
      s->broken = ZRT_ERR_COMM;
      return;
    }
    s->zc_send[r] = sa ? sa->base[r] + c->zc_soff : NULL;
    s->zc_recv[r] = ra ? ra->base[r] + c->zc_roff : NULL;
  }
  q->zc = SHM_ZC_ON;
  /* reduce or gather (all_reduce: its rounds, the gather one phase
   * behind), then the phase that starts once every rank is done reading */
  q->last = q->first + 1 + (q->op == SHM_AR ? q->rounds + 2 : 2);
  if (s->c) s->c->zero_copy++;
}

/* Elements [lo, lo + len) of segment j in all_reduce round g (the copy
 * path's rounds: q->q elements of each segment per round). */
static void ar_round(const shm_req *q, int j, uint64_t g, size_t *lo, size_t *len) {
  size_t a = (size_t)g * q->q, c = q->counts[j];
  *lo = a < c ? a : c;
  *len = (a + q->q < c ? a + q->q : c) - *lo;
}

void zrt_shm_zc_phase(shm_ctx *s, shm_req *q, uint64_t k) {
  int R = s->rank, N = s->nranks;
  size_t es = zrt_dtype_size(q->dt), lo, len;
  char *recv = q->recv;
  const void *in[SHM_MAX_RANKS];
  if (q->op == SHM_RS && k == 0) {
    /* my segment over the ranks in rank order, straight from their send
     * buffers into recv (in place: my own input, read before written) */
    for (int r = 0; r < N; r++) in[r] = s->zc_send[r] + q->offs[R] * es;
    zrt_shm_reduce_into(recv, NULL, in, N, q->counts[R], q->dt, q->red, q->nt);
  } else if (q->op == SHM_AG && k == 0) {
    for (int j = 0; j < N; j++) {
      size_t n = q->counts[j] * es;
      char *dst = recv + q->offs[j] * es;
      const char *src = s->zc_send[j];
      if (!n || dst == src) continue;
      /* my own piece overlapping its place in recv: memmove; otherwise it
       * streams like the peers' (ordinary stores would read each line of
       * recv first: a third more traffic for this piece) */
      if (j == R && dst < src + n && src < dst + n)
        memmove(dst, src, n);
      else
        zrt_shm_copy_out(q, dst, src, n);
    }
  } else if (q->op == SHM_AR) {
    /* pipelined by rounds: phase k reduces round k of my segment into my
     * recv and gathers round k - 1 of the others' from their recv (written
     * one phase earlier: still in cache) */
    if (k < q->rounds) {
      ar_round(q, R, k, &lo, &len);
      for (int r = 0; r < N; r++) in[r] = s->zc_send[r] + (q->offs[R] + lo) * es;
      /* ordinary stores: the peers read these sums in the next phase */
      zrt_shm_reduce_into(recv + (q->offs[R] + lo) * es, NULL, in, N, len, q->dt, q->red, 0);
    }
    if (k >= 1 && k - 1 < q->rounds)
      for (int j = 0; j < N; j++) {
        if (j == R) continue;
        ar_round(q, j, k - 1, &lo, &len);
        if (len)
          zrt_shm_copy_out(q, recv + (q->offs[j] + lo) * es, s->zc_recv[j] + (q->offs[j] + lo) * es,
                           len * es);
      }
  }
  /* the last phase: nothing (every rank finished reading before it) */
}
