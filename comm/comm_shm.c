/*
 * comm_shm.c — collectives through one POSIX shared-memory segment for ranks
 * on one machine (the CPU backend's default), in rounds of at most a region
 * per rank pipelined at one handshake per round over double-buffered
 * regions, 16-bit sums added in fp32 and rounded once, waits on futexes,
 * recv streamed past the cache for large collectives; Open
 * MPI underneath for bootstrap and as the fallback. Buffers from the
 * comm's allocator take the zero-copy paths of comm/comm_shm_zc.c (hooks:
 * the publish phase in shm_issue / do_phase / progress). Invariants (rounds,
 * ordering, timed-out requests, dead ranks, bounds): docs/comms.md, "The
 * shared-memory comm".
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "comm_shm_impl.h"
#include "copy_stream.h"
#include "cpu_features.h"
#include "dtype.h"
#include "env.h"

/* ----------------------------------------------------------- kernels */

static inline uint64_t ld_phase(const shm_ctx *s, int r) {
  return __atomic_load_n(&s->hdr->ctl[r].phase, __ATOMIC_ACQUIRE);
}

/* The futex word of rank r: the low 32 bits of its phase (they change on
 * every phase). */
static uint32_t *phase_word(const shm_ctx *s, int r) {
  uint32_t *w = (uint32_t *)&s->hdr->ctl[r].phase;
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  w++;
#endif
  return w;
}

static long shm_futex(uint32_t *w, int op, uint32_t val, const struct timespec *ts) {
  return syscall(SYS_futex, w, op, val, ts, NULL, 0);
}

/* Rank r's region for round g (double buffered by g's parity). */
static char *region(const shm_ctx *s, char *base, uint64_t g, int r) {
  return base + ((size_t)(g & 1) * (size_t)s->nranks + (size_t)r) * s->region;
}

/* o[i] = a[i] + c[i] over k floats, 16 at a time in vector registers
 * (GCC vector extensions: the build's -O2 does not vectorise these loops by
 * itself; each lane is one IEEE add, so the bits are the scalar loop's). */
typedef float shm_v4 __attribute__((vector_size(16)));
static void add_f32(float *o, const float *a, const float *c, size_t k) {
  size_t i = 0;
  for (; i + 16 <= k; i += 16) {
    shm_v4 x[4], y[4];
    __builtin_memcpy(x, a + i, sizeof x);
    __builtin_memcpy(y, c + i, sizeof y);
    for (int j = 0; j < 4; j++) x[j] += y[j];
    __builtin_memcpy(o + i, x, sizeof x);
  }
  for (; i < k; i++) o[i] = a[i] + c[i];
}

/* out[i] = in[0][i] + in[1][i] + ... in rank order, fp32, through a block
 * accumulator (out may be one of the inputs). */
static void sum_f32(float *out, const float *const *in, int n, size_t len) {
  if (n == 1) {
    memmove(out, in[0], len * sizeof(float));
    return;
  }
  float acc[SHM_BLOCK];
  for (size_t b = 0; b < len; b += SHM_BLOCK) {
    size_t k = len - b < SHM_BLOCK ? len - b : SHM_BLOCK;
    add_f32(acc, in[0] + b, in[1] + b, k);
    for (int r = 2; r < n; r++) add_f32(acc, acc, in[r] + b, k);
    memcpy(out + b, acc, k * sizeof(float));
  }
}

/* 16-bit: widen, add in fp32 in rank order, round once. */
static void sum_half(uint16_t *out, const uint16_t *const *in, int n, size_t len, zrt_dtype dt) {
  float acc[SHM_BLOCK], x[SHM_BLOCK];
  for (size_t b = 0; b < len; b += SHM_BLOCK) {
    size_t k = len - b < SHM_BLOCK ? len - b : SHM_BLOCK;
    zrt_dtype_convert_host(acc, ZRT_F32, in[0] + b, dt, k);
    for (int r = 1; r < n; r++) {
      zrt_dtype_convert_host(x, ZRT_F32, in[r] + b, dt, k);
      add_f32(acc, acc, x, k);
    }
    zrt_dtype_convert_host(out + b, dt, acc, ZRT_F32, k);
  }
}

/* MAX / MIN: pick an input, NaN wins. fp32 by the same rule as
 * zrt_half_reduce's 16-bit one. */
static void pick_f32(float *out, const float *const *in, int n, size_t len, zrt_redop red) {
  for (size_t i = 0; i < len; i++) {
    float a = in[0][i];
    for (int r = 1; r < n; r++) {
      float b = in[r][i];
      int take = red == ZRT_RED_MAX ? b > a : b < a;
      if ((b != b || take) && a == a) a = b;
    }
    out[i] = a;
  }
}

/* The SUM kernel: the portable loops, AVX2, AVX-512, or AVX-512 rounding
 * bf16 with vcvtne2ps2bf16 (a cached CPU parameter, as amp/dtype.c caches
 * its own; unit.test_shm_kernel holds every path this CPU runs to the
 * scalar bits). */
enum { SHM_PORTABLE, SHM_AVX2, SHM_AVX512, SHM_AVX512_BF16 };
static int shm_sum_path = -1;

static int sum_path(void) {
  if (shm_sum_path < 0) {
    zrt_isa isa = zrt_isa_best();
    shm_sum_path = isa == ZRT_ISA_AVX512 ? (zrt_isa_has_avx512bf16() ? SHM_AVX512_BF16 : SHM_AVX512)
                   : isa == ZRT_ISA_AVX2 ? SHM_AVX2
                                         : SHM_PORTABLE;
  }
  return shm_sum_path;
}

/* out[i] = in[0][i] (op) in[1][i] ... in rank order, and out2 the same
 * bits when not NULL (a region). out may be one of the inputs exactly (in
 * place): every path reads all inputs of an element before writing it.
 * nt: out (recv) with non-temporal stores where a vector kernel runs. */
void zrt_shm_reduce_into(void *out, void *out2, const void *const *in, int n, size_t len,
                         zrt_dtype dt, zrt_redop red, int nt) {
  if (!len) return;
  size_t es = zrt_dtype_size(dt);
  int path = red == ZRT_RED_SUM ? sum_path() : SHM_PORTABLE;
  if (path == SHM_AVX2) {
    zrt_shm_sum_avx2(out, out2, in, n, len, dt, nt);
    return;
  }
  if (path != SHM_PORTABLE) {
    zrt_shm_sum_avx512(out, out2, in, n, len, dt, nt, path == SHM_AVX512_BF16);
    return;
  }
  if (dt == ZRT_F32) {
    if (red == ZRT_RED_SUM)
      sum_f32(out, (const float *const *)in, n, len);
    else
      pick_f32(out, (const float *const *)in, n, len, red);
  } else if (red == ZRT_RED_SUM) {
    sum_half(out, (const uint16_t *const *)in, n, len, dt);
  } else {
    /* 16-bit MAX / MIN through a block buffer: out may be in[r], r > 0 */
    zrt_half_op op = red == ZRT_RED_MAX ? ZRT_HALF_MAX : ZRT_HALF_MIN;
    uint16_t acc[SHM_BLOCK];
    for (size_t b = 0; b < len; b += SHM_BLOCK) {
      size_t k = len - b < SHM_BLOCK ? len - b : SHM_BLOCK;
      memcpy(acc, (const uint16_t *)in[0] + b, k * es);
      for (int r = 1; r < n; r++) zrt_half_reduce(acc, (const uint16_t *)in[r] + b, dt, k, op);
      memcpy((char *)out + b * es, acc, k * es);
    }
  }
  if (out2) memcpy(out2, out, len * es);
}

/* A copy into recv: non-temporal for an nt request (zrt_copy_stream: AVX-512,
 * AVX2 or SSE2 stores, every x86-64 CPU streams). */
void zrt_shm_copy_out(const shm_req *q, void *dst, const void *src, size_t bytes) {
  if (q->nt)
    zrt_copy_stream(dst, src, bytes);
  else
    memcpy(dst, src, bytes);
}

/* ------------------------------------------------------------ phases */

/* Elements [lo, hi) of segment j's round g (clipped to its count). */
static void seg_round(const shm_req *q, int j, uint64_t g, size_t *lo, size_t *len) {
  size_t a = (size_t)g * q->q, c = q->counts[j];
  *lo = a < c ? a : c;
  size_t b = a + q->q;
  *len = (b < c ? b : c) - *lo;
}

/* Stages of one round: a round's stage t runs in phase g + t (pipelined),
 * so consecutive rounds overlap and a request of R rounds takes
 * R + stages - 1 phases. */
static int stages(shm_op op) { return op == SHM_AR ? 3 : 2; }

/* Does stage t of round g of q on this rank. Stage t reads only what stage
 * t - 1 of the same round wrote one phase earlier; round g's regions are
 * next written by round g + 2, two phases after that read. */
static void do_stage(shm_ctx *s, shm_req *q, int t, uint64_t g) {
  int R = s->rank, N = s->nranks;
  size_t es = zrt_dtype_size(q->dt);
  const char *send = q->send;
  char *recv = q->recv;
  char *mine = region(s, s->data, g, R);
  size_t lo, len;
  switch (q->op) {
  case SHM_BARRIER: break;
  case SHM_RS:
  case SHM_AR:
    if (t == 0) { /* publish: every segment's piece but my own */
      for (int j = 0; j < N; j++) {
        if (j == R) continue;
        seg_round(q, j, g, &lo, &len);
        memcpy(mine + (size_t)j * q->q * es, send + (q->offs[j] + lo) * es, len * es);
      }
    } else if (t == 1) { /* reduce my segment's piece over the ranks, in rank order */
      seg_round(q, R, g, &lo, &len);
      const void *in[SHM_MAX_RANKS];
      for (int r = 0; r < N; r++)
        in[r] = r == R ? (const void *)(send + (q->offs[R] + lo) * es)
                       : (const void *)(region(s, s->data, g, r) + (size_t)R * q->q * es);
      /* straight into recv (my own input there when in place: the kernels
       * read every input of an element before writing it); all_reduce
       * also into my result region, in the same pass */
      if (q->op == SHM_RS)
        zrt_shm_reduce_into(recv + lo * es, NULL, in, N, len, q->dt, q->red, q->nt);
      else
        zrt_shm_reduce_into(recv + (q->offs[R] + lo) * es, region(s, s->res, g, R), in, N, len,
                            q->dt, q->red, q->nt);
    } else { /* all_reduce gather: the other segments' sums */
      for (int j = 0; j < N; j++) {
        if (j == R) continue;
        seg_round(q, j, g, &lo, &len);
        zrt_shm_copy_out(q, recv + (q->offs[j] + lo) * es, region(s, s->res, g, j), len * es);
      }
    }
    break;
  case SHM_AG:
    seg_round(q, R, g, &lo, &len);
    if (t == 0) {
      memcpy(mine, send + lo * es, len * es);
      /* my own piece now: send is not in the regions' way */
      char *dst = recv + (q->offs[R] + lo) * es;
      if (dst != send + lo * es) memmove(dst, send + lo * es, len * es);
    } else {
      for (int j = 0; j < N; j++) {
        if (j == R) continue;
        seg_round(q, j, g, &lo, &len);
        zrt_shm_copy_out(q, recv + (q->offs[j] + lo) * es, region(s, s->data, g, j), len * es);
      }
    }
    break;
  case SHM_BC:
    seg_round(q, 0, g, &lo, &len); /* counts[0] = count */
    if (t == 0 && R == q->root)
      memcpy(region(s, s->data, g, q->root), recv + lo * es, len * es);
    else if (t == 1 && R != q->root)
      zrt_shm_copy_out(q, recv + lo * es, region(s, s->data, g, q->root), len * es);
    break;
  }
}

/* Does phase k (0-based within the request) of q: stage t of round k - t
 * for every stage whose round exists, the oldest round first. */
static void do_phase(shm_ctx *s, shm_req *q, uint64_t k) {
  if (q->zc != SHM_ZC_NONE) { /* phase 0 publishes; then zero-copy or the copy path */
    if (k == 0) {
      zrt_shm_zc_publish(s, q);
      return;
    }
    if (q->zc == SHM_ZC_ON) {
      zrt_shm_zc_phase(s, q, k - 1);
      if (q->nt) zrt_store_fence();
      return;
    }
    k--;
  }
  for (int t = stages(q->op) - 1; t >= 0; t--)
    if (k >= (uint64_t)t && k - (uint64_t)t < q->rounds) do_stage(s, q, t, k - (uint64_t)t);
  /* non-temporal stores are weakly ordered: globally visible before the
   * phase (and so the request's completion) is */
  if (q->nt) zrt_store_fence();
}

/* Advances the pending requests from the head as far as the other ranks
 * allow. *moved = phases completed by this call. */
static void progress(shm_ctx *s, int *moved) {
  *moved = 0;
  while (s->head) {
    shm_req *q = s->head;
    if (!q->started) { /* its phases follow the previous request's */
      q->started = 1;
      q->first = s->phase;
      q->last = q->first + q->nph + (q->zc != SHM_ZC_NONE);
    }
    while (s->phase < q->last) {
      /* phase s->phase + 1 starts when every rank completed s->phase */
      for (int r = 0; r < s->nranks; r++)
        if (r != s->rank && ld_phase(s, r) < s->phase) {
          s->laggard = r;
          return;
        }
      /* every rank published: zero-copy or not, the same on all */
      if (q->zc == SHM_ZC_ASK && s->phase == q->first + 1) {
        zrt_shm_zc_decide(s, q);
        if (s->broken != ZRT_OK) return; /* a buffer it cannot reach */
      }
      do_phase(s, q, s->phase - q->first);
      s->phase++;
      /* sequentially consistent with the waiter's count (Dekker): either it
       * sees the new phase before it sleeps or this sees it waiting */
      __atomic_store_n(&s->hdr->ctl[s->rank].phase, s->phase, __ATOMIC_SEQ_CST);
      if (__atomic_load_n(&s->hdr->ctl[s->rank].waiters, __ATOMIC_SEQ_CST) > 0)
        shm_futex(phase_word(s, s->rank), FUTEX_WAKE, INT32_MAX, NULL);
      (*moved)++;
    }
    q->done = 1;
    s->head = q->next;
    if (!s->head) s->tail = NULL;
  }
}

/* A rank's process is gone (or a zombie): it will never finish a phase. */
static int rank_dead(const shm_ctx *s, int r) {
  pid_t pid = s->hdr->ctl[r].pid;
  if (pid <= 0) return 0;
  if (kill(pid, 0) != 0) return errno == ESRCH;
  char path[64], buf[512];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  char *p = strrchr(buf, ')');
  return p && p[1] == ' ' && p[2] == 'Z';
}

static zrt_status check_alive(shm_ctx *s, const shm_req *q) {
  for (int r = 0; r < s->nranks; r++)
    if (r != s->rank && ld_phase(s, r) < s->phase && rank_dead(s, r)) {
      snprintf(s->broken_msg, sizeof s->broken_msg,
               "shm comm: rank %d (pid %d) died: it exited or was killed after completing %llu "
               "of the phases rank %d waits for in collective #%llu %s; the job cannot go on "
               "(see how rank %d ended in the launcher's report)",
               r, (int)s->hdr->ctl[r].pid, (unsigned long long)ld_phase(s, r), s->rank,
               (unsigned long long)(q ? q->base.seq : 0), q && q->base.op ? q->base.op : "", r);
      s->broken = ZRT_ERR_COMM;
      return zrt_error(ZRT_ERR_COMM, "%s", s->broken_msg);
    }
  return ZRT_OK;
}

/* Blocks on the phase futex of the rank progress() found behind until it
 * completes a phase or max_s passes. */
static void wait_laggard(shm_ctx *s, double max_s) {
  shm_ctl *c = &s->hdr->ctl[s->laggard];
  __atomic_add_fetch(&c->waiters, 1, __ATOMIC_SEQ_CST);
  uint64_t ph = __atomic_load_n(&c->phase, __ATOMIC_SEQ_CST);
  if (ph < s->phase) {
    if (max_s < 1e-6) max_s = 1e-6;
    struct timespec ts = {(time_t)max_s, (long)((max_s - (double)(time_t)max_s) * 1e9)};
    shm_futex(phase_word(s, s->laggard), FUTEX_WAIT, (uint32_t)ph, &ts);
  }
  __atomic_sub_fetch(&c->waiters, 1, __ATOMIC_SEQ_CST);
}

static int more_ranks_than_cores(shm_ctx *s) {
  if (!s->cores) {
    cpu_set_t set;
    long n = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set)
                                                         : sysconf(_SC_NPROCESSORS_ONLN);
    s->cores = n > 0 ? (int)n : 1;
  }
  return s->nranks > s->cores;
}

/* Progresses until q is done (q NULL: until the FIFO is empty) or
 * timeout_s passes (<= 0: forever). 1 done, 0 timed out, -1 error (*st). */
static int progress_until(shm_ctx *s, shm_req *q, double timeout_s, zrt_status *st) {
  if (s->broken != ZRT_OK) {
    *st = zrt_error(s->broken, "%s", s->broken_msg);
    return -1;
  }
  double t0 = zrt_now_s(), last_live = t0, idle_since = 0;
  double yield_s = more_ranks_than_cores(s) ? 0.0 : SHM_YIELD_S;
  unsigned idle = 0;
  for (;;) {
    int moved = 0;
    progress(s, &moved);
    if (q ? q->done : !s->head) return 1;
    if (s->broken != ZRT_OK) {
      *st = zrt_error(s->broken, "%s", s->broken_msg);
      return -1;
    }
    if (moved) { /* the ladder restarts at every phase the others let through */
      idle = 0;
      continue;
    }
    if (idle++ < SHM_SPINS) {
      __builtin_ia32_pause();
      continue;
    }
    double now = zrt_now_s();
    if (idle == SHM_SPINS + 1) idle_since = now;
    if (timeout_s > 0 && now - t0 >= timeout_s) return 0;
    if (now - last_live >= SHM_LIVENESS_S) {
      last_live = now;
      if ((*st = check_alive(s, q)) != ZRT_OK) return -1;
    }
    if (now - idle_since < yield_s) {
      sched_yield(); /* a rank sharing this core may be the one we wait for */
    } else {
      double max_s = SHM_LIVENESS_S - (now - last_live);
      if (timeout_s > 0 && timeout_s - (now - t0) < max_s) max_s = timeout_s - (now - t0);
      wait_laggard(s, max_s);
    }
  }
}

zrt_status zrt_shm_drain(shm_ctx *s) {
  zrt_status st = ZRT_OK;
  double t = s->c ? s->c->timeout_s : 0;
  int got = progress_until(s, NULL, t, &st);
  if (got == 0)
    return zrt_error(ZRT_ERR_COMM,
                     "shm comm: the collectives issued before zrt_comm_mem_alloc did not complete "
                     "within %gs",
                     t);
  return got < 0 ? st : ZRT_OK;
}

/* ------------------------------------------------------------ requests */

static void req_free(shm_ctx *s, shm_req *q) {
  if (!q) return;
  free(q->counts);
  free(q);
  s->inflight--;
}

/* Unlinks q from the FIFO (a collective that can never complete) and
 * frees it. */
static void req_drop(shm_ctx *s, shm_req *q) {
  shm_req **pp = &s->head, *prev = NULL;
  while (*pp && *pp != q) {
    prev = *pp;
    pp = &(*pp)->next;
  }
  if (*pp) {
    *pp = q->next;
    if (s->tail == q) s->tail = prev;
  }
  req_free(s, q);
}

static zrt_status shm_wait(void *ctx, zrt_comm_req *req, double timeout_s) {
  shm_ctx *s = ctx;
  shm_req *q = (shm_req *)req;
  zrt_status st = ZRT_OK;
  int got = q->done ? 1 : progress_until(s, q, timeout_s, &st);
  if (got == 0) {
    req->timed_out = 1;
    return zrt_error(ZRT_ERR_COMM, "shm comm: request did not complete within %gs", timeout_s);
  }
  if (got < 0) {
    req_drop(s, q);
    return st;
  }
  req_free(s, q);
  return ZRT_OK;
}

static zrt_status shm_test(void *ctx, zrt_comm_req *req, int *done) {
  shm_ctx *s = ctx;
  shm_req *q = (shm_req *)req;
  *done = 0;
  if (s->broken != ZRT_OK && !q->done) {
    *done = 1;
    req_drop(s, q);
    return zrt_error(s->broken, "%s", s->broken_msg);
  }
  int moved = 0;
  progress(s, &moved);
  if (!q->done) return ZRT_OK;
  *done = 1;
  req_free(s, q);
  return ZRT_OK;
}

/* Queues a request of `rounds` rounds and makes what progress it can now. */
static zrt_status shm_issue(shm_ctx *s, shm_req *q, size_t rounds, zrt_comm_req **req) {
  q->rounds = rounds;
  q->nph = rounds ? (uint64_t)rounds + (uint64_t)stages(q->op) - 1 : 0;
  /* once the comm has allocated buffers (collectively: the same on every
   * rank), every reduction and gather publishes where its buffers are */
  if (s->zc_made && rounds && (q->op == SHM_AR || q->op == SHM_RS || q->op == SHM_AG))
    q->zc = SHM_ZC_ASK;
  if (s->tail)
    s->tail->next = q;
  else
    s->head = q;
  s->tail = q;
  int moved = 0;
  progress(s, &moved);
  if (req) {
    *req = &q->base;
    return ZRT_OK;
  }
  return shm_wait(s, &q->base, s->c ? s->c->timeout_s : 0);
}

static zrt_status req_new(shm_ctx *s, shm_op op, zrt_dtype dt, shm_req **out) {
  *out = NULL;
  if (s->broken != ZRT_OK) return zrt_error(s->broken, "%s", s->broken_msg);
  shm_req *q = calloc(1, sizeof *q);
  size_t *c = calloc(2 * (size_t)s->nranks, sizeof *c);
  if (!q || !c) {
    free(q);
    free(c);
    return zrt_error(ZRT_ERR_OOM, "shm comm: out of host memory for a request");
  }
  q->op = op;
  q->dt = dt;
  q->counts = c;
  q->offs = c + s->nranks;
  s->inflight++;
  *out = q;
  return ZRT_OK;
}

/* Offsets, the largest count, q and the round count of a segmented op.
 * per_region: elements of one segment a region holds per round. */
static size_t layout(shm_ctx *s, shm_req *q, size_t per_region) {
  size_t off = 0, mx = 0;
  for (int r = 0; r < s->nranks; r++) {
    q->offs[r] = off;
    off += q->counts[r];
    if (q->counts[r] > mx) mx = q->counts[r];
  }
  q->maxcount = mx;
  q->q = per_region;
  return mx ? (mx + per_region - 1) / per_region : 0;
}

/* Elements of one segment per round when a region holds a piece of each of
 * the N segments (reductions), a multiple of 16 (64-byte pieces). */
static size_t red_piece(const shm_ctx *s, zrt_dtype dt) {
  size_t q = s->region / zrt_dtype_size(dt) / (size_t)s->nranks;
  return q >= 16 ? q / 16 * 16 : q;
}

/* Non-temporal stores into recv pay off when the ranks' recv buffers
 * together reach the last-level cache: the lines written first would be
 * evicted by the later ones before the caller reads them, so ordinary
 * stores would only add a read of every line (write allocate). A
 * reduce_scatter also reads every rank's whole send while it writes its
 * recv, so there the reads count too: `together` is the bytes across the
 * ranks (callers pass them; use_nt compares them to the cache). Below that,
 * recv stays in cache for the caller (the optimizer reading its gradient
 * shard right after the reduce_scatter). ZRT_COMM_SHM_NT_BYTES (a size; 0:
 * always) overrides the cache size (the tests use it to run the
 * non-temporal paths); where the cache size is unknown nothing streams. */
static zrt_status use_nt(shm_ctx *s, shm_req *q, size_t together) {
  if (!s->nt_ready) {
    const char *e = zrt_env("ZRT_COMM_SHM_NT_BYTES");
    size_t llc = zrt_cpu_llc_bytes();
    uint64_t v = 0;
    if (e && *e) {
      if (!zrt_parse_size(e, &v))
        return zrt_error(ZRT_ERR_CONFIG,
                         "ZRT_COMM_SHM_NT_BYTES=\"%s\": expected a size (e.g. 32MiB; 0: always "
                         "stream recv); unset it for this CPU's last-level cache (%zu bytes)",
                         e, llc);
      s->nt_from = (size_t)v;
    } else {
      s->nt_from = llc ? llc : SIZE_MAX;
    }
    s->nt_ready = 1;
  }
  q->nt = together > 0 && together >= s->nt_from;
  return ZRT_OK;
}

/* ---------------------------------------------------------- collectives */

static zrt_status shm_all_reduce(void *ctx, const void *send, void *recv, size_t count,
                                 zrt_dtype dt, zrt_redop op, zrt_comm_req **req) {
  shm_ctx *s = ctx;
  shm_req *q = NULL;
  ZRT_CHECK(req_new(s, SHM_AR, dt, &q));
  q->send = send;
  q->recv = recv;
  q->red = op;
  for (int r = 0; r < s->nranks; r++)
    q->counts[r] = count / (size_t)s->nranks + ((size_t)r < count % (size_t)s->nranks);
  size_t rounds = layout(s, q, red_piece(s, dt)), es = zrt_dtype_size(dt);
  zrt_status st = use_nt(s, q, count * es * (size_t)s->nranks);
  if (st != ZRT_OK) {
    req_free(s, q);
    return st;
  }
  return shm_issue(s, q, rounds, req);
}

static zrt_status shm_reduce_scatter(void *ctx, const void *send, void *recv, const size_t *counts,
                                     zrt_dtype dt, zrt_redop op, zrt_comm_req **req) {
  shm_ctx *s = ctx;
  shm_req *q = NULL;
  ZRT_CHECK(req_new(s, SHM_RS, dt, &q));
  q->send = send;
  q->recv = recv;
  q->red = op;
  memcpy(q->counts, counts, (size_t)s->nranks * sizeof *counts);
  size_t rounds = layout(s, q, red_piece(s, dt)), es = zrt_dtype_size(dt);
  size_t total = q->offs[s->nranks - 1] + counts[s->nranks - 1];
  zrt_status st =
      use_nt(s, q, total * es * (size_t)(s->nranks + 1)); /* N sends read, recvs written */
  if (st != ZRT_OK) {
    req_free(s, q);
    return st;
  }
  return shm_issue(s, q, rounds, req);
}

static zrt_status shm_all_gather(void *ctx, const void *send, void *recv, const size_t *counts,
                                 zrt_dtype dt, zrt_comm_req **req) {
  shm_ctx *s = ctx;
  shm_req *q = NULL;
  ZRT_CHECK(req_new(s, SHM_AG, dt, &q));
  q->send = send;
  q->recv = recv;
  memcpy(q->counts, counts, (size_t)s->nranks * sizeof *counts);
  size_t rounds = layout(s, q, s->region / zrt_dtype_size(dt)), es = zrt_dtype_size(dt);
  size_t total = q->offs[s->nranks - 1] + counts[s->nranks - 1];
  zrt_status st = use_nt(s, q, total * es * (size_t)s->nranks);
  if (st != ZRT_OK) {
    req_free(s, q);
    return st;
  }
  return shm_issue(s, q, rounds, req);
}

static zrt_status shm_broadcast(void *ctx, void *buf, size_t count, zrt_dtype dt, int root,
                                zrt_comm_req **req) {
  shm_ctx *s = ctx;
  shm_req *q = NULL;
  ZRT_CHECK(req_new(s, SHM_BC, dt, &q));
  q->recv = buf;
  q->root = root;
  q->counts[0] = count;
  q->q = s->region / zrt_dtype_size(dt);
  size_t rounds = count ? (count + q->q - 1) / q->q : 0;
  zrt_status st = use_nt(s, q, count * zrt_dtype_size(dt) * (size_t)s->nranks);
  if (st != ZRT_OK) {
    req_free(s, q);
    return st;
  }
  return shm_issue(s, q, rounds, req);
}

static zrt_status shm_barrier(void *ctx) {
  shm_ctx *s = ctx;
  shm_req *q = NULL;
  ZRT_CHECK(req_new(s, SHM_BARRIER, ZRT_F32, &q));
  /* On timeout the request stays queued (the barrier is still pending). */
  return shm_issue(s, q, 1, NULL);
}

/* ------------------------------------------------------------ lifecycle */

static void shm_destroy(void *ctx) {
  shm_ctx *s = ctx;
  if (!s) return;
  if (s->inflight > 0)
    zrt_log(ZRT_LOG_WARN, "shm comm: %d collective(s) still in flight at destroy", s->inflight);
  zrt_shm_zc_release(s);
  if (s->hdr) munmap(s->hdr, s->map_bytes);
  /* With a collective given up on (timed out, or a rank died) the other
   * ranks may never reach MPI_Finalize: leave MPI up, as the MPI comm does. */
  if (s->inflight == 0 && s->broken == ZRT_OK && s->mpi.iface) s->mpi.iface->destroy(s->mpi.ctx);
  free(s);
}

static const zrt_comm_iface shm_iface = {
    .name = "shm",
    .all_reduce = shm_all_reduce,
    .reduce_scatter = shm_reduce_scatter,
    .all_gather = shm_all_gather,
    .broadcast = shm_broadcast,
    .barrier = shm_barrier,
    .wait = shm_wait,
    .test = shm_test,
    .destroy = shm_destroy,
    .mem_alloc = zrt_shm_zc_alloc,
    .mem_free = zrt_shm_zc_free,
};

/* Creates (rank 0) or opens the segment and maps it. Fills why on failure. */
static int shm_map(shm_ctx *s, const char *name, size_t bytes, char *why, size_t whylen) {
  int fd =
      s->rank == 0 ? shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600) : shm_open(name, O_RDWR, 0600);
  if (fd < 0) {
    snprintf(why, whylen, "shm_open(%s): %s", name, strerror(errno));
    return -1;
  }
  if (s->rank == 0) {
    /* reserve the pages now: a full /dev/shm must fail here, not SIGBUS a
     * rank in the middle of a collective */
    int e = ftruncate(fd, (off_t)bytes) != 0 ? errno : posix_fallocate(fd, 0, (off_t)bytes);
    if (e) {
      snprintf(why, whylen, "reserving %zu bytes of shared memory (/dev/shm): %s", bytes,
               strerror(e));
      close(fd);
      return -1;
    }
  }
  void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) {
    snprintf(why, whylen, "mmap of %zu shared bytes: %s", bytes, strerror(errno));
    return -1;
  }
  s->hdr = p;
  s->map_bytes = bytes;
  return 0;
}

zrt_status zrt_comm_shm_init(zrt_comm *c, zrt_backend *backend, char *why, size_t whylen) {
  return zrt_comm_shm_init_on(c, backend, NULL, why, whylen);
}

zrt_status zrt_comm_shm_init_on(zrt_comm *c, zrt_backend *backend, const void *parent, char *why,
                                size_t whylen) {
  zrt_status st = ZRT_OK;
  why[0] = 0;
  ZRT_CHECK(zrt_comm_mpi_init_on(c, backend, parent));
  /* From here c is a working MPI comm; it stays one when shared memory
   * cannot serve these ranks. */
  if (backend && backend->device_id >= 0) {
    snprintf(why, whylen, "buffers are on a device (%s backend)", backend->iface->name);
    return ZRT_OK;
  }
  if (c->local_world != c->world) {
    snprintf(why, whylen, "ranks on several machines (%d of %d on this one)", c->local_world,
             c->world);
    return ZRT_OK;
  }
  if (c->world > SHM_MAX_RANKS) {
    snprintf(why, whylen, "%d ranks, more than the %d one segment serves", c->world, SHM_MAX_RANKS);
    return ZRT_OK;
  }
  shm_ctx *s = calloc(1, sizeof *s);
  if (!s) return zrt_error(ZRT_ERR_OOM, "shm comm: out of host memory");
  s->c = c;
  s->mpi = *c; /* the MPI comm's iface and ctx; its ctx keeps reading c->timeout_s */
  s->rank = c->rank;
  s->nranks = c->world;
  s->region = SHM_REGION_BYTES;
  const char *rs = zrt_env("ZRT_COMM_SHM_REGION");
  uint64_t rv = 0;
  if (rs && *rs) {
    if (!zrt_parse_size(rs, &rv) || rv < SHM_REGION_MIN || rv > ((uint64_t)1 << 30)) {
      free(s);
      return zrt_error(ZRT_ERR_CONFIG,
                       "ZRT_COMM_SHM_REGION=\"%s\": expected a size from %zu bytes to 1GiB (e.g. "
                       "4KiB); unset it for the default %zu bytes",
                       rs, SHM_REGION_MIN, SHM_REGION_BYTES);
    }
    s->region = (size_t)rv / 64 * 64;
  }
  size_t bytes = sizeof(shm_hdr) + 4 * (size_t)s->nranks * s->region;
  /* rank 0 names the segment; every rank learns it over MPI */
  char name[64] = {0};
  if (s->rank == 0) {
    zrt_shm_sweep_stale(); /* one rank per machine: the segment's group */
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    snprintf(name, sizeof name, "/zrt-shm-%d-%d-%lx", (int)getuid(), (int)getpid(),
             (unsigned long)ts.tv_nsec ^ (unsigned long)ts.tv_sec);
  }
  ZRT_CHECK_GOTO(zrt_comm_mpi_bcast_bytes(s->mpi.ctx, name, sizeof name, 0), st, fail_mpi);
  /* rank 0 creates before the others open: its result goes out first */
  int ok = 1;
  char mywhy[256] = "";
  if (s->rank == 0) ok = shm_map(s, name, bytes, mywhy, sizeof mywhy) == 0;
  float f = ok ? 1.0f : 0.0f;
  ZRT_CHECK_GOTO(s->mpi.iface->all_reduce(s->mpi.ctx, &f, &f, 1, ZRT_F32, ZRT_RED_MIN, NULL), st,
                 fail_mpi);
  if (f == 1.0f && s->rank != 0) ok = shm_map(s, name, bytes, mywhy, sizeof mywhy) == 0;
  if (ok && s->hdr) {
    if (s->rank == 0) {
      s->hdr->magic = SHM_MAGIC;
      s->hdr->nranks = s->nranks;
      s->hdr->region_bytes = s->region;
    }
    s->hdr->ctl[s->rank].pid = (int32_t)getpid();
    __atomic_store_n(&s->hdr->ctl[s->rank].phase, 0, __ATOMIC_RELEASE);
  }
  float g = ok ? 1.0f : 0.0f;
  ZRT_CHECK_GOTO(s->mpi.iface->all_reduce(s->mpi.ctx, &g, &g, 1, ZRT_F32, ZRT_RED_MIN, NULL), st,
                 fail_mpi);
  /* everyone mapped it (or gave up): the name can go */
  if (s->rank == 0) shm_unlink(name);
  if (g != 1.0f || (s->hdr && s->hdr->magic != SHM_MAGIC)) {
    snprintf(why, whylen, "shared memory unavailable%s%s", mywhy[0] ? ": " : " on another rank",
             mywhy);
    if (s->hdr) munmap(s->hdr, s->map_bytes);
    free(s);
    return ZRT_OK; /* c is still the MPI comm */
  }
  s->data = (char *)s->hdr + sizeof(shm_hdr);
  s->res = s->data + 2 * (size_t)s->nranks * s->region;
  c->iface = &shm_iface;
  c->ctx = s;
  return ZRT_OK;
fail_mpi:
  if (s->hdr) munmap(s->hdr, s->map_bytes);
  if (s->rank == 0 && name[0]) shm_unlink(name);
  free(s);
  return st; /* c is still the MPI comm; the caller destroys it */
}
