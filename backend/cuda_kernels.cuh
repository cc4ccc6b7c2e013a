/*
 * cuda_kernels.cuh — the CUDA backend's device code, included by
 * backend_cuda.cu only (one translation unit: the kernels are templates on
 * the dtypes): dtype loads/stores (amp/dtype_scalar.h's conversions, so the
 * GPU rounds with the code unit.test_dtype checks), convert, accumulate,
 * the two-pass sum of squares with the non-finite flag, and the fused
 * optimizer step in cpu_optim_scalar.c's expression order.
 */
#ifndef ZRT_CUDA_KERNELS_CUH
#define ZRT_CUDA_KERNELS_CUH

/* ------------------------------------------------ dtype (amp/dtype.h) */

/* The scalar conversions are amp/dtype_scalar.h's, compiled for the device
 * too: the GPU rounds with the very code unit.test_dtype checks. */

template <int DT> __device__ __forceinline__ float zrt_d_load(const void *p, size_t i) {
  if (DT == ZRT_F16) return zrt_f16_to_f32(((const uint16_t *)p)[i]);
  if (DT == ZRT_BF16) return zrt_bf16_to_f32(((const uint16_t *)p)[i]);
  return ((const float *)p)[i];
}

template <int DT> __device__ __forceinline__ void zrt_d_store(void *p, size_t i, float v) {
  if (DT == ZRT_F16)
    ((uint16_t *)p)[i] = zrt_f32_to_f16(v);
  else if (DT == ZRT_BF16)
    ((uint16_t *)p)[i] = zrt_f32_to_bf16(v);
  else
    ((float *)p)[i] = v;
}

/* ----------------------------------------------------------- kernels */

#define ZRT_GRID_STRIDE(i, n)                                                                      \
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);                          \
       i += (size_t)gridDim.x * blockDim.x)

template <int S, int D> __global__ void zrt_k_convert(void *dst, const void *src, size_t n) {
  ZRT_GRID_STRIDE(i, n) zrt_d_store<D>(dst, i, zrt_d_load<S>(src, i));
}

/* Strided 2-D convert (rows x cols) for GEMM's fp32 workspace of C. */
template <int S, int D>
__global__ void zrt_k_convert2d(void *dst, int64_t ldd, const void *src, int64_t lds, int64_t rows,
                                int64_t cols) {
  size_t n = (size_t)(rows * cols);
  ZRT_GRID_STRIDE(i, n) {
    int64_t r = (int64_t)(i / (size_t)cols), c = (int64_t)(i % (size_t)cols);
    zrt_d_store<D>(dst, (size_t)(r * ldd + c), zrt_d_load<S>(src, (size_t)(r * lds + c)));
  }
}

/* C *= beta on a strided matrix; beta 0 writes zeros (C is not read). */
template <int D>
__global__ void zrt_k_scale2d(void *c, int64_t ldc, int64_t rows, int64_t cols, float beta) {
  size_t n = (size_t)(rows * cols);
  ZRT_GRID_STRIDE(i, n) {
    size_t at = (size_t)((int64_t)(i / (size_t)cols) * ldc + (int64_t)(i % (size_t)cols));
    zrt_d_store<D>(c, at, beta == 0.0f ? 0.0f : __fmul_rn(zrt_d_load<D>(c, at), beta));
  }
}

template <int S>
__global__ void zrt_k_accumulate(float *dst, const void *src, float alpha, size_t n) {
  ZRT_GRID_STRIDE(i, n) dst[i] = __fadd_rn(dst[i], __fmul_rn(zrt_d_load<S>(src, i), alpha));
}

/* Block-wide fixed-order tree reduction (blockDim.x a power of two, at
 * most ZRT_CUDA_THREADS): on return every thread holds the block's sum of
 * acc and OR of bad, folded in the same order on every run. */
static __device__ void zrt_d_block_sum(double *acc, int *bad) {
  __shared__ double ssum[ZRT_CUDA_THREADS];
  __shared__ int sbad[ZRT_CUDA_THREADS];
  ssum[threadIdx.x] = *acc;
  sbad[threadIdx.x] = *bad;
  __syncthreads();
  for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) {
      ssum[threadIdx.x] += ssum[threadIdx.x + s];
      sbad[threadIdx.x] |= sbad[threadIdx.x + s];
    }
    __syncthreads();
  }
  *acc = ssum[0];
  *bad = sbad[0];
}

/* Pass 1: each block writes its sum of (x*scale)^2 in double and whether
 * it saw a non-finite x. */
template <int S>
__global__ void zrt_k_sumsq_partial(const void *x, size_t n, float scale, double *partial,
                                    int *flags) {
  double acc = 0.0;
  int bad = 0;
  ZRT_GRID_STRIDE(i, n) {
    float g = zrt_d_load<S>(x, i);
    if (!isfinite(g)) bad = 1;
    double v = (double)g * (double)scale;
    acc += v * v;
  }
  zrt_d_block_sum(&acc, &bad);
  if (threadIdx.x == 0) {
    partial[blockIdx.x] = acc;
    flags[blockIdx.x] = bad;
  }
}

/* Pass 2 (one block) for one buffer of a scale_check list: fold the
 * partials in a fixed order, then out = init + sum for the first buffer and
 * out = out + sum after it, the order of the host's `*sumsq += sum` per
 * buffer, so the bits match per-buffer calls. */
__global__ void zrt_k_sumsq_fold(const double *partial, const int *flags, int nblocks, double *out,
                                 int *out_flag, int first, double init) {
  double acc = 0.0;
  int bad = 0;
  for (int i = threadIdx.x; i < nblocks; i += blockDim.x) {
    acc += partial[i];
    bad |= flags[i];
  }
  zrt_d_block_sum(&acc, &bad);
  if (threadIdx.x == 0) {
    *out = (first ? init : *out) + acc;
    *out_flag = first ? bad : (*out_flag | bad);
  }
}

typedef struct zrt_d_optim {
  int type;
  float lr, b1, b2, eps, wd, momentum, mul;
  float step_size, inv_sqrt_bc2; /* computed on the host exactly as the scalar path does */
} zrt_d_optim;

/* One fused step per element; P < 0 means no param16 output. The
 * expression order is cpu_optim_scalar.c's, with every rounding explicit. */
template <int G, int P>
__global__ void zrt_k_optim(zrt_d_optim o, float *master, float *s1, float *s2, const void *grad,
                            void *param16, size_t n) {
  ZRT_GRID_STRIDE(i, n) {
    float g = __fmul_rn(zrt_d_load<G>(grad, i), o.mul);
    float p = master[i];
    switch (o.type) {
    case ZRT_OPTIM_ADAM:
    case ZRT_OPTIM_ADAMW: {
      if (o.type == ZRT_OPTIM_ADAM)
        g = __fadd_rn(g, __fmul_rn(o.wd, p));
      else
        p = __fmul_rn(p, __fsub_rn(1.0f, __fmul_rn(o.lr, o.wd)));
      float m = __fadd_rn(__fmul_rn(o.b1, s1[i]), __fmul_rn(__fsub_rn(1.0f, o.b1), g));
      float v =
          __fadd_rn(__fmul_rn(o.b2, s2[i]), __fmul_rn(__fmul_rn(__fsub_rn(1.0f, o.b2), g), g));
      s1[i] = m;
      s2[i] = v;
      p = __fsub_rn(p, __fdiv_rn(__fmul_rn(o.step_size, m),
                                 __fadd_rn(__fmul_rn(__fsqrt_rn(v), o.inv_sqrt_bc2), o.eps)));
      break;
    }
    case ZRT_OPTIM_SGD: {
      g = __fadd_rn(g, __fmul_rn(o.wd, p));
      if (o.momentum != 0.0f) {
        float buf = __fadd_rn(__fmul_rn(o.momentum, s1[i]), g);
        s1[i] = buf;
        g = buf;
      }
      p = __fsub_rn(p, __fmul_rn(o.lr, g));
      break;
    }
    case ZRT_OPTIM_LION: {
      float c = __fadd_rn(__fmul_rn(o.b1, s1[i]), __fmul_rn(__fsub_rn(1.0f, o.b1), g));
      p = __fmul_rn(p, __fsub_rn(1.0f, __fmul_rn(o.lr, o.wd)));
      p = __fsub_rn(p, __fmul_rn(o.lr, (float)((c > 0.0f) - (c < 0.0f))));
      s1[i] = __fadd_rn(__fmul_rn(o.b2, s1[i]), __fmul_rn(__fsub_rn(1.0f, o.b2), g));
      break;
    }
    }
    master[i] = p;
    if (P >= 0) zrt_d_store<P>(param16, i, p);
  }
}

/* Run-time dtype -> template argument. */
#define ZRT_DT_SWITCH(dt, NAME, ...)                                                               \
  switch (dt) {                                                                                    \
  case ZRT_F16: {                                                                                  \
    constexpr int NAME = ZRT_F16;                                                                  \
    __VA_ARGS__;                                                                                   \
  } break;                                                                                         \
  case ZRT_BF16: {                                                                                 \
    constexpr int NAME = ZRT_BF16;                                                                 \
    __VA_ARGS__;                                                                                   \
  } break;                                                                                         \
  default: {                                                                                       \
    constexpr int NAME = ZRT_F32;                                                                  \
    __VA_ARGS__;                                                                                   \
  } break;                                                                                         \
  }

#endif
