/*
 * comm_hier.c — the hierarchical comm for ranks on several machines (CPU
 * backend, host buffers): a node-level comm over the ranks of this machine
 * (the shm comm; self when the machine has one rank) and a cross-machine
 * MPI comm over the ranks with this rank's local index (self on one
 * machine). Each collective is a fixed sequence of stages of sub-collectives
 * on the two levels; requests run one at a time in issue order, so every
 * rank issues the same sub-collectives in the same order on each level.
 * Stages, layout rules, the order of additions and its bound:
 * docs/comms.md, "The hierarchical comm".
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm_impl.h"
#include "dtype.h"

/* Most machines one request stages (its sub-collective table is inline:
 * a stage issues at most one sub-collective per machine). */
#define HIER_MAX_MACHINES 64

typedef enum { H_AR = 0, H_RS, H_AG, H_BC } hier_op;

typedef struct hier_req {
  zrt_comm_req base; /* first: zrt_comm_req * and hier_req * convert */
  struct hier_req *next;
  hier_op op;
  const void *send;
  void *recv;
  zrt_dtype dt;
  zrt_redop red;
  int root;
  size_t count;   /* all_reduce / broadcast elements */
  size_t *counts; /* world entries (reduce_scatter / all_gather), owned */
  void *tmp;      /* this rank's slice between the levels (pool) */
  int stage;      /* the stage being run */
  int issued;     /* its sub-collectives are issued */
  int nsub, subdone;
  zrt_comm *sublvl[HIER_MAX_MACHINES]; /* per sub-collective: the level it runs on */
  zrt_comm_req **subs;                 /* M + 1 entries */
  int done;                            /* complete (or failed): out of the FIFO */
  int failed; /* a sub-collective failed: waiting on it returns the error */
} hier_req;

typedef struct hier_ctx {
  zrt_comm *c;          /* the comm this ctx backs (timeout_s) */
  zrt_comm node, cross; /* the two levels */
  int have_node, have_cross;
  int cross_mpi;         /* the cross level is an MPI comm (M > 1): alltoallv for reduce_scatter */
  int M, L, n, l;        /* machines, ranks per machine, mine, my local index */
  zrt_pool *pool;        /* "comm hier staging": the slices between levels */
  size_t *scratch;       /* 2 * max(M, L) counts handed to sub-collectives */
  hier_req *head, *tail; /* pending, in issue order; the head runs */
  int inflight;
  zrt_status broken;
  char broken_msg[768];
} hier_ctx;

/* ------------------------------------------------------------ layout */

static size_t part_of(size_t count, int parts, int i) {
  return count / (size_t)parts + ((size_t)i < count % (size_t)parts);
}

/* Elements before segment (machine m, local index j) in the world's
 * rank-ordered layout (ranks are contiguous per machine). */
static size_t world_off(const hier_ctx *s, const size_t *counts, int m, int j) {
  size_t o = 0;
  for (int w = 0; w < m * s->L + j; w++) o += counts[w];
  return o;
}

/* Elements of local index l's segments of machines before m. */
static size_t lane_off(const hier_ctx *s, const size_t *counts, int m) {
  size_t o = 0;
  for (int k = 0; k < m; k++) o += counts[k * s->L + s->l];
  return o;
}

static size_t lane_total(const hier_ctx *s, const size_t *counts) {
  return lane_off(s, counts, s->M);
}

static int nstages(hier_op op) { return op == H_AR || op == H_RS ? 3 : 2; }

/* MAX / MIN of fp32: pick an input, NaN wins (the shm comm's rule). */
static float pick_f32(float a, float b, zrt_redop red) {
  int take = red == ZRT_RED_MAX ? b > a : b < a;
  return ((b != b || take) && a == a) ? b : a;
}

/* recv = red over the M pieces of n elements at in, piece m at in + m*n,
 * in machine order. SUM adds in fp32 (16-bit pieces widened) and rounds
 * once to dt; MAX / MIN pick. */
/* fp32 accumulator elements per pass (8 KiB, in L1 beside the widened input) */
#define HIER_BLOCK 2048
static void reduce_pieces(void *recv, const char *in, int M, size_t n, zrt_dtype dt,
                          zrt_redop red) {
  size_t es = zrt_dtype_size(dt);
  float acc[HIER_BLOCK], x[HIER_BLOCK];
  for (size_t b = 0; b < n; b += HIER_BLOCK) {
    size_t k = n - b < HIER_BLOCK ? n - b : HIER_BLOCK;
    zrt_dtype_convert_host(acc, ZRT_F32, in + b * es, dt, k);
    for (int m = 1; m < M; m++) {
      /* widening is exact: 16-bit MAX / MIN pick in fp32 and narrow back
       * to the same bits */
      zrt_dtype_convert_host(x, ZRT_F32, in + ((size_t)m * n + b) * es, dt, k);
      if (red == ZRT_RED_SUM)
        for (size_t i = 0; i < k; i++) acc[i] += x[i];
      else
        for (size_t i = 0; i < k; i++) acc[i] = pick_f32(acc[i], x[i], red);
    }
    zrt_dtype_convert_host((char *)recv + b * es, dt, acc, ZRT_F32, k);
  }
}

/* Issues stage q->stage of q (docs/comms.md lists them). */
static zrt_status issue_stage(hier_ctx *s, hier_req *q) {
  size_t es = zrt_dtype_size(q->dt), *sc = s->scratch;
  zrt_comm *nd = &s->node, *cr = &s->cross;
  const char *send = q->send;
  char *recv = q->recv, *tmp = q->tmp;
  q->nsub = q->subdone = 0;
  /* call names its request &q->subs[q->nsub]; counted once issued */
#define SUB(lvl, call)                                                                             \
  do {                                                                                             \
    q->sublvl[q->nsub] = (lvl);                                                                    \
    ZRT_CHECK((lvl)->iface->call);                                                                 \
    q->nsub++;                                                                                     \
  } while (0)
  switch (q->op) {
  case H_AR:
    for (int j = 0; j < s->L; j++) sc[j] = part_of(q->count, s->L, j);
    if (q->stage == 0)
      SUB(nd, reduce_scatter(nd->ctx, send, tmp, sc, q->dt, q->red, &q->subs[q->nsub]));
    else if (q->stage == 1)
      SUB(cr, all_reduce(cr->ctx, tmp, tmp, sc[s->l], q->dt, q->red, &q->subs[q->nsub]));
    else
      SUB(nd, all_gather(nd->ctx, tmp, recv, sc, q->dt, &q->subs[q->nsub]));
    break;
  case H_RS:
    if (q->stage == 0) {
      /* per machine m: its block of L segments, reduced over this machine's
       * ranks; local index l keeps segment (m, l) at lane offset m */
      for (int m = 0; m < s->M; m++) {
        for (int j = 0; j < s->L; j++) sc[j] = q->counts[m * s->L + j];
        SUB(nd, reduce_scatter(nd->ctx, send + world_off(s, q->counts, m, 0) * es,
                               tmp + lane_off(s, q->counts, m) * es, sc, q->dt, q->red,
                               &q->subs[q->nsub]));
      }
    } else if (q->stage == 1 && !s->cross_mpi) {
      for (int m = 0; m < s->M; m++) sc[m] = q->counts[m * s->L + s->l];
      SUB(cr, reduce_scatter(cr->ctx, tmp, recv, sc, q->dt, q->red, &q->subs[q->nsub]));
    } else if (q->stage == 1) {
      /* each lane rank m gets its segment's M machine sums (1/L of the
       * data leaves each rank: the ring volume), reduced in stage 2 */
      size_t mine = q->counts[s->n * s->L + s->l];
      for (int m = 0; m < s->M; m++) sc[m] = q->counts[m * s->L + s->l], sc[s->M + m] = mine;
      char *pieces = tmp + lane_total(s, q->counts) * es;
      q->sublvl[q->nsub] = cr;
      ZRT_CHECK(
          zrt_comm_mpi_alltoallv(cr->ctx, tmp, sc, pieces, sc + s->M, q->dt, &q->subs[q->nsub]));
      q->nsub++;
    } else if (s->cross_mpi) {
      size_t mine = q->counts[s->n * s->L + s->l];
      reduce_pieces(recv, tmp + lane_total(s, q->counts) * es, s->M, mine, q->dt, q->red);
    }
    break;
  case H_AG:
    if (q->stage == 0) {
      for (int m = 0; m < s->M; m++) sc[m] = q->counts[m * s->L + s->l];
      SUB(cr, all_gather(cr->ctx, send, tmp, sc, q->dt, &q->subs[q->nsub]));
    } else {
      for (int m = 0; m < s->M; m++) {
        for (int j = 0; j < s->L; j++) sc[j] = q->counts[m * s->L + j];
        SUB(nd,
            all_gather(nd->ctx, tmp + lane_off(s, q->counts, m) * es,
                       recv + world_off(s, q->counts, m, 0) * es, sc, q->dt, &q->subs[q->nsub]));
      }
    }
    break;
  case H_BC: {
    int rm = q->root / s->L, rl = q->root % s->L;
    if (q->stage == 0) {
      /* only the root's lane crosses machines */
      if (s->l == rl) SUB(cr, broadcast(cr->ctx, recv, q->count, q->dt, rm, &q->subs[q->nsub]));
    } else {
      SUB(nd, broadcast(nd->ctx, recv, q->count, q->dt, rl, &q->subs[q->nsub]));
    }
    break;
  }
  }
#undef SUB
  q->issued = 1;
  return ZRT_OK;
}

/* ------------------------------------------------------------ progress */

/* A sub-collective failed (not a timeout): the levels may now be out of
 * step between ranks, so the comm refuses every later call. The message
 * keeps the level's own (a dead rank named by the shm comm) and says
 * which world ranks that level's ranks are. */
static zrt_status hier_break(hier_ctx *s, const zrt_comm *lv, zrt_status st) {
  if (lv == &s->node)
    zrt_error_context(
        st, "hier comm, node level on machine %d (its local rank k is world rank %d+k): ", s->n,
        s->n * s->L);
  else
    zrt_error_context(st,
                      "hier comm, cross-machine level of local index %d (its rank m is world "
                      "rank m*%d+%d): ",
                      s->l, s->L, s->l);
  snprintf(s->broken_msg, sizeof s->broken_msg, "%s", zrt_last_error());
  s->broken = st;
  return st;
}

static void req_free(hier_ctx *s, hier_req *q) {
  if (!q) return;
  /* a sub-collective still in flight (the comm broke mid-stage) may be
   * writing into tmp: leave it */
  if (q->subdone == q->nsub || !q->issued) zrt_pool_free(s->pool, q->tmp);
  free(q->counts);
  free(q->subs);
  free(q);
  s->inflight--;
}

static void pop_head(hier_ctx *s) {
  s->head = s->head->next;
  if (!s->head) s->tail = NULL;
}

/* Runs the FIFO from its head until `target` is done (NULL: until empty).
 * block: wait on sub-collectives (at most timeout_s in all, <= 0 forever);
 * otherwise only test them. 1 done, 0 not yet (timed out when blocking),
 * -1 error in *st: the comm is broken; the request that failed left the
 * FIFO marked failed (its owner frees it on wait or test), the others stay
 * queued until their owners drop them. */
static int progress(hier_ctx *s, hier_req *target, int block, double timeout_s, zrt_status *st) {
  if (s->broken != ZRT_OK) {
    *st = zrt_error(s->broken, "%s", s->broken_msg);
    return -1;
  }
  double t0 = zrt_now_s();
  while (s->head) {
    hier_req *q = s->head;
    if (!q->issued) {
      zrt_status is = issue_stage(s, q);
      if (is != ZRT_OK) {
        *st = hier_break(s, q->sublvl[q->nsub], is);
        pop_head(s);
        q->done = q->failed = 1;
        return -1;
      }
    }
    while (q->subdone < q->nsub) {
      zrt_comm *lv = q->sublvl[q->subdone];
      zrt_comm_req *r = q->subs[q->subdone];
      r->seq = q->base.seq; /* the level names the caller's collective */
      r->op = q->base.op;
      zrt_status ss;
      if (block) {
        double left = timeout_s > 0 ? timeout_s - (zrt_now_s() - t0) : 0;
        if (timeout_s > 0 && left <= 0) return 0;
        double tw = zrt_now_s();
        ss = lv->iface->wait(lv->ctx, r, left);
        /* A timeout leaves r valid (waited on again later); any other
         * failure freed it, so r is not read to tell them apart: a timeout
         * is a COMM failure after the whole time, with the level's timeout
         * message. */
        if (ss == ZRT_ERR_COMM && timeout_s > 0 && zrt_now_s() - tw >= left &&
            strstr(zrt_last_error(), "request did not complete within"))
          return 0;
      } else {
        int d = 0;
        ss = lv->iface->test(lv->ctx, r, &d);
        if (ss == ZRT_OK && !d) return 0;
      }
      q->subdone++; /* r is freed, whatever ss says */
      if (ss != ZRT_OK) {
        *st = hier_break(s, lv, ss);
        pop_head(s);
        q->done = q->failed = 1;
        return -1;
      }
    }
    q->issued = 0;
    if (++q->stage < nstages(q->op)) continue;
    q->done = 1;
    pop_head(s);
    if (q == target) return 1;
  }
  return target ? target->done : 1;
}

/* Unlinks q from the FIFO when it is still queued, and frees it. */
static void req_drop(hier_ctx *s, hier_req *q) {
  hier_req **pp = &s->head, *prev = NULL;
  while (*pp && *pp != q) prev = *pp, pp = &(*pp)->next;
  if (*pp) {
    *pp = q->next;
    if (s->tail == q) s->tail = prev;
  }
  req_free(s, q);
}

/* A request that left the FIFO: its result, and it is freed. */
static zrt_status req_finish(hier_ctx *s, hier_req *q) {
  int failed = q->failed;
  req_free(s, q);
  return failed ? zrt_error(s->broken, "%s", s->broken_msg) : ZRT_OK;
}

static zrt_status hier_wait(void *ctx, zrt_comm_req *req, double timeout_s) {
  hier_ctx *s = ctx;
  hier_req *q = (hier_req *)req;
  zrt_status st = ZRT_OK;
  int got = q->done ? 1 : progress(s, q, 1, timeout_s, &st);
  if (got == 0) {
    req->timed_out = 1;
    return zrt_error(ZRT_ERR_COMM, "hier comm: request did not complete within %gs", timeout_s);
  }
  if (got < 0 && !q->done) {
    req_drop(s, q);
    return st;
  }
  return req_finish(s, q);
}

static zrt_status hier_test(void *ctx, zrt_comm_req *req, int *done) {
  hier_ctx *s = ctx;
  hier_req *q = (hier_req *)req;
  *done = 0;
  zrt_status st = ZRT_OK;
  if (!q->done && progress(s, q, 0, 0, &st) < 0 && !q->done) {
    *done = 1;
    req_drop(s, q);
    return st;
  }
  if (!q->done) return ZRT_OK;
  *done = 1;
  return req_finish(s, q);
}

/* ------------------------------------------------------------ requests */

static zrt_status req_new(hier_ctx *s, hier_op op, zrt_dtype dt, const size_t *counts,
                          size_t tmp_elems, hier_req **out) {
  *out = NULL;
  if (s->broken != ZRT_OK) return zrt_error(s->broken, "%s", s->broken_msg);
  hier_req *q = calloc(1, sizeof *q);
  zrt_comm_req **subs = calloc((size_t)s->M + 1, sizeof *subs);
  size_t *c = counts ? malloc((size_t)s->M * (size_t)s->L * sizeof *c) : NULL;
  if (!q || !subs || (counts && !c)) {
    free(q), free(subs), free(c);
    return zrt_error(ZRT_ERR_OOM, "hier comm: out of host memory for a request");
  }
  if (counts) memcpy(c, counts, (size_t)s->M * (size_t)s->L * sizeof *c);
  q->op = op;
  q->dt = dt;
  q->counts = c;
  q->subs = subs;
  {
    /* at least one element: the levels copy from it even when empty */
    size_t n = tmp_elems ? tmp_elems : 1;
    zrt_status st = zrt_pool_alloc(s->pool, n * zrt_dtype_size(dt), ZRT_MEM_COMM, &q->tmp);
    if (st != ZRT_OK) {
      free(q), free(subs), free(c);
      return zrt_error_context(st,
                               "hier comm: staging %zu elements between the levels: ", tmp_elems);
    }
  }
  s->inflight++;
  *out = q;
  return ZRT_OK;
}

/* Queues q and runs what it can now without blocking. */
static zrt_status hier_issue(hier_ctx *s, hier_req *q, zrt_comm_req **req) {
  if (s->tail)
    s->tail->next = q;
  else
    s->head = q;
  s->tail = q;
  zrt_status st = ZRT_OK;
  if (progress(s, NULL, 0, 0, &st) < 0) {
    req_drop(s, q); /* q, or one before it, failed: the comm is broken */
    return st;
  }
  if (req) {
    *req = &q->base;
    return ZRT_OK;
  }
  return hier_wait(s, &q->base, s->c ? s->c->timeout_s : 0);
}

static zrt_status hier_all_reduce(void *ctx, const void *send, void *recv, size_t count,
                                  zrt_dtype dt, zrt_redop op, zrt_comm_req **req) {
  hier_ctx *s = ctx;
  hier_req *q = NULL;
  ZRT_CHECK(req_new(s, H_AR, dt, NULL, part_of(count, s->L, s->l), &q));
  q->send = send;
  q->recv = recv;
  q->red = op;
  q->count = count;
  return hier_issue(s, q, req);
}

static zrt_status hier_reduce_scatter(void *ctx, const void *send, void *recv, const size_t *counts,
                                      zrt_dtype dt, zrt_redop op, zrt_comm_req **req) {
  hier_ctx *s = ctx;
  hier_req *q = NULL;
  size_t extra = s->cross_mpi ? (size_t)s->M * counts[s->n * s->L + s->l] : 0;
  ZRT_CHECK(req_new(s, H_RS, dt, counts, lane_total(s, counts) + extra, &q));
  q->send = send;
  q->recv = recv;
  q->red = op;
  return hier_issue(s, q, req);
}

static zrt_status hier_all_gather(void *ctx, const void *send, void *recv, const size_t *counts,
                                  zrt_dtype dt, zrt_comm_req **req) {
  hier_ctx *s = ctx;
  hier_req *q = NULL;
  ZRT_CHECK(req_new(s, H_AG, dt, counts, lane_total(s, counts), &q));
  q->send = send;
  q->recv = recv;
  return hier_issue(s, q, req);
}

static zrt_status hier_broadcast(void *ctx, void *buf, size_t count, zrt_dtype dt, int root,
                                 zrt_comm_req **req) {
  hier_ctx *s = ctx;
  hier_req *q = NULL;
  ZRT_CHECK(req_new(s, H_BC, dt, NULL, 0, &q));
  q->recv = buf;
  q->count = count;
  q->root = root;
  return hier_issue(s, q, req);
}

/* Pending collectives first (their sub-collectives come before the
 * barrier's on every rank), then the node barrier and the cross-machine
 * barrier: when rank (m, l) leaves the latter, every (m', l) has left its
 * node barrier, so every rank of every machine has entered. */
static zrt_status hier_barrier(void *ctx) {
  hier_ctx *s = ctx;
  double timeout_s = s->c ? s->c->timeout_s : 0, t0 = zrt_now_s();
  zrt_status st = ZRT_OK;
  int got = progress(s, NULL, 1, timeout_s, &st);
  if (got < 0) return st;
  if (got == 0)
    return zrt_error(ZRT_ERR_COMM,
                     "hier comm: barrier: earlier collectives did not complete "
                     "within %gs",
                     timeout_s);
  zrt_comm *lv[2] = {&s->node, &s->cross};
  for (int i = 0; i < 2; i++) {
    double left = timeout_s > 0 ? timeout_s - (zrt_now_s() - t0) : 0;
    if (timeout_s > 0 && left <= 0)
      return zrt_error(ZRT_ERR_COMM, "hier comm: barrier did not complete within %gs", timeout_s);
    lv[i]->timeout_s = timeout_s > 0 ? left : timeout_s;
    st = lv[i]->iface->barrier(lv[i]->ctx);
    lv[i]->timeout_s = timeout_s;
    if (st != ZRT_OK) {
      /* a timed-out barrier stays pending in its level: out of step */
      return hier_break(s, lv[i], st);
    }
  }
  return ZRT_OK;
}

/* ------------------------------------------------------------ lifecycle */

static void hier_destroy(void *ctx) {
  hier_ctx *s = ctx;
  if (!s) return;
  if (s->inflight > 0 || s->broken != ZRT_OK) {
    /* the levels may hold collectives that never complete: destroying them
     * could block in MPI (the MPI comm's own rule) */
    zrt_log(ZRT_LOG_WARN, "hier comm: %d collective(s) still in flight at destroy%s", s->inflight,
            s->broken != ZRT_OK ? " (the comm failed)" : "");
    return;
  }
  if (s->have_node) s->node.iface->destroy(s->node.ctx);
  if (s->have_cross) s->cross.iface->destroy(s->cross.ctx);
  zrt_pool_destroy(s->pool);
  free(s->scratch);
  free(s);
}

static const zrt_comm_iface hier_iface = {
    .name = "hier",
    .all_reduce = hier_all_reduce,
    .reduce_scatter = hier_reduce_scatter,
    .all_gather = hier_all_gather,
    .broadcast = hier_broadcast,
    .barrier = hier_barrier,
    .wait = hier_wait,
    .test = hier_test,
    .destroy = hier_destroy,
};

static zrt_status host_alloc(void *ctx, size_t bytes, void **out) {
  (void)ctx;
  if (posix_memalign(out, 64, bytes ? bytes : 64) != 0)
    return zrt_error(ZRT_ERR_OOM, "hier comm: out of host memory for %zu staging bytes", bytes);
  return ZRT_OK;
}

static void host_free(void *ctx, void *p, size_t bytes) {
  (void)ctx, (void)bytes;
  free(p);
}

/* Machine of every rank (numbered by first appearance) and whether the
 * layout is one the stages serve: the same number of ranks on every
 * machine, placed contiguously. why says what is wrong otherwise. */
static int machine_map(const uint64_t *hosts, int N, int *mach, int *M, int *L, char *why,
                       size_t whylen) {
  int m = 0;
  for (int r = 0; r < N; r++) {
    mach[r] = -1;
    for (int j = 0; j < r && mach[r] < 0; j++)
      if (hosts[j] == hosts[r]) mach[r] = mach[j];
    if (mach[r] < 0) mach[r] = m++;
  }
  *M = m;
  int *cnt = calloc((size_t)m, sizeof *cnt);
  if (!cnt) {
    snprintf(why, whylen, "out of host memory for the machine map");
    return 0;
  }
  for (int r = 0; r < N; r++) cnt[mach[r]]++;
  int ok = 1;
  for (int k = 1; k < m && ok; k++)
    if (cnt[k] != cnt[0]) {
      snprintf(why, whylen,
               "uneven machines: machine 0 has %d ranks, machine %d has %d (the hierarchical "
               "comm needs the same number on every machine)",
               cnt[0], k, cnt[k]);
      ok = 0;
    }
  *L = cnt[0];
  free(cnt);
  for (int r = 0; r < N && ok; r++)
    if (mach[r] != r / *L) {
      snprintf(why, whylen,
               "ranks not placed contiguously: rank %d is on machine %d, expected machine %d "
               "(place ranks by machine: mpiexec --map-by ppr:%d:node)",
               r, mach[r], r / *L, *L);
      ok = 0;
    }
  return ok;
}

zrt_status zrt_comm_hier_init(zrt_comm *c, zrt_backend *backend, int allow_single, char *why,
                              size_t whylen) {
  zrt_status st = ZRT_OK;
  why[0] = 0;
  ZRT_CHECK(zrt_comm_mpi_init(c, backend));
  /* From here c is the flat MPI comm; it stays one when the layout does
   * not allow the two levels. */
  if (backend && backend->device_id >= 0) {
    snprintf(why, whylen, "buffers are on a device (%s backend)", backend->iface->name);
    return ZRT_OK;
  }
  int N = c->world, M = 0, L = 0;
  int *mach = malloc((size_t)N * sizeof *mach);
  if (!mach) return zrt_error(ZRT_ERR_OOM, "hier comm: out of host memory for the machine map");
  int ok = machine_map(zrt_comm_mpi_hosts(c->ctx), N, mach, &M, &L, why, whylen);
  free(mach);
  if (!ok) return ZRT_OK;
  if (L == 1 && !allow_single) {
    snprintf(why, whylen, "one rank per machine (%d machines): nothing to share within one", M);
    return ZRT_OK;
  }
  if (M > HIER_MAX_MACHINES) {
    snprintf(why, whylen, "%d machines, more than the %d one request stages", M, HIER_MAX_MACHINES);
    return ZRT_OK;
  }
  hier_ctx *s = calloc(1, sizeof *s);
  size_t *scratch = calloc(2 * (size_t)(M > L ? M : L), sizeof *scratch);
  if (!s || !scratch) {
    free(s), free(scratch);
    return zrt_error(ZRT_ERR_OOM, "hier comm: out of host memory");
  }
  s->c = c;
  s->scratch = scratch;
  s->M = M, s->L = L, s->n = c->rank / L, s->l = c->rank % L;
  s->node.timeout_s = s->cross.timeout_s = c->timeout_s;
  MPI_Comm nodec = MPI_COMM_NULL, crossc = MPI_COMM_NULL;
  char nwhy[256] = "";
  int rc = MPI_Comm_split(MPI_COMM_WORLD, s->n, c->rank, &nodec);
  if (rc == MPI_SUCCESS) rc = MPI_Comm_split(MPI_COMM_WORLD, s->l, c->rank, &crossc);
  if (rc != MPI_SUCCESS) {
    st = zrt_error(ZRT_ERR_COMM,
                   "hier comm: MPI_Comm_split into machines and lanes failed on "
                   "rank %d (MPI error %d)",
                   c->rank, rc);
    goto fail;
  }
  if (L > 1)
    st = zrt_comm_shm_init_on(&s->node, backend, &nodec, nwhy, sizeof nwhy);
  else
    st = zrt_comm_self_init(&s->node, backend);
  if (st != ZRT_OK) {
    if (s->node.iface) s->node.iface->destroy(s->node.ctx);
    zrt_error_context(
        st, "hier comm: creating the node-level comm of machine %d (world ranks %d..%d): ", s->n,
        s->n * L, s->n * L + L - 1);
    goto fail;
  }
  s->have_node = 1;
  if (M > 1)
    st = zrt_comm_mpi_init_on(&s->cross, backend, &crossc);
  else
    st = zrt_comm_self_init(&s->cross, backend);
  if (st != ZRT_OK) {
    zrt_error_context(st,
                      "hier comm: creating the cross-machine comm of local index %d (world ranks "
                      "%d, %d, ... step %d): ",
                      s->l, s->l, s->l + L, L);
    goto fail;
  }
  s->have_cross = 1;
  s->cross_mpi = M > 1;
  st = zrt_pool_create("comm hier staging", 0, host_alloc, host_free, NULL, &s->pool);
  if (st != ZRT_OK) goto fail;
  MPI_Comm_free(&nodec);
  MPI_Comm_free(&crossc);
  if (nwhy[0])
    zrt_log_once("comm-hier-node", ZRT_LOG_INFO,
                 "comm: hier: the node level is MPI (shared memory not used: %s)", nwhy);
  snprintf(why, whylen, "%d machine%s x %d rank%s: %s within a machine, mpi across", M,
           M == 1 ? "" : "s", L, L == 1 ? "" : "s",
           L == 1    ? "nothing"
           : nwhy[0] ? "mpi"
                     : "shm");
  /* the flat comm's MPI duplicate is not needed any more (the levels hold
   * their own, so MPI stays initialised) */
  int rank = c->rank, world = c->world, lr = c->local_rank, lw = c->local_world;
  c->iface->destroy(c->ctx);
  c->iface = &hier_iface;
  c->ctx = s;
  c->rank = rank, c->world = world, c->local_rank = lr, c->local_world = lw;
  return ZRT_OK;
fail:
  if (s->have_cross) s->cross.iface->destroy(s->cross.ctx);
  if (s->have_node) s->node.iface->destroy(s->node.ctx);
  if (nodec != MPI_COMM_NULL) MPI_Comm_free(&nodec);
  if (crossc != MPI_COMM_NULL) MPI_Comm_free(&crossc);
  free(s->scratch);
  free(s);
  return st; /* c is still the flat MPI comm; the caller destroys it */
}
