/*
 * backend_twin.c — the GPU twin: the CPU backend's numerics with a GPU's
 * ordering and memory rules, so every suite checks the CUDA path's rules
 * without a GPU (docs/engine.md, "The twin backend").
 *
 * Streams: each stream (the default one that NULL means, and every
 * stream_create) is a worker thread that runs its queued ops in FIFO order.
 * An op captures its arguments by value when it is queued and calls the CPU
 * backend's kernel (backend_cpu.c's iface, ctx = this zrt_backend, so GEMM
 * workspaces come from this pool) when its turn comes. Every stream counts
 * ops queued (enq) and ops finished (done); an event's record captures
 * (stream, enq at the record), so it completes when that stream's done
 * reaches it: CUDA's semantics (a wait on, or a synchronize of, an event
 * never recorded returns at once). stream_wait_event queues a wait op that
 * holds the event's last record by value; stream_join queues one per other
 * stream. ZRT_TWIN_JITTER=SEED sleeps a seeded random 0-200 us before each
 * op, so an ordering that holds only because one thread happened to be
 * faster fails. An op that fails makes its stream's error sticky: later
 * ops on that stream are skipped and the next host call that touches the
 * stream (enqueue, synchronize, event_synchronize) returns the error.
 *
 * Memory: device memory is one private mapping (the twin's "device", the
 * size of device_memory_limit or of physical memory, reserved without
 * backing), carved first-fit in 256-byte units. New blocks are filled with
 * 0xFF bytes on the default stream (NaN in every float type: cudaMalloc's
 * memory is not zero) and the other streams are ordered after that, as the
 * CUDA backend's stream-ordered allocation is. A free joins every stream
 * into the default stream and returns the block there, so a block is
 * reused only after all work queued before the free (a free from inside an
 * op — a GEMM workspace — returns at once: only that op used it).
 *
 * The host cannot touch it. Where the CPU has protection keys (PKU) the
 * mapping carries a key that only stream workers (and the OpenMP teams they
 * start, which inherit their PKRU) may use: the thread that creates the
 * backend and every thread created before or outside the workers run with
 * access disabled (Linux starts every process with keys 1-15 disabled;
 * pkey_alloc is called with PKEY_DISABLE_ACCESS). A host touch dies in a
 * SIGSEGV handler that names the address, the pool category of its block
 * and the thread. OpenBLAS's own pthread pool was created at load time,
 * without access, so with PKU the twin runs OpenBLAS single-threaded (GEMM
 * results do not depend on OpenBLAS's thread count: it splits M and N,
 * never K). Without PKU (logged once) the twin checks pointer kinds at op
 * boundaries: a kernel may read only device memory or host memory
 * registered with the backend (copies, like cudaMemcpyDefault, take their
 * direction from the pointers).
 * Both modes apply the op-boundary checks.
 *
 * Copies follow CUDA: to pageable host memory the host waits for the copy
 * (a host wait); from pageable host memory to the device the source is
 * captured at once and the device write is queued (CUDA returns once the
 * bytes are staged, the DMA may still be in flight), so only work ordered
 * after it on its stream may read it; to or from memory registered with
 * host_register (the pinned host pool) it is asynchronous. scale_check returns host
 * values, so it is a host wait and a device-to-host read.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "backend.h"
#include "dtype.h"

/* Allocation unit (CUDA's allocations are 256-byte aligned). */
#define ZRT_TWIN_ALIGN 256
/* Upper bound of the random delay before each op with ZRT_TWIN_JITTER. */
#define ZRT_TWIN_JITTER_MAX_US 200
/* Streams one twin tracks at once (the CUDA backend's limit is of the same order). */
#define ZRT_TWIN_MAX_STREAMS 64
/* Host ranges registered at once (the pinned host pool registers a handful). */
#define ZRT_TWIN_MAX_REGS 1024
/* Freed blocks at least this large give their pages back (MADV_DONTNEED). */
#define ZRT_TWIN_RELEASE_BYTES ((size_t)1 << 20)

typedef struct twin_ctx twin_ctx;
typedef struct twin_stream twin_stream;
typedef zrt_status (*twin_run_fn)(twin_ctx *c, void *args);

typedef struct twin_op {
  struct twin_op *next;
  twin_run_fn run;
  const char *what;
  _Alignas(16) unsigned char args[]; /* the arguments, copied at enqueue */
} twin_op;

struct twin_stream {
  twin_ctx *c;
  int index;
  pthread_t thr;
  pthread_mutex_t mu;
  pthread_cond_t work, progress;
  twin_op *head, *tail;
  uint64_t enq, done; /* ops queued / finished (done <= enq) */
  int stop;
  zrt_status err; /* sticky: first failure */
  char errmsg[512];
  uint64_t rng; /* jitter */
};

typedef struct twin_event {
  twin_stream *s; /* last record's stream; NULL = never recorded */
  uint64_t target;
} twin_event;

typedef struct twin_block {
  size_t off, bytes;
  struct twin_block *next;
} twin_block;

typedef struct twin_reg {
  uintptr_t lo, hi;
} twin_reg;

struct twin_ctx {
  zrt_backend *b;
  zrt_backend cpu; /* the CPU backend's iface (its kernels) */
  unsigned char *base;
  size_t size;
  int pkey;              /* -1: no PKU */
  pthread_mutex_t mu;    /* streams, events, free list, registrations */
  twin_block *free_list; /* sorted by offset, coalesced */
  twin_stream *streams[ZRT_TWIN_MAX_STREAMS];
  int nstreams;
  twin_stream *def;
  twin_reg regs[ZRT_TWIN_MAX_REGS];
  int nregs;
  int jitter;
  uint64_t jitter_seed;
};

/* The stream whose worker runs on this thread (NULL on host threads). */
static _Thread_local twin_stream *twin_cur;

/* ------------------------------------------------------------ PKU */

/* One twin per process holds the signal handler's view of the mapping. */
static _Atomic(twin_ctx *) twin_global;
static struct sigaction twin_old_segv;

static int twin_pkey_set(int key, unsigned rights) {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 27))
  return pkey_set(key, rights);
#else
  (void)key;
  (void)rights;
  errno = ENOSYS;
  return -1;
#endif
}

static void twin_segv(int sig, siginfo_t *si, void *uctx) {
  twin_ctx *c = atomic_load(&twin_global);
  unsigned char *a = si ? (unsigned char *)si->si_addr : NULL;
  if (c && a >= c->base && a < c->base + c->size) {
    char name[32] = "?";
    pthread_getname_np(pthread_self(), name, sizeof name);
    void *blk = NULL;
    size_t bytes = 0;
    zrt_mem_category cat = ZRT_MEM_OTHER;
    int found = zrt_pool_find(c->b->pool, a, &blk, &bytes, &cat);
    char msg[512];
    int n = snprintf(msg, sizeof msg,
                     "zrt twin: host thread %ld (\"%s\") touched device memory at %p (%s%s%s): "
                     "device memory is reachable only from a stream (zrt_engine_launch, "
                     "zrt_engine_memcpy); si_code %d%s\n",
                     (long)syscall(SYS_gettid), name, (void *)a,
                     found ? "a block of pool category " : "no live block",
                     found ? zrt_mem_category_name(cat) : "", found ? "" : "", si->si_code,
#ifdef SEGV_PKUERR
                     si->si_code == SEGV_PKUERR ? " (SEGV_PKUERR)" : ""
#else
                     ""
#endif
    );
    if (n > 0) {
      ssize_t w = write(2, msg, (size_t)(n < (int)sizeof msg ? n : (int)sizeof msg - 1));
      (void)w;
    }
    signal(SIGSEGV, SIG_DFL);
    raise(SIGSEGV);
    return;
  }
  /* not ours: whatever handled SIGSEGV before, else the default action */
  if (twin_old_segv.sa_flags & SA_SIGINFO && twin_old_segv.sa_sigaction) {
    twin_old_segv.sa_sigaction(sig, si, uctx);
    return;
  }
  if (twin_old_segv.sa_handler != SIG_DFL && twin_old_segv.sa_handler != SIG_IGN &&
      twin_old_segv.sa_handler) {
    twin_old_segv.sa_handler(sig);
    return;
  }
  signal(SIGSEGV, SIG_DFL);
  raise(SIGSEGV);
}

/* -------------------------------------------------------- pointer kinds */

static int twin_is_dev(const twin_ctx *c, const void *p) {
  const unsigned char *q = p;
  return q >= c->base && q < c->base + c->size;
}

static int twin_is_reg(twin_ctx *c, const void *p, size_t bytes) {
  uintptr_t lo = (uintptr_t)p, hi = lo + bytes;
  int ok = 0;
  pthread_mutex_lock(&c->mu);
  for (int i = 0; i < c->nregs && !ok; i++) ok = lo >= c->regs[i].lo && hi <= c->regs[i].hi;
  pthread_mutex_unlock(&c->mu);
  return ok;
}

/* A kernel's operand: device memory or registered host memory (a kernel
 * cannot read pageable host memory on a GPU). */
static zrt_status twin_operand(twin_ctx *c, const char *op, const char *arg, const void *p,
                               size_t bytes) {
  if (!p || twin_is_dev(c, p) || twin_is_reg(c, p, bytes)) return ZRT_OK;
  return zrt_error(ZRT_ERR_INVALID_ARG,
                   "twin %s: %s (%p) is pageable host memory, which a GPU kernel cannot read; "
                   "pass device memory (zrt_engine_alloc) or copy it there first",
                   op, arg, p);
}

/* ------------------------------------------------------------- streams */

static zrt_status twin_sticky(twin_stream *s) {
  /* caller holds s->mu */
  if (s->err == ZRT_OK) return ZRT_OK;
  return zrt_error(s->err, "twin stream %d: an earlier op failed: %s", s->index, s->errmsg);
}

static void twin_jitter(twin_stream *s) {
  /* xorshift64*: seeded per stream from ZRT_TWIN_JITTER and the stream index */
  s->rng ^= s->rng >> 12;
  s->rng ^= s->rng << 25;
  s->rng ^= s->rng >> 27;
  uint64_t r = s->rng * 0x2545F4914F6CDD1Dull;
  long us = (long)(r % (ZRT_TWIN_JITTER_MAX_US + 1));
  struct timespec ts = {0, us * 1000L};
  nanosleep(&ts, NULL);
}

static void *twin_worker(void *arg) {
  twin_stream *s = arg;
  twin_ctx *c = s->c;
  twin_cur = s;
  char name[16];
  snprintf(name, sizeof name, "zrt-twin-s%d", s->index);
  pthread_setname_np(pthread_self(), name);
  if (c->pkey >= 0) twin_pkey_set(c->pkey, 0);
  pthread_mutex_lock(&s->mu);
  for (;;) {
    while (!s->head && !s->stop) pthread_cond_wait(&s->work, &s->mu);
    if (!s->head) break;
    twin_op *op = s->head;
    int skip = s->err != ZRT_OK;
    pthread_mutex_unlock(&s->mu);
    zrt_status st = ZRT_OK;
    if (!skip) {
      if (c->jitter) twin_jitter(s);
      st = op->run(c, op->args);
    }
    pthread_mutex_lock(&s->mu);
    if (st != ZRT_OK && s->err == ZRT_OK) {
      s->err = st;
      snprintf(s->errmsg, sizeof s->errmsg, "%s: %s", op->what, zrt_last_error());
    }
    s->head = op->next;
    if (!s->head) s->tail = NULL;
    s->done++;
    free(op);
    pthread_cond_broadcast(&s->progress);
  }
  pthread_mutex_unlock(&s->mu);
  return NULL;
}

static twin_stream *twin_stream_of(twin_ctx *c, zrt_stream s) {
  return s ? (twin_stream *)s : c->def;
}

/* Queues run(args) on s; runs it at once when called from s's own worker
 * (an op or a host function issuing work on its own stream). */
static zrt_status twin_enqueue(twin_ctx *c, twin_stream *s, twin_run_fn run, const char *what,
                               const void *args, size_t bytes) {
  if (twin_cur == s) {
    unsigned char copy[bytes ? bytes : 1];
    memcpy(copy, args, bytes);
    return run(c, copy);
  }
  twin_op *op = malloc(sizeof *op + bytes);
  if (!op) return zrt_error(ZRT_ERR_OOM, "twin: out of host memory queueing %s", what);
  op->next = NULL;
  op->run = run;
  op->what = what;
  memcpy(op->args, args, bytes);
  pthread_mutex_lock(&s->mu);
  zrt_status st = twin_sticky(s);
  if (st != ZRT_OK) {
    pthread_mutex_unlock(&s->mu);
    free(op);
    return st;
  }
  if (s->tail)
    s->tail->next = op;
  else
    s->head = op;
  s->tail = op;
  s->enq++;
  pthread_cond_signal(&s->work);
  pthread_mutex_unlock(&s->mu);
  return ZRT_OK;
}

/* Host: waits until s finished its first `target` ops. */
static zrt_status twin_wait_done(twin_stream *s, uint64_t target) {
  if (twin_cur == s) return ZRT_OK; /* everything before the running op is done */
  pthread_mutex_lock(&s->mu);
  while (s->done < target && s->err == ZRT_OK) pthread_cond_wait(&s->progress, &s->mu);
  zrt_status st = twin_sticky(s);
  pthread_mutex_unlock(&s->mu);
  return st;
}

static uint64_t twin_enq_of(twin_stream *s) {
  pthread_mutex_lock(&s->mu);
  uint64_t e = s->enq;
  pthread_mutex_unlock(&s->mu);
  return e;
}

typedef struct {
  twin_stream *s;
  uint64_t target;
} twin_wait_args;

static zrt_status twin_run_wait(twin_ctx *c, void *a) {
  (void)c;
  twin_wait_args w;
  memcpy(&w, a, sizeof w);
  pthread_mutex_lock(&w.s->mu);
  /* a failed producer: its later ops never run; carry its error over */
  while (w.s->done < w.target && w.s->err == ZRT_OK) pthread_cond_wait(&w.s->progress, &w.s->mu);
  zrt_status st = twin_sticky(w.s);
  pthread_mutex_unlock(&w.s->mu);
  return st;
}

/* Queues on `to` a wait for everything queued so far on `from`. */
static zrt_status twin_order_after(twin_ctx *c, twin_stream *to, twin_stream *from) {
  if (to == from) return ZRT_OK;
  twin_wait_args w = {from, twin_enq_of(from)};
  if (w.target == 0) return ZRT_OK;
  return twin_enqueue(c, to, twin_run_wait, "stream wait", &w, sizeof w);
}

static zrt_status twin_stream_new(twin_ctx *c, twin_stream **out) {
  twin_stream *s = calloc(1, sizeof *s);
  if (!s) return zrt_error(ZRT_ERR_OOM, "twin: out of host memory for a stream");
  s->c = c;
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->work, NULL);
  pthread_cond_init(&s->progress, NULL);
  pthread_mutex_lock(&c->mu);
  if (c->nstreams == ZRT_TWIN_MAX_STREAMS) {
    pthread_mutex_unlock(&c->mu);
    free(s);
    return zrt_error(ZRT_ERR_UNSUPPORTED,
                     "twin backend: more than %d streams at once (ZRT_TWIN_MAX_STREAMS); destroy "
                     "streams you no longer use",
                     ZRT_TWIN_MAX_STREAMS);
  }
  static _Atomic int next_index;
  s->index = atomic_fetch_add(&next_index, 1);
  s->rng = (c->jitter_seed ^ (0x9E3779B97F4A7C15ull * (uint64_t)(s->index + 1))) | 1u;
  int rc = pthread_create(&s->thr, NULL, twin_worker, s);
  if (rc != 0) {
    pthread_mutex_unlock(&c->mu);
    free(s);
    return zrt_error(ZRT_ERR_INTERNAL, "twin: pthread_create for a stream worker: %s",
                     strerror(rc));
  }
  c->streams[c->nstreams++] = s;
  pthread_mutex_unlock(&c->mu);
  *out = s;
  return ZRT_OK;
}

static void twin_stream_end(twin_stream *s) {
  pthread_mutex_lock(&s->mu);
  s->stop = 1;
  pthread_cond_signal(&s->work);
  pthread_mutex_unlock(&s->mu);
  pthread_join(s->thr, NULL);
  pthread_mutex_destroy(&s->mu);
  pthread_cond_destroy(&s->work);
  pthread_cond_destroy(&s->progress);
  free(s);
}

/* Snapshot of the streams (a stream destroyed meanwhile is the caller's bug,
 * as on CUDA). */
static int twin_streams(twin_ctx *c, twin_stream **out) {
  pthread_mutex_lock(&c->mu);
  int n = c->nstreams;
  memcpy(out, c->streams, (size_t)n * sizeof *out);
  pthread_mutex_unlock(&c->mu);
  return n;
}

/* ------------------------------------------------------------ memory */

static zrt_status twin_carve(twin_ctx *c, size_t bytes, void **out) {
  size_t need = ZRT_ALIGN_UP(bytes ? bytes : 1, (size_t)ZRT_TWIN_ALIGN);
  pthread_mutex_lock(&c->mu);
  twin_block **pp = &c->free_list;
  for (twin_block *f = *pp; f; pp = &f->next, f = *pp) {
    if (f->bytes < need) continue;
    *out = c->base + f->off;
    f->off += need;
    f->bytes -= need;
    if (!f->bytes) {
      *pp = f->next;
      free(f);
    }
    pthread_mutex_unlock(&c->mu);
    return ZRT_OK;
  }
  pthread_mutex_unlock(&c->mu);
  char sz[32], cap[32];
  return zrt_error(ZRT_ERR_OOM,
                   "twin device mapping (%s) has no free range of %s left (fragmented or full)",
                   zrt_format_size(c->size, cap, sizeof cap), zrt_format_size(need, sz, sizeof sz));
}

static zrt_status twin_give_back(twin_ctx *c, size_t off, size_t bytes) {
  bytes = ZRT_ALIGN_UP(bytes ? bytes : 1, (size_t)ZRT_TWIN_ALIGN);
  if (bytes >= ZRT_TWIN_RELEASE_BYTES) {
    /* whole pages inside the block: their content is dead */
    uintptr_t lo = ZRT_ALIGN_UP((uintptr_t)(c->base + off), (uintptr_t)4096);
    uintptr_t hi = ((uintptr_t)(c->base + off + bytes)) & ~(uintptr_t)4095;
    if (hi > lo) madvise((void *)lo, hi - lo, MADV_DONTNEED);
  }
  twin_block *n = malloc(sizeof *n);
  if (!n) return zrt_error(ZRT_ERR_OOM, "twin: out of host memory for the free list");
  n->off = off;
  n->bytes = bytes;
  pthread_mutex_lock(&c->mu);
  twin_block **pp = &c->free_list, *prev = NULL;
  while (*pp && (*pp)->off < off) {
    prev = *pp;
    pp = &(*pp)->next;
  }
  n->next = *pp;
  *pp = n;
  if (n->next && n->off + n->bytes == n->next->off) {
    twin_block *x = n->next;
    n->bytes += x->bytes;
    n->next = x->next;
    free(x);
  }
  if (prev && prev->off + prev->bytes == n->off) {
    prev->bytes += n->bytes;
    prev->next = n->next;
    free(n);
  }
  pthread_mutex_unlock(&c->mu);
  return ZRT_OK;
}

typedef struct {
  void *dst;
  int value;
  size_t bytes;
} twin_memset_args;

static zrt_status twin_run_memset(twin_ctx *c, void *a) {
  twin_memset_args m;
  memcpy(&m, a, sizeof m);
  return c->cpu.iface->memset(c->b, m.dst, m.value, m.bytes, NULL);
}

static zrt_status twin_alloc(void *ctx, size_t bytes, void **out) {
  twin_ctx *c = ctx;
  *out = NULL;
  ZRT_CHECK(twin_carve(c, bytes, out));
  if (twin_cur) return ZRT_OK; /* an op's workspace: only that op uses it */
  /* Stream-ordered, as the CUDA backend's: poisoned on the default stream,
   * every other stream ordered after it. */
  twin_memset_args m = {*out, 0xFF, bytes};
  zrt_status st = twin_enqueue(c, c->def, twin_run_memset, "fill a new allocation", &m, sizeof m);
  twin_stream *all[ZRT_TWIN_MAX_STREAMS];
  int n = twin_streams(c, all);
  for (int i = 0; i < n && st == ZRT_OK; i++) st = twin_order_after(c, all[i], c->def);
  if (st != ZRT_OK) {
    (void)twin_give_back(c, (size_t)((unsigned char *)*out - c->base), bytes);
    *out = NULL;
  }
  return st;
}

typedef struct {
  size_t off, bytes;
} twin_free_args;

static zrt_status twin_run_free(twin_ctx *c, void *a) {
  twin_free_args f;
  memcpy(&f, a, sizeof f);
  return twin_give_back(c, f.off, f.bytes);
}

static void twin_free(void *ctx, void *ptr, size_t bytes) {
  twin_ctx *c = ctx;
  twin_free_args f = {(size_t)((unsigned char *)ptr - c->base), bytes};
  if (twin_cur) {
    (void)twin_give_back(c, f.off, f.bytes);
    return;
  }
  twin_stream *all[ZRT_TWIN_MAX_STREAMS];
  int n = twin_streams(c, all);
  zrt_status st = ZRT_OK;
  for (int i = 0; i < n && st == ZRT_OK; i++) st = twin_order_after(c, c->def, all[i]);
  if (st == ZRT_OK) st = twin_enqueue(c, c->def, twin_run_free, "free", &f, sizeof f);
  if (st != ZRT_OK)
    zrt_log(ZRT_LOG_ERROR, "twin free(%p, %zu bytes): %s (the block stays unused)", ptr, bytes,
            zrt_last_error());
}

/* ------------------------------------------------------------- copies */

typedef struct {
  void *dst;
  const void *src;
  size_t bytes;
} twin_copy_args;

static zrt_status twin_run_copy(twin_ctx *c, void *a) {
  twin_copy_args m;
  memcpy(&m, a, sizeof m);
  return c->cpu.iface->memcpy(c->b, m.dst, m.src, m.bytes, ZRT_COPY_D2D, NULL);
}

/* A copy from pageable host memory into device (or registered) memory: the
 * source bytes travel inside the op (captured when it is queued). */
typedef struct {
  void *dst;
  size_t bytes;
} twin_staged_copy_hdr;

static zrt_status twin_run_staged_copy(twin_ctx *c, void *a) {
  twin_staged_copy_hdr h;
  memcpy(&h, a, sizeof h);
  return c->cpu.iface->memcpy(c->b, h.dst, (unsigned char *)a + sizeof h, h.bytes, ZRT_COPY_D2D,
                              NULL);
}

/* Like the CUDA backend's cudaMemcpyDefault, the direction comes from where
 * the pointers live (unified addressing), not from `kind`. */
static zrt_status twin_memcpy(void *ctx, void *dst, const void *src, size_t bytes,
                              zrt_copy_kind kind, zrt_stream s) {
  twin_ctx *c = ctx;
  (void)kind;
  twin_stream *ts = twin_stream_of(c, s);
  int src_pageable = !twin_is_dev(c, src) && !twin_is_reg(c, src, bytes);
  int dst_pageable = !twin_is_dev(c, dst) && !twin_is_reg(c, dst, bytes);
  if (src_pageable && !dst_pageable && twin_cur != ts) {
    /* CUDA: an H2D copy from pageable memory returns once the bytes are
     * staged; the device write may still be in flight, ordered on s only.
     * The twin does the same (the source is captured now, the caller may
     * reuse it), so work on another stream that is not ordered after the
     * copy reads the allocation's 0xFF poison instead of the data. */
    size_t hb = sizeof(twin_staged_copy_hdr);
    unsigned char *op = malloc(hb + bytes);
    if (!op)
      return zrt_error(ZRT_ERR_OOM, "twin: out of host memory staging a %zu-byte copy", bytes);
    twin_staged_copy_hdr h = {dst, bytes};
    memcpy(op, &h, hb);
    memcpy(op + hb, src, bytes);
    zrt_status st = twin_enqueue(c, ts, twin_run_staged_copy, "memcpy (staged from pageable host)",
                                 op, hb + bytes);
    free(op);
    return st;
  }
  twin_copy_args m = {dst, src, bytes};
  ZRT_CHECK(twin_enqueue(c, ts, twin_run_copy, "memcpy", &m, sizeof m));
  /* CUDA: a copy to pageable host memory (or between two pageable buffers)
   * returns when it is done */
  int blocking = src_pageable || dst_pageable;
  if (!blocking || twin_cur == ts) return ZRT_OK;
  ZRT_BACKEND_COUNT(c->b, host_waits);
  return twin_wait_done(ts, twin_enq_of(ts));
}

static zrt_status twin_memset(void *ctx, void *dst, int value, size_t bytes, zrt_stream s) {
  twin_ctx *c = ctx;
  ZRT_CHECK(twin_operand(c, "memset", "dst", dst, bytes));
  twin_memset_args m = {dst, value, bytes};
  return twin_enqueue(c, twin_stream_of(c, s), twin_run_memset, "memset", &m, sizeof m);
}

/* ------------------------------------------------------------ kernels */

typedef struct {
  void *dst;
  zrt_dtype ddt;
  const void *src;
  zrt_dtype sdt;
  size_t n;
} twin_convert_args;

static zrt_status twin_run_convert(twin_ctx *c, void *a) {
  twin_convert_args m;
  memcpy(&m, a, sizeof m);
  return c->cpu.iface->convert(c->b, m.dst, m.ddt, m.src, m.sdt, m.n, NULL);
}

static zrt_status twin_convert(void *ctx, void *dst, zrt_dtype dst_dt, const void *src,
                               zrt_dtype src_dt, size_t n, zrt_stream s) {
  twin_ctx *c = ctx;
  ZRT_CHECK(twin_operand(c, "convert", "dst", dst, n * zrt_dtype_size(dst_dt)));
  ZRT_CHECK(twin_operand(c, "convert", "src", src, n * zrt_dtype_size(src_dt)));
  twin_convert_args m = {dst, dst_dt, src, src_dt, n};
  return twin_enqueue(c, twin_stream_of(c, s), twin_run_convert, "convert", &m, sizeof m);
}

typedef struct {
  float *dst;
  const void *src;
  zrt_dtype sdt;
  float alpha;
  size_t n;
} twin_acc_args;

static zrt_status twin_run_acc(twin_ctx *c, void *a) {
  twin_acc_args m;
  memcpy(&m, a, sizeof m);
  return c->cpu.iface->accumulate(c->b, m.dst, m.src, m.sdt, m.alpha, m.n, NULL);
}

static zrt_status twin_accumulate(void *ctx, float *dst, const void *src, zrt_dtype src_dt,
                                  float alpha, size_t n, zrt_stream s) {
  twin_ctx *c = ctx;
  ZRT_CHECK(twin_operand(c, "accumulate", "dst", dst, n * sizeof(float)));
  ZRT_CHECK(twin_operand(c, "accumulate", "src", src, n * zrt_dtype_size(src_dt)));
  twin_acc_args m = {dst, src, src_dt, alpha, n};
  return twin_enqueue(c, twin_stream_of(c, s), twin_run_acc, "accumulate", &m, sizeof m);
}

typedef struct {
  const void *x;
  zrt_dtype dt;
  size_t n;
  float scale;
  double *sumsq;
  int *nonfinite;
} twin_check_args;

static zrt_status twin_run_check(twin_ctx *c, void *a) {
  twin_check_args m;
  memcpy(&m, a, sizeof m);
  return c->cpu.iface->scale_check(c->b, m.x, m.dt, m.n, m.scale, m.sumsq, m.nonfinite, NULL);
}

/* Results are host values (backend.h): the host waits, as the CUDA
 * backend's copy back does. */
static zrt_status twin_scale_check(void *ctx, const void *x, zrt_dtype dt, size_t n, float scale,
                                   double *sumsq, int *nonfinite, zrt_stream s) {
  twin_ctx *c = ctx;
  ZRT_CHECK(twin_operand(c, "scale_check", "x", x, n * zrt_dtype_size(dt)));
  twin_stream *ts = twin_stream_of(c, s);
  twin_check_args m = {x, dt, n, scale, sumsq, nonfinite};
  ZRT_CHECK(twin_enqueue(c, ts, twin_run_check, "scale_check", &m, sizeof m));
  if (twin_cur == ts) return ZRT_OK;
  ZRT_BACKEND_COUNT(c->b, host_waits);
  ZRT_BACKEND_COUNT(c->b, d2h_reads);
  return twin_wait_done(ts, twin_enq_of(ts));
}

typedef struct {
  int ta, tb;
  int64_t m, n, k;
  float alpha;
  const void *a;
  int64_t lda;
  const void *bm;
  int64_t ldb;
  zrt_dtype abt;
  float beta;
  void *cm;
  int64_t ldc;
  zrt_dtype cdt;
} twin_gemm_args;

static zrt_status twin_run_gemm(twin_ctx *c, void *a) {
  twin_gemm_args g;
  memcpy(&g, a, sizeof g);
  return c->cpu.iface->gemm(c->b, g.ta, g.tb, g.m, g.n, g.k, g.alpha, g.a, g.lda, g.bm, g.ldb,
                            g.abt, g.beta, g.cm, g.ldc, g.cdt, NULL);
}

static zrt_status twin_gemm(void *ctx, int trans_a, int trans_b, int64_t m, int64_t n, int64_t k,
                            float alpha, const void *a, int64_t lda, const void *bm, int64_t ldb,
                            zrt_dtype ab_dt, float beta, void *cm, int64_t ldc, zrt_dtype c_dt,
                            zrt_stream s) {
  twin_ctx *c = ctx;
  ZRT_CHECK(twin_operand(c, "gemm", "A", a, 1));
  ZRT_CHECK(twin_operand(c, "gemm", "B", bm, 1));
  ZRT_CHECK(twin_operand(c, "gemm", "C", cm, 1));
  twin_gemm_args g = {trans_a, trans_b, m,     n,    k,  alpha, a,   lda,
                      bm,      ldb,     ab_dt, beta, cm, ldc,   c_dt};
  return twin_enqueue(c, twin_stream_of(c, s), twin_run_gemm, "gemm", &g, sizeof g);
}

typedef struct {
  zrt_optim_hparams hp;
  float *master, *s1, *s2;
  const void *grad;
  zrt_dtype gdt;
  void *p16;
  zrt_dtype pdt;
  size_t n;
} twin_optim_args;

static zrt_status twin_run_optim(twin_ctx *c, void *a) {
  twin_optim_args o;
  memcpy(&o, a, sizeof o);
  return c->cpu.iface->optim_step(c->b, &o.hp, o.master, o.s1, o.s2, o.grad, o.gdt, o.p16, o.pdt,
                                  o.n, NULL);
}

static zrt_status twin_optim(void *ctx, const zrt_optim_hparams *hp, float *master, float *s1,
                             float *s2, const void *grad, zrt_dtype gdt, void *param16,
                             zrt_dtype pdt, size_t n, zrt_stream s) {
  twin_ctx *c = ctx;
  ZRT_CHECK(twin_operand(c, "optim_step", "master", master, n * 4));
  ZRT_CHECK(twin_operand(c, "optim_step", "s1", s1, n * 4));
  ZRT_CHECK(twin_operand(c, "optim_step", "s2", s2, n * 4));
  ZRT_CHECK(twin_operand(c, "optim_step", "grad", grad, n * zrt_dtype_size(gdt)));
  ZRT_CHECK(twin_operand(c, "optim_step", "param16", param16, n * zrt_dtype_size(pdt)));
  twin_optim_args o = {*hp, master, s1, s2, grad, gdt, param16, pdt, n};
  return twin_enqueue(c, twin_stream_of(c, s), twin_run_optim, "optim_step", &o, sizeof o);
}

typedef struct {
  zrt_host_fn fn;
  size_t bytes;
  void *heap; /* the arguments' copy when they do not fit inline */
  unsigned char inl[64];
} twin_host_args;

static zrt_status twin_run_host(twin_ctx *c, void *a) {
  (void)c;
  twin_host_args h;
  memcpy(&h, a, sizeof h);
  zrt_status st = h.fn(h.heap ? h.heap : ((twin_host_args *)a)->inl);
  free(h.heap);
  return st;
}

static zrt_status twin_launch_host(void *ctx, zrt_host_fn fn, const void *args, size_t bytes,
                                   zrt_stream s) {
  twin_ctx *c = ctx;
  twin_host_args h;
  memset(&h, 0, sizeof h);
  h.fn = fn;
  h.bytes = bytes;
  if (bytes > sizeof h.inl) {
    h.heap = malloc(bytes);
    if (!h.heap) return zrt_error(ZRT_ERR_OOM, "twin: out of host memory for a host function");
    memcpy(h.heap, args, bytes);
  } else if (bytes) {
    memcpy(h.inl, args, bytes);
  }
  zrt_status st =
      twin_enqueue(c, twin_stream_of(c, s), twin_run_host, "host function", &h, sizeof h);
  if (st != ZRT_OK && twin_cur != twin_stream_of(c, s)) free(h.heap);
  return st;
}

/* ---------------------------------------------------- streams and events */

static zrt_status twin_stream_create(void *ctx, zrt_stream *out) {
  twin_ctx *c = ctx;
  twin_stream *s = NULL;
  ZRT_CHECK(twin_stream_new(c, &s));
  /* a new stream starts after the allocations queued so far */
  ZRT_CHECK(twin_order_after(c, s, c->def));
  *out = s;
  return ZRT_OK;
}

static void twin_stream_destroy(void *ctx, zrt_stream st) {
  twin_ctx *c = ctx;
  twin_stream *s = st;
  if (!s || s == c->def) return;
  pthread_mutex_lock(&c->mu);
  for (int i = 0; i < c->nstreams; i++)
    if (c->streams[i] == s) {
      c->streams[i] = c->streams[--c->nstreams];
      break;
    }
  pthread_mutex_unlock(&c->mu);
  /* CUDA: destroying a stream with queued work lets it finish */
  twin_stream_end(s);
}

static zrt_status twin_event_create(void *ctx, zrt_event *out) {
  (void)ctx;
  twin_event *e = calloc(1, sizeof *e);
  if (!e) return zrt_error(ZRT_ERR_OOM, "twin: out of host memory for an event");
  *out = e;
  return ZRT_OK;
}

static void twin_event_destroy(void *ctx, zrt_event e) {
  (void)ctx;
  free(e);
}

static zrt_status twin_event_record(void *ctx, zrt_event ev, zrt_stream s) {
  twin_ctx *c = ctx;
  twin_event *e = ev;
  twin_stream *ts = twin_stream_of(c, s);
  /* from the stream's own worker the running op counts as queued before */
  uint64_t t = twin_enq_of(ts);
  if (twin_cur == ts) {
    pthread_mutex_lock(&ts->mu);
    t = ts->done + 1;
    pthread_mutex_unlock(&ts->mu);
  }
  pthread_mutex_lock(&c->mu);
  e->s = ts;
  e->target = t;
  pthread_mutex_unlock(&c->mu);
  return ZRT_OK;
}

static void twin_event_get(twin_ctx *c, twin_event *e, twin_wait_args *w) {
  pthread_mutex_lock(&c->mu);
  w->s = e->s;
  w->target = e->target;
  pthread_mutex_unlock(&c->mu);
}

static zrt_status twin_stream_wait_event(void *ctx, zrt_stream s, zrt_event ev) {
  twin_ctx *c = ctx;
  twin_wait_args w;
  twin_event_get(c, ev, &w);
  twin_stream *ts = twin_stream_of(c, s);
  if (!w.s || w.s == ts) return ZRT_OK; /* never recorded, or FIFO already orders it */
  return twin_enqueue(c, ts, twin_run_wait, "stream wait event", &w, sizeof w);
}

static zrt_status twin_event_synchronize(void *ctx, zrt_event ev) {
  twin_ctx *c = ctx;
  twin_wait_args w;
  twin_event_get(c, ev, &w);
  if (!w.s) return ZRT_OK;
  return twin_wait_done(w.s, w.target);
}

static zrt_status twin_stream_join(void *ctx, zrt_stream s) {
  twin_ctx *c = ctx;
  twin_stream *to = twin_stream_of(c, s), *all[ZRT_TWIN_MAX_STREAMS];
  int n = twin_streams(c, all);
  for (int i = 0; i < n; i++) ZRT_CHECK(twin_order_after(c, to, all[i]));
  return ZRT_OK;
}

static zrt_status twin_synchronize(void *ctx, zrt_stream s) {
  twin_ctx *c = ctx;
  if (s) return twin_wait_done((twin_stream *)s, twin_enq_of((twin_stream *)s));
  twin_stream *all[ZRT_TWIN_MAX_STREAMS];
  int n = twin_streams(c, all);
  zrt_status st = ZRT_OK;
  for (int i = 0; i < n; i++) {
    zrt_status si = twin_wait_done(all[i], twin_enq_of(all[i]));
    if (st == ZRT_OK) st = si;
  }
  return st;
}

/* --------------------------------------------------- host registration */

static zrt_status twin_host_register(void *ctx, void *ptr, size_t bytes) {
  twin_ctx *c = ctx;
  uintptr_t lo = (uintptr_t)ptr, hi = lo + bytes;
  if (twin_is_dev(c, ptr))
    return zrt_error(ZRT_ERR_INVALID_ARG,
                     "twin host_register(%p, %zu bytes): that is device memory, not host memory",
                     ptr, bytes);
  pthread_mutex_lock(&c->mu);
  for (int i = 0; i < c->nregs; i++)
    if (lo < c->regs[i].hi && hi > c->regs[i].lo) {
      pthread_mutex_unlock(&c->mu);
      return zrt_error(ZRT_ERR_INVALID_ARG,
                       "twin host_register(%p, %zu bytes): the range overlaps one already "
                       "registered (as cudaHostRegister, registering twice is an error)",
                       ptr, bytes);
    }
  if (c->nregs == ZRT_TWIN_MAX_REGS) {
    pthread_mutex_unlock(&c->mu);
    return zrt_error(ZRT_ERR_UNSUPPORTED, "twin: more than %d registered host ranges",
                     ZRT_TWIN_MAX_REGS);
  }
  c->regs[c->nregs++] = (twin_reg){lo, hi};
  pthread_mutex_unlock(&c->mu);
  return ZRT_OK;
}

static void twin_host_unregister(void *ctx, void *ptr) {
  twin_ctx *c = ctx;
  pthread_mutex_lock(&c->mu);
  int found = 0;
  for (int i = 0; i < c->nregs; i++)
    if (c->regs[i].lo == (uintptr_t)ptr) {
      c->regs[i] = c->regs[--c->nregs];
      found = 1;
      break;
    }
  pthread_mutex_unlock(&c->mu);
  if (!found) zrt_log(ZRT_LOG_WARN, "twin host_unregister(%p): not registered", ptr);
}

/* ------------------------------------------------------------ lifecycle */

static void twin_destroy(void *ctx) {
  twin_ctx *c = ctx;
  if (!c) return;
  for (int i = c->nstreams - 1; i >= 0; i--) twin_stream_end(c->streams[i]);
  twin_ctx *me = c;
  atomic_compare_exchange_strong(&twin_global, &me, NULL);
  if (c->base) munmap(c->base, c->size);
  if (c->pkey >= 0) pkey_free(c->pkey);
  while (c->free_list) {
    twin_block *n = c->free_list->next;
    free(c->free_list);
    c->free_list = n;
  }
  pthread_mutex_destroy(&c->mu);
  free(c);
}

static const zrt_backend_iface zrt_twin_iface = {
    .name = "twin",
    .alloc = twin_alloc,
    .free = twin_free,
    .memcpy = twin_memcpy,
    .memset = twin_memset,
    .convert = twin_convert,
    .accumulate = twin_accumulate,
    .scale_check = twin_scale_check,
    .gemm = twin_gemm,
    .optim_step = twin_optim,
    .stream_create = twin_stream_create,
    .stream_destroy = twin_stream_destroy,
    .event_create = twin_event_create,
    .event_destroy = twin_event_destroy,
    .event_record = twin_event_record,
    .stream_wait_event = twin_stream_wait_event,
    .synchronize = twin_synchronize,
    .stream_join = twin_stream_join,
    .event_synchronize = twin_event_synchronize,
    .host_register = twin_host_register,
    .host_unregister = twin_host_unregister,
    .launch_host = twin_launch_host,
    .destroy = twin_destroy,
};

int zrt_backend_twin_pku(void) {
  int key = pkey_alloc(0, 0);
  if (key < 0) return 0;
  pkey_free(key);
  return 1;
}

/* ZRT_TWIN_JITTER: unset or "" = off; a decimal seed turns it on. */
static zrt_status twin_jitter_env(twin_ctx *c) {
  const char *v = getenv("ZRT_TWIN_JITTER");
  if (!v || !*v) return ZRT_OK;
  char *end = NULL;
  errno = 0;
  unsigned long long seed = strtoull(v, &end, 10);
  if (errno || !end || *end || *v == '-')
    return zrt_error(ZRT_ERR_CONFIG,
                     "ZRT_TWIN_JITTER=\"%s\": expected a decimal seed (e.g. ZRT_TWIN_JITTER=1) "
                     "or unset for no jitter",
                     v);
  c->jitter = 1;
  c->jitter_seed = (uint64_t)seed * 0xD1B54A32D192ED03ull + 1;
  return ZRT_OK;
}

zrt_status zrt_backend_twin_init(zrt_backend *b, size_t device_memory_limit) {
  if (!b) return zrt_error(ZRT_ERR_INVALID_ARG, "zrt_backend_twin_init: b is NULL");
  zrt_status st = ZRT_OK;
  twin_ctx *c = calloc(1, sizeof *c);
  if (!c) return zrt_error(ZRT_ERR_OOM, "twin: out of host memory");
  c->b = b;
  c->pkey = -1;
  pthread_mutex_init(&c->mu, NULL);
  ZRT_CHECK_GOTO(zrt_backend_cpu_init(&c->cpu), st, fail);
  ZRT_CHECK_GOTO(twin_jitter_env(c), st, fail);
  long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
  size_t phys = pages > 0 && psz > 0 ? (size_t)pages * (size_t)psz : (size_t)1 << 34;
  c->size = ZRT_ALIGN_UP(device_memory_limit ? device_memory_limit + ((size_t)64 << 20) : phys,
                         (size_t)1 << 21);
  void *m = mmap(NULL, c->size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                 -1, 0);
  if (m == MAP_FAILED) {
    char sz[32];
    st = zrt_error(ZRT_ERR_OOM, "twin: mmap of the device mapping (%s): %s",
                   zrt_format_size(c->size, sz, sizeof sz), strerror(errno));
    goto fail;
  }
  c->base = m;
  c->free_list = malloc(sizeof *c->free_list);
  if (!c->free_list) {
    st = zrt_error(ZRT_ERR_OOM, "twin: out of host memory");
    goto fail;
  }
  *c->free_list = (twin_block){0, c->size, NULL};

  /* PKU: the key starts disabled for this thread (and every thread that
   * never enables it); workers enable it for themselves. */
  int key = pkey_alloc(0, PKEY_DISABLE_ACCESS);
  twin_ctx *none = NULL;
  if (key >= 0 && atomic_compare_exchange_strong(&twin_global, &none, c)) {
    if (pkey_mprotect(c->base, c->size, PROT_READ | PROT_WRITE, key) != 0) {
      zrt_log_once("twin.pku", ZRT_LOG_WARN,
                   "twin: pkey_mprotect failed (%s); host touches of device memory are not "
                   "caught, only pointer kinds at op boundaries",
                   strerror(errno));
      pkey_free(key);
      atomic_store(&twin_global, NULL);
    } else {
      c->pkey = key;
      struct sigaction sa;
      memset(&sa, 0, sizeof sa);
      sa.sa_sigaction = twin_segv;
      sa.sa_flags = SA_SIGINFO;
      sigemptyset(&sa.sa_mask);
      sigaction(SIGSEGV, &sa, &twin_old_segv);
      zrt_backend_cpu_blas_threads(1);
    }
  } else {
    if (key >= 0) pkey_free(key);
    zrt_log_once("twin.pku", ZRT_LOG_INFO,
                 "twin: %s; host touches of device memory are not caught here, only pointer "
                 "kinds at op boundaries (kernel operands)",
                 key >= 0 ? "another twin in this process holds the protection key"
                          : "this CPU or kernel has no protection keys (PKU)");
  }
  ZRT_CHECK_GOTO(twin_stream_new(c, &c->def), st, fail);
  {
    char sz[32];
    snprintf(b->description, sizeof b->description,
             "GPU twin on the host CPU (%s device mapping, %s%s)",
             zrt_format_size(c->size, sz, sizeof sz),
             c->pkey >= 0 ? "PKU-guarded" : "pointer-kind checks", c->jitter ? ", jitter" : "");
  }
  b->device_id = 0;
  b->numa_node = -1;
  b->device_capacity = 0;
  b->ctx = c;
  b->iface = &zrt_twin_iface;
  return ZRT_OK;
fail:
  twin_destroy(c);
  return st;
}
