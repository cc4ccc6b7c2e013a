/*
 * backend.c — the backend registry and the dispatch helpers (backend.h).
 *
 * The registry picks the backend by the rules of device_rules.h ("auto" =
 * CUDA when it is compiled in and a GPU is usable; "twin" only when asked; the CPU when there is no
 * GPU, and the CPU with a warning carrying CUDA's message on a driver
 * problem), runs its constructor, and puts the accounted device pool in
 * front of the backend's raw allocator with a capacity of
 * device_memory_limit when set, else this rank's share of the device (free
 * memory less a reserve, divided among the local ranks sharing it). The
 * choice is logged once per process.
 *
 * Dispatch helpers validate arguments once for every backend (so each
 * backend may assume sane shapes and pointers), then call the slot; a NULL
 * optional slot falls back to generic code: host loops where the backend's
 * memory is host-addressable (device_id < 0), no-ops for streams, events,
 * synchronize and host registration.
 *
 * This file and the CUDA files are the only places with ZRT_HAVE_CUDA.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "device_rules.h"
#include "dtype.h"
#ifdef ZRT_HAVE_CUDA
#include "backend_cuda.h"
#include "env.h"
#endif

/* The pool sees this wrapper as its raw allocator so that the reason a raw
 * allocation failed (e.g. cudaMalloc's own message) survives the pool's
 * OOM message, which replaces the thread's last error. Thread-local because
 * the pool calls the raw allocator on the allocating thread; it is
 * diagnostic text only, like the last-error buffer. */
static _Thread_local char zrt_backend_raw_err[512];

static zrt_status zrt_backend_raw_alloc(void *ctx, size_t bytes, void **out) {
  zrt_backend *b = ctx;
  zrt_status st = b->iface->alloc(b->ctx, bytes, out);
  if (st != ZRT_OK)
    snprintf(zrt_backend_raw_err, sizeof zrt_backend_raw_err, "%s", zrt_last_error());
  return st;
}

/* zrt_backend_free_on's stream, for the raw free the pool calls on this
 * thread inside zrt_pool_free (the pool's interface has no stream). */
static _Thread_local struct {
  int set;
  zrt_stream s;
} zrt_backend_free_stream;

static void zrt_backend_raw_free(void *ctx, void *ptr, size_t bytes) {
  zrt_backend *b = ctx;
  if (zrt_backend_free_stream.set && b->iface->free_on)
    b->iface->free_on(b->ctx, ptr, bytes, zrt_backend_free_stream.s);
  else
    b->iface->free(b->ctx, ptr, bytes);
}

int zrt_backend_cuda_built(void) {
#ifdef ZRT_HAVE_CUDA
  return 1;
#else
  return 0;
#endif
}

void zrt_backend_cuda_probe_devices(zrt_cuda_probe *out) {
#ifdef ZRT_HAVE_CUDA
  zrt_backend_cuda_probe(out);
#else
  zrt_cuda_probe_classify(0, 0, 0, 0, NULL, out);
  out->kind = ZRT_CUDA_PROBE_NOT_BUILT;
#endif
}

int zrt_backend_cuda_device_count(void) {
#ifdef ZRT_HAVE_CUDA
  zrt_cuda_probe p;
  zrt_backend_cuda_probe(&p);
  return p.count;
#else
  return 0;
#endif
}

void zrt_backend_cuda_versions(char *buf, size_t n) {
#ifdef ZRT_HAVE_CUDA
  zrt_backend_cuda_probe_versions(buf, n);
#else
  snprintf(buf, n, "not built");
#endif
}

static const char *zrt_backend_hint(const zrt_backend *b, size_t limit) {
  if (b->device_id < 0 || limit)
    return "raise zero_optimization.stage, enable offload_optimizer/offload_param, or raise "
           "zrt.device_memory_limit";
  return "raise zero_optimization.stage, enable offload_optimizer/offload_param, use more GPUs, "
         "or lower train_micro_batch_size_per_gpu";
}

#ifdef ZRT_HAVE_CUDA
/* Ranks on this host as the launcher announces them (Open MPI's mpiexec,
 * torchrun-style LOCAL_WORLD_SIZE); at least local_rank + 1. */
static int zrt_backend_local_world(int local_rank) {
  const char *names[2] = {"OMPI_COMM_WORLD_LOCAL_SIZE", "LOCAL_WORLD_SIZE"};
  int w = 1;
  for (int i = 0; i < 2; i++) {
    const char *v = zrt_env(names[i]);
    char *end = NULL;
    long x = v && *v ? strtol(v, &end, 10) : 0;
    if (v && *v && !*end && x > w && x < (1 << 20)) w = (int)x;
  }
  return w > local_rank ? w : local_rank + 1;
}
#endif

zrt_status zrt_backend_create(const char *want, size_t device_memory_limit, int local_rank,
                              zrt_backend **out) {
  return zrt_backend_create_placed(want, device_memory_limit, local_rank, 0, out);
}

zrt_status zrt_backend_create_placed(const char *want, size_t device_memory_limit, int local_rank,
                                     int local_world, zrt_backend **out) {
  (void)local_world; /* read only where CUDA is built */
  if (!out) return zrt_error(ZRT_ERR_INVALID_ARG, "zrt_backend_create: out is NULL");
  *out = NULL;
  if (!want || !*want) want = "auto";
  if (local_rank < 0)
    return zrt_error(ZRT_ERR_INVALID_ARG, "zrt_backend_create: local_rank %d is negative",
                     local_rank);
  zrt_cuda_probe probe;
  memset(&probe, 0, sizeof probe);
  if (strcmp(want, "cpu") && strcmp(want, "twin")) zrt_backend_cuda_probe_devices(&probe);
  int use_cuda = 0;
  ZRT_CHECK(zrt_backend_decide(want, &probe, &use_cuda));
  int ndev = probe.count;

  zrt_status st = ZRT_OK;
  zrt_backend *b = calloc(1, sizeof *b);
  if (!b) return zrt_error(ZRT_ERR_OOM, "zrt_backend_create: out of host memory");
  b->device_id = -1;
  b->numa_node = -1;
#ifdef ZRT_HAVE_CUDA
  if (use_cuda) {
    int device = zrt_device_for_local_rank(local_rank, ndev);
    if (local_world <= 0) local_world = zrt_backend_local_world(local_rank);
    if (local_world <= local_rank) local_world = local_rank + 1;
    int sharing = zrt_ranks_sharing_device(local_world, ndev, device);
    zrt_log(ZRT_LOG_DEBUG, "cuda: local rank %d of %d uses device %d of %d visible (%d sharing it)",
            local_rank, local_world, device, ndev, sharing);
    ZRT_CHECK_GOTO(zrt_backend_cuda_init(b, device, sharing), st, fail);
  } else
#endif
      if (!strcmp(want, "twin")) {
    ZRT_CHECK_GOTO(zrt_backend_twin_init(b, device_memory_limit), st, fail);
  } else {
    (void)use_cuda;
    (void)ndev;
    ZRT_CHECK_GOTO(zrt_backend_cpu_init(b), st, fail);
  }
  if (!b->iface || !b->iface->alloc || !b->iface->free) {
    st =
        zrt_error(ZRT_ERR_INTERNAL, "backend %s has no allocator", b->iface ? b->iface->name : "?");
    goto fail;
  }
  size_t cap = device_memory_limit ? device_memory_limit : b->device_capacity;
  if (device_memory_limit && b->device_capacity && device_memory_limit > b->device_capacity) {
    char l[32], d[32];
    zrt_log(ZRT_LOG_WARN,
            "device_memory_limit %s is above the device's %s; the device limits first",
            zrt_format_size(device_memory_limit, l, sizeof l),
            zrt_format_size(b->device_capacity, d, sizeof d));
  }
  char pname[64];
  if (b->device_id >= 0)
    snprintf(pname, sizeof pname, "device (%s:%d)", b->iface->name, b->device_id);
  else
    snprintf(pname, sizeof pname, "device (%s)", b->iface->name);
  ZRT_CHECK_GOTO(
      zrt_pool_create(pname, cap, zrt_backend_raw_alloc, zrt_backend_raw_free, b, &b->pool), st,
      fail);
  zrt_pool_set_hint(b->pool, zrt_backend_hint(b, device_memory_limit));
  {
    char c[32];
    zrt_log_once("backend.choice", ZRT_LOG_INFO, "backend %s (asked \"%s\"): %s, capacity %s%s",
                 b->iface->name, want, b->description,
                 cap ? zrt_format_size(cap, c, sizeof c) : "unlimited",
                 device_memory_limit ? " (device_memory_limit)" : "");
  }
  *out = b;
  return ZRT_OK;
fail:
  if (b->iface && b->iface->destroy) b->iface->destroy(b->ctx);
  free(b);
  return st;
}

void zrt_backend_destroy(zrt_backend *b) {
  if (!b) return;
  /* Queued work may still use pool memory; drain before freeing it. */
  if (b->iface && b->iface->synchronize) (void)b->iface->synchronize(b->ctx, NULL);
  zrt_pool_destroy(b->pool);
  if (b->iface && b->iface->destroy) b->iface->destroy(b->ctx);
  free(b);
}

/* ------------------------------------------------------------- validation */

#define ZRT_BACKEND_NN(b, what)                                                                    \
  do {                                                                                             \
    if (!(b) || !(b)->iface)                                                                       \
      return zrt_error(ZRT_ERR_INVALID_ARG, "zrt_backend_%s: backend is NULL", what);              \
  } while (0)

static zrt_status zrt_backend_missing(const zrt_backend *b, const char *op) {
  return zrt_error(ZRT_ERR_UNSUPPORTED, "backend %s has no %s op", b->iface->name, op);
}

static int zrt_dtype_valid(zrt_dtype dt) {
  return dt == ZRT_F32 || dt == ZRT_F16 || dt == ZRT_BF16;
}

static zrt_status zrt_backend_check_dtype(const char *op, const char *arg, zrt_dtype dt) {
  if (!zrt_dtype_valid(dt))
    return zrt_error(ZRT_ERR_INVALID_ARG,
                     "zrt_backend_%s: %s dtype %d is not one of fp32 (0), fp16 (1), bf16 (2)", op,
                     arg, (int)dt);
  return ZRT_OK;
}

static zrt_status zrt_backend_check_ptr(const char *op, const char *arg, const void *p) {
  if (!p) return zrt_error(ZRT_ERR_INVALID_ARG, "zrt_backend_%s: %s is NULL", op, arg);
  return ZRT_OK;
}

/* -------------------------------------------------------------- memory */

zrt_status zrt_backend_alloc(zrt_backend *b, size_t bytes, zrt_mem_category cat, void **out) {
  ZRT_BACKEND_NN(b, "alloc");
  if (!out) return zrt_error(ZRT_ERR_INVALID_ARG, "zrt_backend_alloc: out is NULL");
  if (!b->pool)
    return zrt_error(ZRT_ERR_INVALID_ARG,
                     "zrt_backend_alloc: backend %s has no pool (create it with "
                     "zrt_backend_create)",
                     b->iface->name);
  zrt_backend_raw_err[0] = '\0';
  ZRT_BACKEND_COUNT(b, allocs);
  zrt_status st = zrt_pool_alloc(b->pool, bytes, cat, out);
  if (st == ZRT_ERR_OOM && zrt_backend_raw_err[0]) {
    char msg[4096];
    snprintf(msg, sizeof msg, "%s", zrt_last_error());
    st = zrt_error(ZRT_ERR_OOM, "%s (%s)", msg, zrt_backend_raw_err);
  }
  return st;
}

void zrt_backend_free(zrt_backend *b, void *ptr) {
  if (!b || !ptr) return;
  zrt_pool_free(b->pool, ptr);
}

void zrt_backend_free_on(zrt_backend *b, void *ptr, zrt_stream s) {
  if (!b || !ptr) return;
  zrt_backend_free_stream.set = 1;
  zrt_backend_free_stream.s = s;
  zrt_pool_free(b->pool, ptr);
  zrt_backend_free_stream.set = 0;
}

zrt_status zrt_backend_memcpy(zrt_backend *b, void *dst, const void *src, size_t bytes,
                              zrt_copy_kind kind, zrt_stream s) {
  ZRT_BACKEND_NN(b, "memcpy");
  if (bytes == 0) return ZRT_OK;
  ZRT_CHECK(zrt_backend_check_ptr("memcpy", "dst", dst));
  ZRT_CHECK(zrt_backend_check_ptr("memcpy", "src", src));
  if (kind < ZRT_COPY_H2D || kind > ZRT_COPY_H2H)
    return zrt_error(ZRT_ERR_INVALID_ARG, "zrt_backend_memcpy: copy kind %d is not H2D/D2H/D2D/H2H",
                     (int)kind);
  if (kind == ZRT_COPY_D2H && bytes <= ZRT_BACKEND_SCALAR_BYTES) ZRT_BACKEND_COUNT(b, d2h_reads);
  if (b->iface->memcpy) return b->iface->memcpy(b->ctx, dst, src, bytes, kind, s);
  if (b->device_id >= 0) return zrt_backend_missing(b, "memcpy");
  memmove(dst, src, bytes);
  return ZRT_OK;
}

zrt_status zrt_backend_memset(zrt_backend *b, void *dst, int value, size_t bytes, zrt_stream s) {
  ZRT_BACKEND_NN(b, "memset");
  if (bytes == 0) return ZRT_OK;
  ZRT_CHECK(zrt_backend_check_ptr("memset", "dst", dst));
  if (b->iface->memset) return b->iface->memset(b->ctx, dst, value, bytes, s);
  if (b->device_id >= 0) return zrt_backend_missing(b, "memset");
  memset(dst, value, bytes);
  return ZRT_OK;
}

/* ------------------------------------------------------------- compute */

zrt_status zrt_backend_convert(zrt_backend *b, void *dst, zrt_dtype dst_dt, const void *src,
                               zrt_dtype src_dt, size_t n, zrt_stream s) {
  ZRT_BACKEND_NN(b, "convert");
  ZRT_CHECK(zrt_backend_check_dtype("convert", "destination", dst_dt));
  ZRT_CHECK(zrt_backend_check_dtype("convert", "source", src_dt));
  if (n == 0) return ZRT_OK;
  ZRT_CHECK(zrt_backend_check_ptr("convert", "dst", dst));
  ZRT_CHECK(zrt_backend_check_ptr("convert", "src", src));
  if (!b->iface->convert) return zrt_backend_missing(b, "convert");
  return b->iface->convert(b->ctx, dst, dst_dt, src, src_dt, n, s);
}

zrt_status zrt_backend_accumulate(zrt_backend *b, float *dst, const void *src, zrt_dtype src_dt,
                                  float alpha, size_t n, zrt_stream s) {
  ZRT_BACKEND_NN(b, "accumulate");
  ZRT_CHECK(zrt_backend_check_dtype("accumulate", "source", src_dt));
  if (n == 0) return ZRT_OK;
  ZRT_CHECK(zrt_backend_check_ptr("accumulate", "dst", dst));
  ZRT_CHECK(zrt_backend_check_ptr("accumulate", "src", src));
  if (b->iface->accumulate) return b->iface->accumulate(b->ctx, dst, src, src_dt, alpha, n, s);
  if (b->device_id >= 0) return zrt_backend_missing(b, "accumulate");
  for (size_t i = 0; i < n; i++) dst[i] += zrt_load_f(src, src_dt, i) * alpha;
  return ZRT_OK;
}

zrt_status zrt_backend_scale_check(zrt_backend *b, const void *x, zrt_dtype dt, size_t n,
                                   float scale, double *sumsq, int *nonfinite, zrt_stream s) {
  ZRT_BACKEND_NN(b, "scale_check");
  ZRT_CHECK(zrt_backend_check_dtype("scale_check", "input", dt));
  ZRT_CHECK(zrt_backend_check_ptr("scale_check", "sumsq", sumsq));
  ZRT_CHECK(zrt_backend_check_ptr("scale_check", "nonfinite", nonfinite));
  if (n == 0) return ZRT_OK;
  ZRT_CHECK(zrt_backend_check_ptr("scale_check", "x", x));
  if (!b->iface->scale_check) return zrt_backend_missing(b, "scale_check");
  return b->iface->scale_check(b->ctx, x, dt, n, scale, sumsq, nonfinite, s);
}

zrt_status zrt_backend_scale_check_list(zrt_backend *b, const void *const *x, const size_t *n,
                                        int k, zrt_dtype dt, float scale, double *sumsq,
                                        int *nonfinite, zrt_stream s) {
  ZRT_BACKEND_NN(b, "scale_check_list");
  ZRT_CHECK(zrt_backend_check_dtype("scale_check_list", "input", dt));
  ZRT_CHECK(zrt_backend_check_ptr("scale_check_list", "sumsq", sumsq));
  ZRT_CHECK(zrt_backend_check_ptr("scale_check_list", "nonfinite", nonfinite));
  if (k < 0)
    return zrt_error(ZRT_ERR_INVALID_ARG, "scale_check_list: %d buffers (expected 0 or more)", k);
  if (k == 0) return ZRT_OK;
  ZRT_CHECK(zrt_backend_check_ptr("scale_check_list", "x", x));
  ZRT_CHECK(zrt_backend_check_ptr("scale_check_list", "n", n));
  int live = 0;
  for (int i = 0; i < k; i++) {
    if (!n[i]) continue;
    if (!x[i])
      return zrt_error(ZRT_ERR_INVALID_ARG,
                       "scale_check_list: buffer %d of %d is NULL (%zu elements)", i, k, n[i]);
    live++;
  }
  if (!live) return ZRT_OK;
  if (!b->iface->scale_check_list) {
    for (int i = 0; i < k; i++)
      ZRT_CHECK(zrt_backend_scale_check(b, x[i], dt, n[i], scale, sumsq, nonfinite, s));
    return ZRT_OK;
  }
  return b->iface->scale_check_list(b->ctx, x, n, k, dt, scale, sumsq, nonfinite, s);
}

zrt_status zrt_backend_gemm(zrt_backend *b, int trans_a, int trans_b, int64_t m, int64_t n,
                            int64_t k, float alpha, const void *a, int64_t lda, const void *bm,
                            int64_t ldb, zrt_dtype ab_dt, float beta, void *c, int64_t ldc,
                            zrt_dtype c_dt, zrt_stream s) {
  ZRT_BACKEND_NN(b, "gemm");
  ZRT_CHECK(zrt_backend_check_dtype("gemm", "A/B", ab_dt));
  ZRT_CHECK(zrt_backend_check_dtype("gemm", "C", c_dt));
  if (m < 0 || n < 0 || k < 0)
    return zrt_error(ZRT_ERR_INVALID_ARG, "zrt_backend_gemm: negative size m=%lld n=%lld k=%lld",
                     (long long)m, (long long)n, (long long)k);
  /* Row-major: a row of the stored matrix is its leading dimension. */
  int64_t a_cols = trans_a ? m : k, b_cols = trans_b ? k : n;
  if (lda < ZRT_MAX(a_cols, 1) || ldb < ZRT_MAX(b_cols, 1) || ldc < ZRT_MAX(n, 1))
    return zrt_error(ZRT_ERR_INVALID_ARG,
                     "zrt_backend_gemm: leading dimension too small (row-major): lda=%lld needs "
                     ">= %lld, ldb=%lld needs >= %lld, ldc=%lld needs >= %lld",
                     (long long)lda, (long long)ZRT_MAX(a_cols, 1), (long long)ldb,
                     (long long)ZRT_MAX(b_cols, 1), (long long)ldc, (long long)ZRT_MAX(n, 1));
  if (m == 0 || n == 0) return ZRT_OK;
  ZRT_CHECK(zrt_backend_check_ptr("gemm", "C", c));
  if (k > 0) {
    ZRT_CHECK(zrt_backend_check_ptr("gemm", "A", a));
    ZRT_CHECK(zrt_backend_check_ptr("gemm", "B", bm));
  }
  if (!b->iface->gemm) return zrt_backend_missing(b, "gemm");
  return b->iface->gemm(b->ctx, trans_a, trans_b, m, n, k, alpha, a, lda, bm, ldb, ab_dt, beta, c,
                        ldc, c_dt, s);
}

zrt_status zrt_backend_optim_step(zrt_backend *b, const zrt_optim_hparams *hp, float *master,
                                  float *s1, float *s2, const void *grad, zrt_dtype gdt,
                                  void *param16, zrt_dtype pdt, size_t n, zrt_stream s) {
  ZRT_BACKEND_NN(b, "optim_step");
  ZRT_CHECK(zrt_backend_check_ptr("optim_step", "hparams", hp));
  ZRT_CHECK(zrt_backend_check_dtype("optim_step", "gradient", gdt));
  if (param16) ZRT_CHECK(zrt_backend_check_dtype("optim_step", "param16", pdt));
  int needs_s1 = 0, needs_s2 = 0;
  switch (hp->type) {
  case ZRT_OPTIM_ADAM:
  case ZRT_OPTIM_ADAMW:
    needs_s1 = needs_s2 = 1;
    if (hp->bias_correction && hp->step < 1)
      return zrt_error(ZRT_ERR_INVALID_ARG,
                       "zrt_backend_optim_step: step %lld with bias correction; steps are "
                       "1-based",
                       (long long)hp->step);
    break;
  case ZRT_OPTIM_SGD: needs_s1 = hp->momentum != 0.0f; break;
  case ZRT_OPTIM_LION: needs_s1 = 1; break;
  default:
    return zrt_error(ZRT_ERR_INVALID_ARG,
                     "zrt_backend_optim_step: optimizer type %d is not Adam, AdamW, SGD or Lion",
                     (int)hp->type);
  }
  if (n == 0) return ZRT_OK;
  ZRT_CHECK(zrt_backend_check_ptr("optim_step", "master", master));
  ZRT_CHECK(zrt_backend_check_ptr("optim_step", "grad", grad));
  if (needs_s1) ZRT_CHECK(zrt_backend_check_ptr("optim_step", "state s1 (m / momentum)", s1));
  if (needs_s2) ZRT_CHECK(zrt_backend_check_ptr("optim_step", "state s2 (v)", s2));
  if (!b->iface->optim_step) return zrt_backend_missing(b, "optim_step");
  return b->iface->optim_step(b->ctx, hp, master, s1, s2, grad, gdt, param16, pdt, n, s);
}

/* ------------------------------------------------- streams and events */

zrt_status zrt_backend_synchronize(zrt_backend *b, zrt_stream s) {
  ZRT_BACKEND_NN(b, "synchronize");
  if (b->iface->synchronize) ZRT_BACKEND_COUNT(b, host_waits);
  return b->iface->synchronize ? b->iface->synchronize(b->ctx, s) : ZRT_OK;
}

/* Backends without streams run every op to completion before returning, so
 * the default stream (NULL) is the only stream and events are NULL. */
zrt_status zrt_backend_stream_create(zrt_backend *b, zrt_stream *out) {
  ZRT_BACKEND_NN(b, "stream_create");
  ZRT_CHECK(zrt_backend_check_ptr("stream_create", "out", out));
  *out = NULL;
  return b->iface->stream_create ? b->iface->stream_create(b->ctx, out) : ZRT_OK;
}

void zrt_backend_stream_destroy(zrt_backend *b, zrt_stream s) {
  if (b && b->iface && s && b->iface->stream_destroy) b->iface->stream_destroy(b->ctx, s);
}

zrt_status zrt_backend_event_create(zrt_backend *b, zrt_event *out) {
  ZRT_BACKEND_NN(b, "event_create");
  ZRT_CHECK(zrt_backend_check_ptr("event_create", "out", out));
  *out = NULL;
  return b->iface->event_create ? b->iface->event_create(b->ctx, out) : ZRT_OK;
}

void zrt_backend_event_destroy(zrt_backend *b, zrt_event e) {
  if (b && b->iface && e && b->iface->event_destroy) b->iface->event_destroy(b->ctx, e);
}

zrt_status zrt_backend_event_record(zrt_backend *b, zrt_event e, zrt_stream s) {
  ZRT_BACKEND_NN(b, "event_record");
  if (!b->iface->event_record) return ZRT_OK;
  ZRT_CHECK(zrt_backend_check_ptr("event_record", "event", e));
  return b->iface->event_record(b->ctx, e, s);
}

zrt_status zrt_backend_stream_wait_event(zrt_backend *b, zrt_stream s, zrt_event e) {
  ZRT_BACKEND_NN(b, "stream_wait_event");
  if (!b->iface->stream_wait_event) return ZRT_OK;
  ZRT_CHECK(zrt_backend_check_ptr("stream_wait_event", "event", e));
  return b->iface->stream_wait_event(b->ctx, s, e);
}

zrt_status zrt_backend_stream_join(zrt_backend *b, zrt_stream s) {
  ZRT_BACKEND_NN(b, "stream_join");
  if (!b->iface->stream_join) return ZRT_OK;
  return b->iface->stream_join(b->ctx, s);
}

zrt_status zrt_backend_event_synchronize(zrt_backend *b, zrt_event e) {
  ZRT_BACKEND_NN(b, "event_synchronize");
  if (!b->iface->event_synchronize || !e) return ZRT_OK;
  ZRT_BACKEND_COUNT(b, host_waits);
  return b->iface->event_synchronize(b->ctx, e);
}

zrt_status zrt_backend_event_query(zrt_backend *b, zrt_event e, int *done) {
  ZRT_BACKEND_NN(b, "event_query");
  ZRT_CHECK(zrt_backend_check_ptr("event_query", "done", done));
  *done = 1;
  if (!b->iface->event_query || !e) return ZRT_OK;
  return b->iface->event_query(b->ctx, e, done);
}

zrt_status zrt_backend_event_create_timed(zrt_backend *b, zrt_event *out) {
  ZRT_BACKEND_NN(b, "event_create_timed");
  ZRT_CHECK(zrt_backend_check_ptr("event_create_timed", "out", out));
  *out = NULL;
  if (!b->iface->event_create_timed)
    return zrt_error(ZRT_ERR_UNSUPPORTED,
                     "event_create_timed: the %s backend has no timing events (its ops complete "
                     "before they return, so there is no stream time to measure)",
                     b->iface->name);
  return b->iface->event_create_timed(b->ctx, out);
}

zrt_status zrt_backend_event_elapsed(zrt_backend *b, zrt_event start, zrt_event end, int *ready,
                                     double *seconds) {
  ZRT_BACKEND_NN(b, "event_elapsed");
  ZRT_CHECK(zrt_backend_check_ptr("event_elapsed", "start", start));
  ZRT_CHECK(zrt_backend_check_ptr("event_elapsed", "end", end));
  ZRT_CHECK(zrt_backend_check_ptr("event_elapsed", "ready", ready));
  ZRT_CHECK(zrt_backend_check_ptr("event_elapsed", "seconds", seconds));
  *ready = 0;
  *seconds = 0;
  if (!b->iface->event_elapsed)
    return zrt_error(ZRT_ERR_UNSUPPORTED, "event_elapsed: the %s backend has no timing events",
                     b->iface->name);
  return b->iface->event_elapsed(b->ctx, start, end, ready, seconds);
}

zrt_status zrt_backend_cuda_gpu_key(int device, char *buf, size_t n) {
#ifdef ZRT_HAVE_CUDA
  return zrt_backend_cuda_probe_gpu_key(device, buf, n);
#else
  (void)device;
  if (n) buf[0] = 0;
  return zrt_error(ZRT_ERR_UNSUPPORTED, "GPU key: this zrt is built without CUDA");
#endif
}

zrt_status zrt_backend_host_register(zrt_backend *b, void *ptr, size_t bytes) {
  ZRT_BACKEND_NN(b, "host_register");
  if (!b->iface->host_register || bytes == 0) return ZRT_OK;
  ZRT_CHECK(zrt_backend_check_ptr("host_register", "ptr", ptr));
  return b->iface->host_register(b->ctx, ptr, bytes);
}

void zrt_backend_host_unregister(zrt_backend *b, void *ptr) {
  if (b && b->iface && ptr && b->iface->host_unregister) b->iface->host_unregister(b->ctx, ptr);
}

zrt_status zrt_backend_launch_host(zrt_backend *b, zrt_host_fn fn, const void *args, size_t bytes,
                                   zrt_stream s) {
  return zrt_backend_launch_host_named(b, fn, args, bytes, s, "host function");
}

zrt_status zrt_backend_launch_host_named(zrt_backend *b, zrt_host_fn fn, const void *args,
                                         size_t bytes, zrt_stream s, const char *what) {
  ZRT_BACKEND_NN(b, "launch_host");
  ZRT_CHECK(zrt_backend_check_ptr("launch_host", "fn", (const void *)fn));
  if (bytes) ZRT_CHECK(zrt_backend_check_ptr("launch_host", "args", args));
  if (b->iface->launch_host)
    return b->iface->launch_host(b->ctx, fn, args, bytes, s, what ? what : "host function");
  ZRT_CHECK(zrt_backend_synchronize(b, s));
  /* fn may write its copy: give it one, as the asynchronous slot does */
  unsigned char small[256];
  void *copy = bytes <= sizeof small ? (void *)small : malloc(bytes);
  if (!copy) return zrt_error(ZRT_ERR_OOM, "zrt_backend_launch_host: out of host memory");
  if (bytes) memcpy(copy, args, bytes);
  zrt_status st = fn(copy);
  if (copy != small) free(copy);
  return st;
}

zrt_status zrt_backend_enqueue_host_named(zrt_backend *b, zrt_host_fn fn, const void *args,
                                          size_t bytes, zrt_stream s, const char *what) {
  ZRT_BACKEND_NN(b, "enqueue_host");
  /* without the slot (cpu): launch_host, which runs it at once */
  if (!b->iface->enqueue_host) return zrt_backend_launch_host_named(b, fn, args, bytes, s, what);
  ZRT_CHECK(zrt_backend_check_ptr("enqueue_host", "fn", (const void *)fn));
  if (bytes) ZRT_CHECK(zrt_backend_check_ptr("enqueue_host", "args", args));
  return b->iface->enqueue_host(b->ctx, fn, args, bytes, s, what ? what : "host function");
}

int zrt_backend_host_fn_async(const zrt_backend *b) {
  return b && b->iface && (b->iface->enqueue_host || b->iface->launch_host) && b->host_fn_async;
}

int zrt_backend_host_fn_device(const zrt_backend *b) {
  return zrt_backend_host_fn_async(b) && b->iface->launch_host && b->host_fn_device;
}

int zrt_backend_host_fn_kernels(const zrt_backend *b) {
  return zrt_backend_host_fn_device(b) && b->host_fn_kernels;
}
