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
 * stream. ZRT_TWIN_SIDE_DELAY_US=N sleeps N us before each op of every
 * stream but the default one (a slow copy engine or comm stream: work the
 * compute stream reads only because a side stream's op is quick, not
 * because an event orders it, then reads stale data); on the timing
 * events' timeline the sleep is part of the op (a slow op), the jitter not.
 * ZRT_TWIN_SLOW_OP=LABEL:US does the same for the ops whose label contains
 * LABEL, on any stream (one slow kind of work: an update that must finish
 * before a write-back on another stream reads its output).
 * ZRT_TWIN_JITTER=SEED sleeps a seeded random 0-200 us before each
 * op, so an ordering that holds only because one thread happened to be
 * faster fails. An op that fails makes its stream's error sticky: later
 * ops on that stream are skipped and the next host call that touches the
 * stream (enqueue, synchronize, event_synchronize) returns the error.
 * Timing events (cudaEventElapsedTime): every stream keeps the finish times
 * of its last ZRT_TWIN_STAMPS ops on a GPU-like timeline: an op starts when
 * it is queued and its stream's previous op has finished, and takes the time
 * its kernel ran (a worker's wake-up and the jitter sleep are not the
 * device's time); a wait op takes no time unless its producer finished
 * later, and then finishes when the producer did. An event's time is its
 * record's when the stream had already reached it, else the finish time of
 * the op it waits for: a time between two events is stream time, and a
 * wait's span is exactly how long its stream stalled on the other.
 *
 * Memory (backend_twin_mem.c owns the mapping, its guard and the carving):
 * new blocks are filled with 0xFF bytes on the default stream (NaN in every
 * float type: cudaMalloc's memory is not zero) and the other streams are
 * ordered after that, as the CUDA backend's stream-ordered allocation is. A
 * free joins every stream into the default stream and returns the block
 * there, so a block is reused only after all work queued before the free (a
 * free from inside an op — a GEMM workspace — returns at once: only that op
 * used it); free_on (zrt_backend_free_on) returns it on one stream only, for
 * blocks whose users that stream is ordered after. Vtable ops translate their device operands to
 * the workers' view (zrt_twin_dev) when they run, and a workspace allocated inside one is handed
 * out in that view; a launched host function runs with the program's view open
 * (zrt_twin_guard_open), since it holds the program's pointers. Every op checks its operands' kinds
 * when it is queued: a kernel may read only device memory or host memory registered with the
 * backend (copies, like cudaMemcpyDefault, take their direction from the pointers).
 *
 * Copies follow CUDA: to pageable host memory the host waits for the copy
 * (a host wait); from pageable host memory to the device the source is
 * captured at once and the device write is queued (CUDA returns once the
 * bytes are staged, the DMA may still be in flight), so only work ordered
 * after it on its stream may read it; to or from memory registered with
 * host_register (the pinned host pool) it is asynchronous, and a copy on
 * registered memory that runs after its range was unregistered (the pool
 * freed under a copy in flight) dies with a message. scale_check returns host
 * values, so it is a host wait and a device-to-host read.
 *
 * Copy guard (ZRT_TWIN_COPY_GUARD, on unless 0): a queued copy on registered
 * host memory is armed when no op ordered before it that may write its
 * source, or read or write its destination, is unfinished (at once, or when
 * the last such op ends, before its stream counts it done). Ordered before:
 * by vector clocks, each stream's (TWIN_VC slots) merged at every stream
 * wait and event wait, so an op on a stream the copy waited for counts and
 * one on a stream it did not does not hold it back (it may run during the
 * copy on a GPU too; a rewrite of the source by it is a race the hash
 * check reports). Then its
 * source's hash is taken and its destination, outside the source's bytes,
 * filled with 0xFF. When it runs, a source that hashes otherwise was
 * rewritten by the host while the copy was in flight: the process dies with
 * a message (on a GPU the copy would send the rewrite, silently); a host
 * read of the destination before the copy ran sees NaN, not stale values.
 * What an op may touch there (its footprint, kept in queueing order): a
 * copy its registered range(s); a kernel with a registered operand, and an
 * enqueue_host function (host-side work), any registered memory; a
 * launch_host function (the program's compute, a comm, the statistics: a
 * kernel's work) may read any of it but writes none. A copy run in place
 * (issued by its own stream's op) is part of that op, and unguarded; one
 * that starts before it was armed (possible only behind an op of a stream
 * past the clock slots) is not checked.
 *
 * Op trace (ZRT_TWIN_TRACE=DIR, off by default): each worker records every
 * op it runs from its queue (label, start, end; ops run in place inside a
 * host function belong to that function's interval) in its own stream's
 * array, and the backend's destroy writes one line per op,
 * "<stream> <start_s> <end_s> <label>" (zrt_now_s), to
 * DIR/twin_trace.<pid>.txt after every worker ended (perf/twin_overlap.py
 * reads it).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <omp.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "backend_twin.h"
#include "dtype.h"
#include "env.h"

/* Upper bound of the random delay before each op with ZRT_TWIN_JITTER. */
#define ZRT_TWIN_JITTER_MAX_US 200
/* Finish times kept per stream (a ring): a timed event's time is read back
 * while its op is among the stream's last ZRT_TWIN_STAMPS finished. */
#define ZRT_TWIN_STAMPS 4096

typedef zrt_status (*twin_run_fn)(twin_ctx *c, void *args);

/* Copy guard: the rules a guarded copy's footprint carries. SRC: it reads
 * registered host memory, whose bytes must not change until it runs; DST: it
 * writes registered host memory, poisoned until it runs. */
#define TWIN_GUARD_SRC 1
#define TWIN_GUARD_DST 2
/* A guarded copy's state. */
enum { TWIN_GUARD_WAITING = 0, TWIN_GUARD_ARMED, TWIN_GUARD_RUN };
/* Streams with a vector clock (the first TWIN_VC a backend creates): which
 * ops are ordered before a guarded copy. A stream past them has none, and
 * its ops count as ordered with every other op (the guard's conservative
 * side: a copy waits for them before it is armed). */
#define TWIN_VC 32

/* A queued op's footprint on registered host memory (ZRT_TWIN_COPY_GUARD):
 * what it may read and write there while it is queued or running, so that a
 * guarded copy is armed only once no op queued before it that may write its
 * source, or touch its destination, is still unfinished. */
struct twin_fp {
  twin_fp *prev, *next;   /* c->fps, in queueing order */
  twin_fp *gprev, *gnext; /* c->guards (waiting guarded copies) */
  uint64_t seq;           /* queueing order; 0 = not a footprint */
  const char *what;       /* the op's label */
  int stream;             /* its stream's index */
  int any_r, any_w;       /* may read / write any registered memory (host functions) */
  uintptr_t rlo, rhi;     /* the registered bytes a copy reads (empty: rlo == rhi) */
  uintptr_t wlo, whi;     /* ... and writes */
  int guard;              /* TWIN_GUARD_SRC | TWIN_GUARD_DST; 0 = not a guarded copy */
  int state;              /* TWIN_GUARD_* */
  size_t nconf;           /* unfinished ops ordered before it that keep it from being armed */
  uint64_t hash;          /* the source's bytes when armed */
  int slot;               /* its stream's clock slot (-1: none) */
  uint64_t qn;            /* its place on its stream (1-based) */
  uint64_t vc[TWIN_VC];   /* a guarded copy: how many of each slot's ops are ordered before it */
};

typedef struct twin_op {
  struct twin_op *next;
  twin_run_fn run;
  const char *what;
  double t_enq;                      /* when it was queued (the timeline's earliest start) */
  twin_fp fp;                        /* fp.seq != 0: linked into the copy guard's lists */
  _Alignas(16) unsigned char args[]; /* the arguments, copied at enqueue */
} twin_op;

typedef struct twin_trace_rec {
  const char *what;
  double t0, t1;
} twin_trace_rec;

struct twin_stream {
  twin_ctx *c;
  int index;
  twin_trace_rec *trace; /* ZRT_TWIN_TRACE: this worker's ops (only it writes them) */
  size_t ntrace, cap_trace;
  pthread_t thr;
  pthread_mutex_t mu;
  pthread_cond_t work, progress;
  twin_op *head, *tail;
  uint64_t enq, done;             /* ops queued / finished (done <= enq) */
  double done_t[ZRT_TWIN_STAMPS]; /* finish time of op k (1-based) at (k - 1) % ZRT_TWIN_STAMPS */
  int stop;
  _Atomic int in_host_fn; /* a launched host function runs now (its OpenMP team) */
  zrt_status err;         /* sticky: first failure */
  char errmsg[512];
  uint64_t rng;             /* jitter */
  struct twin_stream *dead; /* destroyed streams, kept until the backend goes */
  /* the copy guard's vector clock (under mu): vc[j] = how many ops of slot
   * j's stream are ordered before this stream's next op (through waits and
   * events); vc[slot] is unused (the stream's own order is enq) */
  int slot;
  uint64_t vc[TWIN_VC];
};

typedef struct twin_event {
  twin_stream *s; /* last record's stream; NULL = never recorded */
  uint64_t target;
  int at_record;        /* the stream had reached target when recorded: the time is t */
  double t;             /* at_record: the record's time (zrt_now_s) */
  uint64_t vc[TWIN_VC]; /* the ops the record is ordered after (the stream's clock, target) */
} twin_event;

/* The stream whose worker runs on this thread (NULL on host threads). */
static _Thread_local twin_stream *twin_cur;
/* 1 while this thread runs a vtable op (not a launched host function): an
 * allocation made there is that op's workspace, in the workers' view. */
static _Thread_local int twin_in_kernel;
/* Set by a wait op: its producer's finish on the timeline (-1: not a wait). */
static _Thread_local double twin_wait_vt = -1;
/* The footprint of the queued op this worker runs now (NULL: none, or an op
 * run in place, which belongs to the running op's footprint). */
static _Thread_local twin_fp *twin_run_fp;

/* Runs one op on the calling worker. */
static zrt_status twin_call(twin_ctx *c, twin_run_fn run, void *args) {
  int k = twin_in_kernel;
  twin_in_kernel = 1;
  zrt_status st = run(c, args);
  twin_in_kernel = k;
  return st;
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

static void twin_trace_add(twin_stream *s, const char *what, double t0, double t1) {
  if (s->ntrace == s->cap_trace) {
    size_t nc = s->cap_trace ? 2 * s->cap_trace : 4096;
    twin_trace_rec *n = realloc(s->trace, nc * sizeof *n);
    if (!n) return; /* the trace is a measurement: it stops growing, the run goes on */
    s->trace = n;
    s->cap_trace = nc;
  }
  s->trace[s->ntrace++] = (twin_trace_rec){what, t0, t1};
}

/* Writes every stream's records (after the workers ended). */
static void twin_trace_write(twin_ctx *c) {
  if (!c->trace_dir[0]) return;
  char path[640];
  snprintf(path, sizeof path, "%s/twin_trace.%ld.txt", c->trace_dir, (long)getpid());
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
  if (!f) {
    if (fd >= 0) close(fd);
    zrt_log(ZRT_LOG_WARN, "twin: cannot write the op trace %s: %s", path, strerror(errno));
    return;
  }
  for (int i = 0; i < c->nstreams; i++) {
    twin_stream *s = c->streams[i];
    for (size_t k = 0; k < s->ntrace; k++)
      fprintf(f, "%d %.9f %.9f %s\n", s->index, s->trace[k].t0, s->trace[k].t1, s->trace[k].what);
  }
  for (twin_stream *s = c->dead; s; s = s->dead)
    for (size_t k = 0; k < s->ntrace; k++)
      fprintf(f, "%d %.9f %.9f %s\n", s->index, s->trace[k].t0, s->trace[k].t1, s->trace[k].what);
  if (fclose(f) != 0) zrt_log(ZRT_LOG_WARN, "twin: writing the op trace %s failed", path);
}

/* ---------------------------------------------------------- copy guard */

/* 64-bit FNV-1a over 8-byte words in four lanes, the tail bytewise, the
 * lanes folded the same way: each step (h ^ w) * prime is a bijection of h,
 * so one changed word always changes the hash. Memory speed: a test backend
 * can afford it twice per guarded copy. */
static uint64_t twin_hash(const void *p, size_t n) {
  const uint64_t prime = 0x100000001b3ull;
  uint64_t h[4] = {0xcbf29ce484222325ull, 0x84222325cbf29ce4ull, 0x9e3779b97f4a7c15ull,
                   0xd1b54a32d192ed03ull};
  const unsigned char *b = p;
  size_t i = 0;
  for (; i + 32 <= n; i += 32)
    for (int k = 0; k < 4; k++) {
      uint64_t w;
      memcpy(&w, b + i + 8 * k, sizeof w);
      h[k] = (h[k] ^ w) * prime;
    }
  for (; i < n; i++) h[0] = (h[0] ^ b[i]) * prime;
  uint64_t r = (uint64_t)n;
  for (int k = 0; k < 4; k++) {
    r = (r ^ h[k]) * prime;
    r ^= r >> 31;
  }
  return r;
}

static int twin_overlap(uintptr_t alo, uintptr_t ahi, uintptr_t blo, uintptr_t bhi) {
  return alo < ahi && blo < bhi && alo < bhi && blo < ahi;
}

/* 1 when e, queued before the guarded copy g and unfinished, keeps g from
 * being armed: e may write g's source, or touch g's destination (which the
 * poison would change under it). */
static int twin_fp_conflicts(const twin_fp *e, const twin_fp *g) {
  if ((g->guard & TWIN_GUARD_SRC) && (e->any_w || twin_overlap(e->wlo, e->whi, g->rlo, g->rhi)))
    return 1;
  if ((g->guard & TWIN_GUARD_DST) &&
      (e->any_r || e->any_w || twin_overlap(e->rlo, e->rhi, g->wlo, g->whi) ||
       twin_overlap(e->wlo, e->whi, g->wlo, g->whi)))
    return 1;
  return 0;
}

/* 1 when e is ordered before the guarded copy g (on g's stream before it,
 * or before a wait or event record that g's stream waited on): only such an
 * op keeps g from being armed. One that is not ordered before g may run
 * during g on a GPU too: if it rewrites g's source, g's hash check reports
 * the race. Without a clock (a stream past TWIN_VC), ordered. */
static int twin_fp_before(const twin_fp *e, const twin_fp *g) {
  if (e->slot < 0 || g->slot < 0) return 1;
  return g->vc[e->slot] >= e->qn;
}

/* dst = max(dst, src), slot by slot. */
static void twin_vc_max(uint64_t *dst, const uint64_t *src) {
  for (int j = 0; j < TWIN_VC; j++)
    if (src[j] > dst[j]) dst[j] = src[j];
}

/* s's clock with its own slot at `own` ops (caller holds s->mu). */
static void twin_vc_at(const twin_stream *s, uint64_t own, uint64_t *out) {
  memcpy(out, s->vc, sizeof s->vc);
  if (s->slot >= 0) out[s->slot] = own;
}

static void twin_poison(uintptr_t lo, uintptr_t hi) {
  if (lo < hi) memset((void *)lo, 0xFF, hi - lo);
}

/* Arms g (caller holds fp_mu; no op queued before g may still change its
 * source or use its destination): the source's hash, the destination's
 * poison (0xFF: NaN in every float type) outside the source's bytes. A range
 * unregistered meanwhile is left alone: the copy's run dies with the
 * registration's message. */
static void twin_guard_arm(twin_ctx *c, twin_fp *g) {
  g->state = TWIN_GUARD_ARMED;
  if (g->guard & TWIN_GUARD_SRC) {
    if (zrt_twin_is_reg(c, (const void *)g->rlo, g->rhi - g->rlo))
      g->hash = twin_hash((const void *)g->rlo, g->rhi - g->rlo);
    else
      g->guard &= ~TWIN_GUARD_SRC;
  }
  if (g->guard & TWIN_GUARD_DST) {
    if (!zrt_twin_is_reg(c, (const void *)g->wlo, g->whi - g->wlo)) {
      g->guard &= ~TWIN_GUARD_DST;
    } else if (!twin_overlap(g->wlo, g->whi, g->rlo, g->rhi)) {
      twin_poison(g->wlo, g->whi);
    } else { /* a host-to-host copy onto its own source: the bytes around the source */
      twin_poison(g->wlo, g->rlo);
      twin_poison(g->rhi, g->whi);
    }
  }
}

/* A footprint joins the queue as stream s's next op (caller holds s->mu, so
 * the queueing order of a stream's ops is their seq order): a guarded copy
 * is armed now when nothing unfinished and ordered before it conflicts, else
 * when the last of those ends. */
static void twin_fp_add(twin_ctx *c, twin_stream *s, twin_fp *f) {
  f->slot = s->slot;
  f->qn = s->enq + 1;
  if (f->guard) twin_vc_at(s, f->qn, f->vc);
  pthread_mutex_lock(&c->fp_mu);
  f->seq = ++c->fp_seq;
  f->nconf = 0;
  if (f->guard)
    for (twin_fp *e = c->fps; e; e = e->next)
      f->nconf += (size_t)(twin_fp_conflicts(e, f) && twin_fp_before(e, f));
  f->prev = c->fps_tail;
  f->next = NULL;
  if (c->fps_tail)
    c->fps_tail->next = f;
  else
    c->fps = f;
  c->fps_tail = f;
  if (f->guard) {
    f->state = TWIN_GUARD_WAITING;
    if (!f->nconf) {
      twin_guard_arm(c, f);
    } else {
      f->gprev = NULL;
      f->gnext = c->guards;
      if (c->guards) c->guards->gprev = f;
      c->guards = f;
    }
  }
  pthread_mutex_unlock(&c->fp_mu);
}

static void twin_guard_unlink(twin_ctx *c, twin_fp *g) {
  /* caller holds fp_mu; g is waiting */
  if (g->gprev)
    g->gprev->gnext = g->gnext;
  else
    c->guards = g->gnext;
  if (g->gnext) g->gnext->gprev = g->gprev;
}

/* An op with a footprint ended (ran, failed or was skipped): it leaves the
 * queue, and the guarded copies ordered after it that waited only for it are
 * armed (before its stream counts it done, so a copy ordered after it is
 * armed before it can start). */
static void twin_fp_done(twin_ctx *c, twin_fp *f) {
  pthread_mutex_lock(&c->fp_mu);
  if (f->prev)
    f->prev->next = f->next;
  else
    c->fps = f->next;
  if (f->next)
    f->next->prev = f->prev;
  else
    c->fps_tail = f->prev;
  if (f->guard && f->state == TWIN_GUARD_WAITING) twin_guard_unlink(c, f);
  for (twin_fp *g = c->guards, *n; g; g = n) {
    n = g->gnext;
    if (g->seq > f->seq && twin_fp_conflicts(f, g) && twin_fp_before(f, g) && --g->nconf == 0) {
      twin_guard_unlink(c, g);
      twin_guard_arm(c, g);
    }
  }
  pthread_mutex_unlock(&c->fp_mu);
}

/* Rule (a) fired: the source of an armed copy changed before the copy ran.
 * On a GPU the copy would send the new bytes (or a mix), silently: the
 * program's bug, and a sticky error would surface far from it, if at all
 * (a wrong number is no error), so die here, as twin_copy_unregistered. */
static void twin_copy_rewritten(const twin_fp *g) {
  char msg[1024];
  int n = snprintf(
      msg, sizeof msg,
      "zrt twin: a queued copy (op \"%s\" on twin stream %d) reads %zu bytes of registered host "
      "memory at %p, and those bytes changed after the copy was queued and before it ran: the "
      "host rewrote the copy's source while the copy was in flight (on a GPU the copy sends the "
      "rewrite, or a mix, silently). Rewrite a buffer an asynchronous copy reads only after a "
      "host wait that covers the copy: synchronize the copy's stream (zrt_engine_synchronize), "
      "or wait for an event recorded after it (zrt.h, the contract of zrt_engine_host_alloc); "
      "ZRT_TWIN_COPY_GUARD=0 turns this check off\n",
      g->what, g->stream, (size_t)(g->rhi - g->rlo), (void *)g->rlo);
  if (n > 0) {
    ssize_t w = write(2, msg, (size_t)(n < (int)sizeof msg ? n : (int)sizeof msg - 1));
    (void)w;
  }
  abort();
}

/* A guarded copy starts (on its worker, after any delay): an armed source
 * must hash as it did when armed. A copy that starts before it was armed
 * (behind an op of a stream without a clock slot) is not checked. */
static void twin_guard_run(twin_ctx *c, twin_fp *g) {
  pthread_mutex_lock(&c->fp_mu);
  int check = g->state == TWIN_GUARD_ARMED && (g->guard & TWIN_GUARD_SRC);
  atomic_fetch_add(g->state == TWIN_GUARD_ARMED ? &c->guard_armed : &c->guard_unarmed, 1);
  if (g->state == TWIN_GUARD_WAITING) twin_guard_unlink(c, g);
  g->state = TWIN_GUARD_RUN;
  pthread_mutex_unlock(&c->fp_mu);
  if (check && twin_hash((const void *)g->rlo, g->rhi - g->rlo) != g->hash) twin_copy_rewritten(g);
}

/* A kernel's footprint: any registered operand (the operand checks passed,
 * so an operand that is not device memory is registered) makes it a reader
 * and writer of registered memory; NULL when it touches device memory only. */
static const twin_fp *twin_kernel_fp(twin_ctx *c, twin_fp *fp, const void *const *p, int n) {
  if (!c->copy_guard) return NULL;
  for (int i = 0; i < n; i++)
    if (p[i] && !zrt_twin_is_dev(c, p[i])) {
      memset(fp, 0, sizeof *fp);
      fp->any_r = fp->any_w = 1;
      return fp;
    }
  return NULL;
}

static void *twin_worker(void *arg) {
  twin_stream *s = arg;
  twin_ctx *c = s->c;
  twin_cur = s;
  char name[16];
  snprintf(name, sizeof name, "zrt-twin-s%d", s->index);
  pthread_setname_np(pthread_self(), name);
  zrt_twin_mem_worker_start(c);
  pthread_mutex_lock(&s->mu);
  for (;;) {
    while (!s->head && !s->stop) pthread_cond_wait(&s->work, &s->mu);
    if (!s->head) break;
    twin_op *op = s->head;
    int skip = s->err != ZRT_OK;
    pthread_mutex_unlock(&s->mu);
    zrt_status st = ZRT_OK;
    double ta = 0, tb = 0;
    twin_wait_vt = -1;
    if (!skip) {
      if (c->jitter) twin_jitter(s);
      ta = zrt_now_s();
      long us = c->side_delay_us && s != c->def ? c->side_delay_us : 0;
      if (c->slow_op_us && strstr(op->what, c->slow_op)) us += c->slow_op_us;
      if (us) { /* a slow engine or kernel: its time counts */
        struct timespec ts = {us / 1000000, us % 1000000 * 1000L};
        nanosleep(&ts, NULL);
      }
      twin_run_fp = op->fp.seq ? &op->fp : NULL;
      st = twin_call(c, op->run, op->args);
      twin_run_fp = NULL;
      tb = zrt_now_s();
      if (c->trace_dir[0]) twin_trace_add(s, op->what, ta, tb);
    }
    if (op->fp.seq) twin_fp_done(c, &op->fp);
    pthread_mutex_lock(&s->mu);
    if (st != ZRT_OK && s->err == ZRT_OK) {
      s->err = st;
      snprintf(s->errmsg, sizeof s->errmsg, "%s: %s", op->what, zrt_last_error());
    }
    s->head = op->next;
    if (!s->head) s->tail = NULL;
    {
      double prev = s->done ? s->done_t[(s->done - 1) % ZRT_TWIN_STAMPS] : 0;
      double v0 = prev > op->t_enq ? prev : op->t_enq;
      s->done_t[s->done % ZRT_TWIN_STAMPS] =
          twin_wait_vt < 0 ? v0 + (tb - ta) : (twin_wait_vt > v0 ? twin_wait_vt : v0);
    }
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
 * (an op or a host function issuing work on its own stream). fp: the op's
 * footprint on registered host memory (copy guard on), or NULL. after: a
 * clock s's ops from this one on are ordered after (a wait's), or NULL. An
 * op queued from another stream's worker (a host function issuing work) is
 * taken as ordered after the op that runs there, whole (the conservative
 * side: nothing on a GPU issues work that way). */
static zrt_status twin_enqueue_vc(twin_ctx *c, twin_stream *s, twin_run_fn run, const char *what,
                                  const void *args, size_t bytes, const twin_fp *fp,
                                  const uint64_t *after) {
  uint64_t issuer[TWIN_VC];
  twin_stream *from = twin_cur;
  if (from && from != s) {
    pthread_mutex_lock(&from->mu);
    twin_vc_at(from, from->done + 1, issuer);
    pthread_mutex_unlock(&from->mu);
  }
  /* From s's own worker, or from the OpenMP team of a host function s is
   * running (a team thread has no twin_cur: OpenMP's pool threads are not
   * the worker), the op runs in place, as the function's own work. A host
   * thread inside its own parallel region while s runs a host function
   * would be taken for that team: programs issue ops from one thread. */
  if (twin_cur == s || (!twin_cur && atomic_load(&s->in_host_fn) && omp_in_parallel())) {
    if (after) {
      pthread_mutex_lock(&s->mu);
      twin_vc_max(s->vc, after);
      pthread_mutex_unlock(&s->mu);
    }
    unsigned char copy[bytes ? bytes : 1];
    memcpy(copy, args, bytes);
    twin_stream *was = twin_cur;
    double vt = twin_wait_vt;  /* an in-place wait is part of the running op */
    twin_fp *rf = twin_run_fp; /* and so are its reads and writes: no guard */
    twin_cur = s;
    twin_run_fp = NULL;
    zrt_status st = twin_call(c, run, copy);
    twin_cur = was;
    twin_wait_vt = vt;
    twin_run_fp = rf;
    return st;
  }
  twin_op *op = malloc(sizeof *op + bytes);
  if (!op) return zrt_error(ZRT_ERR_OOM, "twin: out of host memory queueing %s", what);
  op->next = NULL;
  op->run = run;
  op->what = what;
  op->t_enq = zrt_now_s();
  memset(&op->fp, 0, sizeof op->fp);
  memcpy(op->args, args, bytes);
  pthread_mutex_lock(&s->mu);
  zrt_status st = twin_sticky(s);
  if (st != ZRT_OK) {
    pthread_mutex_unlock(&s->mu);
    free(op);
    return st;
  }
  if (after) twin_vc_max(s->vc, after);
  if (from && from != s) twin_vc_max(s->vc, issuer);
  if (fp) { /* before the worker can see the op: a guarded copy is armed first */
    op->fp = *fp;
    op->fp.what = what;
    op->fp.stream = s->index;
    twin_fp_add(c, s, &op->fp);
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

static zrt_status twin_enqueue_fp(twin_ctx *c, twin_stream *s, twin_run_fn run, const char *what,
                                  const void *args, size_t bytes, const twin_fp *fp) {
  return twin_enqueue_vc(c, s, run, what, args, bytes, fp, NULL);
}

static zrt_status twin_enqueue(twin_ctx *c, twin_stream *s, twin_run_fn run, const char *what,
                               const void *args, size_t bytes) {
  return twin_enqueue_vc(c, s, run, what, args, bytes, NULL, NULL);
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
  /* the timeline: this op ends when its producer did (long ago: at once) */
  twin_wait_vt = w.target > 0 && w.s->done - w.target < ZRT_TWIN_STAMPS
                     ? w.s->done_t[(w.target - 1) % ZRT_TWIN_STAMPS]
                     : 0;
  pthread_mutex_unlock(&w.s->mu);
  return st;
}

/* Queues on `to` a wait for everything queued so far on `from`. */
static zrt_status twin_order_after(twin_ctx *c, twin_stream *to, twin_stream *from) {
  if (to == from) return ZRT_OK;
  uint64_t vc[TWIN_VC];
  pthread_mutex_lock(&from->mu);
  twin_wait_args w = {from, from->enq};
  twin_vc_at(from, w.target, vc);
  pthread_mutex_unlock(&from->mu);
  if (w.target == 0) return ZRT_OK;
  return twin_enqueue_vc(c, to, twin_run_wait, "stream wait", &w, sizeof w, NULL, vc);
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
  s->slot = c->vc_slots < TWIN_VC ? c->vc_slots++ : -1;
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

/* Stops s once its queued work is done (CUDA: destroying a stream with
 * queued work lets it finish) and joins its worker. Its memory stays: a wait
 * queued on another stream, or an event recorded on s, still reads its
 * progress (both satisfied for good now), so twin_stream_free runs only when
 * the backend goes and every worker has ended. */
static void twin_stream_stop(twin_stream *s) {
  pthread_mutex_lock(&s->mu);
  s->stop = 1;
  pthread_cond_signal(&s->work);
  pthread_mutex_unlock(&s->mu);
  pthread_join(s->thr, NULL);
}

static void twin_stream_free(twin_stream *s) {
  free(s->trace);
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

typedef struct {
  void *dst;
  int value;
  size_t bytes;
} twin_memset_args;

static zrt_status twin_run_memset(twin_ctx *c, void *a) {
  twin_memset_args m;
  memcpy(&m, a, sizeof m);
  return c->cpu.iface->memset(c->b, zrt_twin_dev(c, m.dst), m.value, m.bytes, NULL);
}

static zrt_status twin_alloc(void *ctx, size_t bytes, void **out) {
  twin_ctx *c = ctx;
  *out = NULL;
  ZRT_CHECK(zrt_twin_carve(c, bytes, out));
  if (twin_cur) {
    /* an op's workspace: only that op uses it; a kernel's in its own view */
    if (twin_in_kernel) *out = zrt_twin_dev(c, *out);
    return ZRT_OK;
  }
  /* Stream-ordered, as the CUDA backend's: poisoned on the default stream,
   * every other stream ordered after it. */
  twin_memset_args m = {*out, 0xFF, bytes};
  zrt_status st = twin_enqueue(c, c->def, twin_run_memset, "fill a new allocation", &m, sizeof m);
  twin_stream *all[ZRT_TWIN_MAX_STREAMS];
  int n = twin_streams(c, all);
  for (int i = 0; i < n && st == ZRT_OK; i++) st = twin_order_after(c, all[i], c->def);
  if (st != ZRT_OK) {
    (void)zrt_twin_give_back(c, zrt_twin_off(c, *out), bytes);
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
  return zrt_twin_give_back(c, f.off, f.bytes);
}

static void twin_free(void *ctx, void *ptr, size_t bytes) {
  twin_ctx *c = ctx;
  twin_free_args f = {zrt_twin_off(c, ptr), bytes};
  if (twin_cur) {
    (void)zrt_twin_give_back(c, f.off, f.bytes);
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

/* The block goes back after the work queued on s so far, other streams
 * not waited for (the caller vouches that s is ordered after every use):
 * carving it again happens only after that op ran, so a new owner's work,
 * on any stream, comes after every use of the old one. */
static void twin_free_on(void *ctx, void *ptr, size_t bytes, zrt_stream s) {
  twin_ctx *c = ctx;
  twin_free_args f = {zrt_twin_off(c, ptr), bytes};
  if (twin_cur) {
    (void)zrt_twin_give_back(c, f.off, f.bytes);
    return;
  }
  zrt_status st = twin_enqueue(c, twin_stream_of(c, s), twin_run_free, "free", &f, sizeof f);
  if (st != ZRT_OK)
    zrt_log(ZRT_LOG_ERROR, "twin free(%p, %zu bytes): %s (the block stays unused)", ptr, bytes,
            zrt_last_error());
}

/* ------------------------------------------------------------- copies */

typedef struct {
  void *dst;
  const void *src;
  size_t bytes;
  int reg_dst, reg_src; /* registered host memory when the copy was queued */
} twin_copy_args;

/* A copy queued on registered (pinned) host memory that runs after the
 * range was unregistered: on a GPU the copy engine writes or reads pages the
 * host has handed back (freed, unmapped, reused). The program's bug, and
 * nobody would read a sticky error at teardown, where it happens: die with
 * a message, as a host touch of device memory does. */
static void twin_copy_unregistered(const twin_copy_args *m, const char *which) {
  char msg[512];
  int n = snprintf(msg, sizeof msg,
                   "zrt twin: a queued copy's %s (%p, %zu bytes) was registered host memory when "
                   "the copy was queued and is no longer registered when it runs: its range was "
                   "unregistered (a host pool freed or destroyed) while the copy was in flight; "
                   "synchronize the copy's stream (or wait for an event after it) before freeing "
                   "the memory\n",
                   which, which[0] == 'd' ? m->dst : (void *)m->src, m->bytes);
  if (n > 0) {
    ssize_t w = write(2, msg, (size_t)(n < (int)sizeof msg ? n : (int)sizeof msg - 1));
    (void)w;
  }
  abort();
}

static zrt_status twin_run_copy(twin_ctx *c, void *a) {
  twin_copy_args m;
  memcpy(&m, a, sizeof m);
  if (m.reg_dst && !zrt_twin_is_reg(c, m.dst, m.bytes)) twin_copy_unregistered(&m, "destination");
  if (m.reg_src && !zrt_twin_is_reg(c, m.src, m.bytes)) twin_copy_unregistered(&m, "source");
  if (twin_run_fp && twin_run_fp->guard) twin_guard_run(c, twin_run_fp);
  return c->cpu.iface->memcpy(c->b, zrt_twin_dev(c, m.dst), zrt_twin_dev(c, m.src), m.bytes,
                              ZRT_COPY_D2D, NULL);
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
  if (twin_run_fp && twin_run_fp->guard) twin_guard_run(c, twin_run_fp);
  return c->cpu.iface->memcpy(c->b, zrt_twin_dev(c, h.dst), (unsigned char *)a + sizeof h, h.bytes,
                              ZRT_COPY_D2D, NULL);
}

/* Like the CUDA backend's cudaMemcpyDefault, the direction comes from where
 * the pointers live (unified addressing), not from `kind`. */
static zrt_status twin_memcpy(void *ctx, void *dst, const void *src, size_t bytes,
                              zrt_copy_kind kind, zrt_stream s) {
  twin_ctx *c = ctx;
  (void)kind;
  twin_stream *ts = twin_stream_of(c, s);
  int src_pageable = !zrt_twin_is_dev(c, src) && !zrt_twin_is_reg(c, src, bytes);
  int dst_pageable = !zrt_twin_is_dev(c, dst) && !zrt_twin_is_reg(c, dst, bytes);
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
    /* into registered memory: poisoned until it runs (rule b) */
    twin_fp fp = {0};
    if (c->copy_guard && bytes && !zrt_twin_is_dev(c, dst)) {
      fp.wlo = (uintptr_t)dst;
      fp.whi = fp.wlo + bytes;
      fp.guard = TWIN_GUARD_DST;
    }
    zrt_status st =
        twin_enqueue_fp(c, ts, twin_run_staged_copy, "memcpy (staged from pageable host)", op,
                        hb + bytes, fp.guard ? &fp : NULL);
    free(op);
    return st;
  }
  twin_copy_args m = {dst, src, bytes, !dst_pageable && !zrt_twin_is_dev(c, dst),
                      !src_pageable && !zrt_twin_is_dev(c, src)};
  /* The copy guard: a registered source must keep its bytes until the copy
   * runs (rule a), a registered destination is poisoned until then (rule b) */
  twin_fp fp = {0};
  if (c->copy_guard && bytes && (m.reg_src || m.reg_dst)) {
    if (m.reg_src) {
      fp.rlo = (uintptr_t)src;
      fp.rhi = fp.rlo + bytes;
      fp.guard |= TWIN_GUARD_SRC;
    }
    if (m.reg_dst) {
      fp.wlo = (uintptr_t)dst;
      fp.whi = fp.wlo + bytes;
      fp.guard |= TWIN_GUARD_DST;
    }
  }
  ZRT_CHECK(twin_enqueue_fp(c, ts, twin_run_copy, "memcpy", &m, sizeof m, fp.guard ? &fp : NULL));
  /* CUDA: a copy to pageable host memory (or between two pageable buffers)
   * returns when it is done */
  int blocking = src_pageable || dst_pageable;
  if (!blocking || twin_cur == ts) return ZRT_OK;
  ZRT_BACKEND_COUNT(c->b, host_waits);
  return twin_wait_done(ts, twin_enq_of(ts));
}

static zrt_status twin_memset(void *ctx, void *dst, int value, size_t bytes, zrt_stream s) {
  twin_ctx *c = ctx;
  ZRT_CHECK(zrt_twin_operand(c, "memset", "dst", dst, bytes));
  twin_memset_args m = {dst, value, bytes};
  const void *ops[] = {dst};
  twin_fp fp;
  return twin_enqueue_fp(c, twin_stream_of(c, s), twin_run_memset, "memset", &m, sizeof m,
                         twin_kernel_fp(c, &fp, ops, 1));
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
  return c->cpu.iface->convert(c->b, zrt_twin_dev(c, m.dst), m.ddt, zrt_twin_dev(c, m.src), m.sdt,
                               m.n, NULL);
}

static zrt_status twin_convert(void *ctx, void *dst, zrt_dtype dst_dt, const void *src,
                               zrt_dtype src_dt, size_t n, zrt_stream s) {
  twin_ctx *c = ctx;
  ZRT_CHECK(zrt_twin_operand(c, "convert", "dst", dst, n * zrt_dtype_size(dst_dt)));
  ZRT_CHECK(zrt_twin_operand(c, "convert", "src", src, n * zrt_dtype_size(src_dt)));
  twin_convert_args m = {dst, dst_dt, src, src_dt, n};
  const void *ops[] = {dst, src};
  twin_fp fp;
  return twin_enqueue_fp(c, twin_stream_of(c, s), twin_run_convert, "convert", &m, sizeof m,
                         twin_kernel_fp(c, &fp, ops, 2));
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
  return c->cpu.iface->accumulate(c->b, zrt_twin_dev(c, m.dst), zrt_twin_dev(c, m.src), m.sdt,
                                  m.alpha, m.n, NULL);
}

static zrt_status twin_accumulate(void *ctx, float *dst, const void *src, zrt_dtype src_dt,
                                  float alpha, size_t n, zrt_stream s) {
  twin_ctx *c = ctx;
  ZRT_CHECK(zrt_twin_operand(c, "accumulate", "dst", dst, n * sizeof(float)));
  ZRT_CHECK(zrt_twin_operand(c, "accumulate", "src", src, n * zrt_dtype_size(src_dt)));
  twin_acc_args m = {dst, src, src_dt, alpha, n};
  const void *ops[] = {dst, src};
  twin_fp fp;
  return twin_enqueue_fp(c, twin_stream_of(c, s), twin_run_acc, "accumulate", &m, sizeof m,
                         twin_kernel_fp(c, &fp, ops, 2));
}

typedef struct {
  const void *const *x; /* the caller's arrays: it waits for the op, or */
  const size_t *n;      /* runs it in place (on the stream's own worker) */
  int k;
  zrt_dtype dt;
  float scale;
  double *sumsq;
  int *nonfinite;
} twin_check_list_args;

static zrt_status twin_run_check_list(twin_ctx *c, void *a) {
  twin_check_list_args m;
  memcpy(&m, a, sizeof m);
  for (int i = 0; i < m.k; i++)
    if (m.n[i])
      ZRT_CHECK(c->cpu.iface->scale_check(c->b, zrt_twin_dev(c, m.x[i]), m.dt, m.n[i], m.scale,
                                          zrt_twin_dev(c, m.sumsq), zrt_twin_dev(c, m.nonfinite),
                                          NULL));
  return ZRT_OK;
}

/* One op for the whole list (named `op`: its label for ZRT_TWIN_SLOW_OP and
 * the trace), one host wait (the CUDA backend's one copy back): results are
 * host values (backend.h). scale_check is the list of one. */
static zrt_status twin_check_list(twin_ctx *c, const char *op, const void *const *x,
                                  const size_t *n, int k, zrt_dtype dt, float scale, double *sumsq,
                                  int *nonfinite, zrt_stream s) {
  for (int i = 0; i < k; i++)
    if (n[i]) ZRT_CHECK(zrt_twin_operand(c, op, "x", x[i], n[i] * zrt_dtype_size(dt)));
  twin_stream *ts = twin_stream_of(c, s);
  twin_check_list_args m = {x, n, k, dt, scale, sumsq, nonfinite};
  twin_fp fp;
  const twin_fp *fpp = NULL;
  for (int i = 0; i < k && !fpp; i++)
    if (n[i]) fpp = twin_kernel_fp(c, &fp, &x[i], 1);
  ZRT_CHECK(twin_enqueue_fp(c, ts, twin_run_check_list, op, &m, sizeof m, fpp));
  if (twin_cur == ts) return ZRT_OK;
  ZRT_BACKEND_COUNT(c->b, host_waits);
  ZRT_BACKEND_COUNT(c->b, d2h_reads);
  return twin_wait_done(ts, twin_enq_of(ts));
}

static zrt_status twin_scale_check_list(void *ctx, const void *const *x, const size_t *n, int k,
                                        zrt_dtype dt, float scale, double *sumsq, int *nonfinite,
                                        zrt_stream s) {
  return twin_check_list(ctx, "scale_check_list", x, n, k, dt, scale, sumsq, nonfinite, s);
}

static zrt_status twin_scale_check(void *ctx, const void *x, zrt_dtype dt, size_t n, float scale,
                                   double *sumsq, int *nonfinite, zrt_stream s) {
  return twin_check_list(ctx, "scale_check", &x, &n, 1, dt, scale, sumsq, nonfinite, s);
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
  return c->cpu.iface->gemm(c->b, g.ta, g.tb, g.m, g.n, g.k, g.alpha, zrt_twin_dev(c, g.a), g.lda,
                            zrt_twin_dev(c, g.bm), g.ldb, g.abt, g.beta, zrt_twin_dev(c, g.cm),
                            g.ldc, g.cdt, NULL);
}

static zrt_status twin_gemm(void *ctx, int trans_a, int trans_b, int64_t m, int64_t n, int64_t k,
                            float alpha, const void *a, int64_t lda, const void *bm, int64_t ldb,
                            zrt_dtype ab_dt, float beta, void *cm, int64_t ldc, zrt_dtype c_dt,
                            zrt_stream s) {
  twin_ctx *c = ctx;
  ZRT_CHECK(zrt_twin_operand(c, "gemm", "A", a, 1));
  ZRT_CHECK(zrt_twin_operand(c, "gemm", "B", bm, 1));
  ZRT_CHECK(zrt_twin_operand(c, "gemm", "C", cm, 1));
  twin_gemm_args g = {trans_a, trans_b, m,     n,    k,  alpha, a,   lda,
                      bm,      ldb,     ab_dt, beta, cm, ldc,   c_dt};
  const void *ops[] = {a, bm, cm};
  twin_fp fp;
  return twin_enqueue_fp(c, twin_stream_of(c, s), twin_run_gemm, "gemm", &g, sizeof g,
                         twin_kernel_fp(c, &fp, ops, 3));
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
  return c->cpu.iface->optim_step(c->b, &o.hp, zrt_twin_dev(c, o.master), zrt_twin_dev(c, o.s1),
                                  zrt_twin_dev(c, o.s2), zrt_twin_dev(c, o.grad), o.gdt,
                                  zrt_twin_dev(c, o.p16), o.pdt, o.n, NULL);
}

static zrt_status twin_optim(void *ctx, const zrt_optim_hparams *hp, float *master, float *s1,
                             float *s2, const void *grad, zrt_dtype gdt, void *param16,
                             zrt_dtype pdt, size_t n, zrt_stream s) {
  twin_ctx *c = ctx;
  ZRT_CHECK(zrt_twin_operand(c, "optim_step", "master", master, n * 4));
  ZRT_CHECK(zrt_twin_operand(c, "optim_step", "s1", s1, n * 4));
  ZRT_CHECK(zrt_twin_operand(c, "optim_step", "s2", s2, n * 4));
  ZRT_CHECK(zrt_twin_operand(c, "optim_step", "grad", grad, n * zrt_dtype_size(gdt)));
  ZRT_CHECK(zrt_twin_operand(c, "optim_step", "param16", param16, n * zrt_dtype_size(pdt)));
  twin_optim_args o = {*hp, master, s1, s2, grad, gdt, param16, pdt, n};
  const void *ops[] = {master, s1, s2, grad, param16};
  twin_fp fp;
  return twin_enqueue_fp(c, twin_stream_of(c, s), twin_run_optim, "optim_step", &o, sizeof o,
                         twin_kernel_fp(c, &fp, ops, 5));
}

typedef struct {
  zrt_host_fn fn;
  size_t bytes;
  void *heap; /* the arguments' copy when they do not fit inline */
  unsigned char inl[64];
} twin_host_args;

/* The function holds the program's pointers: it runs with that view open
 * (and not as a kernel: what it allocates is the program's). */
static zrt_status twin_run_host(twin_ctx *c, void *a) {
  twin_host_args h;
  memcpy(&h, a, sizeof h);
  int k = twin_in_kernel;
  twin_in_kernel = 0;
  zrt_twin_guard_open(c);
  atomic_fetch_add(&twin_cur->in_host_fn, 1);
  zrt_status st = h.fn(h.heap ? h.heap : ((twin_host_args *)a)->inl);
  atomic_fetch_sub(&twin_cur->in_host_fn, 1);
  zrt_twin_guard_close(c);
  twin_in_kernel = k;
  free(h.heap);
  return st;
}

/* host_work: queued by enqueue_host (cudaLaunchHostFunc: host-side work,
 * which may read and write any host memory, registered included), else by
 * launch_host (the program's compute, a comm, the statistics: kernels that
 * may read registered memory but write device memory). The difference is
 * the copy guard's: a copy queued behind a host-side function that may
 * still write its source or touch its destination is armed when the
 * function ends. */
static zrt_status twin_host_fn(twin_ctx *c, zrt_host_fn fn, const void *args, size_t bytes,
                               zrt_stream s, const char *what, int host_work) {
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
  twin_stream *ts = twin_stream_of(c, s);
  /* a host thread's call (not one from a worker or a host function's team,
   * which run in place or on a stream) waits in sync mode */
  int wait = c->host_fn_sync && !twin_cur && !(atomic_load(&ts->in_host_fn) && omp_in_parallel());
  twin_fp fp = {0};
  fp.any_r = 1;
  fp.any_w = host_work;
  zrt_status st =
      twin_enqueue_fp(c, ts, twin_run_host, what, &h, sizeof h, c->copy_guard ? &fp : NULL);
  if (st != ZRT_OK && twin_cur != ts) free(h.heap);
  if (st == ZRT_OK && wait) st = zrt_backend_synchronize(c->b, s);
  return st;
}

static zrt_status twin_launch_host(void *ctx, zrt_host_fn fn, const void *args, size_t bytes,
                                   zrt_stream s, const char *what) {
  return twin_host_fn(ctx, fn, args, bytes, s, what, 0);
}

static zrt_status twin_enqueue_host(void *ctx, zrt_host_fn fn, const void *args, size_t bytes,
                                    zrt_stream s, const char *what) {
  return twin_host_fn(ctx, fn, args, bytes, s, what, 1);
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
  twin_stream_stop(s);
  pthread_mutex_lock(&c->mu);
  s->dead = c->dead;
  c->dead = s;
  pthread_mutex_unlock(&c->mu);
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
  uint64_t vc[TWIN_VC];
  pthread_mutex_lock(&ts->mu);
  uint64_t t = twin_cur == ts ? ts->done + 1 : ts->enq;
  int reached = ts->done >= t;
  twin_vc_at(ts, t, vc);
  pthread_mutex_unlock(&ts->mu);
  double now = zrt_now_s();
  pthread_mutex_lock(&c->mu);
  e->s = ts;
  e->target = t;
  e->at_record = reached;
  e->t = now;
  memcpy(e->vc, vc, sizeof vc);
  pthread_mutex_unlock(&c->mu);
  return ZRT_OK;
}

/* The time e's last record was reached: *ready = 0 while pending. */
static zrt_status twin_event_time(twin_ctx *c, twin_event *e, int *ready, double *t) {
  pthread_mutex_lock(&c->mu);
  twin_event x = *e;
  pthread_mutex_unlock(&c->mu);
  *ready = 0;
  if (!x.s)
    return zrt_error(ZRT_ERR_INVALID_ARG, "twin event_elapsed: an event never recorded (CUDA: "
                                          "cudaErrorInvalidResourceHandle)");
  if (x.at_record) {
    *ready = 1;
    *t = x.t;
    return ZRT_OK;
  }
  pthread_mutex_lock(&x.s->mu);
  zrt_status st = ZRT_OK;
  if (x.s->done >= x.target) {
    if (x.s->done - x.target >= ZRT_TWIN_STAMPS)
      st = zrt_error(ZRT_ERR_UNSUPPORTED,
                     "twin event_elapsed: the event's op finished %llu ops ago on stream %d; the "
                     "twin keeps the last %d finish times (read timing events sooner)",
                     (unsigned long long)(x.s->done - x.target), x.s->index, ZRT_TWIN_STAMPS);
    else {
      *ready = 1;
      *t = x.s->done_t[(x.target - 1) % ZRT_TWIN_STAMPS];
    }
  }
  pthread_mutex_unlock(&x.s->mu);
  return st;
}

static zrt_status twin_event_elapsed(void *ctx, zrt_event start, zrt_event end, int *ready,
                                     double *seconds) {
  twin_ctx *c = ctx;
  int r0 = 0, r1 = 0;
  double t0 = 0, t1 = 0;
  ZRT_CHECK(twin_event_time(c, start, &r0, &t0));
  ZRT_CHECK(twin_event_time(c, end, &r1, &t1));
  *ready = r0 && r1;
  *seconds = *ready ? t1 - t0 : 0;
  return ZRT_OK;
}

/* e's last record: what a wait on it waits for, and (vc non-NULL) the
 * clock of the ops it is ordered after. */
static void twin_event_get(twin_ctx *c, twin_event *e, twin_wait_args *w, uint64_t *vc) {
  pthread_mutex_lock(&c->mu);
  w->s = e->s;
  w->target = e->target;
  if (vc) memcpy(vc, e->vc, sizeof e->vc);
  pthread_mutex_unlock(&c->mu);
}

static zrt_status twin_stream_wait_event(void *ctx, zrt_stream s, zrt_event ev) {
  twin_ctx *c = ctx;
  twin_wait_args w;
  uint64_t vc[TWIN_VC];
  twin_event_get(c, ev, &w, vc);
  twin_stream *ts = twin_stream_of(c, s);
  if (!w.s || w.s == ts) return ZRT_OK; /* never recorded, or FIFO already orders it */
  return twin_enqueue_vc(c, ts, twin_run_wait, "stream wait event", &w, sizeof w, NULL, vc);
}

static zrt_status twin_event_synchronize(void *ctx, zrt_event ev) {
  twin_ctx *c = ctx;
  twin_wait_args w;
  twin_event_get(c, ev, &w, NULL);
  if (!w.s) return ZRT_OK;
  return twin_wait_done(w.s, w.target);
}

static zrt_status twin_event_query(void *ctx, zrt_event ev, int *done) {
  twin_ctx *c = ctx;
  twin_wait_args w;
  twin_event_get(c, ev, &w, NULL);
  *done = 1;
  if (!w.s) return ZRT_OK;
  pthread_mutex_lock(&w.s->mu);
  /* a failed stream never reaches the record: its error, as a wait gives it */
  zrt_status st = twin_sticky(w.s);
  if (st == ZRT_OK) *done = w.s->done >= w.target;
  pthread_mutex_unlock(&w.s->mu);
  return st;
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

/* ------------------------------------------------------------ lifecycle */

static void twin_destroy(void *ctx) {
  twin_ctx *c = ctx;
  if (!c) return;
  /* every worker ends before any stream's memory goes (a wait on one
   * stream reads another's progress) */
  for (int i = c->nstreams - 1; i >= 0; i--) twin_stream_stop(c->streams[i]);
  twin_trace_write(c);
  if (c->copy_guard)
    zrt_log(ZRT_LOG_DEBUG,
            "twin copy guard: %llu guarded copies started armed (checked), %llu "
            "before they were armed (not checked)",
            (unsigned long long)atomic_load(&c->guard_armed),
            (unsigned long long)atomic_load(&c->guard_unarmed));
  for (int i = c->nstreams - 1; i >= 0; i--) twin_stream_free(c->streams[i]);
  while (c->dead) {
    twin_stream *d = c->dead;
    c->dead = d->dead;
    twin_stream_free(d);
  }
  zrt_twin_mem_destroy(c);
  pthread_mutex_destroy(&c->mu);
  pthread_mutex_destroy(&c->fp_mu);
  free(c);
}

static const zrt_backend_iface zrt_twin_iface = {
    .name = "twin",
    .alloc = twin_alloc,
    .free = twin_free,
    .free_on = twin_free_on,
    .memcpy = twin_memcpy,
    .memset = twin_memset,
    .convert = twin_convert,
    .accumulate = twin_accumulate,
    .scale_check = twin_scale_check,
    .scale_check_list = twin_scale_check_list,
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
    .event_query = twin_event_query,
    .event_create_timed = twin_event_create, /* every twin event carries its time */
    .event_elapsed = twin_event_elapsed,
    .host_register = zrt_twin_host_register,
    .host_unregister = zrt_twin_host_unregister,
    .launch_host = twin_launch_host,
    .enqueue_host = twin_enqueue_host,
    .destroy = twin_destroy,
};

/* ZRT_TWIN_JITTER: unset or "" = off; a decimal seed turns it on. */
static zrt_status twin_jitter_env(twin_ctx *c) {
  const char *v = zrt_env("ZRT_TWIN_JITTER");
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

/* ZRT_TWIN_TRACE: unset or "" = off; else an existing directory. */
static zrt_status twin_trace_env(twin_ctx *c) {
  const char *v = zrt_env("ZRT_TWIN_TRACE");
  if (!v || !*v) return ZRT_OK;
  struct stat sb;
  if (strlen(v) >= sizeof c->trace_dir || stat(v, &sb) != 0 || !S_ISDIR(sb.st_mode))
    return zrt_error(ZRT_ERR_CONFIG,
                     "ZRT_TWIN_TRACE=\"%s\": expected an existing directory for the twin's op "
                     "trace (twin_trace.<pid>.txt), or unset for no trace",
                     v);
  snprintf(c->trace_dir, sizeof c->trace_dir, "%s", v);
  return ZRT_OK;
}

/* ZRT_TWIN_SIDE_DELAY_US: unset or "" = none; microseconds (at most 10 s). */
static zrt_status twin_side_delay_env(twin_ctx *c) {
  const char *v = zrt_env("ZRT_TWIN_SIDE_DELAY_US");
  if (!v || !*v) return ZRT_OK;
  char *end = NULL;
  errno = 0;
  long long us = strtoll(v, &end, 10);
  if (errno || !end || *end || us < 0 || us > 10000000)
    return zrt_error(ZRT_ERR_CONFIG,
                     "ZRT_TWIN_SIDE_DELAY_US=\"%s\": expected microseconds from 0 to 10000000 "
                     "(e.g. ZRT_TWIN_SIDE_DELAY_US=2000) or unset for none",
                     v);
  c->side_delay_us = (long)us;
  return ZRT_OK;
}

/* ZRT_TWIN_SLOW_OP: unset or "" = none; LABEL:US (US at most 10 s). */
static zrt_status twin_slow_op_env(twin_ctx *c) {
  const char *v = zrt_env("ZRT_TWIN_SLOW_OP");
  if (!v || !*v) return ZRT_OK;
  const char *colon = strrchr(v, ':');
  char *end = NULL;
  long long us = -1;
  if (colon && colon != v && (size_t)(colon - v) < sizeof c->slow_op) {
    errno = 0;
    us = strtoll(colon + 1, &end, 10);
    if (errno || end == colon + 1 || *end) us = -1;
  }
  if (us < 0 || us > 10000000)
    return zrt_error(ZRT_ERR_CONFIG,
                     "ZRT_TWIN_SLOW_OP=\"%s\": expected LABEL:MICROSECONDS, a part of an op's "
                     "label (as ZRT_TWIN_TRACE names ops) and 0 to 10000000 (e.g. "
                     "ZRT_TWIN_SLOW_OP=\"offload optimizer update:3000\"), or unset for none",
                     v);
  memcpy(c->slow_op, v, (size_t)(colon - v));
  c->slow_op[colon - v] = 0;
  c->slow_op_us = (long)us;
  return ZRT_OK;
}

/* ZRT_TWIN_HOST_FN: unset, "" or "stream" = host functions are stream ops;
 * "sync" = the caller waits for each; "cuda" = stream ops used for host-side
 * work only (see twin_ctx). */
static zrt_status twin_host_fn_env(twin_ctx *c) {
  const char *v = zrt_env("ZRT_TWIN_HOST_FN");
  if (!v || !*v || !strcmp(v, "stream")) return ZRT_OK;
  if (!strcmp(v, "sync")) {
    c->host_fn_sync = 1;
    return ZRT_OK;
  }
  if (!strcmp(v, "cuda")) {
    c->host_fn_cuda = 1;
    return ZRT_OK;
  }
  return zrt_error(ZRT_ERR_CONFIG,
                   "ZRT_TWIN_HOST_FN=\"%s\": expected stream (host functions are stream ops, "
                   "the default), sync (the caller waits for each; comms staged through host "
                   "memory) or cuda (stream ops, the statistics on the host, as on CUDA)",
                   v);
}

/* ZRT_TWIN_COPY_GUARD: unset, "" or "1" = on (the default); "0" = off. */
static zrt_status twin_copy_guard_env(twin_ctx *c) {
  const char *v = zrt_env("ZRT_TWIN_COPY_GUARD");
  c->copy_guard = 1;
  if (!v || !*v || !strcmp(v, "1")) return ZRT_OK;
  if (!strcmp(v, "0")) {
    c->copy_guard = 0;
    return ZRT_OK;
  }
  return zrt_error(ZRT_ERR_CONFIG,
                   "ZRT_TWIN_COPY_GUARD=\"%s\": expected 1 (the default: a copy's registered "
                   "host source must not change until the copy runs, its registered host "
                   "destination reads 0xFF bytes until then) or 0 (neither check)",
                   v);
}

zrt_status zrt_backend_twin_init(zrt_backend *b, size_t device_memory_limit) {
  if (!b) return zrt_error(ZRT_ERR_INVALID_ARG, "zrt_backend_twin_init: b is NULL");
  zrt_status st = ZRT_OK;
  twin_ctx *c = calloc(1, sizeof *c);
  if (!c) return zrt_error(ZRT_ERR_OOM, "twin: out of host memory");
  c->b = b;
  c->memfd = -1; /* zrt_twin_mem_destroy runs on every failure path */
  c->pkey = -1;
  pthread_mutex_init(&c->mu, NULL);
  pthread_mutex_init(&c->guard_mu, NULL);
  pthread_mutex_init(&c->fp_mu, NULL);
  ZRT_CHECK_GOTO(zrt_backend_cpu_init(&c->cpu), st, fail);
  ZRT_CHECK_GOTO(twin_jitter_env(c), st, fail);
  ZRT_CHECK_GOTO(twin_trace_env(c), st, fail);
  ZRT_CHECK_GOTO(twin_side_delay_env(c), st, fail);
  ZRT_CHECK_GOTO(twin_slow_op_env(c), st, fail);
  ZRT_CHECK_GOTO(twin_host_fn_env(c), st, fail);
  ZRT_CHECK_GOTO(twin_copy_guard_env(c), st, fail);
  ZRT_CHECK_GOTO(zrt_twin_mem_init(c, device_memory_limit), st, fail);
  ZRT_CHECK_GOTO(twin_stream_new(c, &c->def), st, fail);
  {
    char sz[32];
    snprintf(b->description, sizeof b->description,
             "GPU twin on the host CPU (%s device mapping, %s%s%s%s%s%s)",
             zrt_format_size(c->size, sz, sizeof sz),
             c->guard == ZRT_TWIN_GUARD_PKU        ? "PKU-guarded"
             : c->guard == ZRT_TWIN_GUARD_MPROTECT ? "mprotect-guarded"
                                                   : "pointer-kind checks",
             c->jitter ? ", jitter" : "", c->side_delay_us ? ", slow side streams" : "",
             c->slow_op_us ? ", slow ops" : "",
             c->host_fn_sync   ? ", synchronous host functions"
             : c->host_fn_cuda ? ", CUDA's host functions"
                               : "",
             c->copy_guard ? "" : ", no copy guard");
  }
  b->device_id = 0;
  b->numa_node = -1;
  b->device_capacity = 0;
  b->host_fn_async = !c->host_fn_sync;
  b->host_fn_device = !c->host_fn_sync;
  b->host_fn_kernels = !c->host_fn_sync && !c->host_fn_cuda;
  b->ctx = c;
  b->iface = &zrt_twin_iface;
  return ZRT_OK;
fail:
  twin_destroy(c);
  return st;
}
