/*
 * backend_cuda.cu — the CUDA backend: device memory from a CUDA memory pool
 * behind the accounted device pool, copies and kernels on tracked streams
 * ordered by events, GEMM through cuBLAS with fp32 compute, pinned host
 * registration, host-side work queued on streams (cudaLaunchHostFunc: the
 * buckets' host additions, the offload pipe's updates); element-for-element
 * the CPU backend's semantics. Details
 * (numerics, streams, memory, errors): docs/engine.md, "The CUDA backend
 * (backend_cuda.cu)".
 */
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern "C" {
#include "backend.h"
#include "backend_cuda.h"
#include "cuda_check.h"
#include "dtype_scalar.h"
}

#define ZRT_CUDA_THREADS 256
/* Blocks of the scale_check partial pass; the fold kernel reads them all. */
#define ZRT_CUDA_RED_BLOCKS 1024

/* cuBLAS workspace per stream: NVIDIA's recommendation for Hopper (the
 * cuBLAS guide, cublasSetWorkspace: 32 MiB on sm_90, 4 MiB before); kept
 * out of the device share by device_rules.h's reserve. */
#define ZRT_CUBLAS_WORKSPACE ((size_t)32 << 20)
/* Streams one backend tracks (its own plus stream_create's). */
#define ZRT_CUDA_MAX_STREAMS 64

typedef struct zrt_cuda_stream_rec {
  cudaStream_t s;
  cudaEvent_t join; /* recorded on s when memory is freed */
  void *cublas_ws;  /* ZRT_CUBLAS_WORKSPACE bytes, raw from the memory pool */
} zrt_cuda_stream_rec;

typedef struct zrt_cuda_ctx {
  zrt_backend *b;
  int device;
  int sm_count;
  cudaStream_t stream; /* what NULL means */
  cublasHandle_t cublas;
  cudaStream_t cublas_bound; /* the stream cublas is set to */
  pthread_mutex_t mu;
  void *d_scratch; /* partial sums, flags, folded result */
  void *h_result;  /* pinned: double sumsq, int flag */
  cudaMemPool_t mempool;
  cudaEvent_t fork;                              /* recorded on stream after an allocation */
  zrt_cuda_stream_rec rec[ZRT_CUDA_MAX_STREAMS]; /* rec[0] is stream */
  int nrec;
  /* the first failure of an enqueued host function (cudaLaunchHostFunc
   * runs it on a driver thread): sticky, reported by every later
   * synchronize, event_synchronize and enqueue */
  pthread_mutex_t herr_mu;
  zrt_status herr;
  char herr_msg[512];
} zrt_cuda_ctx;

/* ------------------------------------------------------------- errors */

/* device_rules.h states CUDA's error numbers without the header: they must
 * be the ones this build's header has. */
static_assert((int)ZRT_CUDA_ERR_INSUFFICIENT_DRIVER == (int)cudaErrorInsufficientDriver,
              "CUDA error number");
static_assert((int)ZRT_CUDA_ERR_NO_DEVICE == (int)cudaErrorNoDevice, "CUDA error number");
static_assert((int)ZRT_CUDA_ERR_ECC_UNCORRECTABLE == (int)cudaErrorECCUncorrectable,
              "CUDA error number");
static_assert((int)ZRT_CUDA_ERR_ILLEGAL_ADDRESS == (int)cudaErrorIllegalAddress,
              "CUDA error number");
static_assert((int)ZRT_CUDA_ERR_LAUNCH_TIMEOUT == (int)cudaErrorLaunchTimeout, "CUDA error number");
static_assert((int)ZRT_CUDA_ERR_ASSERT == (int)cudaErrorAssert, "CUDA error number");
static_assert((int)ZRT_CUDA_ERR_HARDWARE_STACK == (int)cudaErrorHardwareStackError,
              "CUDA error number");
static_assert((int)ZRT_CUDA_ERR_ILLEGAL_INSTRUCTION == (int)cudaErrorIllegalInstruction,
              "CUDA error number");
static_assert((int)ZRT_CUDA_ERR_MISALIGNED_ADDRESS == (int)cudaErrorMisalignedAddress,
              "CUDA error number");
static_assert((int)ZRT_CUDA_ERR_INVALID_ADDRESS_SPACE == (int)cudaErrorInvalidAddressSpace,
              "CUDA error number");
static_assert((int)ZRT_CUDA_ERR_INVALID_PC == (int)cudaErrorInvalidPc, "CUDA error number");
static_assert((int)ZRT_CUDA_ERR_LAUNCH_FAILURE == (int)cudaErrorLaunchFailure, "CUDA error number");

static zrt_status zrt_cublas_err(cublasStatus_t s, const char *what) {
  return zrt_error(ZRT_ERR_CUDA, "%s failed: cuBLAS %s (%d)", what, cublasGetStatusString(s),
                   (int)s);
}

static cudaStream_t zrt_cuda_stream(zrt_cuda_ctx *c, zrt_stream s) {
  return s ? (cudaStream_t)s : c->stream;
}

static unsigned zrt_cuda_blocks(const zrt_cuda_ctx *c, size_t n) {
  size_t want = (n + ZRT_CUDA_THREADS - 1) / ZRT_CUDA_THREADS;
  size_t cap = (size_t)c->sm_count * 32;
  if (want > cap) want = cap;
  return (unsigned)(want ? want : 1);
}

#include "cuda_kernels.cuh"

/* ----------------------------------------------------------- memory */

/* Raw stream-ordered allocation from the backend's memory pool on
 * ctx->stream, then ordered before later work on every tracked stream. */
static zrt_status zrt_cuda_alloc(void *ctx, size_t bytes, void **out) {
  zrt_cuda_ctx *c = (zrt_cuda_ctx *)ctx;
  *out = NULL;
  ZRT_CUDA_CHECK(cudaSetDevice(c->device));
  cudaError_t e = cudaMallocFromPoolAsync(out, bytes, c->mempool, c->stream);
  if (e == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    *out = NULL;
    return zrt_error(ZRT_ERR_OOM, "cudaMallocFromPoolAsync(%zu bytes) on device %d: %s", bytes,
                     c->device, cudaGetErrorString(e));
  }
  if (e != cudaSuccess) return zrt_cuda_status(e, "cudaMallocFromPoolAsync");
  pthread_mutex_lock(&c->mu);
  e = cudaEventRecord(c->fork, c->stream);
  for (int i = 1; i < c->nrec && e == cudaSuccess; i++)
    e = cudaStreamWaitEvent(c->rec[i].s, c->fork, 0);
  pthread_mutex_unlock(&c->mu);
  if (e != cudaSuccess) return zrt_cuda_status(e, "ordering a new allocation before the streams");
  return ZRT_OK;
}

/* Joins every tracked stream into ctx->stream, then frees there: the block
 * is reused only after all work queued so far on any of them. */
static void zrt_cuda_free(void *ctx, void *ptr, size_t bytes) {
  zrt_cuda_ctx *c = (zrt_cuda_ctx *)ctx;
  (void)bytes;
  cudaSetDevice(c->device);
  cudaError_t e = cudaSuccess;
  pthread_mutex_lock(&c->mu);
  for (int i = 1; i < c->nrec && e == cudaSuccess; i++) {
    e = cudaEventRecord(c->rec[i].join, c->rec[i].s);
    if (e == cudaSuccess) e = cudaStreamWaitEvent(c->stream, c->rec[i].join, 0);
  }
  pthread_mutex_unlock(&c->mu);
  if (e == cudaSuccess) e = cudaFreeAsync(ptr, c->stream);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    zrt_log(ZRT_LOG_ERROR, "cudaFreeAsync(%p) on device %d: %s", ptr, c->device,
            cudaGetErrorString(e));
  }
}

/* zrt_backend_free_on: the block goes back in stream order on s alone
 * (the caller vouches that s is ordered after every use of it), with no
 * join of the other streams: a module's gradients freed after their
 * reduce-scatter's stream wait do not make the compute stream wait for the
 * comm stream's later work. The memory pool orders a later allocation on
 * any stream after this free itself (cudaMallocAsync's stream-ordered
 * reuse: event dependencies, or a dependency it inserts). */
static void zrt_cuda_free_on(void *ctx, void *ptr, size_t bytes, zrt_stream s) {
  zrt_cuda_ctx *c = (zrt_cuda_ctx *)ctx;
  (void)bytes;
  cudaSetDevice(c->device);
  cudaError_t e = cudaFreeAsync(ptr, zrt_cuda_stream(c, s));
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    zrt_log(ZRT_LOG_ERROR, "cudaFreeAsync(%p) on device %d, stream %p: %s", ptr, c->device, s,
            cudaGetErrorString(e));
  }
}

/* The record of stream st (caller holds mu); NULL when untracked. */
static zrt_cuda_stream_rec *zrt_cuda_rec(zrt_cuda_ctx *c, cudaStream_t st) {
  for (int i = 0; i < c->nrec; i++)
    if (c->rec[i].s == st) return &c->rec[i];
  return NULL;
}

/* Where p lives: cudaMemoryTypeUnregistered for pageable host memory (a
 * pointer the runtime cannot place counts as pageable; its error is not
 * sticky and is cleared). */
static cudaMemoryType zrt_cuda_mem_type(const void *p) {
  cudaPointerAttributes a;
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    (void)cudaGetLastError();
    return cudaMemoryTypeUnregistered;
  }
  return a.type;
}

/* A copy from device memory into pageable host memory has completed when
 * this returns (zrt.h's contract, and the twin's rule): the runtime's API
 * synchronization notes say only that cudaMemcpyAsync between device and
 * pageable memory "might be synchronous", so the stream is synchronized
 * after it (a host wait, counted as the twin counts that copy; free where
 * the driver already waited). Copies from pageable memory to the device
 * are left asynchronous: the driver stages their bytes before returning. */
static zrt_status zrt_cuda_memcpy(void *ctx, void *dst, const void *src, size_t bytes,
                                  zrt_copy_kind kind, zrt_stream s) {
  zrt_cuda_ctx *c = (zrt_cuda_ctx *)ctx;
  (void)kind; /* unified addressing knows where each pointer lives */
  ZRT_CUDA_CHECK(cudaSetDevice(c->device));
  cudaStream_t st = zrt_cuda_stream(c, s);
  ZRT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, st));
  if (zrt_cuda_mem_type(dst) == cudaMemoryTypeUnregistered &&
      zrt_cuda_mem_type(src) == cudaMemoryTypeDevice) {
    ZRT_CUDA_CHECK(cudaStreamSynchronize(st));
    ZRT_BACKEND_COUNT(c->b, host_waits);
  }
  return ZRT_OK;
}

static zrt_status zrt_cuda_memset(void *ctx, void *dst, int value, size_t bytes, zrt_stream s) {
  zrt_cuda_ctx *c = (zrt_cuda_ctx *)ctx;
  ZRT_CUDA_CHECK(cudaSetDevice(c->device));
  ZRT_CUDA_CHECK(cudaMemsetAsync(dst, value, bytes, zrt_cuda_stream(c, s)));
  return ZRT_OK;
}

/* ---------------------------------------------------------- compute */

static zrt_status zrt_cuda_convert(void *ctx, void *dst, zrt_dtype dst_dt, const void *src,
                                   zrt_dtype src_dt, size_t n, zrt_stream s) {
  zrt_cuda_ctx *c = (zrt_cuda_ctx *)ctx;
  cudaStream_t st = zrt_cuda_stream(c, s);
  ZRT_CUDA_CHECK(cudaSetDevice(c->device));
  if (dst_dt == src_dt) {
    ZRT_CUDA_CHECK(cudaMemcpyAsync(dst, src, n * zrt_dtype_size(dst_dt), cudaMemcpyDefault, st));
    return ZRT_OK;
  }
  unsigned g = zrt_cuda_blocks(c, n);
  ZRT_DT_SWITCH(
      src_dt, S,
      ZRT_DT_SWITCH(dst_dt, D, zrt_k_convert<S, D><<<g, ZRT_CUDA_THREADS, 0, st>>>(dst, src, n)));
  ZRT_CUDA_LAUNCHED("convert kernel");
  return ZRT_OK;
}

static zrt_status zrt_cuda_accumulate(void *ctx, float *dst, const void *src, zrt_dtype src_dt,
                                      float alpha, size_t n, zrt_stream s) {
  zrt_cuda_ctx *c = (zrt_cuda_ctx *)ctx;
  cudaStream_t st = zrt_cuda_stream(c, s);
  ZRT_CUDA_CHECK(cudaSetDevice(c->device));
  unsigned g = zrt_cuda_blocks(c, n);
  ZRT_DT_SWITCH(src_dt, S, zrt_k_accumulate<S><<<g, ZRT_CUDA_THREADS, 0, st>>>(dst, src, alpha, n));
  ZRT_CUDA_LAUNCHED("accumulate kernel");
  return ZRT_OK;
}

/* scale_check over a list: per buffer the partial pass and a fold that adds
 * into one device record (started from the caller's *sumsq, as the host's
 * `*sumsq +=` would), then one copy back and one wait for all of them.
 * scale_check is the list of one. */
static zrt_status zrt_cuda_scale_check_list_locked(zrt_cuda_ctx *c, const void *const *x,
                                                   const size_t *n, int k, zrt_dtype dt,
                                                   float scale, double *sumsq, int *nonfinite,
                                                   cudaStream_t st) {
  double *partial = (double *)c->d_scratch;
  int *flags = (int *)(partial + ZRT_CUDA_RED_BLOCKS);
  double *out = partial + ZRT_CUDA_RED_BLOCKS + ZRT_CUDA_RED_BLOCKS / 2;
  int *out_flag = (int *)(out + 1);
  int first = 1;
  for (int i = 0; i < k; i++) {
    if (!n[i]) continue;
    unsigned g = zrt_cuda_blocks(c, n[i]);
    if (g > ZRT_CUDA_RED_BLOCKS) g = ZRT_CUDA_RED_BLOCKS;
    ZRT_DT_SWITCH(dt, S,
                  zrt_k_sumsq_partial<S>
                  <<<g, ZRT_CUDA_THREADS, 0, st>>>(x[i], n[i], scale, partial, flags));
    ZRT_CUDA_LAUNCHED("scale_check kernel");
    zrt_k_sumsq_fold<<<1, ZRT_CUDA_THREADS, 0, st>>>(partial, flags, (int)g, out, out_flag, first,
                                                     *sumsq);
    ZRT_CUDA_LAUNCHED("scale_check fold kernel");
    first = 0;
  }
  if (first) return ZRT_OK; /* every buffer empty */
  ZRT_CUDA_CHECK(
      cudaMemcpyAsync(c->h_result, out, sizeof(double) + sizeof(int), cudaMemcpyDeviceToHost, st));
  ZRT_CUDA_CHECK(cudaStreamSynchronize(st));
  ZRT_BACKEND_COUNT(c->b, host_waits);
  ZRT_BACKEND_COUNT(c->b, d2h_reads);
  int f;
  memcpy(sumsq, c->h_result, sizeof *sumsq);
  memcpy(&f, (char *)c->h_result + sizeof(double), sizeof f);
  *nonfinite |= f;
  return ZRT_OK;
}

static zrt_status zrt_cuda_scale_check_list(void *ctx, const void *const *x, const size_t *n, int k,
                                            zrt_dtype dt, float scale, double *sumsq,
                                            int *nonfinite, zrt_stream s) {
  zrt_cuda_ctx *c = (zrt_cuda_ctx *)ctx;
  ZRT_CUDA_CHECK(cudaSetDevice(c->device));
  pthread_mutex_lock(&c->mu);
  zrt_status st = zrt_cuda_scale_check_list_locked(c, x, n, k, dt, scale, sumsq, nonfinite,
                                                   zrt_cuda_stream(c, s));
  pthread_mutex_unlock(&c->mu);
  return st;
}

static zrt_status zrt_cuda_scale_check(void *ctx, const void *x, zrt_dtype dt, size_t n,
                                       float scale, double *sumsq, int *nonfinite, zrt_stream s) {
  zrt_cuda_ctx *c = (zrt_cuda_ctx *)ctx;
  ZRT_CUDA_CHECK(cudaSetDevice(c->device));
  pthread_mutex_lock(&c->mu);
  zrt_status st = zrt_cuda_scale_check_list_locked(c, &x, &n, 1, dt, scale, sumsq, nonfinite,
                                                   zrt_cuda_stream(c, s));
  pthread_mutex_unlock(&c->mu);
  return st;
}

static cudaDataType zrt_cuda_dtype(zrt_dtype dt) {
  return dt == ZRT_F16 ? CUDA_R_16F : dt == ZRT_BF16 ? CUDA_R_16BF : CUDA_R_32F;
}

static zrt_status zrt_cuda_scale_c(zrt_cuda_ctx *c, void *cm, zrt_dtype cdt, int64_t m, int64_t n,
                                   int64_t ldc, float beta, cudaStream_t st) {
  unsigned g = zrt_cuda_blocks(c, (size_t)(m * n));
  ZRT_DT_SWITCH(cdt, D, zrt_k_scale2d<D><<<g, ZRT_CUDA_THREADS, 0, st>>>(cm, ldc, m, n, beta));
  ZRT_CUDA_LAUNCHED("gemm beta-scale kernel");
  return ZRT_OK;
}

static zrt_status zrt_cuda_convert2d(zrt_cuda_ctx *c, void *dst, zrt_dtype ddt, int64_t ldd,
                                     const void *src, zrt_dtype sdt, int64_t lds, int64_t rows,
                                     int64_t cols, cudaStream_t st) {
  unsigned g = zrt_cuda_blocks(c, (size_t)(rows * cols));
  ZRT_DT_SWITCH(sdt, S,
                ZRT_DT_SWITCH(ddt, D,
                              zrt_k_convert2d<S, D>
                              <<<g, ZRT_CUDA_THREADS, 0, st>>>(dst, ldd, src, lds, rows, cols)));
  ZRT_CUDA_LAUNCHED("gemm convert kernel");
  return ZRT_OK;
}

static zrt_status zrt_cuda_gemm_ex(zrt_cuda_ctx *c, int ta, int tb, int64_t m, int64_t n, int64_t k,
                                   float alpha, const void *a, int64_t lda, const void *bm,
                                   int64_t ldb, zrt_dtype abt, float beta, void *cm, int64_t ldc,
                                   zrt_dtype cdt, cudaStream_t st) {
  /* Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: swap
   * the operands; each keeps its own transpose flag. */
  pthread_mutex_lock(&c->mu);
  cublasStatus_t cs = CUBLAS_STATUS_SUCCESS;
  if (c->cublas_bound != st) {
    /* the stream's own workspace: two streams never share one */
    zrt_cuda_stream_rec *r = zrt_cuda_rec(c, st);
    if (!r) {
      pthread_mutex_unlock(&c->mu);
      return zrt_error(ZRT_ERR_INVALID_ARG,
                       "cuda gemm: stream %p was not created by this backend "
                       "(zrt_backend_stream_create); cuBLAS needs a workspace per stream",
                       (void *)st);
    }
    cs = cublasSetStream(c->cublas, st);
    if (cs != CUBLAS_STATUS_SUCCESS) {
      pthread_mutex_unlock(&c->mu);
      return zrt_cublas_err(cs, "cublasSetStream (gemm)");
    }
    cs = cublasSetWorkspace(c->cublas, r->cublas_ws, ZRT_CUBLAS_WORKSPACE);
    if (cs != CUBLAS_STATUS_SUCCESS) {
      c->cublas_bound = NULL; /* the handle is on st now, without st's workspace */
      pthread_mutex_unlock(&c->mu);
      return zrt_cublas_err(cs, "cublasSetWorkspace (gemm)");
    }
    c->cublas_bound = st;
  }
  if (cs == CUBLAS_STATUS_SUCCESS)
    cs = cublasGemmEx(c->cublas, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                      (int)n, (int)m, (int)k, &alpha, bm, zrt_cuda_dtype(abt), (int)ldb, a,
                      zrt_cuda_dtype(abt), (int)lda, &beta, cm, zrt_cuda_dtype(cdt), (int)ldc,
                      CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  pthread_mutex_unlock(&c->mu);
  if (cs != CUBLAS_STATUS_SUCCESS) return zrt_cublas_err(cs, "cublasGemmEx");
  return ZRT_OK;
}

/* The fp32 workspace of one mixed-dtype GEMM: taken from the memory pool
 * on the GEMM's own stream and given back there right after the GEMM's
 * kernels (zrt_cuda_gemm), so it is stream-ordered on that stream alone (no
 * join of the other streams, no host wait) and lives exactly as long as the
 * GEMM, as the CPU and twin backends' per-call workspace does. Counted in
 * the accounted pool (ZRT_MEM_ACTIVATIONS, its capacity applies) from here
 * until the free is queued: current_total returns to what the caller holds
 * once zrt_backend_gemm returns. The memory pool keeps the bytes (release
 * threshold: all), so the next GEMM's allocation is cheap. */
static zrt_status zrt_cuda_gemm_workspace(zrt_cuda_ctx *c, cudaStream_t st, size_t bytes,
                                          float **out) {
  void *ws = NULL;
  *out = NULL;
  cudaError_t e = cudaMallocFromPoolAsync(&ws, bytes, c->mempool, st);
  if (e == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    return zrt_error(ZRT_ERR_OOM,
                     "cuda gemm: the fp32 workspace of a mixed-dtype GEMM (%zu bytes) on device "
                     "%d: cudaMallocFromPoolAsync: %s",
                     bytes, c->device, cudaGetErrorString(e));
  }
  if (e != cudaSuccess) return zrt_cuda_status(e, "cudaMallocFromPoolAsync (gemm workspace)");
  zrt_status s = zrt_pool_adopt(c->b->pool, ws, bytes, ZRT_MEM_ACTIVATIONS);
  if (s != ZRT_OK) {
    (void)cudaFreeAsync(ws, st);
    return s;
  }
  *out = (float *)ws;
  return ZRT_OK;
}

static void zrt_cuda_gemm_workspace_free(zrt_cuda_ctx *c, float *ws, cudaStream_t st) {
  zrt_pool_free(c->b->pool, ws); /* adopted: stops counting it */
  cudaError_t e = cudaFreeAsync(ws, st);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    zrt_log(ZRT_LOG_ERROR, "cudaFreeAsync(gemm workspace %p) on device %d: %s", (void *)ws,
            c->device, cudaGetErrorString(e));
  }
}

static zrt_status zrt_cuda_gemm(void *ctx, int ta, int tb, int64_t m, int64_t n, int64_t k,
                                float alpha, const void *a, int64_t lda, const void *bm,
                                int64_t ldb, zrt_dtype abt, float beta, void *cm, int64_t ldc,
                                zrt_dtype cdt, zrt_stream s) {
  zrt_cuda_ctx *c = (zrt_cuda_ctx *)ctx;
  cudaStream_t st = zrt_cuda_stream(c, s);
  zrt_status rs = ZRT_OK;
  float *cw = NULL;
  ZRT_CUDA_CHECK(cudaSetDevice(c->device));
  if (m > INT_MAX || n > INT_MAX || k > INT_MAX || lda > INT_MAX || ldb > INT_MAX || ldc > INT_MAX)
    return zrt_error(ZRT_ERR_UNSUPPORTED,
                     "cuda gemm: sizes above 2^31-1 (m=%lld n=%lld k=%lld) exceed cublasGemmEx's "
                     "32-bit interface; split the product",
                     (long long)m, (long long)n, (long long)k);
  if (k == 0) return zrt_cuda_scale_c(c, cm, cdt, m, n, ldc, beta, st);
  /* cublasGemmEx with fp32 compute takes C in fp32, or C in the dtype of
   * 16-bit A/B; other pairs accumulate into an fp32 workspace. */
  int direct = cdt == ZRT_F32 || cdt == abt;
  if (direct)
    return zrt_cuda_gemm_ex(c, ta, tb, m, n, k, alpha, a, lda, bm, ldb, abt, beta, cm, ldc, cdt,
                            st);
  ZRT_CHECK(zrt_cuda_gemm_workspace(c, st, (size_t)(m * n) * sizeof(float), &cw));
  if (beta != 0.0f)
    ZRT_CHECK_GOTO(zrt_cuda_convert2d(c, cw, ZRT_F32, n, cm, cdt, ldc, m, n, st), rs, done);
  ZRT_CHECK_GOTO(
      zrt_cuda_gemm_ex(c, ta, tb, m, n, k, alpha, a, lda, bm, ldb, abt, beta, cw, n, ZRT_F32, st),
      rs, done);
  ZRT_CHECK_GOTO(zrt_cuda_convert2d(c, cm, cdt, ldc, cw, ZRT_F32, n, m, n, st), rs, done);
done:
  zrt_cuda_gemm_workspace_free(c, cw, st);
  return rs;
}

static zrt_status zrt_cuda_optim_step(void *ctx, const zrt_optim_hparams *hp, float *master,
                                      float *s1, float *s2, const void *grad, zrt_dtype gdt,
                                      void *param16, zrt_dtype pdt, size_t n, zrt_stream s) {
  zrt_cuda_ctx *c = (zrt_cuda_ctx *)ctx;
  cudaStream_t st = zrt_cuda_stream(c, s);
  ZRT_CUDA_CHECK(cudaSetDevice(c->device));
  /* Host-side constants exactly as cpu_optim_scalar.c computes them. */
  float bc1 = 1.0f, bc2 = 1.0f;
  if (hp->bias_correction && (hp->type == ZRT_OPTIM_ADAM || hp->type == ZRT_OPTIM_ADAMW)) {
    bc1 = 1.0f - powf(hp->beta1, (float)hp->step);
    bc2 = 1.0f - powf(hp->beta2, (float)hp->step);
  }
  zrt_d_optim o;
  o.type = (int)hp->type;
  o.lr = hp->lr;
  o.b1 = hp->beta1;
  o.b2 = hp->beta2;
  o.eps = hp->eps;
  o.wd = hp->weight_decay;
  o.momentum = hp->momentum;
  o.mul = hp->grad_mul;
  o.step_size = hp->lr / bc1;
  o.inv_sqrt_bc2 = 1.0f / sqrtf(bc2);
  unsigned g = zrt_cuda_blocks(c, n);
  if (!param16) {
    ZRT_DT_SWITCH(gdt, G,
                  zrt_k_optim<G, -1>
                  <<<g, ZRT_CUDA_THREADS, 0, st>>>(o, master, s1, s2, grad, NULL, n));
  } else {
    ZRT_DT_SWITCH(gdt, G,
                  ZRT_DT_SWITCH(pdt, P,
                                zrt_k_optim<G, P><<<g, ZRT_CUDA_THREADS, 0, st>>>(
                                    o, master, s1, s2, grad, param16, n)));
  }
  ZRT_CUDA_LAUNCHED("optimizer kernel");
  return ZRT_OK;
}

/* ------------------------------------------------- streams and events */

/* A stream with its join event and cuBLAS workspace, tracked in c->rec. */
static zrt_status zrt_cuda_track(zrt_cuda_ctx *c, cudaStream_t s) {
  zrt_cuda_stream_rec r;
  memset(&r, 0, sizeof r);
  r.s = s;
  cudaError_t e = cudaEventCreateWithFlags(&r.join, cudaEventDisableTiming);
  if (e != cudaSuccess) return zrt_cuda_status(e, "cudaEventCreate (stream join)");
  e = cudaMallocFromPoolAsync(&r.cublas_ws, ZRT_CUBLAS_WORKSPACE, c->mempool, s);
  if (e != cudaSuccess) {
    cudaEventDestroy(r.join);
    return zrt_cuda_status(e, "cudaMallocFromPoolAsync (cuBLAS workspace)");
  }
  e = cudaStreamSynchronize(s); /* once, at creation */
  if (e != cudaSuccess) {
    (void)cudaFreeAsync(r.cublas_ws, s);
    cudaEventDestroy(r.join);
    return zrt_cuda_status(e, "cudaStreamSynchronize (a new stream's cuBLAS workspace)");
  }
  pthread_mutex_lock(&c->mu);
  if (c->nrec == ZRT_CUDA_MAX_STREAMS) {
    pthread_mutex_unlock(&c->mu);
    cudaFreeAsync(r.cublas_ws, s);
    cudaEventDestroy(r.join);
    return zrt_error(ZRT_ERR_UNSUPPORTED,
                     "cuda backend: more than %d streams at once (ZRT_CUDA_MAX_STREAMS); destroy "
                     "streams you no longer use",
                     ZRT_CUDA_MAX_STREAMS);
  }
  c->rec[c->nrec++] = r;
  pthread_mutex_unlock(&c->mu);
  return ZRT_OK;
}

static zrt_status zrt_cuda_stream_create(void *ctx, zrt_stream *out) {
  zrt_cuda_ctx *c = (zrt_cuda_ctx *)ctx;
  cudaStream_t s;
  ZRT_CUDA_CHECK(cudaSetDevice(c->device));
  ZRT_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  zrt_status st = zrt_cuda_track(c, s);
  if (st != ZRT_OK) {
    cudaStreamDestroy(s);
    return st;
  }
  *out = (zrt_stream)s;
  return ZRT_OK;
}

static void zrt_cuda_stream_destroy(void *ctx, zrt_stream s) {
  zrt_cuda_ctx *c = (zrt_cuda_ctx *)ctx;
  cudaSetDevice(c->device);
  zrt_cuda_stream_rec r;
  memset(&r, 0, sizeof r);
  pthread_mutex_lock(&c->mu);
  if (c->cublas_bound == (cudaStream_t)s) { /* never leave cuBLAS on a dead stream */
    cublasSetStream(c->cublas, c->stream);
    cublasSetWorkspace(c->cublas, c->rec[0].cublas_ws, ZRT_CUBLAS_WORKSPACE);
    c->cublas_bound = c->stream;
  }
  for (int i = 1; i < c->nrec; i++)
    if (c->rec[i].s == (cudaStream_t)s) {
      r = c->rec[i];
      c->rec[i] = c->rec[--c->nrec];
      break;
    }
  pthread_mutex_unlock(&c->mu);
  /* the stream's queued work ends before its workspaces are reused */
  if (cudaStreamSynchronize((cudaStream_t)s) != cudaSuccess) (void)cudaGetLastError();
  if (r.cublas_ws) cudaFreeAsync(r.cublas_ws, (cudaStream_t)s);
  if (r.join) cudaEventDestroy(r.join);
  if (cudaStreamDestroy((cudaStream_t)s) != cudaSuccess) (void)cudaGetLastError();
}

static zrt_status zrt_cuda_event_create(void *ctx, zrt_event *out) {
  zrt_cuda_ctx *c = (zrt_cuda_ctx *)ctx;
  cudaEvent_t e;
  ZRT_CUDA_CHECK(cudaSetDevice(c->device));
  ZRT_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  *out = (zrt_event)e;
  return ZRT_OK;
}

static zrt_status zrt_cuda_event_create_timed(void *ctx, zrt_event *out) {
  zrt_cuda_ctx *c = (zrt_cuda_ctx *)ctx;
  cudaEvent_t e;
  ZRT_CUDA_CHECK(cudaSetDevice(c->device));
  ZRT_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDefault));
  *out = (zrt_event)e;
  return ZRT_OK;
}

/* Not ready while either event is pending (cudaErrorNotReady): no wait. */
static zrt_status zrt_cuda_event_elapsed(void *ctx, zrt_event start, zrt_event end, int *ready,
                                         double *seconds) {
  zrt_cuda_ctx *c = (zrt_cuda_ctx *)ctx;
  ZRT_CUDA_CHECK(cudaSetDevice(c->device));
  *ready = 0;
  cudaEvent_t ev[2] = {(cudaEvent_t)start, (cudaEvent_t)end};
  for (int i = 0; i < 2; i++) {
    cudaError_t q = cudaEventQuery(ev[i]);
    if (q == cudaErrorNotReady) {
      /* cleared only when it is the thread's last error (comm_nccl.c's
       * rule): an earlier, unrelated error stays for its own check */
      if (cudaPeekAtLastError() == cudaErrorNotReady) (void)cudaGetLastError();
      return ZRT_OK;
    }
    if (q != cudaSuccess) return zrt_cuda_status(q, "cudaEventQuery (event_elapsed)");
  }
  float ms = 0;
  ZRT_CUDA_CHECK(cudaEventElapsedTime(&ms, ev[0], ev[1]));
  *ready = 1;
  *seconds = ms * 1e-3;
  return ZRT_OK;
}

static void zrt_cuda_event_destroy(void *ctx, zrt_event e) {
  (void)ctx;
  if (cudaEventDestroy((cudaEvent_t)e) != cudaSuccess) (void)cudaGetLastError();
}

static zrt_status zrt_cuda_event_record(void *ctx, zrt_event e, zrt_stream s) {
  zrt_cuda_ctx *c = (zrt_cuda_ctx *)ctx;
  ZRT_CUDA_CHECK(cudaSetDevice(c->device));
  ZRT_CUDA_CHECK(cudaEventRecord((cudaEvent_t)e, zrt_cuda_stream(c, s)));
  return ZRT_OK;
}

static zrt_status zrt_cuda_stream_wait_event(void *ctx, zrt_stream s, zrt_event e) {
  zrt_cuda_ctx *c = (zrt_cuda_ctx *)ctx;
  ZRT_CUDA_CHECK(cudaSetDevice(c->device));
  ZRT_CUDA_CHECK(cudaStreamWaitEvent(zrt_cuda_stream(c, s), (cudaEvent_t)e, 0));
  return ZRT_OK;
}

static zrt_status zrt_cuda_stream_join(void *ctx, zrt_stream s) {
  zrt_cuda_ctx *c = (zrt_cuda_ctx *)ctx;
  cudaStream_t to = zrt_cuda_stream(c, s);
  cudaError_t e = cudaSetDevice(c->device);
  pthread_mutex_lock(&c->mu);
  for (int i = 0; i < c->nrec && e == cudaSuccess; i++) {
    if (c->rec[i].s == to) continue;
    e = cudaEventRecord(c->rec[i].join, c->rec[i].s);
    if (e == cudaSuccess) e = cudaStreamWaitEvent(to, c->rec[i].join, 0);
  }
  pthread_mutex_unlock(&c->mu);
  if (e != cudaSuccess) return zrt_cuda_status(e, "joining the backend's streams");
  return ZRT_OK;
}

/* The enqueued host functions' first failure (sticky), as an error. */
static zrt_status zrt_cuda_host_status(zrt_cuda_ctx *c) {
  pthread_mutex_lock(&c->herr_mu);
  zrt_status st = c->herr;
  char msg[sizeof c->herr_msg];
  memcpy(msg, c->herr_msg, sizeof msg);
  pthread_mutex_unlock(&c->herr_mu);
  if (st == ZRT_OK) return ZRT_OK;
  return zrt_error(st, "a host function queued on a CUDA stream failed: %s", msg);
}

static zrt_status zrt_cuda_event_synchronize(void *ctx, zrt_event e) {
  zrt_cuda_ctx *c = (zrt_cuda_ctx *)ctx;
  ZRT_CUDA_CHECK(cudaSetDevice(c->device));
  ZRT_CUDA_CHECK(cudaEventSynchronize((cudaEvent_t)e));
  return zrt_cuda_host_status(c);
}

static zrt_status zrt_cuda_event_query(void *ctx, zrt_event e, int *done) {
  zrt_cuda_ctx *c = (zrt_cuda_ctx *)ctx;
  *done = 0;
  ZRT_CUDA_CHECK(cudaSetDevice(c->device));
  cudaError_t q = cudaEventQuery((cudaEvent_t)e);
  if (q == cudaErrorNotReady) {
    /* not an error: cleared so the next call does not see it (only when it
     * is the thread's last error, as in comm_nccl.c) */
    if (cudaPeekAtLastError() == cudaErrorNotReady) (void)cudaGetLastError();
    return ZRT_OK;
  }
  if (q != cudaSuccess) return zrt_cuda_status(q, "cudaEventQuery (event_query)");
  *done = 1;
  return zrt_cuda_host_status(c);
}

static zrt_status zrt_cuda_synchronize(void *ctx, zrt_stream s) {
  zrt_cuda_ctx *c = (zrt_cuda_ctx *)ctx;
  ZRT_CUDA_CHECK(cudaSetDevice(c->device));
  if (s)
    ZRT_CUDA_CHECK(cudaStreamSynchronize((cudaStream_t)s));
  else
    ZRT_CUDA_CHECK(cudaDeviceSynchronize());
  return zrt_cuda_host_status(c);
}

/* One enqueued host function: its argument bytes follow the header. */
typedef struct zrt_cuda_host_call {
  zrt_cuda_ctx *c;
  zrt_host_fn fn;
  const char *what;
  double align; /* the argument bytes after the header are 8-byte aligned */
} zrt_cuda_host_call;

static void CUDART_CB zrt_cuda_host_run(void *arg) {
  zrt_cuda_host_call *h = (zrt_cuda_host_call *)arg;
  zrt_cuda_ctx *c = h->c;
  /* after a failure the pipe's state is not to be trusted: later functions
   * are skipped, as the twin skips a failed stream's ops */
  pthread_mutex_lock(&c->herr_mu);
  int skip = c->herr != ZRT_OK;
  pthread_mutex_unlock(&c->herr_mu);
  zrt_status st = skip ? ZRT_OK : h->fn((void *)(h + 1));
  if (st != ZRT_OK) {
    pthread_mutex_lock(&c->herr_mu);
    if (c->herr == ZRT_OK) {
      c->herr = st;
      snprintf(c->herr_msg, sizeof c->herr_msg, "%s: %s", h->what, zrt_last_error());
    }
    pthread_mutex_unlock(&c->herr_mu);
  }
  free(h);
}

/* cudaLaunchHostFunc: fn runs on a driver thread after s's queued work and
 * before the work queued after; it must not call CUDA (backend.h). */
static zrt_status zrt_cuda_enqueue_host(void *ctx, zrt_host_fn fn, const void *args, size_t bytes,
                                        zrt_stream s, const char *what) {
  zrt_cuda_ctx *c = (zrt_cuda_ctx *)ctx;
  ZRT_CHECK(zrt_cuda_host_status(c));
  zrt_cuda_host_call *h = (zrt_cuda_host_call *)malloc(sizeof *h + bytes);
  if (!h) return zrt_error(ZRT_ERR_OOM, "cuda backend: out of host memory queueing %s", what);
  h->c = c;
  h->fn = fn;
  h->what = what;
  if (bytes) memcpy(h + 1, args, bytes);
  cudaError_t e = cudaSetDevice(c->device);
  if (e == cudaSuccess) e = cudaLaunchHostFunc(zrt_cuda_stream(c, s), zrt_cuda_host_run, h);
  if (e != cudaSuccess) {
    free(h);
    return zrt_cuda_status(e, "cudaLaunchHostFunc");
  }
  return ZRT_OK;
}

/* "Already registered" is an error: a stale registration (memory freed
 * and reused without unregistering) may cover other bytes, and accepting it
 * would make the caller unregister what it never registered. */
static zrt_status zrt_cuda_host_register(void *ctx, void *ptr, size_t bytes) {
  zrt_cuda_ctx *c = (zrt_cuda_ctx *)ctx;
  ZRT_CUDA_CHECK(cudaSetDevice(c->device));
  cudaError_t e = cudaHostRegister(ptr, bytes, cudaHostRegisterDefault);
  if (e == cudaErrorHostMemoryAlreadyRegistered) {
    (void)cudaGetLastError();
    return zrt_error(ZRT_ERR_CUDA,
                     "cudaHostRegister(%p, %zu bytes): the range is already registered (a stale "
                     "registration of freed memory, or registered twice); unregister it first",
                     ptr, bytes);
  }
  if (e != cudaSuccess) return zrt_cuda_status(e, "cudaHostRegister");
  return ZRT_OK;
}

static void zrt_cuda_host_unregister(void *ctx, void *ptr) {
  (void)ctx;
  cudaError_t e = cudaHostUnregister(ptr);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    zrt_log(ZRT_LOG_WARN, "cudaHostUnregister(%p): %s", ptr, cudaGetErrorString(e));
  }
}

/* ------------------------------------------------------- lifecycle */

static void zrt_cuda_destroy(void *ctx) {
  zrt_cuda_ctx *c = (zrt_cuda_ctx *)ctx;
  if (!c) return;
  cudaSetDevice(c->device);
  if (c->stream) cudaStreamSynchronize(c->stream);
  if (c->cublas) cublasDestroy(c->cublas);
  if (c->d_scratch) cudaFree(c->d_scratch);
  if (c->h_result) cudaFreeHost(c->h_result);
  for (int i = 0; i < c->nrec; i++) {
    if (c->rec[i].cublas_ws) cudaFreeAsync(c->rec[i].cublas_ws, c->stream);
    if (c->rec[i].join) cudaEventDestroy(c->rec[i].join);
  }
  if (c->stream) cudaStreamSynchronize(c->stream);
  if (c->fork) cudaEventDestroy(c->fork);
  if (c->mempool) cudaMemPoolDestroy(c->mempool);
  if (c->stream) cudaStreamDestroy(c->stream);
  (void)cudaGetLastError();
  pthread_mutex_destroy(&c->mu);
  pthread_mutex_destroy(&c->herr_mu);
  free(c);
}

static zrt_backend_iface zrt_cuda_make_iface(void) {
  zrt_backend_iface f;
  memset(&f, 0, sizeof f);
  f.name = "cuda";
  f.alloc = zrt_cuda_alloc;
  f.free = zrt_cuda_free;
  f.free_on = zrt_cuda_free_on;
  f.memcpy = zrt_cuda_memcpy;
  f.memset = zrt_cuda_memset;
  f.convert = zrt_cuda_convert;
  f.accumulate = zrt_cuda_accumulate;
  f.scale_check = zrt_cuda_scale_check;
  f.scale_check_list = zrt_cuda_scale_check_list;
  f.gemm = zrt_cuda_gemm;
  f.optim_step = zrt_cuda_optim_step;
  f.stream_create = zrt_cuda_stream_create;
  f.stream_destroy = zrt_cuda_stream_destroy;
  f.event_create = zrt_cuda_event_create;
  f.event_destroy = zrt_cuda_event_destroy;
  f.event_record = zrt_cuda_event_record;
  f.stream_wait_event = zrt_cuda_stream_wait_event;
  f.synchronize = zrt_cuda_synchronize;
  f.stream_join = zrt_cuda_stream_join;
  f.event_synchronize = zrt_cuda_event_synchronize;
  f.event_query = zrt_cuda_event_query;
  f.event_create_timed = zrt_cuda_event_create_timed;
  f.event_elapsed = zrt_cuda_event_elapsed;
  f.host_register = zrt_cuda_host_register;
  f.host_unregister = zrt_cuda_host_unregister;
  f.enqueue_host = zrt_cuda_enqueue_host;
  f.destroy = zrt_cuda_destroy;
  return f;
}

static const zrt_backend_iface zrt_cuda_iface = zrt_cuda_make_iface();

/* NUMA node of the GPU's PCI device from sysfs; -1 when unknown. */
static int zrt_cuda_numa_node(int device) {
  char bus[64];
  if (cudaDeviceGetPCIBusId(bus, (int)sizeof bus, device) != cudaSuccess) {
    (void)cudaGetLastError();
    return -1;
  }
  unsigned dom = 0, b = 0, d = 0, fn = 0;
  if (sscanf(bus, "%x:%x:%x.%x", &dom, &b, &d, &fn) != 4) return -1;
  char path[128];
  snprintf(path, sizeof path, "/sys/bus/pci/devices/%04x:%02x:%02x.%x/numa_node", dom, b, d, fn);
  FILE *fp = fopen(path, "r");
  if (!fp) return -1;
  int node = -1;
  if (fscanf(fp, "%d", &node) != 1) node = -1;
  fclose(fp);
  return node < 0 ? -1 : node;
}

extern "C" void zrt_backend_cuda_probe(zrt_cuda_probe *out) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  char msg[200];
  snprintf(msg, sizeof msg, "cudaGetDeviceCount: %s (%s)", cudaGetErrorString(e),
           cudaGetErrorName(e));
  int drv = 0;
  if (cudaDriverGetVersion(&drv) != cudaSuccess) drv = 0;
  if (drv > 0) {
    char v[64];
    snprintf(v, sizeof v, "; driver supports CUDA %d.%d, this build needs %d.%d", drv / 1000,
             (drv % 1000) / 10, CUDART_VERSION / 1000, (CUDART_VERSION % 1000) / 10);
    strncat(msg, v, sizeof msg - strlen(msg) - 1);
  }
  (void)cudaGetLastError();
  zrt_cuda_probe_classify((int)e, ZRT_CUDA_ERR_NO_DEVICE, e == cudaSuccess ? n : 0, drv, msg, out);
}

extern "C" zrt_status zrt_backend_cuda_probe_gpu_key(int device, char *buf, size_t n) {
  char bus[64];
  ZRT_CUDA_CHECK(cudaDeviceGetPCIBusId(bus, (int)sizeof bus, device));
  char host[256] = "unknown", boot[64] = "";
  gethostname(host, sizeof host - 1);
  FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
  if (f) {
    if (!fgets(boot, (int)sizeof boot, f)) boot[0] = 0;
    fclose(f);
  }
  boot[strcspn(boot, "\n")] = 0;
  snprintf(buf, n, "%s:%s/%s", host, boot, bus);
  return ZRT_OK;
}

static void zrt_cuda_ver(int v, char *buf, size_t n) {
  snprintf(buf, n, "%d.%d", v / 1000, (v % 1000) / 10);
}

extern "C" void zrt_backend_cuda_probe_versions(char *buf, size_t n) {
  int rt = 0, drv = 0, maj = 0, min = 0, pat = 0;
  char r[16] = "?", d[32] = "none", b[32] = "?";
  if (cudaRuntimeGetVersion(&rt) == cudaSuccess) zrt_cuda_ver(rt, r, sizeof r);
  if (cudaDriverGetVersion(&drv) == cudaSuccess && drv > 0) zrt_cuda_ver(drv, d, sizeof d);
  (void)cudaGetLastError();
  if (cublasGetProperty(MAJOR_VERSION, &maj) == CUBLAS_STATUS_SUCCESS &&
      cublasGetProperty(MINOR_VERSION, &min) == CUBLAS_STATUS_SUCCESS &&
      cublasGetProperty(PATCH_LEVEL, &pat) == CUBLAS_STATUS_SUCCESS)
    snprintf(b, sizeof b, "%d.%d.%d", maj, min, pat);
  snprintf(buf, n, "runtime %s, driver %s, cuBLAS %s", r, d, b);
}

extern "C" zrt_status zrt_backend_cuda_init(zrt_backend *b, int device, int sharing) {
  if (!b) return zrt_error(ZRT_ERR_INVALID_ARG, "zrt_backend_cuda_init: b is NULL");
  int count = 0;
  ZRT_CUDA_CHECK(cudaGetDeviceCount(&count));
  if (device < 0 || device >= count)
    return zrt_error(ZRT_ERR_INVALID_ARG, "CUDA device %d does not exist (%d visible)", device,
                     count);
  ZRT_CUDA_CHECK(cudaSetDevice(device));
  cudaDeviceProp prop;
  ZRT_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  size_t free_b = 0, total_b = 0;
  ZRT_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));

  zrt_cuda_ctx *c = (zrt_cuda_ctx *)calloc(1, sizeof *c);
  if (!c) return zrt_error(ZRT_ERR_OOM, "zrt_backend_cuda_init: out of host memory");
  pthread_mutex_init(&c->mu, NULL);
  pthread_mutex_init(&c->herr_mu, NULL);
  c->b = b;
  c->device = device;
  c->sm_count = prop.multiProcessorCount > 0 ? prop.multiProcessorCount : 1;
  zrt_status st = ZRT_OK;
  size_t share = zrt_device_share(free_b, zrt_device_reserve(total_b), sharing);
  cudaError_t e = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking);
  if (e != cudaSuccess) {
    c->stream = NULL;
    st = zrt_cuda_status(e, "cudaStreamCreateWithFlags");
    goto fail;
  }
  {
    /* the memory pool keeps what it took (release threshold: all of it) */
    cudaMemPoolProps props;
    memset(&props, 0, sizeof props);
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = device;
    e = cudaMemPoolCreate(&c->mempool, &props);
    if (e != cudaSuccess) {
      c->mempool = NULL;
      st = zrt_cuda_status(e, "cudaMemPoolCreate");
      goto fail;
    }
    uint64_t keep = UINT64_MAX;
    e = cudaMemPoolSetAttribute(c->mempool, cudaMemPoolAttrReleaseThreshold, &keep);
    if (e == cudaSuccess) e = cudaEventCreateWithFlags(&c->fork, cudaEventDisableTiming);
    if (e != cudaSuccess) {
      st = zrt_cuda_status(e, "cudaMemPoolSetAttribute / cudaEventCreate");
      goto fail;
    }
    ZRT_CHECK_GOTO(zrt_cuda_track(c, c->stream), st, fail);
  }
  {
    cublasStatus_t cs = cublasCreate(&c->cublas);
    if (cs != CUBLAS_STATUS_SUCCESS) {
      c->cublas = NULL;
      st = zrt_cublas_err(cs, "cublasCreate");
      goto fail;
    }
    cs = cublasSetStream(c->cublas, c->stream);
    if (cs != CUBLAS_STATUS_SUCCESS) {
      st = zrt_cublas_err(cs, "cublasSetStream");
      goto fail;
    }
    cs = cublasSetWorkspace(c->cublas, c->rec[0].cublas_ws, ZRT_CUBLAS_WORKSPACE);
    if (cs != CUBLAS_STATUS_SUCCESS) {
      st = zrt_cublas_err(cs, "cublasSetWorkspace");
      goto fail;
    }
    c->cublas_bound = c->stream;
  }
  /* partial sums (doubles), flags (ints), folded sum + flag */
  e = cudaMalloc(&c->d_scratch, ZRT_CUDA_RED_BLOCKS * sizeof(double) +
                                    ZRT_CUDA_RED_BLOCKS * sizeof(int) + 2 * sizeof(double));
  if (e != cudaSuccess) {
    c->d_scratch = NULL;
    st = zrt_cuda_status(e, "cudaMalloc (scale_check scratch)");
    goto fail;
  }
  e = cudaMallocHost(&c->h_result, 2 * sizeof(double));
  if (e != cudaSuccess) {
    c->h_result = NULL;
    st = zrt_cuda_status(e, "cudaMallocHost (scale_check result)");
    goto fail;
  }
  b->numa_node = zrt_cuda_numa_node(device);
  b->device_id = device;
  b->device_capacity = share;
  b->native_stream = (void *)c->stream;
  b->host_fn_async = 1; /* enqueue_host: cudaLaunchHostFunc */
  b->host_fn_device = 0;
  snprintf(b->description, sizeof b->description,
           "%s (sm_%d%d, %.1f GiB, %.1f GiB free, share %.1f GiB for %d rank(s))", prop.name,
           prop.major, prop.minor, (double)total_b / (1024.0 * 1024.0 * 1024.0),
           (double)free_b / (1024.0 * 1024.0 * 1024.0), (double)share / (1024.0 * 1024.0 * 1024.0),
           sharing);
  if (!share) {
    st = zrt_error(ZRT_ERR_OOM,
                   "CUDA device %d has %.2f GiB free, not more than the %.2f GiB reserve "
                   "(device_rules.h): free the GPU (nvidia-smi shows who holds it)",
                   device, (double)free_b / (1024.0 * 1024.0 * 1024.0),
                   (double)zrt_device_reserve(total_b) / (1024.0 * 1024.0 * 1024.0));
    goto fail;
  }
  b->ctx = c;
  b->iface = &zrt_cuda_iface;
  return ZRT_OK;
fail:
  zrt_cuda_destroy(c);
  return st;
}
