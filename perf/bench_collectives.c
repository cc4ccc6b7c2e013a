/*
 * bench_collectives.c — `zrt-perf collectives`: algbw and busbw of
 * all_reduce, reduce_scatter and all_gather by message size, fp32 and bf16,
 * for each comm the machine has (mpi and shm always; nccl when a GPU and
 * NCCL are there), through the zrt_comm wrappers the engine uses. A busbw
 * above the same run's memcpy at a size that leaves the caches is flagged
 * (zrt_perf_flag).
 *
 * Multi-rank by re-execution: run without mpiexec (OMPI_COMM_WORLD_SIZE
 * unset), the bench starts itself under `mpiexec --oversubscribe
 * --allow-run-as-root --bind-to none -n <--ranks, default 2>` with
 * ZRT_PERF_CHILD_OUT naming a file; rank 0 of the child job writes its
 * result there and the parent merges it, so `zrt-perf all` works like any
 * other bench. Run under mpiexec directly, rank 0 prints and the other
 * ranks' stdout goes to /dev/null.
 *
 * Figures follow nccl-tests: size = bytes of the full buffer (all_reduce:
 * the buffer; reduce_scatter: the send buffer; all_gather: the receive
 * buffer), time = the slowest rank's mean per iteration, algbw = size/time,
 * busbw = algbw * 2(n-1)/n (all_reduce) or (n-1)/n (reduce_scatter,
 * all_gather). Baseline in the same run: the memory copy bandwidth of the
 * comm's buffers (host: the faster of memcpy and a streaming copy, for
 * mpi and shm; device-to-device copy for nccl), bytes copied per second, measured on every rank at
 * once (the copy of a single-host collective competes for the same memory); each point reports
 * busbw / memcpy. The timed loops cycle through buffer sets that together
 * span twice the last-level cache (zrt_co_ring), so a large collective
 * reads memory as the 64 MiB baseline copy does, not what its previous
 * call left in the cache ("buffer_sets" in each comm's JSON).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "comm.h"
#include "comm_xnode.h"
#include "copy_stream.h"
#include "cpu_features.h"
#include "perf.h"

enum { ZRT_CO_AR = 0, ZRT_CO_RS, ZRT_CO_AG, ZRT_CO_NOPS };
/* Messages from this size on do not fit in the caches of the machines zrt
 * runs on (L2 + a share of L3): their busbw cannot beat the copy baseline. */
#define ZRT_CO_CACHE_BYTES ((size_t)16 << 20)
static const char *zrt_co_names[] = {"all_reduce", "reduce_scatter", "all_gather"};

typedef struct zrt_co_cfg {
  size_t min_bytes, max_bytes;
  int factor;      /* size multiplier between points */
  double target_s; /* timed time per point */
  int ranks;
  int repeat;    /* mpiexec jobs; figures are their medians */
  int alternate; /* rounds of the alternated measure at the largest size (0: none) */
  int quick;
  const char *hostfile; /* --hostfile: ranks over several machines */
  int ppn;              /* --ppn: ranks per machine with a hostfile */
  int private_bufs;     /* --buffers private: the sweep's buffers from the backend pool, not
                           zrt_comm_mem_alloc (what the engine uses) */
} zrt_co_cfg;
#define ZRT_CO_MAX_REPEAT 32
#define ZRT_CO_MAX_ROUNDS 64
#define ZRT_CO_ALT_COMMS 3 /* mpi, shm (comm buffers), shm (private buffers) */

static void zrt_co_cfg_from(const zrt_perf_args *a, zrt_co_cfg *c) {
  c->quick = a->quick || getenv("ZRT_PERF_QUICK") != NULL;
  uint64_t v;
  const char *s;
  c->min_bytes = 4096;
  c->max_bytes = c->quick ? (16u << 20) : (64u << 20);
  c->factor = c->quick ? 4 : 2;
  c->target_s = c->quick ? 0.03 : 0.2;
  if ((s = zrt_perf_opt(a, "min")) && zrt_parse_size(s, &v)) c->min_bytes = v;
  if ((s = zrt_perf_opt(a, "max")) && zrt_parse_size(s, &v)) c->max_bytes = v;
  if ((s = zrt_perf_opt(a, "factor"))) c->factor = atoi(s) > 1 ? atoi(s) : 2;
  if ((s = zrt_perf_opt(a, "time"))) c->target_s = atof(s);
  s = zrt_perf_opt(a, "ranks");
  c->ranks = s && atoi(s) > 0 ? atoi(s) : 2;
  s = zrt_perf_opt(a, "repeat");
  c->repeat = s && atoi(s) > 0 ? atoi(s) : 1;
  if (c->repeat > ZRT_CO_MAX_REPEAT) c->repeat = ZRT_CO_MAX_REPEAT;
  c->hostfile = zrt_perf_opt(a, "hostfile");
  s = zrt_perf_opt(a, "ppn");
  c->ppn = s && atoi(s) > 0 ? atoi(s) : 2;
  s = zrt_perf_opt(a, "alternate");
  c->alternate = s && atoi(s) > 0 ? atoi(s) : 0;
  if (c->alternate > ZRT_CO_MAX_ROUNDS) c->alternate = ZRT_CO_MAX_ROUNDS;
  s = zrt_perf_opt(a, "buffers");
  c->private_bufs = s && !strcmp(s, "private");
}

/* The collective buffers: through the comm's allocator (shared memory on
 * the shm comm: its zero-copy paths) unless private or on a device. */
static zrt_status zrt_co_buf(zrt_comm *c, zrt_backend *be, int priv, size_t bytes, void **out) {
  if (priv || be->device_id >= 0)
    ZRT_CHECK(zrt_backend_alloc(be, bytes, ZRT_MEM_COMM, out));
  else
    ZRT_CHECK(zrt_comm_mem_alloc(c, bytes, out));
  /* touch every page: untouched memory reads as the shared zero page,
   * which stays in cache and would flatter the reads */
  return zrt_backend_memset(be, *out, 0, bytes, NULL);
}

static void zrt_co_buf_free(zrt_comm *c, zrt_backend *be, int priv, void *p) {
  if (priv || be->device_id >= 0)
    zrt_backend_free(be, p);
  else
    zrt_comm_mem_free(c, p);
}

/* Buffer sets the timed loops cycle through: a large collective called
 * back to back on one set would read what its previous call left in the
 * last-level cache, while the memcpy baseline copies 64 MiB from memory.
 * Enough sets that one round of them spans twice the LLC across the
 * machine's ranks (at least 2, at most ZRT_CO_MAX_SETS); messages far
 * below the LLC stay cached whatever the sets, as the engine's buckets do. */
#define ZRT_CO_MAX_SETS 8
typedef struct zrt_co_ring {
  int n;
  void *send[ZRT_CO_MAX_SETS], *recv[ZRT_CO_MAX_SETS];
} zrt_co_ring;

static void zrt_co_ring_free(zrt_comm *c, zrt_backend *be, int priv, zrt_co_ring *r) {
  for (int i = 0; i < ZRT_CO_MAX_SETS; i++) {
    if (r->send[i]) zrt_co_buf_free(c, be, priv, r->send[i]);
    if (r->recv[i]) zrt_co_buf_free(c, be, priv, r->recv[i]);
  }
  memset(r, 0, sizeof *r);
}

static zrt_status zrt_co_ring_alloc(zrt_comm *c, zrt_backend *be, int priv, size_t cap,
                                    zrt_co_ring *r) {
  memset(r, 0, sizeof *r);
  size_t per = 2 * cap * (size_t)(c->local_world > 0 ? c->local_world : 1);
  size_t want = 2 * zrt_cpu_llc_bytes();
  r->n = (int)ZRT_MIN((size_t)ZRT_CO_MAX_SETS, ZRT_MAX((size_t)2, (want + per - 1) / per + 1));
  zrt_status st = ZRT_OK;
  for (int i = 0; i < r->n && st == ZRT_OK; i++) {
    st = zrt_co_buf(c, be, priv, cap, &r->send[i]);
    if (st == ZRT_OK) st = zrt_co_buf(c, be, priv, cap, &r->recv[i]);
  }
  if (st != ZRT_OK) zrt_co_ring_free(c, be, priv, r);
  return st;
}

/* One collective, blocking. */
static zrt_status zrt_co_issue(zrt_comm *c, int op, void *send, void *recv, size_t count,
                               zrt_dtype dt, size_t *counts) {
  switch (op) {
  case ZRT_CO_AR: return zrt_comm_all_reduce(c, send, recv, count, dt, ZRT_RED_SUM, NULL);
  case ZRT_CO_RS: return zrt_comm_reduce_scatter(c, send, recv, counts, dt, ZRT_RED_SUM, NULL);
  default: return zrt_comm_all_gather(c, send, recv, counts, dt, NULL);
  }
}

/* Bytes each rank sends over TCP per collective, to other machines and to
 * its own, at the largest size, fp32: out["xnode"][op]. Read from the
 * kernel's socket counters around ZRT_CO_XN_ITERS blocking collectives. */
#define ZRT_CO_XN_ITERS 4
static zrt_status zrt_co_xnode(zrt_comm *c, zrt_comm *flat, const zrt_co_cfg *cfg, void *send,
                               void *recv, size_t *counts, cJSON *out, const char *comm_name) {
  int n = c->world, L = c->local_world > 0 ? c->local_world : 1;
  size_t count = cfg->max_bytes / 4 / (size_t)n * (size_t)n;
  for (int r = 0; r < n; r++) counts[r] = count / (size_t)n;
  cJSON *xn = cJSON_AddObjectToObject(out, "xnode");
  for (int op = 0; op < ZRT_CO_NOPS; op++) {
    zrt_xn_snap *sn = calloc(2, sizeof *sn);
    if (!sn) return zrt_error(ZRT_ERR_OOM, "collectives: out of host memory");
    ZRT_CHECK(zrt_comm_barrier(flat));
    zrt_xn_read(&sn[0]);
    zrt_status st = ZRT_OK;
    for (int it = 0; it < ZRT_CO_XN_ITERS && st == ZRT_OK; it++)
      st = zrt_co_issue(c, op, send, recv, count, ZRT_F32, counts);
    zrt_xn_read(&sn[1]);
    uint64_t cross = 0, local = 0, other = 0;
    if (st == ZRT_OK) st = zrt_xn_classify(flat, L, &sn[0], &sn[1], &cross, &local, &other);
    free(sn);
    ZRT_CHECK(st);
    /* per collective, averaged over the ranks */
    float v[3] = {(float)cross, (float)local, (float)other}, mx = (float)cross;
    ZRT_CHECK(zrt_comm_all_reduce(flat, v, v, 3, ZRT_F32, ZRT_RED_SUM, NULL));
    ZRT_CHECK(zrt_comm_all_reduce(flat, &mx, &mx, 1, ZRT_F32, ZRT_RED_MAX, NULL));
    double k = (double)ZRT_CO_XN_ITERS * n, B = (double)count * 4;
    cJSON *o = cJSON_AddObjectToObject(xn, zrt_co_names[op]);
    cJSON_AddNumberToObject(o, "bytes", B);
    cJSON_AddNumberToObject(o, "cross_machine_bytes_per_rank", v[0] / k);
    cJSON_AddNumberToObject(o, "cross_machine_bytes_busiest_rank", mx / ZRT_CO_XN_ITERS);
    cJSON_AddNumberToObject(o, "same_machine_tcp_bytes_per_rank", v[1] / k);
    cJSON_AddNumberToObject(o, "daemon_bytes_per_rank", v[2] / k);
    cJSON_AddNumberToObject(o, "cross_over_bytes", v[0] / k / B);
    if (c->rank == 0)
      zrt_perf_note("  %s %s fp32 %.0f B: per rank %.0f B to other machines (%.3f x size; "
                    "busiest rank %.3f x size), %.0f B over TCP within the machine",
                    comm_name, zrt_co_names[op], B, v[0] / k, v[0] / k / B,
                    mx / ZRT_CO_XN_ITERS / B, v[1] / k);
  }
  return ZRT_OK;
}

/* All ranks agree on a value: the max over ranks. */
static double zrt_co_max(zrt_comm *c, double v) {
  float f = (float)v;
  if (zrt_comm_all_reduce(c, &f, &f, 1, ZRT_F32, ZRT_RED_MAX, NULL) != ZRT_OK) return v;
  return f;
}

/* Copy bandwidth of buffers of the comm's kind, every rank at once: the
 * backend's copy, and on the host also a streaming copy (zrt_copy_stream),
 * alternated; the faster counts. glibc's memcpy of 64 MiB stores
 * ordinarily on a VM whose sysconf reports the host's L3 (its
 * non-temporal threshold scales with it), paying a write-allocate read per
 * line: 20 against 27 GB/s on the development VM, a baseline a collective
 * with non-temporal stores beats by half without being faster than
 * memory. */
static double zrt_co_memcpy_bw(zrt_comm *c, zrt_backend *be, void *dst, const void *src,
                               size_t bytes) {
  double best = 1e30;
  int kinds = be->device_id >= 0 ? 1 : 2;
  for (int rep = 0; rep < 6 * kinds; rep++) {
    zrt_comm_barrier(c);
    double t0 = zrt_now_s();
    if (rep % kinds == 0) {
      zrt_backend_memcpy(be, dst, src, bytes, ZRT_COPY_D2D, NULL);
      zrt_backend_synchronize(be, NULL);
    } else {
      zrt_copy_stream(dst, src, bytes);
      zrt_store_fence();
    }
    double dt = zrt_now_s() - t0;
    if (rep >= kinds && dt < best) best = dt; /* first copies fault pages in */
  }
  return (double)bytes / best;
}

/* Measures one comm; adds {"memcpy_bytes_per_s", "points": [...]} to out. */
static zrt_status zrt_co_measure(zrt_comm *c, zrt_comm *flat, zrt_backend *be,
                                 const zrt_co_cfg *cfg, cJSON *out, cJSON *plots_res,
                                 const char *comm_name) {
  zrt_status st = ZRT_OK;
  zrt_co_ring ring = {0};
  int n = c->world;
  size_t *counts = calloc((size_t)n, sizeof(size_t));
  size_t cap = ZRT_ALIGN_UP(cfg->max_bytes, (size_t)n * 4);
  if (!counts) return zrt_error(ZRT_ERR_OOM, "collectives: out of host memory");
  ZRT_CHECK_GOTO(zrt_co_ring_alloc(c, be, cfg->private_bufs, cap, &ring), st, done);
  void *send = ring.send[0], *recv = ring.recv[0];
  cJSON_AddNumberToObject(out, "buffer_sets", ring.n);
  cJSON_AddStringToObject(out, "buffers",
                          cfg->private_bufs || be->device_id >= 0 ? "private" : "comm");
  /* DRAM, not cache: copy at least 64 MiB (fresh buffers when the
   * collective buffers are smaller) */
  size_t mcap = ZRT_MAX(cap, (size_t)64 << 20);
  void *ms = send, *mr = recv;
  if (mcap > cap) {
    ZRT_CHECK_GOTO(zrt_backend_alloc(be, mcap, ZRT_MEM_OTHER, &ms), st, done);
    if ((st = zrt_backend_alloc(be, mcap, ZRT_MEM_OTHER, &mr)) != ZRT_OK) {
      zrt_backend_free(be, ms);
      goto done;
    }
    zrt_backend_memset(be, ms, 1, mcap, NULL);
    zrt_backend_memset(be, mr, 0, mcap, NULL);
  }
  double mbw = zrt_co_memcpy_bw(c, be, mr, ms, mcap);
  if (mcap > cap) {
    zrt_backend_free(be, ms);
    zrt_backend_free(be, mr);
  }
  double mbw_min = 1.0 / zrt_co_max(c, 1.0 / mbw); /* slowest rank's copy */
  cJSON_AddNumberToObject(out, "memcpy_bytes", (double)mcap);
  cJSON_AddNumberToObject(out, "memcpy_bytes_per_s", mbw_min);
  cJSON *pts = cJSON_AddArrayToObject(out, "points");
  double xs[64], ys[ZRT_CO_NOPS][2][64];
  int np[ZRT_CO_NOPS][2] = {{0}};
  const zrt_dtype dts[2] = {ZRT_F32, ZRT_BF16};
  for (int op = 0; op < ZRT_CO_NOPS; op++)
    for (int d = 0; d < 2; d++) {
      size_t es = zrt_dtype_size(dts[d]);
      for (size_t bytes = cfg->min_bytes; bytes <= cfg->max_bytes && np[op][d] < 64;
           bytes *= (size_t)cfg->factor) {
        size_t count = bytes / es / (size_t)n * (size_t)n; /* divisible by ranks */
        if (!count) continue;
        for (int r = 0; r < n; r++) counts[r] = count / (size_t)n;
        size_t size = count * es;
        for (int w = 0; w < ring.n; w++)
          ZRT_CHECK_GOTO(zrt_co_issue(c, op, ring.send[w], ring.recv[w], count, dts[d], counts), st,
                         done);
        ZRT_CHECK_GOTO(zrt_comm_barrier(c), st, done);
        double t0 = zrt_now_s();
        ZRT_CHECK_GOTO(zrt_co_issue(c, op, send, recv, count, dts[d], counts), st, done);
        double one = zrt_co_max(c, zrt_now_s() - t0);
        int iters = (int)ZRT_MIN(1000.0, ZRT_MAX(3.0, cfg->target_s / ZRT_MAX(one, 1e-6)));
        ZRT_CHECK_GOTO(zrt_comm_barrier(c), st, done);
        t0 = zrt_now_s();
        for (int it = 0; it < iters; it++)
          ZRT_CHECK_GOTO(zrt_co_issue(c, op, ring.send[(it + 1) % ring.n],
                                      ring.recv[(it + 1) % ring.n], count, dts[d], counts),
                         st, done);
        if (be->device_id >= 0) zrt_backend_synchronize(be, NULL);
        double t = zrt_co_max(c, (zrt_now_s() - t0) / iters);
        double alg = (double)size / t;
        double f = op == ZRT_CO_AR ? 2.0 * (n - 1) / n : (double)(n - 1) / n;
        double bus = alg * f;
        cJSON *p = cJSON_CreateObject();
        cJSON_AddStringToObject(p, "op", zrt_co_names[op]);
        cJSON_AddStringToObject(p, "dtype", zrt_dtype_name(dts[d]));
        cJSON_AddNumberToObject(p, "bytes", (double)size);
        cJSON_AddNumberToObject(p, "iters", iters);
        cJSON_AddNumberToObject(p, "time_s", t);
        cJSON_AddNumberToObject(p, "algbw_bytes_per_s", alg);
        cJSON_AddNumberToObject(p, "busbw_bytes_per_s", bus);
        cJSON_AddNumberToObject(p, "busbw_over_memcpy", bus / mbw_min);
        /* Above the copy bandwidth of the same run is impossible for
         * messages that leave the caches (a collective moves at least the
         * bytes busbw counts through memory); small ones may sit in cache. */
        if (c->rank == 0 && bus > mbw_min && size >= ZRT_CO_CACHE_BYTES)
          zrt_perf_flag(plots_res,
                        "collectives: %s %s %s at %zu bytes: busbw %.2f GB/s is above the "
                        "%.2f GB/s memcpy of the same run",
                        comm_name, zrt_co_names[op], zrt_dtype_name(dts[d]), size, bus / 1e9,
                        mbw_min / 1e9);
        cJSON_AddItemToArray(pts, p);
        if (op == 0 && d == 0) xs[np[op][d]] = (double)size;
        ys[op][d][np[op][d]++] = bus / 1e9;
        if (c->rank == 0)
          zrt_perf_note("  %s %s %s %zu B: %.3f GB/s busbw (%d iters)", comm_name, zrt_co_names[op],
                        zrt_dtype_name(dts[d]), size, bus / 1e9, iters);
      }
    }
  char file[64], title[128];
  snprintf(file, sizeof file, "collectives_busbw_%s", comm_name);
  snprintf(title, sizeof title, "busbw by size, %s, %d ranks (memcpy %.2f GB/s)", comm_name, n,
           mbw_min / 1e9);
  cJSON *pl = zrt_perf_plot(plots_res, file, title, "message bytes", "busbw (GB/s)", 1);
  for (int op = 0; op < ZRT_CO_NOPS; op++)
    for (int d = 0; d < 2; d++) {
      char name[64];
      snprintf(name, sizeof name, "%s %s", zrt_co_names[op], zrt_dtype_name(dts[d]));
      zrt_perf_series(pl, name, xs, ys[op][d], np[op][d]);
    }
  /* machines: the figure that carries over is the bytes that cross them */
  if (cfg->hostfile && be->device_id < 0)
    ZRT_CHECK_GOTO(zrt_co_xnode(c, flat, cfg, send, recv, counts, out, comm_name), st, done);
done:
  zrt_co_ring_free(c, be, cfg->private_bufs, &ring);
  free(counts);
  return st;
}

/* Times iters collectives (the slowest rank's mean per iteration). */
static zrt_status zrt_co_time(zrt_comm *c, int op, const zrt_co_ring *ring, size_t count,
                              zrt_dtype dt, size_t *counts, int iters, double *t) {
  ZRT_CHECK(zrt_comm_barrier(c));
  double t0 = zrt_now_s();
  for (int it = 0; it < iters; it++)
    ZRT_CHECK(
        zrt_co_issue(c, op, ring->send[it % ring->n], ring->recv[it % ring->n], count, dt, counts));
  *t = zrt_co_max(c, (zrt_now_s() - t0) / iters);
  return ZRT_OK;
}

/* --alternate K: at the largest size, K rounds of {memcpy baseline, every
 * op and dtype on each comm}, so that every figure has a baseline taken
 * seconds before it (a shared machine's load drifts between the sweeps
 * above). Adds r["alternated"]: per comm/op/dtype the rounds' busbw and
 * busbw / that round's memcpy. */
static zrt_status zrt_co_alternate(zrt_comm **cs, const char *const *names, const int *privs,
                                   int nc, zrt_backend *be, const zrt_co_cfg *cfg, cJSON *r) {
  zrt_status st = ZRT_OK;
  zrt_comm *c = cs[0];
  int n = c->world, K = cfg->alternate;
  size_t cap = ZRT_ALIGN_UP(cfg->max_bytes, (size_t)n * 4);
  size_t mcap = ZRT_MAX(cap, (size_t)64 << 20); /* the sweep's baseline: DRAM, not cache */
  zrt_co_ring rings[ZRT_CO_ALT_COMMS] = {{0}};
  void *ms = NULL, *mr = NULL;
  size_t *counts = calloc((size_t)n, sizeof(size_t));
  const zrt_dtype dts[2] = {ZRT_F32, ZRT_BF16};
  enum { NS = ZRT_CO_ALT_COMMS * ZRT_CO_NOPS * 2 }; /* comms x ops x dtypes */
  double mbw[ZRT_CO_MAX_ROUNDS], bus[NS][ZRT_CO_MAX_ROUNDS];
  int iters[NS] = {0};
  if (!counts) return zrt_error(ZRT_ERR_OOM, "collectives: out of host memory");
  for (int ci = 0; ci < nc; ci++) {
    ZRT_CHECK_GOTO(zrt_co_ring_alloc(cs[ci], be, privs[ci], cap, &rings[ci]), st, done);
  }
  ZRT_CHECK_GOTO(zrt_backend_alloc(be, mcap, ZRT_MEM_OTHER, &ms), st, done);
  ZRT_CHECK_GOTO(zrt_backend_alloc(be, mcap, ZRT_MEM_OTHER, &mr), st, done);
  ZRT_CHECK_GOTO(zrt_backend_memset(be, ms, 1, mcap, NULL), st, done);
  ZRT_CHECK_GOTO(zrt_backend_memset(be, mr, 0, mcap, NULL), st, done);
  size_t bytes = cfg->max_bytes;
  for (int k = 0; k < K; k++) {
    mbw[k] = 1.0 / zrt_co_max(c, 1.0 / zrt_co_memcpy_bw(c, be, mr, ms, mcap));
    for (int ci = 0; ci < nc; ci++)
      for (int op = 0; op < ZRT_CO_NOPS; op++)
        for (int d = 0; d < 2; d++) {
          int j = (ci * ZRT_CO_NOPS + op) * 2 + d;
          size_t es = zrt_dtype_size(dts[d]);
          size_t count = bytes / es / (size_t)n * (size_t)n;
          for (int q = 0; q < n; q++) counts[q] = count / (size_t)n;
          double t = 0;
          if (!iters[j]) { /* first round: warm up, then size the timed loop */
            ZRT_CHECK_GOTO(
                zrt_co_time(cs[ci], op, &rings[ci], count, dts[d], counts, rings[ci].n, &t), st,
                done);
            iters[j] = (int)ZRT_MIN(1000.0, ZRT_MAX(3.0, cfg->target_s / ZRT_MAX(t, 1e-6)));
          }
          ZRT_CHECK_GOTO(zrt_co_time(cs[ci], op, &rings[ci], count, dts[d], counts, iters[j], &t),
                         st, done);
          double f = op == ZRT_CO_AR ? 2.0 * (n - 1) / n : (double)(n - 1) / n;
          bus[j][k] = (double)(count * es) / t * f;
        }
  }
  cJSON *alt = cJSON_AddObjectToObject(r, "alternated");
  cJSON_AddNumberToObject(alt, "bytes", (double)bytes);
  cJSON_AddItemToObject(alt, "memcpy_bytes_per_s", cJSON_CreateDoubleArray(mbw, K));
  cJSON *ser = cJSON_AddArrayToObject(alt, "series");
  for (int ci = 0; ci < nc; ci++)
    for (int op = 0; op < ZRT_CO_NOPS; op++)
      for (int d = 0; d < 2; d++) {
        int j = (ci * ZRT_CO_NOPS + op) * 2 + d;
        double ratio[ZRT_CO_MAX_ROUNDS];
        for (int k = 0; k < K; k++) ratio[k] = bus[j][k] / mbw[k];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "comm", names[ci]);
        cJSON_AddStringToObject(o, "op", zrt_co_names[op]);
        cJSON_AddStringToObject(o, "dtype", zrt_dtype_name(dts[d]));
        cJSON_AddNumberToObject(o, "iters", iters[j]);
        cJSON_AddItemToObject(o, "busbw_bytes_per_s", cJSON_CreateDoubleArray(bus[j], K));
        cJSON_AddItemToObject(o, "busbw_over_memcpy", cJSON_CreateDoubleArray(ratio, K));
        cJSON_AddItemToArray(ser, o);
      }
done:
  for (int ci = 0; ci < nc; ci++) zrt_co_ring_free(cs[ci], be, privs[ci], &rings[ci]);
  zrt_backend_free(be, ms);
  zrt_backend_free(be, mr);
  free(counts);
  return st;
}

/* Summary lines of r["alternated"] (every job's rounds pooled), with the
 * spreads added to each series. */
static size_t zrt_co_alt_summary(cJSON *r, char *md, size_t k, size_t cap) {
  cJSON *alt = cJSON_GetObjectItem(r, "alternated"), *o;
  if (!alt) return k;
  const cJSON *m = cJSON_GetObjectItem(alt, "memcpy_bytes_per_s");
  int K = cJSON_GetArraySize(m);
  double v[ZRT_CO_MAX_ROUNDS * ZRT_CO_MAX_REPEAT];
  for (int i = 0; i < K && i < (int)(sizeof v / sizeof *v); i++)
    v[i] = cJSON_GetNumberValue(cJSON_GetArrayItem(m, i));
  cJSON_DeleteItemFromObject(alt, "memcpy");
  double mmed = zrt_perf_spread(alt, "memcpy", v, K);
  k += (size_t)snprintf(md + k, k < cap ? cap - k : 0,
                        "\nAlternated round by round at %.0f bytes (%d rounds: memcpy, then each "
                        "comm's ops; memcpy median %.2f GB/s):\n\n| comm | op | dtype | busbw "
                        "GB/s | busbw/memcpy of its round | p10-p90 |\n|---|---|---|---|---|---|\n",
                        cJSON_GetNumberValue(cJSON_GetObjectItem(alt, "bytes")), K, mmed / 1e9);
  cJSON_ArrayForEach(o, cJSON_GetObjectItem(alt, "series")) {
    double med[2];
    const char *keys[2] = {"busbw_bytes_per_s", "busbw_over_memcpy"};
    for (int q = 0; q < 2; q++) {
      const cJSON *a = cJSON_GetObjectItem(o, keys[q]);
      int na = cJSON_GetArraySize(a);
      for (int i = 0; i < na && i < (int)(sizeof v / sizeof *v); i++)
        v[i] = cJSON_GetNumberValue(cJSON_GetArrayItem(a, i));
      char sk[64];
      snprintf(sk, sizeof sk, "%s_stats", keys[q]);
      cJSON_DeleteItemFromObject(o, sk);
      med[q] = zrt_perf_spread(o, sk, v, na);
    }
    const cJSON *rs = cJSON_GetObjectItem(o, "busbw_over_memcpy_stats");
    k += (size_t)snprintf(md + k, k < cap ? cap - k : 0,
                          "| %s | %s | %s | %.3f | %.3f | %.3f-%.3f |\n",
                          cJSON_GetStringValue(cJSON_GetObjectItem(o, "comm")),
                          cJSON_GetStringValue(cJSON_GetObjectItem(o, "op")),
                          cJSON_GetStringValue(cJSON_GetObjectItem(o, "dtype")), med[0] / 1e9,
                          med[1], cJSON_GetNumberValue(cJSON_GetObjectItem(rs, "p10")),
                          cJSON_GetNumberValue(cJSON_GetObjectItem(rs, "p90")));
  }
  return k;
}

/* r["summary"]: the table of the largest size per comm, op and dtype
 * (busbw and busbw / memcpy: medians over the runs when repeated). */
static void zrt_co_summary(cJSON *r, int world) {
  const cJSON *comms = cJSON_GetObjectItem(r, "comms");
  const cJSON *rep = cJSON_GetObjectItem(r, "repeat");
  int nrep = rep ? (int)cJSON_GetNumberValue(rep) : 1;
  char md[8192];
  size_t k = (size_t)snprintf(md, sizeof md,
                              "%d ranks on one host. busbw (GB/s) at the largest size and busbw / "
                              "memcpy bandwidth of the same run%s:\n\n| comm | memcpy GB/s | op | "
                              "dtype | bytes | busbw GB/s | busbw/memcpy | p10-p90 of "
                              "busbw/memcpy |\n|---|---|---|---|---|---|---|---|\n",
                              world, nrep > 1 ? " (medians of the repeated runs)" : "");
  const char *cn[4] = {"mpi", "shm", "hier", "nccl"};
  for (int i = 0; i < 4; i++) {
    const cJSON *cj = cJSON_GetObjectItem(comms, cn[i]), *p, *best[6] = {0};
    cJSON_ArrayForEach(p, cJSON_GetObjectItem(cj, "points")) {
      int op = 0, d = !strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(p, "dtype")), "bf16");
      while (op < ZRT_CO_NOPS &&
             strcmp(zrt_co_names[op], cJSON_GetStringValue(cJSON_GetObjectItem(p, "op"))))
        op++;
      if (op < ZRT_CO_NOPS) best[op * 2 + d] = p; /* sizes ascend: keeps the largest */
    }
    for (int j = 0; j < 6; j++)
      if (best[j]) {
        const cJSON *sp = cJSON_GetObjectItem(best[j], "busbw_over_memcpy_runs");
        char spread[64] = "-";
        if (sp)
          snprintf(spread, sizeof spread, "%.3f-%.3f",
                   cJSON_GetNumberValue(cJSON_GetObjectItem(sp, "p10")),
                   cJSON_GetNumberValue(cJSON_GetObjectItem(sp, "p90")));
        k += (size_t)snprintf(
            md + k, k < sizeof md ? sizeof md - k : 0,
            "| %s | %.2f | %s | %s | %.0f | %.3f | %.3f | %s |\n", cn[i],
            cJSON_GetNumberValue(cJSON_GetObjectItem(cj, "memcpy_bytes_per_s")) / 1e9,
            zrt_co_names[j / 2], j % 2 ? "bf16" : "fp32",
            cJSON_GetNumberValue(cJSON_GetObjectItem(best[j], "bytes")),
            cJSON_GetNumberValue(cJSON_GetObjectItem(best[j], "busbw_bytes_per_s")) / 1e9,
            cJSON_GetNumberValue(cJSON_GetObjectItem(best[j], "busbw_over_memcpy")), spread);
      }
    const cJSON *xn = cJSON_GetObjectItem(cj, "xnode");
    for (int op = 0; xn && op < ZRT_CO_NOPS; op++) {
      const cJSON *o = cJSON_GetObjectItem(xn, zrt_co_names[op]);
      if (o)
        k += (size_t)snprintf(
            md + k, k < sizeof md ? sizeof md - k : 0,
            "| %s | cross-machine bytes per rank | %s | fp32 | %.0f | %.0f (%.3f x size; "
            "busiest rank %.3f x size) | TCP within the machine: %.0f | |\n",
            cn[i], zrt_co_names[op], cJSON_GetNumberValue(cJSON_GetObjectItem(o, "bytes")),
            cJSON_GetNumberValue(cJSON_GetObjectItem(o, "cross_machine_bytes_per_rank")),
            cJSON_GetNumberValue(cJSON_GetObjectItem(o, "cross_over_bytes")),
            cJSON_GetNumberValue(cJSON_GetObjectItem(o, "cross_machine_bytes_busiest_rank")) /
                cJSON_GetNumberValue(cJSON_GetObjectItem(o, "bytes")),
            cJSON_GetNumberValue(cJSON_GetObjectItem(o, "same_machine_tcp_bytes_per_rank")));
    }
    const cJSON *sk = cJSON_GetObjectItem(cj, "skipped");
    if (sk)
      k += (size_t)snprintf(md + k, k < sizeof md ? sizeof md - k : 0, "\n%s: not measured (%s)\n",
                            cn[i], cJSON_GetStringValue(sk));
  }
  k = zrt_co_alt_summary(r, md, k, sizeof md);
  cJSON_DeleteItemFromObject(r, "summary");
  cJSON_AddStringToObject(r, "summary", md);
}

/* Inside the mpiexec job: every rank measures, rank 0 fills r. */
static int zrt_co_ranked(const zrt_co_cfg *cfg, cJSON *r) {
  zrt_backend *cpu = NULL, *gpu = NULL;
  zrt_comm *mpi = NULL, *shm = NULL, *hier = NULL, *nccl = NULL;
  int rc = 1;
  if (zrt_backend_create("cpu", 0, 0, &cpu) != ZRT_OK ||
      zrt_comm_create("mpi", cpu, 120, &mpi) != ZRT_OK) {
    zrt_perf_note("collectives: mpi comm: %s", zrt_last_error());
    goto done;
  }
  cJSON *comms = cJSON_AddObjectToObject(r, "comms");
  cJSON_AddNumberToObject(r, "ranks", mpi->world);
  cJSON *jm = cJSON_AddObjectToObject(comms, "mpi");
  if (zrt_co_measure(mpi, mpi, cpu, cfg, jm, r, "mpi") != ZRT_OK) {
    cJSON_AddStringToObject(jm, "error", zrt_last_error());
    zrt_perf_note("collectives: mpi: %s", zrt_last_error());
  }
  /* the shared-memory comm (what auto picks on one machine) */
  cJSON *js = cJSON_AddObjectToObject(comms, "shm");
  if (zrt_comm_create("shm", cpu, 120, &shm) != ZRT_OK) {
    cJSON_AddStringToObject(js, "skipped", zrt_last_error());
  } else if (strcmp(shm->iface->name, "shm")) {
    cJSON_AddStringToObject(js, "skipped", "shared memory unavailable (the comm fell back to mpi)");
  } else if (zrt_co_measure(shm, mpi, cpu, cfg, js, r, "shm") != ZRT_OK) {
    cJSON_AddStringToObject(js, "error", zrt_last_error());
    zrt_perf_note("collectives: shm: %s", zrt_last_error());
  }
  /* the hierarchical comm (what auto picks over several machines) */
  cJSON *jh = cJSON_AddObjectToObject(comms, "hier");
  if (mpi->local_world == mpi->world) {
    cJSON_AddStringToObject(jh, "skipped", "one machine (run with --hostfile)");
  } else if (zrt_comm_create("hier", cpu, 120, &hier) != ZRT_OK) {
    cJSON_AddStringToObject(jh, "skipped", zrt_last_error());
  } else if (strcmp(hier->iface->name, "hier")) {
    cJSON_AddStringToObject(jh, "skipped", "the layout does not allow it (see the comm log line)");
  } else if (zrt_co_measure(hier, mpi, cpu, cfg, jh, r, "hier") != ZRT_OK) {
    cJSON_AddStringToObject(jh, "error", zrt_last_error());
    zrt_perf_note("collectives: hier: %s", zrt_last_error());
  }
  if (cfg->alternate > 0 && shm && !strcmp(shm->iface->name, "shm")) {
    /* the shm comm on its own buffers (zero-copy) and on private ones
     * (the copy path), alternated with mpi and memcpy */
    zrt_comm *cs[ZRT_CO_ALT_COMMS] = {mpi, shm, shm};
    const char *const nm[ZRT_CO_ALT_COMMS] = {"mpi", "shm", "shm private buffers"};
    const int privs[ZRT_CO_ALT_COMMS] = {1, 0, 1};
    if (zrt_co_alternate(cs, nm, privs, ZRT_CO_ALT_COMMS, cpu, cfg, r) != ZRT_OK)
      zrt_perf_note("collectives: alternated rounds: %s", zrt_last_error());
  }
  cJSON *jn = cJSON_AddObjectToObject(comms, "nccl");
  if (!zrt_backend_cuda_built() || zrt_backend_cuda_device_count() <= 0) {
    cJSON_AddStringToObject(jn, "skipped",
                            zrt_backend_cuda_built() ? "no GPU on this machine"
                                                     : "this build has no CUDA backend");
  } else if (zrt_backend_create("cuda", 0, mpi->local_rank, &gpu) != ZRT_OK ||
             zrt_comm_create("nccl", gpu, 120, &nccl) != ZRT_OK) {
    cJSON_AddStringToObject(jn, "skipped", zrt_last_error());
  } else if (zrt_co_measure(nccl, nccl, gpu, cfg, jn, r, "nccl") != ZRT_OK) {
    cJSON_AddStringToObject(jn, "error", zrt_last_error());
  }
  rc = 0;
  zrt_co_summary(r, mpi->world);
done:
  if (mpi && mpi->rank != 0 && !freopen("/dev/null", "w", stdout)) rc = 1;
  zrt_comm_destroy(nccl);
  zrt_comm_destroy(hier);
  zrt_comm_destroy(shm);
  zrt_backend_destroy(gpu);
  zrt_comm_destroy(mpi);
  zrt_backend_destroy(cpu);
  return rc;
}

static int zrt_bench_collectives(const zrt_perf_args *a, cJSON *r) {
  zrt_co_cfg cfg;
  zrt_co_cfg_from(a, &cfg);
  if (getenv("OMPI_COMM_WORLD_SIZE")) {
    int rc = zrt_co_ranked(&cfg, r);
    const char *out = getenv("ZRT_PERF_CHILD_OUT");
    const char *rank = getenv("OMPI_COMM_WORLD_RANK");
    if (out && rank && !strcmp(rank, "0")) {
      FILE *f = fopen(out, "w");
      char *s = cJSON_PrintUnformatted(r);
      if (f && s) fprintf(f, "%s\n", s);
      if (f) fclose(f);
      free(s);
    }
    return rc;
  }
  /* Parent: re-execute under mpiexec with the options that shape the run. */
  char self[1024], tmp[] = "/tmp/zrt-perf-coll-XXXXXX";
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  int fd = mkstemp(tmp);
  if (n <= 0 || fd < 0) {
    zrt_perf_note("collectives: cannot find /proc/self/exe or make a temporary file");
    return 1;
  }
  close(fd);
  self[n] = 0;
  char cmd[3000], place[1200] = "", cargs[1100] = "";
  if (cfg.hostfile) {
    snprintf(place, sizeof place, "--hostfile %s --map-by ppr:%d:node ", cfg.hostfile, cfg.ppn);
    snprintf(cargs, sizeof cargs, " --hostfile %s --ppn %d", cfg.hostfile, cfg.ppn);
  }
  size_t k = (size_t)snprintf(
      cmd, sizeof cmd,
      "ZRT_PERF_CHILD_OUT=%s %s mpiexec --oversubscribe --allow-run-as-root "
      "--bind-to none -n %d -x ZRT_PERF_CHILD_OUT %s%s%s collectives "
      "--min %zu --max %zu --factor %d --time %g%s --alternate %d --buffers %s --json > /dev/null",
      tmp, cfg.quick ? "ZRT_PERF_QUICK=1" : "", cfg.ranks, cfg.quick ? "-x ZRT_PERF_QUICK " : "",
      place, self, cfg.min_bytes, cfg.max_bytes, cfg.factor, cfg.target_s, cargs, cfg.alternate,
      cfg.private_bufs ? "private" : "comm");
  (void)k;
  zrt_perf_note("collectives: %s (%d run%s)", cmd, cfg.repeat, cfg.repeat == 1 ? "" : "s");
  cJSON *runs[ZRT_CO_MAX_REPEAT] = {0};
  double loads[ZRT_CO_MAX_REPEAT];
  int nruns = 0, rc = 0;
  for (int rep = 0; rep < cfg.repeat && rc == 0; rep++) {
    loads[rep] = zrt_perf_loadavg();
    rc = system(cmd);
    FILE *f = fopen(tmp, "r");
    char *buf = NULL;
    size_t len = 0;
    if (f) {
      fseek(f, 0, SEEK_END);
      len = (size_t)ftell(f);
      fseek(f, 0, SEEK_SET);
      buf = calloc(1, len + 1);
      if (buf && fread(buf, 1, len, f) != len) len = 0;
      fclose(f);
    }
    cJSON *child = buf && len ? cJSON_Parse(buf) : NULL;
    free(buf);
    if (rc != 0 || !child) {
      zrt_perf_note("collectives: the mpiexec job failed (exit %d)%s", rc,
                    child ? "" : "; no result from rank 0");
      cJSON_Delete(child);
      rc = rc ? rc : 1;
      break;
    }
    runs[nruns++] = child;
  }
  unlink(tmp);
  if (rc != 0 || !nruns) {
    for (int i = 0; i < nruns; i++) cJSON_Delete(runs[i]);
    return 1;
  }
  cJSON *child = runs[0];
  cJSON_AddStringToObject(r, "mpiexec_command", cmd);
  if (nruns > 1) {
    /* medians over the runs, point by point (every run measures the same
     * points in the same order), with the spread of busbw / memcpy */
    cJSON_AddNumberToObject(child, "repeat", nruns);
    cJSON_AddItemToObject(child, "loadavg_1min_runs", cJSON_CreateDoubleArray(loads, nruns));
    static const char *const cn[4] = {"mpi", "shm", "hier", "nccl"};
    for (int c = 0; c < 4; c++) {
      cJSON *cj0 = cJSON_GetObjectItem(cJSON_GetObjectItem(child, "comms"), cn[c]);
      cJSON *pts0 = cJSON_GetObjectItem(cj0, "points");
      if (!pts0) continue;
      double v[ZRT_CO_MAX_REPEAT], w[ZRT_CO_MAX_REPEAT];
      for (int i = 0; i < nruns; i++)
        v[i] = cJSON_GetNumberValue(
            cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(runs[i], "comms"), cn[c]),
                                "memcpy_bytes_per_s"));
      cJSON_ReplaceItemInObject(cj0, "memcpy_bytes_per_s",
                                cJSON_CreateNumber(zrt_perf_quantile(v, nruns, 0.5)));
      for (int pi = 0; pi < cJSON_GetArraySize(pts0); pi++) {
        cJSON *p0 = cJSON_GetArrayItem(pts0, pi);
        int m = 0;
        for (int i = 0; i < nruns; i++) {
          cJSON *pi_ = cJSON_GetArrayItem(
              cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(runs[i], "comms"), cn[c]),
                                  "points"),
              pi);
          if (!pi_) continue;
          v[m] = cJSON_GetNumberValue(cJSON_GetObjectItem(pi_, "busbw_bytes_per_s"));
          w[m++] = cJSON_GetNumberValue(cJSON_GetObjectItem(pi_, "busbw_over_memcpy"));
        }
        cJSON_ReplaceItemInObject(p0, "busbw_bytes_per_s",
                                  cJSON_CreateNumber(zrt_perf_spread(p0, "busbw_runs", v, m)));
        cJSON_ReplaceItemInObject(
            p0, "busbw_over_memcpy",
            cJSON_CreateNumber(zrt_perf_spread(p0, "busbw_over_memcpy_runs", w, m)));
      }
    }
    /* the alternated rounds of every job pooled into the first's */
    cJSON *alt0 = cJSON_GetObjectItem(child, "alternated");
    for (int i = 1; i < nruns && alt0; i++) {
      cJSON *alt = cJSON_GetObjectItem(runs[i], "alternated"), *x;
      if (!alt) continue;
      cJSON_ArrayForEach(x, cJSON_GetObjectItem(alt, "memcpy_bytes_per_s")) cJSON_AddItemToArray(
          cJSON_GetObjectItem(alt0, "memcpy_bytes_per_s"), cJSON_CreateNumber(x->valuedouble));
      cJSON *s0 = cJSON_GetObjectItem(alt0, "series")->child, *s1;
      cJSON_ArrayForEach(s1, cJSON_GetObjectItem(alt, "series")) {
        if (!s0) break;
        const char *keys[2] = {"busbw_bytes_per_s", "busbw_over_memcpy"};
        for (int q = 0; q < 2; q++)
          cJSON_ArrayForEach(x, cJSON_GetObjectItem(s1, keys[q])) cJSON_AddItemToArray(
              cJSON_GetObjectItem(s0, keys[q]), cJSON_CreateNumber(x->valuedouble));
        s0 = s0->next;
      }
    }
    zrt_co_summary(child, (int)cJSON_GetNumberValue(cJSON_GetObjectItem(child, "ranks")));
  }
  /* the children's flags count here too (the driver's exit status) */
  for (int i = 0; i < nruns; i++) {
    cJSON *fl = cJSON_DetachItemFromObject(runs[i], "flags"), *f1;
    cJSON_ArrayForEach(f1, fl) zrt_perf_flag(r, "run %d: %s", i + 1, f1->valuestring);
    cJSON_Delete(fl);
  }
  cJSON *it = child->child;
  while (it) {
    cJSON *next = it->next;
    if (!cJSON_GetObjectItem(r, it->string))
      cJSON_AddItemToObject(r, it->string, cJSON_DetachItemViaPointer(child, it));
    it = next;
  }
  for (int i = 0; i < nruns; i++) cJSON_Delete(runs[i]);
  return 0;
}

ZRT_PERF_BENCH(collectives,
               "all_reduce / reduce_scatter / all_gather algbw+busbw by size vs memcpy, mpi, shm "
               "and hier (--ranks --min --max --factor --time --repeat: medians of repeated jobs; "
               "--alternate K: K rounds of memcpy, mpi and shm alternated at --max; --hostfile F "
               "--ppn K: K ranks per machine of F, plus the bytes each comm sends across machines; "
               "--buffers comm|private: the sweep's buffers from zrt_comm_mem_alloc (default, "
               "zero-copy on shm) or the backend pool; --alternate measures shm on both)",
               zrt_bench_collectives)
