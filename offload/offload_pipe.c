/*
 * offload_pipe.c — the offloaded optimizer step (see offload.h).
 *
 * The shard is cut into tiles of tile_elems. While the CPU optimizer
 * (OpenMP threads) updates tile k, one copy thread moves the grads of tile
 * k+1 device->host into the other half of a double-buffered pinned staging
 * area, sends the new 16-bit params of tile k-1 host->device, and in NVMe
 * mode reads master/state tile k+1 from and writes tile k-1 to the swap
 * files. Main and copy thread meet once per tile, so every buffer has one
 * owner at a time:
 *   grad staging  [k%2]  written by the copy thread at k-1, read by the update at k
 *   param staging [k%2]  written by the update at k, read by the copy thread at k+1
 *   state staging [k%2]  (NVMe) filled at k-1, updated at k, written back at k+1
 * Where copies are asynchronous the copy thread issues each copy on its
 * own stream and synchronizes that stream, so a copy is complete when its
 * job is; the D2H stream first joins every backend stream
 * (zrt_backend_stream_join) and the prologue synchronizes it, so the grads
 * the compute stream produced are complete before they are read and the
 * params it still reads are not overwritten early; on the CPU backend
 * copies are plain memcpys of accounted host memory. The update
 * is zrt_cpu_optim_step on the same bytes, so the pipe's results are bitwise
 * those of one zrt_cpu_optim_step over the whole shard.
 *
 * Stream mode (backends whose host functions are stream ops, cuda and the
 * twin, and staging registered with the backend): no copy thread and no
 * host wait.
 * Each tile k is three stream steps ordered by events: IN(k) on s_d2h
 * (grad copies into gstage[k%2], the NVMe read into sbuf[k%2] as a host
 * function), UPD(k) on s_upd (the update as a host function), WB(k) on
 * s_h2d (the param copy out of pstage[k%2]) with the NVMe write on s_d2h
 * (so one thread at a time does NVMe I/O, as the copy thread). IN(k)
 * waits for WB(k-2) (ev_out[k%2]: the staging half is free again; UPD(k)
 * after IN(k) so too),
 * UPD(k) for IN(k) (ev_in), WB(k) for UPD(k) (ev_upd); IN(k+1) is queued
 * before UPD(k), so copies overlap the update as in thread mode. A run
 * starts after all work queued on the backend (one join) and ends with a
 * host function on s_h2d (NVMe commit, timing) whose event the backend's
 * stream waits for: work queued there afterwards sees the new params; the
 * host sees results after zrt_offload_pipe_sync, which every pipe call that
 * reads or writes pipe-held state on the host makes first. Host functions
 * get their hyper-parameters and segments by value (a run-owned copy the
 * last host function frees): the caller's may be gone when they run. The
 * host functions touch host memory only and issue no backend ops
 * (cudaLaunchHostFunc's rule: zrt_backend_enqueue_host_named).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtype.h"
#include "nvme.h"
#include "offload.h"

#define ZRT_PIPE_DEFAULT_TILE (1u << 20)

typedef struct zrt_pipe_job {
  int k; /* tile being updated by the main thread; -1 = prologue */
  const zrt_optim_hparams *hp;
  const void *grad_dev;
  int grad_host; /* grad_dev is host memory: read in place, not copied */
  zrt_dtype gdt;
  void *param16_dev;
  zrt_dtype pdt;
  size_t n;
  const zrt_offload_segment *segs; /* segment mode (n = file set size), else NULL */
  int nsegs;
} zrt_pipe_job;

struct zrt_offload_pipe {
  zrt_backend *be;
  zrt_hostpool *hpool;
  size_t tile;
  int buffer_count;
  void *gstage[2], *pstage[2]; /* pinned staging, 4 bytes/elem each */
  int greg[2], preg[2];        /* ... registered by the pipe (an unpinned host pool) */
  void *sraw[2][3];            /* NVMe state staging (raw pool pointers) */
  float *sbuf[2][3];           /* ... aligned to ZRT_NVME_ALIGN */
  zrt_stream s_d2h, s_h2d;
  /* stream mode (see the top): the update stream, the ordering events, and
   * whether a run may still be in flight (the host has not synchronized) */
  int async;
  zrt_stream s_upd;
  zrt_event ev_in[2], ev_upd[2], ev_out[2], ev_io, ev_tail;
  int pending;
  double run_copy_s, run_upd_s; /* the running step's host-function times (NVMe I/O on
                                   s_d2h, updates on s_upd: one writer each) */
  int param16_host;   /* param16 destinations are host memory: written in place, no copy */
  int pool_pinned;    /* the host pool's pages are pinned (zrt_hostpool_pinned) */
  zrt_dtype mdt, sdt; /* host-memory master / state dtypes of plain steps (fp32 or bf16) */
  zrt_nvme *nv;
  size_t nv_n;
  int nv_states;
  zrt_offload_timing timing;

  pthread_t thr;
  int thr_ok;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int posted, done, quit;
  zrt_pipe_job job;
  zrt_status job_st;
  double job_copy_s;
  char errbuf[1024];
  int nvme;
  char nvme_path[512];
  char nvme_prefix[64];
};

static size_t zrt_pipe_tiles(const zrt_offload_pipe *p, size_t n) { return ZRT_DIV_UP(n, p->tile); }

/* First segment that ends after element lo (segments are sorted). */
static int zrt_pipe_seg_first(const zrt_offload_segment *s, int ns, size_t lo) {
  int a = 0, b = ns;
  while (a < b) {
    int mid = (a + b) / 2;
    if (s[mid].file_off + s[mid].n <= lo)
      a = mid + 1;
    else
      b = mid;
  }
  return a;
}

/* Segment mode: grads of every segment piece in tile `t` into its grad
 * staging (in = 1), or the new params of tile t out of its param staging. */
static zrt_status zrt_pipe_seg_copies(zrt_offload_pipe *p, const zrt_pipe_job *j, size_t t,
                                      int in) {
  size_t gsz = zrt_dtype_size(j->gdt), psz = zrt_dtype_size(j->pdt);
  size_t t0 = t * p->tile, t1 = ZRT_MIN(t0 + p->tile, j->n);
  for (int i = zrt_pipe_seg_first(j->segs, j->nsegs, t0); i < j->nsegs && j->segs[i].file_off < t1;
       i++) {
    const zrt_offload_segment *sg = &j->segs[i];
    size_t lo = ZRT_MAX(t0, sg->file_off), hi = ZRT_MIN(t1, sg->file_off + sg->n);
    if (lo >= hi) continue;
    size_t rel = lo - t0, so = lo - sg->file_off, len = hi - lo;
    if (in && sg->grad_host) continue; /* read in place by the update */
    if (in)
      ZRT_CHECK(zrt_backend_memcpy(p->be, (char *)p->gstage[t % 2] + rel * gsz,
                                   (const char *)sg->grad_dev + so * gsz, len * gsz, ZRT_COPY_D2H,
                                   p->s_d2h));
    else if (sg->param16_dev && !p->param16_host)
      ZRT_CHECK(zrt_backend_memcpy(p->be, (char *)sg->param16_dev + so * psz,
                                   (char *)p->pstage[t % 2] + rel * psz, len * psz, ZRT_COPY_H2D,
                                   p->s_h2d));
  }
  return ZRT_OK;
}

/* The copy thread's share of iteration k: grads of k+1 in, params of k-1 out,
 * NVMe state of k+1 in and of k-1 out. */
static zrt_status zrt_pipe_copy_work(zrt_offload_pipe *p, const zrt_pipe_job *j) {
  size_t tiles = zrt_pipe_tiles(p, j->n);
  size_t gsz = zrt_dtype_size(j->gdt), psz = zrt_dtype_size(j->pdt);
  long in = j->k + 1, out = j->k - 1;
  if (j->segs) {
    if (out >= 0) {
      size_t off = (size_t)out * p->tile, len = ZRT_MIN(p->tile, j->n - off);
      ZRT_CHECK(zrt_pipe_seg_copies(p, j, (size_t)out, 0));
      ZRT_CHECK(zrt_nvme_tile_io(p->nv, 1, off, len, p->sbuf[out % 2]));
    }
    if (in < (long)tiles) {
      size_t off = (size_t)in * p->tile, len = ZRT_MIN(p->tile, j->n - off);
      ZRT_CHECK(zrt_pipe_seg_copies(p, j, (size_t)in, 1));
      ZRT_CHECK(zrt_nvme_tile_io(p->nv, 0, off, len, p->sbuf[in % 2]));
    }
    ZRT_CHECK(zrt_backend_synchronize(p->be, p->s_d2h));
    ZRT_CHECK(zrt_backend_synchronize(p->be, p->s_h2d));
    return ZRT_OK;
  }
  if (out >= 0 && j->param16_dev && !p->param16_host) {
    size_t off = (size_t)out * p->tile, len = ZRT_MIN(p->tile, j->n - off);
    ZRT_CHECK(zrt_backend_memcpy(p->be, (char *)j->param16_dev + off * psz, p->pstage[out % 2],
                                 len * psz, ZRT_COPY_H2D, p->s_h2d));
  }
  if (out >= 0 && p->nv) {
    size_t off = (size_t)out * p->tile, len = ZRT_MIN(p->tile, j->n - off);
    ZRT_CHECK(zrt_nvme_tile_io(p->nv, 1, off, len, p->sbuf[out % 2]));
  }
  if (in < (long)tiles) {
    size_t off = (size_t)in * p->tile, len = ZRT_MIN(p->tile, j->n - off);
    if (!j->grad_host)
      ZRT_CHECK(zrt_backend_memcpy(p->be, p->gstage[in % 2], (const char *)j->grad_dev + off * gsz,
                                   len * gsz, ZRT_COPY_D2H, p->s_d2h));
    if (p->nv) ZRT_CHECK(zrt_nvme_tile_io(p->nv, 0, off, len, p->sbuf[in % 2]));
  }
  ZRT_CHECK(zrt_backend_synchronize(p->be, p->s_d2h));
  ZRT_CHECK(zrt_backend_synchronize(p->be, p->s_h2d));
  return ZRT_OK;
}

static void *zrt_pipe_thread(void *arg) {
  zrt_offload_pipe *p = arg;
  pthread_mutex_lock(&p->mu);
  for (;;) {
    while (!p->posted && !p->quit) pthread_cond_wait(&p->cv, &p->mu);
    if (p->quit) break;
    zrt_pipe_job j = p->job;
    p->posted = 0;
    pthread_mutex_unlock(&p->mu);
    double t0 = zrt_now_s();
    zrt_status st = zrt_pipe_copy_work(p, &j);
    double dt = zrt_now_s() - t0;
    pthread_mutex_lock(&p->mu);
    p->job_st = st;
    p->job_copy_s = dt;
    /* the message is in this thread's last-error slot; hand it over */
    snprintf(p->errbuf, sizeof p->errbuf, "%s", st != ZRT_OK ? zrt_last_error() : "");
    p->done = 1;
    pthread_cond_broadcast(&p->cv);
  }
  pthread_mutex_unlock(&p->mu);
  return NULL;
}

static void zrt_pipe_post(zrt_offload_pipe *p, const zrt_pipe_job *j) {
  pthread_mutex_lock(&p->mu);
  p->job = *j;
  p->posted = 1;
  p->done = 0;
  pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->mu);
}

static zrt_status zrt_pipe_wait(zrt_offload_pipe *p, double *copy_s) {
  pthread_mutex_lock(&p->mu);
  while (!p->done) pthread_cond_wait(&p->cv, &p->mu);
  zrt_status st = p->job_st;
  *copy_s += p->job_copy_s;
  pthread_mutex_unlock(&p->mu);
  if (st != ZRT_OK) return zrt_error(st, "%s", p->errbuf);
  return ZRT_OK;
}

/* The optimizer update of tile k (elements [off, off + len) of the step)
 * on the main thread, while the copy thread moves tiles k+1 in and k-1 out. */
typedef zrt_status (*zrt_pipe_update_fn)(zrt_offload_pipe *p, const zrt_pipe_job *j, size_t k,
                                         size_t off, size_t len, void *arg);

/* One pipelined step over j->n elements: prologue (tile 0 in), then per
 * tile the copy thread's job posted while update() runs, the copy thread
 * always met before an error returns; epilogue (last tile out), the NVMe
 * commit (NVMe mode) and the step's timing. */
static zrt_status zrt_pipe_run(zrt_offload_pipe *p, zrt_pipe_job *j, zrt_pipe_update_fn update,
                               void *arg) {
  double t0 = zrt_now_s(), copy_s = 0, upd_s = 0;
  size_t n = j->n, tiles = zrt_pipe_tiles(p, n);
  j->k = -1;
  /* The grads were produced, and the params are still read, by work queued
   * on the backend's other streams (the compute stream): the D2H stream
   * starts after it (events, no host wait), and the prologue's synchronize
   * of that stream returns after it, so every H2D copy, issued later, comes
   * after it too (the H2D stream's own join was idle: the mutation run) */
  ZRT_CHECK(zrt_backend_stream_join(p->be, p->s_d2h));
  zrt_pipe_post(p, j); /* prologue: tile 0 in */
  ZRT_CHECK(zrt_pipe_wait(p, &copy_s));
  for (size_t k = 0; k < tiles; k++) {
    j->k = (int)k;
    zrt_pipe_post(p, j);
    size_t off = k * p->tile, len = ZRT_MIN(p->tile, n - off);
    double u0 = zrt_now_s();
    zrt_status ust = update(p, j, k, off, len, arg);
    upd_s += zrt_now_s() - u0;
    /* always meet the copy thread before returning, even on error */
    zrt_status st = zrt_pipe_wait(p, &copy_s);
    if (ust != ZRT_OK) return ust;
    if (st != ZRT_OK) return st;
  }
  j->k = (int)tiles; /* epilogue: last tile out */
  zrt_pipe_post(p, j);
  ZRT_CHECK(zrt_pipe_wait(p, &copy_s));
  if (p->nv) ZRT_CHECK(zrt_nvme_commit(p->nv));
  p->timing.total_s = zrt_now_s() - t0;
  p->timing.copy_s = copy_s;
  p->timing.update_s = upd_s;
  double hidden = copy_s + upd_s - p->timing.total_s;
  p->timing.hidden_fraction = copy_s > 0 ? ZRT_MAX(0.0, ZRT_MIN(1.0, hidden / copy_s)) : 1.0;
  return ZRT_OK;
}

/* Master / states of a plain step in host memory (NULL in NVMe mode,
 * where the copy thread swaps tiles into p->sbuf). */
typedef struct zrt_pipe_host_state {
  void *master, *s1, *s2; /* p->mdt / p->sdt elements */
} zrt_pipe_host_state;

/* ------------------------------------------------------------ stream mode */

/* One run's by-value state for its host functions: the job with the
 * hyper-parameters and segments copied (the caller's may be gone when the
 * functions run). Heap; the run's last host function frees it (a run that
 * failed to queue keeps it: its stream's error is sticky, the pipe is done). */
typedef struct zrt_pipe_run_ctx {
  zrt_pipe_job j; /* j.hp -> hp, j.segs -> segs */
  zrt_optim_hparams hp;
  zrt_offload_segment *segs; /* each segment's own hp points into shp */
  zrt_optim_hparams *shp;
  zrt_pipe_update_fn update;
  zrt_pipe_host_state hs;
  int has_hs;
  double t0; /* when the run was queued (the step's total time starts there) */
} zrt_pipe_run_ctx;

typedef struct zrt_pipe_fn_args {
  zrt_offload_pipe *p;
  zrt_pipe_run_ctx *run;
  size_t k, off, len;
  int write; /* NVMe tile I/O: 1 = write tile k back, 0 = read it in */
} zrt_pipe_fn_args;

static zrt_status zrt_pipe_fn_update(void *arg) {
  const zrt_pipe_fn_args *a = arg;
  zrt_pipe_run_ctx *r = a->run;
  double u0 = zrt_now_s();
  zrt_status st = r->update(a->p, &r->j, a->k, a->off, a->len, r->has_hs ? &r->hs : NULL);
  a->p->run_upd_s += zrt_now_s() - u0; /* only s_upd's worker writes it */
  return st;
}

/* NVMe tile I/O of tile k, reads and writes alike on s_d2h (one thread at
 * a time in the NVMe set, as the copy thread was). */
static zrt_status zrt_pipe_fn_io(void *arg) {
  const zrt_pipe_fn_args *a = arg;
  zrt_offload_pipe *p = a->p;
  double t0 = zrt_now_s();
  zrt_status st = zrt_nvme_tile_io(p->nv, a->write, a->off, a->len, p->sbuf[a->k % 2]);
  p->run_copy_s += zrt_now_s() - t0;
  return st;
}

/* The run's last op (s_h2d, after every write-back): the NVMe commit, the
 * step's timing, the run's state freed. */
static zrt_status zrt_pipe_fn_tail(void *arg) {
  const zrt_pipe_fn_args *a = arg;
  zrt_offload_pipe *p = a->p;
  zrt_pipe_run_ctx *r = a->run;
  zrt_status st = p->nv ? zrt_nvme_commit(p->nv) : ZRT_OK;
  double copy_s = p->run_copy_s, upd_s = p->run_upd_s;
  p->timing.total_s = zrt_now_s() - r->t0;
  p->timing.copy_s = copy_s;
  p->timing.update_s = upd_s;
  double hidden = copy_s + upd_s - p->timing.total_s;
  p->timing.hidden_fraction = copy_s > 0 ? ZRT_MAX(0.0, ZRT_MIN(1.0, hidden / copy_s)) : 1.0;
  p->run_copy_s = p->run_upd_s = 0;
  free(r->segs);
  free(r->shp);
  free(r);
  return st;
}

/* IN(t): grads of tile t into gstage[t%2], NVMe state into sbuf[t%2], once
 * WB(t-2) has freed that half. */
static zrt_status zrt_pipe_enq_in(zrt_offload_pipe *p, zrt_pipe_run_ctx *r, size_t t) {
  zrt_backend *be = p->be;
  const zrt_pipe_job *j = &r->j;
  size_t b = t % 2, off = t * p->tile, len = ZRT_MIN(p->tile, j->n - off);
  ZRT_CHECK(zrt_backend_stream_wait_event(be, p->s_d2h, p->ev_out[b]));
  if (j->segs)
    ZRT_CHECK(zrt_pipe_seg_copies(p, j, t, 1));
  else if (!j->grad_host)
    ZRT_CHECK(zrt_backend_memcpy(be, p->gstage[b],
                                 (const char *)j->grad_dev + off * zrt_dtype_size(j->gdt),
                                 len * zrt_dtype_size(j->gdt), ZRT_COPY_D2H, p->s_d2h));
  if (p->nv) {
    zrt_pipe_fn_args a = {p, r, t, off, len, 0};
    ZRT_CHECK(zrt_backend_enqueue_host_named(be, zrt_pipe_fn_io, &a, sizeof a, p->s_d2h,
                                             "offload NVMe read"));
  }
  return zrt_backend_event_record(be, p->ev_in[b], p->s_d2h);
}

/* UPD(t) after IN(t) and WB(t-2) (pstage[t%2] free), then WB(t): the new
 * params of tile t out on s_h2d, its NVMe state written back on s_d2h
 * (queued there after IN(t+1) and before IN(t+2), which so finds sbuf[t%2]
 * written back). */
static zrt_status zrt_pipe_enq_upd_wb(zrt_offload_pipe *p, zrt_pipe_run_ctx *r, size_t t) {
  zrt_backend *be = p->be;
  const zrt_pipe_job *j = &r->j;
  size_t b = t % 2, off = t * p->tile, len = ZRT_MIN(p->tile, j->n - off);
  zrt_pipe_fn_args a = {p, r, t, off, len, 0};
  /* IN(t) waited for WB(t-2): waiting for IN(t) orders the update after
   * pstage[t%2]'s last copy out too */
  ZRT_CHECK(zrt_backend_stream_wait_event(be, p->s_upd, p->ev_in[b]));
  ZRT_CHECK(zrt_backend_enqueue_host_named(be, zrt_pipe_fn_update, &a, sizeof a, p->s_upd,
                                           "offload optimizer update"));
  ZRT_CHECK(zrt_backend_event_record(be, p->ev_upd[b], p->s_upd));
  ZRT_CHECK(zrt_backend_stream_wait_event(be, p->s_h2d, p->ev_upd[b]));
  if (j->segs)
    ZRT_CHECK(zrt_pipe_seg_copies(p, j, t, 0));
  else if (j->param16_dev && !p->param16_host)
    ZRT_CHECK(zrt_backend_memcpy(be, (char *)j->param16_dev + off * zrt_dtype_size(j->pdt),
                                 p->pstage[b], len * zrt_dtype_size(j->pdt), ZRT_COPY_H2D,
                                 p->s_h2d));
  if (p->nv) {
    a.write = 1;
    ZRT_CHECK(zrt_backend_stream_wait_event(be, p->s_d2h, p->ev_upd[b]));
    ZRT_CHECK(zrt_backend_enqueue_host_named(be, zrt_pipe_fn_io, &a, sizeof a, p->s_d2h,
                                             "offload NVMe write"));
  }
  return zrt_backend_event_record(be, p->ev_out[b], p->s_h2d);
}

/* zrt_pipe_run in stream mode: queues the run, no host wait (see the top). */
static zrt_status zrt_pipe_run_async(zrt_offload_pipe *p, const zrt_pipe_job *j,
                                     zrt_pipe_update_fn update, const zrt_pipe_host_state *hs) {
  zrt_backend *be = p->be;
  size_t tiles = zrt_pipe_tiles(p, j->n);
  zrt_pipe_run_ctx *r = calloc(1, sizeof *r);
  if (!r) return zrt_error(ZRT_ERR_OOM, "offload pipe: out of host memory queueing a step");
  r->j = *j;
  r->hp = *j->hp;
  r->j.hp = &r->hp;
  r->update = update;
  if (hs) r->hs = *hs;
  r->has_hs = hs != NULL;
  r->t0 = zrt_now_s();
  if (j->segs && j->nsegs) {
    r->segs = malloc((size_t)j->nsegs * sizeof *r->segs);
    r->shp = malloc((size_t)j->nsegs * sizeof *r->shp);
    if (!r->segs || !r->shp) {
      free(r->segs);
      free(r->shp);
      free(r);
      return zrt_error(ZRT_ERR_OOM, "offload pipe: out of host memory queueing a step");
    }
    for (int i = 0; i < j->nsegs; i++) {
      r->segs[i] = j->segs[i];
      if (j->segs[i].hp) {
        r->shp[i] = *j->segs[i].hp;
        r->segs[i].hp = &r->shp[i];
      }
    }
    r->j.segs = r->segs;
  }
  /* the grads were produced (compute, the buckets' host stream), and the
   * params are still read, by work queued on the backend's other streams:
   * the run starts after all of it. One join: UPD(0) waits for IN(0) and
   * WB(0) for UPD(0), so the other two streams start after it too. */
  ZRT_CHECK(zrt_backend_stream_join(be, p->s_d2h));
  p->pending = 1;
  ZRT_CHECK(zrt_pipe_enq_in(p, r, 0));
  for (size_t k = 0; k < tiles; k++) {
    if (k + 1 < tiles) ZRT_CHECK(zrt_pipe_enq_in(p, r, k + 1));
    ZRT_CHECK(zrt_pipe_enq_upd_wb(p, r, k));
  }
  /* the tail commits after the last NVMe write (s_d2h) */
  ZRT_CHECK(zrt_backend_event_record(be, p->ev_io, p->s_d2h));
  ZRT_CHECK(zrt_backend_stream_wait_event(be, p->s_h2d, p->ev_io));
  zrt_pipe_fn_args a = {p, r, tiles, 0, 0, 0};
  ZRT_CHECK(zrt_backend_enqueue_host_named(be, zrt_pipe_fn_tail, &a, sizeof a, p->s_h2d,
                                           "offload step end"));
  ZRT_CHECK(zrt_backend_event_record(be, p->ev_tail, p->s_h2d));
  /* the backend's stream (the next forward, the step's all-gathers queued
   * after it) reads the new params after the run */
  return zrt_backend_stream_wait_event(be, NULL, p->ev_tail);
}

zrt_status zrt_offload_pipe_sync(zrt_offload_pipe *p) {
  if (!p || !p->pending) return ZRT_OK;
  p->pending = 0;
  return zrt_backend_event_synchronize(p->be, p->ev_tail);
}

/* Stream mode's events, created together and destroyed together. */
#define ZRT_PIPE_NEV 8
static void zrt_pipe_events(zrt_offload_pipe *p, zrt_event *evs[ZRT_PIPE_NEV]) {
  zrt_event *all[ZRT_PIPE_NEV] = {&p->ev_in[0],  &p->ev_in[1],  &p->ev_upd[0], &p->ev_upd[1],
                                  &p->ev_out[0], &p->ev_out[1], &p->ev_io,     &p->ev_tail};
  memcpy(evs, all, sizeof all);
}

static void zrt_pipe_free_buffers(zrt_offload_pipe *p) {
  zrt_pool *pool = zrt_hostpool_pool(p->hpool);
  for (int b = 0; b < 2; b++) {
    zrt_hostpool_stage_free(pool, p->be, p->gstage[b], p->greg[b]);
    zrt_hostpool_stage_free(pool, p->be, p->pstage[b], p->preg[b]);
    p->gstage[b] = p->pstage[b] = NULL;
    for (int a = 0; a < 3; a++) {
      zrt_pool_free(pool, p->sraw[b][a]);
      p->sraw[b][a] = NULL;
      p->sbuf[b][a] = NULL;
    }
  }
}

/* The blocking mode's copy thread. */
static zrt_status zrt_pipe_start_thread(zrt_offload_pipe *p) {
  if (pthread_create(&p->thr, NULL, zrt_pipe_thread, p) != 0)
    return zrt_error(ZRT_ERR_INTERNAL, "offload pipe: cannot start the copy thread");
  p->thr_ok = 1;
  return ZRT_OK;
}

zrt_status zrt_offload_pipe_create(zrt_backend *be, zrt_hostpool *hp, const zrt_offload_opts *opts,
                                   zrt_offload_pipe **out) {
  zrt_status st = ZRT_OK;
  if (!be || !hp || !opts || !out)
    return zrt_error(ZRT_ERR_INVALID_ARG, "zrt_offload_pipe_create: NULL argument");
  *out = NULL;
  if (opts->nvme && (!opts->nvme_path || !*opts->nvme_path))
    return zrt_error(
        ZRT_ERR_CONFIG,
        "offload pipe: offload device nvme needs nvme_path (a directory on the "
        "NVMe drive, e.g. zero_optimization.offload_optimizer.nvme_path: /local_nvme)");
  zrt_offload_pipe *p = calloc(1, sizeof *p);
  if (!p) return zrt_error(ZRT_ERR_OOM, "offload pipe: out of host memory");
  p->be = be;
  p->hpool = hp;
  p->tile = opts->tile_elems ? opts->tile_elems : ZRT_PIPE_DEFAULT_TILE;
  /* NVMe tiles must start on O_DIRECT boundaries: 1024 fp32 = 4096 bytes */
  p->tile = ZRT_ALIGN_UP(p->tile, (size_t)1024);
  p->buffer_count = opts->buffer_count > 0 ? opts->buffer_count : 4;
  p->mdt = p->sdt = ZRT_F32;
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->cv, NULL);
  if (opts->nvme) {
    snprintf(p->nvme_path, sizeof p->nvme_path, "%s", opts->nvme_path);
    snprintf(p->nvme_prefix, sizeof p->nvme_prefix, "%s",
             opts->nvme_prefix ? opts->nvme_prefix : "");
    p->nvme = 1;
  }
  zrt_pool *pool = zrt_hostpool_pool(hp);
  /* stream mode needs host functions that are stream ops and staging the
   * backend copies asynchronously (registered: a copy from pageable memory
   * would read pstage when queued, before the update wrote it). With an
   * unpinned host pool (pin_memory false, the default) the pipe registers
   * its own staging, so stream mode is what a user gets without flags; the
   * masters and states stay pageable, touched only by the host functions. */
  int want_async = !opts->blocking && zrt_backend_host_fn_async(be);
  int pinned = zrt_hostpool_pinned(hp), staged = 1;
  for (int b = 0; b < 2; b++) {
    ZRT_CHECK_GOTO(zrt_hostpool_stage_alloc(pool, be, pinned || !want_async, p->tile * 4,
                                            ZRT_MEM_COMM, &p->gstage[b], &p->greg[b]),
                   st, fail);
    ZRT_CHECK_GOTO(zrt_hostpool_stage_alloc(pool, be, pinned || !want_async, p->tile * 4,
                                            ZRT_MEM_COMM, &p->pstage[b], &p->preg[b]),
                   st, fail);
    staged = staged && (pinned || (p->greg[b] && p->preg[b]));
  }
  ZRT_CHECK_GOTO(zrt_backend_stream_create(be, &p->s_d2h), st, fail);
  ZRT_CHECK_GOTO(zrt_backend_stream_create(be, &p->s_h2d), st, fail);
  p->pool_pinned = pinned;
  p->async = want_async && staged;
  if (p->async) {
    ZRT_CHECK_GOTO(zrt_backend_stream_create(be, &p->s_upd), st, fail);
    zrt_event *evs[ZRT_PIPE_NEV];
    zrt_pipe_events(p, evs);
    for (int i = 0; i < ZRT_PIPE_NEV; i++)
      ZRT_CHECK_GOTO(zrt_backend_event_create(be, evs[i]), st, fail);
    *out = p;
    return ZRT_OK;
  }
  ZRT_CHECK_GOTO(zrt_pipe_start_thread(p), st, fail);
  *out = p;
  return ZRT_OK;
fail:
  zrt_offload_pipe_destroy(p);
  return st;
}

void zrt_offload_pipe_destroy(zrt_offload_pipe *p) {
  if (!p) return;
  /* the staging goes below: the last run must be over (its failure, if
   * any, was the step's or is the caller's next call's to report) */
  if (zrt_offload_pipe_sync(p) != ZRT_OK)
    zrt_log(ZRT_LOG_WARN, "offload pipe: the last step failed: %s", zrt_last_error());
  if (p->thr_ok) {
    pthread_mutex_lock(&p->mu);
    p->quit = 1;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    pthread_join(p->thr, NULL);
  }
  if (p->s_d2h) zrt_backend_stream_destroy(p->be, p->s_d2h);
  if (p->s_h2d) zrt_backend_stream_destroy(p->be, p->s_h2d);
  if (p->s_upd) zrt_backend_stream_destroy(p->be, p->s_upd);
  zrt_event *evs[ZRT_PIPE_NEV];
  zrt_pipe_events(p, evs);
  for (int i = 0; i < ZRT_PIPE_NEV; i++) zrt_backend_event_destroy(p->be, *evs[i]);
  zrt_nvme_destroy(p->nv);
  zrt_pipe_free_buffers(p);
  pthread_cond_destroy(&p->cv);
  pthread_mutex_destroy(&p->mu);
  free(p);
}

/* (Re)creates the swap files and the state staging of a file set. */
static zrt_status zrt_pipe_nvme_files(zrt_offload_pipe *p, size_t n, int nstates) {
  zrt_nvme_destroy(p->nv);
  p->nv = NULL;
  ZRT_CHECK(
      zrt_nvme_create_named(p->nvme_path, p->nvme_prefix, n, 1 + nstates, p->buffer_count, &p->nv));
  p->nv_n = n;
  p->nv_states = nstates;
  zrt_pool *pool = zrt_hostpool_pool(p->hpool);
  size_t bytes = p->tile * 4 + ZRT_NVME_ALIGN;
  for (int b = 0; b < 2; b++)
    for (int a = 0; a < 1 + nstates; a++) {
      if (!p->sraw[b][a])
        ZRT_CHECK(zrt_pool_alloc(pool, bytes, a ? ZRT_MEM_OPTIM_STATE : ZRT_MEM_MASTER32,
                                 &p->sraw[b][a]));
      p->sbuf[b][a] = (float *)ZRT_ALIGN_UP((uintptr_t)p->sraw[b][a], (uintptr_t)ZRT_NVME_ALIGN);
    }
  return ZRT_OK;
}

zrt_status zrt_offload_pipe_nvme_register(zrt_offload_pipe *p, size_t n, int nstates,
                                          const float *master, const float *s1, const float *s2) {
  zrt_status st = ZRT_OK;
  if (!p || !master || nstates < 0 || nstates > 2)
    return zrt_error(ZRT_ERR_INVALID_ARG,
                     "zrt_offload_pipe_nvme_register: need a pipe, the initial master and "
                     "nstates 0..2 (got %d)",
                     nstates);
  if (!p->nvme)
    return zrt_error(ZRT_ERR_INVALID_ARG,
                     "zrt_offload_pipe_nvme_register: this pipe was created without opts.nvme");
  ZRT_CHECK(zrt_offload_pipe_sync(p));
  ZRT_CHECK(zrt_pipe_nvme_files(p, n, nstates));
  float *zeros = NULL;
  ZRT_CHECK_GOTO(zrt_nvme_store(p->nv, 0, master), st, done);
  for (int a = 1; a <= nstates; a++) {
    const float *src = a == 1 ? s1 : s2;
    if (!src) {
      if (!zeros) zeros = calloc(n ? n : 1, 4);
      if (!zeros) {
        st = zrt_error(ZRT_ERR_OOM, "offload pipe: out of host memory");
        goto done;
      }
      src = zeros;
    }
    ZRT_CHECK_GOTO(zrt_nvme_store(p->nv, a, src), st, done);
  }
done:
  free(zeros);
  return st;
}

zrt_status zrt_offload_pipe_nvme_read(zrt_offload_pipe *p, int which, float *dst) {
  if (!p || !p->nv || which < 0 || which > p->nv_states || !dst)
    return zrt_error(ZRT_ERR_INVALID_ARG,
                     "zrt_offload_pipe_nvme_read: no registered NVMe shard or array %d "
                     "out of range",
                     which);
  ZRT_CHECK(zrt_offload_pipe_sync(p));
  return zrt_nvme_load(p->nv, which, dst);
}

static zrt_status zrt_pipe_update_plain(zrt_offload_pipe *p, const zrt_pipe_job *j, size_t k,
                                        size_t off, size_t len, void *arg) {
  const zrt_pipe_host_state *hs = arg;
  void *p16 = !j->param16_dev   ? NULL
              : p->param16_host ? (char *)j->param16_dev + off * zrt_dtype_size(j->pdt)
                                : p->pstage[k % 2];
  const void *g =
      j->grad_host ? (const char *)j->grad_dev + off * zrt_dtype_size(j->gdt) : p->gstage[k % 2];
  if (p->nv) {
    float **sb = p->sbuf[k % 2];
    return zrt_cpu_optim_step(j->hp, sb[0], p->nv_states >= 1 ? sb[1] : NULL,
                              p->nv_states >= 2 ? sb[2] : NULL, g, j->gdt, p16, j->pdt, len);
  }
  size_t msz = zrt_dtype_size(p->mdt), ssz = zrt_dtype_size(p->sdt);
  return zrt_cpu_optim_step_lp(
      j->hp, (char *)hs->master + off * msz, p->mdt, hs->s1 ? (char *)hs->s1 + off * ssz : NULL,
      hs->s2 ? (char *)hs->s2 + off * ssz : NULL, p->sdt, g, j->gdt, p16, j->pdt, len);
}
static zrt_status zrt_pipe_step(zrt_offload_pipe *p, const zrt_optim_hparams *hp, float *master,
                                float *s1, float *s2, const void *grad_dev, int grad_host,
                                zrt_dtype gdt, void *param16_dev, zrt_dtype pdt, size_t n) {
  if (!p || !hp || (n && !grad_dev))
    return zrt_error(ZRT_ERR_INVALID_ARG, "zrt_offload_pipe_step: NULL argument");
  if (p->nvme) {
    if (!p->nv)
      return zrt_error(ZRT_ERR_INVALID_ARG,
                       "offload pipe: NVMe mode but no shard registered — call "
                       "zrt_offload_pipe_nvme_register first");
    if (n != p->nv_n)
      return zrt_error(ZRT_ERR_INVALID_ARG,
                       "offload pipe: step over %zu elements but the NVMe shard has %zu", n,
                       p->nv_n);
    int need = zrt_optim_nstates(hp->type, hp->momentum);
    if (need != p->nv_states)
      return zrt_error(ZRT_ERR_INVALID_ARG,
                       "offload pipe: optimizer needs %d state array(s) but the NVMe shard "
                       "was registered with %d",
                       need, p->nv_states);
  } else if (n && !master) {
    return zrt_error(ZRT_ERR_INVALID_ARG, "zrt_offload_pipe_step: master is NULL");
  }
  if (!p->async)
    memset(&p->timing, 0, sizeof p->timing); /* stream mode: the run's tail writes it */
  if (n == 0) return ZRT_OK;
  zrt_pipe_job j = {.hp = hp,
                    .grad_dev = grad_dev,
                    .grad_host = grad_host,
                    .gdt = gdt,
                    .param16_dev = param16_dev,
                    .pdt = pdt,
                    .n = n};
  zrt_pipe_host_state hs = {master, s1, s2};
  if (p->async) return zrt_pipe_run_async(p, &j, zrt_pipe_update_plain, &hs);
  return zrt_pipe_run(p, &j, zrt_pipe_update_plain, &hs);
}

zrt_status zrt_offload_pipe_step(zrt_offload_pipe *p, const zrt_optim_hparams *hp, float *master,
                                 float *s1, float *s2, const void *grad_dev, zrt_dtype gdt,
                                 void *param16_dev, zrt_dtype pdt, size_t n) {
  return zrt_pipe_step(p, hp, master, s1, s2, grad_dev, 0, gdt, param16_dev, pdt, n);
}

zrt_status zrt_offload_pipe_step_host_grad(zrt_offload_pipe *p, const zrt_optim_hparams *hp,
                                           float *master, float *s1, float *s2,
                                           const void *grad_host, zrt_dtype gdt, void *param16_dev,
                                           zrt_dtype pdt, size_t n) {
  return zrt_pipe_step(p, hp, master, s1, s2, grad_host, 1, gdt, param16_dev, pdt, n);
}

zrt_status zrt_offload_pipe_set_param16_host(zrt_offload_pipe *p, int host) {
  if (!p) return ZRT_OK;
  p->param16_host = host;
  /* In stream mode a host function writes the 16-bit host shard, and a copy
   * from pageable memory to the device reads its source when it is queued
   * (CUDA stages it then, the twin alike), before that function ran: with
   * an unpinned host pool the pipe steps blocking instead (ThreadSanitizer
   * on the twin: a stage-3 gather at world 1 read the shard while the
   * update wrote it). */
  if (!host || !p->async || p->pool_pinned || p->thr_ok) return ZRT_OK;
  ZRT_CHECK(zrt_offload_pipe_sync(p));
  ZRT_CHECK(zrt_pipe_start_thread(p));
  p->async = 0;
  return ZRT_OK;
}

zrt_status zrt_offload_pipe_set_state_dtypes(zrt_offload_pipe *p, zrt_dtype master,
                                             zrt_dtype states) {
  if (!p) return zrt_error(ZRT_ERR_INVALID_ARG, "zrt_offload_pipe_set_state_dtypes: NULL pipe");
  if ((master != ZRT_F32 && master != ZRT_BF16) || (states != ZRT_F32 && states != ZRT_BF16))
    return zrt_error(ZRT_ERR_INVALID_ARG,
                     "offload pipe: master dtype %s / state dtype %s: each must be fp32 or bf16",
                     zrt_dtype_name(master), zrt_dtype_name(states));
  if (p->nvme && (master != ZRT_F32 || states != ZRT_F32))
    return zrt_error(ZRT_ERR_INVALID_ARG,
                     "offload pipe: the NVMe swap files hold fp32 master and states only");
  ZRT_CHECK(zrt_offload_pipe_sync(p)); /* a queued run reads them */
  p->mdt = master;
  p->sdt = states;
  return ZRT_OK;
}

void zrt_offload_pipe_timing(zrt_offload_pipe *p, zrt_offload_timing *out) {
  if (!out) return;
  memset(out, 0, sizeof *out);
  if (!p) return;
  /* stream mode: the run's last host function writes the timing; a failed
   * run leaves zeros here and its error sticky for the pipe's next call */
  if (zrt_offload_pipe_sync(p) != ZRT_OK) return;
  *out = p->timing;
}

/* ------------------------------------------------ segmented NVMe file set */

zrt_status zrt_offload_pipe_nvme_open(zrt_offload_pipe *p, size_t n, int nstates) {
  if (!p || nstates < 0 || nstates > 2 || n == 0)
    return zrt_error(ZRT_ERR_INVALID_ARG,
                     "zrt_offload_pipe_nvme_open: need a pipe, n > 0 and nstates 0..2 (got n=%zu, "
                     "nstates %d)",
                     n, nstates);
  if (!p->nvme)
    return zrt_error(ZRT_ERR_INVALID_ARG,
                     "zrt_offload_pipe_nvme_open: this pipe was created without opts.nvme");
  ZRT_CHECK(zrt_offload_pipe_sync(p));
  ZRT_CHECK(zrt_pipe_nvme_files(p, n, nstates));
  for (int a = 0; a <= nstates; a++) ZRT_CHECK(zrt_nvme_zero(p->nv, a));
  return ZRT_OK;
}

zrt_status zrt_offload_pipe_nvme_range(zrt_offload_pipe *p, int which, int write, size_t off,
                                       size_t len, float *buf) {
  if (!p || !p->nv || which < 0 || which > p->nv_states)
    return zrt_error(ZRT_ERR_INVALID_ARG,
                     "zrt_offload_pipe_nvme_range: no NVMe file set or array %d out of range",
                     which);
  ZRT_CHECK(zrt_offload_pipe_sync(p));
  return zrt_nvme_range(p->nv, which, write, off, len, buf);
}

zrt_status zrt_offload_pipe_nvme_sync(zrt_offload_pipe *p) {
  if (!p || !p->nv)
    return zrt_error(ZRT_ERR_INVALID_ARG, "zrt_offload_pipe_nvme_sync: no NVMe file set");
  ZRT_CHECK(zrt_offload_pipe_sync(p));
  return zrt_nvme_sync(p->nv);
}

size_t zrt_offload_pipe_nvme_disk_bytes(const zrt_offload_pipe *p) {
  return p ? zrt_nvme_disk_bytes(p->nv) : 0;
}

void zrt_offload_pipe_nvme_add_io_bytes(zrt_offload_pipe *p, uint64_t *rd, uint64_t *wr) {
  if (!p || !p->nv) return;
  /* the counts of a queued run are final after it: with NVMe the step's
   * bytes cost one host wait (a failed run's error stays sticky for the
   * pipe's next call; the counts then are what was done) */
  if (zrt_offload_pipe_sync(p) != ZRT_OK)
    zrt_log(ZRT_LOG_WARN, "offload pipe: the step's NVMe I/O failed: %s", zrt_last_error());
  zrt_nvme_add_io_bytes(p->nv, rd, wr);
}

/* Updates elements [a, b) of a segment of n elements whose data sit at
 * ms/s1/s2/g/p16 (element a first). zrt_offload_pipe_step on the whole
 * segment sends element i through the ISA's vector body when i < n - n % 8
 * (its tiles are multiples of 8) and through the tail otherwise; the AVX2
 * body and tail may differ in the last bits, so a piece cut by a file tile
 * is split the same way: the body part in whole vectors, a body remainder
 * of < 8 elements through an 8-lane scratch (so it still runs as a
 * vector), the tail part as a call of its own length. (cpu_optim.h allows
 * body and tail 2 ulp apart; tests/unit/test_cpu_optim.c measures 0 today,
 * so this keeps the guarantee under the contract, not just the kernels.) */
static zrt_status zrt_pipe_seg_update(const zrt_optim_hparams *hp, size_t n, size_t a, size_t b,
                                      float *ms, float *s1, float *s2, const void *g, zrt_dtype gdt,
                                      void *p16, zrt_dtype pdt) {
  size_t gsz = zrt_dtype_size(gdt), psz = zrt_dtype_size(pdt);
  size_t nv = n - n % 8, body = a < nv ? ZRT_MIN(b, nv) - a : 0;
  size_t full = body / 8 * 8, rem = body - full;
  if (full) ZRT_CHECK(zrt_cpu_optim_step(hp, ms, s1, s2, g, gdt, p16, pdt, full));
  if (rem) {
    float m8[8] = {0}, a8[8] = {0}, b8[8] = {0}, g8[8] = {0}, p8[8] = {0};
    memcpy(m8, ms + full, rem * 4);
    if (s1) memcpy(a8, s1 + full, rem * 4);
    if (s2) memcpy(b8, s2 + full, rem * 4);
    memcpy(g8, (const char *)g + full * gsz, rem * gsz);
    ZRT_CHECK(zrt_cpu_optim_step(hp, m8, s1 ? a8 : NULL, s2 ? b8 : NULL, g8, gdt, p16 ? p8 : NULL,
                                 pdt, 8));
    memcpy(ms + full, m8, rem * 4);
    if (s1) memcpy(s1 + full, a8, rem * 4);
    if (s2) memcpy(s2 + full, b8, rem * 4);
    if (p16) memcpy((char *)p16 + full * psz, p8, rem * psz);
  }
  size_t t = b - a - body; /* tail part (< 8 elements) */
  if (t)
    ZRT_CHECK(zrt_cpu_optim_step(hp, ms + body, s1 ? s1 + body : NULL, s2 ? s2 + body : NULL,
                                 (const char *)g + body * gsz, gdt,
                                 p16 ? (char *)p16 + body * psz : NULL, pdt, t));
  return ZRT_OK;
}

static zrt_status zrt_pipe_seg_check(const zrt_offload_pipe *p, const zrt_optim_hparams *hp,
                                     const zrt_offload_segment *segs, int nsegs) {
  if (!p->nvme || !p->nv)
    return zrt_error(ZRT_ERR_INVALID_ARG,
                     "offload pipe: segmented step needs an NVMe file set — call "
                     "zrt_offload_pipe_nvme_open first");
  if (nsegs < 0 || (nsegs && !segs))
    return zrt_error(ZRT_ERR_INVALID_ARG, "offload pipe: bad segment table (%d segments)", nsegs);
  size_t end = 0;
  for (int i = 0; i < nsegs; i++) {
    const zrt_offload_segment *s = &segs[i];
    const zrt_optim_hparams *h = s->hp ? s->hp : hp;
    if (s->file_off < end || s->file_off + s->n > p->nv_n || (s->n && !s->grad_dev))
      return zrt_error(ZRT_ERR_INVALID_ARG,
                       "offload pipe: segment %d [%zu, +%zu) overlaps the previous one, is not "
                       "sorted, leaves the %zu-element file set or has no grads",
                       i, s->file_off, s->n, p->nv_n);
    int need = zrt_optim_nstates(h->type, h->momentum);
    if (need > p->nv_states)
      return zrt_error(ZRT_ERR_INVALID_ARG,
                       "offload pipe: segment %d's optimizer needs %d state array(s) but the "
                       "NVMe file set has %d",
                       i, need, p->nv_states);
    end = s->file_off + s->n;
  }
  return ZRT_OK;
}

/* Tile k of a segmented step: each segment's part of the tile with the
 * segment's hyper-parameters (or the step's); gaps are carried unchanged. */
static zrt_status zrt_pipe_update_segments(zrt_offload_pipe *p, const zrt_pipe_job *j, size_t k,
                                           size_t tl, size_t len, void *arg) {
  (void)arg;
  size_t th = tl + len, gsz = zrt_dtype_size(j->gdt), psz = zrt_dtype_size(j->pdt);
  float **sb = p->sbuf[k % 2];
  for (int i = zrt_pipe_seg_first(j->segs, j->nsegs, tl); i < j->nsegs && j->segs[i].file_off < th;
       i++) {
    const zrt_offload_segment *sg = &j->segs[i];
    size_t lo = ZRT_MAX(tl, sg->file_off), hi = ZRT_MIN(th, sg->file_off + sg->n);
    if (lo >= hi) continue;
    size_t r = lo - tl;
    const char *g = sg->grad_host ? (const char *)sg->grad_dev + (lo - sg->file_off) * gsz
                                  : (char *)p->gstage[k % 2] + r * gsz;
    ZRT_CHECK(zrt_pipe_seg_update(
        sg->hp ? sg->hp : j->hp, sg->n, lo - sg->file_off, hi - sg->file_off, sb[0] + r,
        p->nv_states >= 1 ? sb[1] + r : NULL, p->nv_states >= 2 ? sb[2] + r : NULL, g, j->gdt,
        !sg->param16_dev  ? NULL
        : p->param16_host ? (char *)sg->param16_dev + (lo - sg->file_off) * psz
                          : (char *)p->pstage[k % 2] + r * psz,
        j->pdt));
  }
  return ZRT_OK;
}

zrt_status zrt_offload_pipe_nvme_step_segments(zrt_offload_pipe *p, const zrt_optim_hparams *hp,
                                               const zrt_offload_segment *segs, int nsegs,
                                               zrt_dtype gdt, zrt_dtype pdt) {
  if (!p || !hp)
    return zrt_error(ZRT_ERR_INVALID_ARG, "zrt_offload_pipe_nvme_step_segments: NULL argument");
  ZRT_CHECK(zrt_pipe_seg_check(p, hp, segs, nsegs));
  zrt_pipe_job j = {.hp = hp, .gdt = gdt, .pdt = pdt, .n = p->nv_n, .segs = segs, .nsegs = nsegs};
  if (p->async) return zrt_pipe_run_async(p, &j, zrt_pipe_update_segments, NULL);
  memset(&p->timing, 0, sizeof p->timing);
  return zrt_pipe_run(p, &j, zrt_pipe_update_segments, NULL);
}
