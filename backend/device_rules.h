/*
 * device_rules.h — the decisions around the CUDA backend that need no GPU
 * to state or test: what a device probe means (no GPU vs a driver
 * problem), which backend a request gets, how many local ranks share a
 * device, and how much of a device one rank may plan for. Pure functions;
 * backend.c and backend_cuda.cu apply them, tests/unit/test_device_rules.c
 * checks them.
 */
#ifndef ZRT_DEVICE_RULES_H
#define ZRT_DEVICE_RULES_H

#include <stddef.h>

#include "zrt.h"

/* What cudaGetDeviceCount said, reduced to what the registry needs. */
typedef enum zrt_cuda_probe_kind {
  ZRT_CUDA_PROBE_OK = 0,        /* count >= 1 devices */
  ZRT_CUDA_PROBE_NO_DEVICE = 1, /* cudaErrorNoDevice, success with 0 devices, or no
                                   NVIDIA driver installed at all (driver version 0) */
  ZRT_CUDA_PROBE_ERROR = 2,     /* anything else: driver too old, not loaded, ... */
  ZRT_CUDA_PROBE_NOT_BUILT = 3  /* this zrt has no CUDA backend */
} zrt_cuda_probe_kind;

typedef struct zrt_cuda_probe {
  zrt_cuda_probe_kind kind;
  int count;      /* devices visible (0 unless kind is OK) */
  char what[256]; /* CUDA's own message and error name when kind is ERROR */
} zrt_cuda_probe;

/* Classifies a cudaGetDeviceCount result given as numbers (err 0 =
 * cudaSuccess; no_device_code = cudaErrorNoDevice's value, passed in so
 * that this file needs no CUDA header). driver_version is
 * cudaDriverGetVersion's (0 = no driver installed: a machine without a GPU,
 * whatever error the runtime reports). msg is CUDA's text for err. */
void zrt_cuda_probe_classify(int err, int no_device_code, int count, int driver_version,
                             const char *msg, zrt_cuda_probe *out);

/* The backend a request gets: *use_cuda 1 or 0. "cuda" fails unless a
 * device is usable (the error carries CUDA's message on a driver problem);
 * "auto" takes CUDA when usable, the CPU when there is no GPU, and the CPU
 * with a logged warning carrying CUDA's message on a driver problem;
 * "cpu" and "twin" (the CPU with a GPU's rules) never probe. */
zrt_status zrt_backend_decide(const char *want, const zrt_cuda_probe *probe, int *use_cuda);

/* The device local rank local_rank uses among ndev visible ones: the round
 * robin local_rank % ndev (0 when ndev < 1). The local rank must be the
 * one MPI derived (engine.c: zrt_engine_placement), not a launcher variable
 * that srun or MPICH's mpiexec do not set (every rank would take device 0). */
int zrt_device_for_local_rank(int local_rank, int ndev);

/* Local ranks that land on device `device` when local rank r uses device
 * r % ndev: ceil over the round robin (>= 1 when local_world >= 1). */
int zrt_ranks_sharing_device(int local_world, int ndev, int device);

/* Bytes one rank may plan for on a device with free_bytes free: free minus
 * the reserve (CUDA context growth, cuBLAS and NCCL internals, fragmentation),
 * divided among the ranks that share the device; 0 when the reserve exceeds
 * what is free. */
size_t zrt_device_share(size_t free_bytes, size_t reserve, int sharing);

/* The reserve kept out of the device share: the larger of
 * ZRT_DEVICE_RESERVE_MIN and total/ZRT_DEVICE_RESERVE_DIV. 1 GiB covers a
 * cuBLAS workspace per stream (32 MiB each on Hopper), NCCL's channel
 * buffers (a few hundred MiB on 8 GPUs) and the allocator's rounding;
 * 1/32 of the card scales it on larger parts. */
#define ZRT_DEVICE_RESERVE_MIN ((size_t)1 << 30)
#define ZRT_DEVICE_RESERVE_DIV 32
size_t zrt_device_reserve(size_t total_bytes);

/* CUDA error numbers the rules use (driver_types.h; backend_cuda.cu checks
 * at compile time that they match the header it is built with). */
enum {
  ZRT_CUDA_ERR_INSUFFICIENT_DRIVER = 35,
  ZRT_CUDA_ERR_NO_DEVICE = 100,
  ZRT_CUDA_ERR_ECC_UNCORRECTABLE = 214,
  ZRT_CUDA_ERR_ILLEGAL_ADDRESS = 700,
  ZRT_CUDA_ERR_LAUNCH_TIMEOUT = 702,
  ZRT_CUDA_ERR_ASSERT = 710,
  ZRT_CUDA_ERR_HARDWARE_STACK = 714,
  ZRT_CUDA_ERR_ILLEGAL_INSTRUCTION = 715,
  ZRT_CUDA_ERR_MISALIGNED_ADDRESS = 716,
  ZRT_CUDA_ERR_INVALID_ADDRESS_SPACE = 717,
  ZRT_CUDA_ERR_INVALID_PC = 718,
  ZRT_CUDA_ERR_LAUNCH_FAILURE = 719
};

/* 1 for a sticky CUDA error: the context is unusable afterwards (every
 * later call fails with it) and the process must restart; 0 for errors a
 * later call recovers from (out of memory, invalid value, not ready, ...). */
int zrt_cuda_error_sticky(int err);

/* 1 when the environment asks the gpu tests to fail instead of skipping
 * (ZRT_REQUIRE_GPU set to anything but "" or "0"). */
int zrt_require_gpu(void);

#endif
