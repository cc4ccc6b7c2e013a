/*
 * backend_cuda.h — what the registry (backend.c) needs from the CUDA
 * backend beyond backend.h. Private: included only where ZRT_HAVE_CUDA is
 * defined.
 */
#ifndef ZRT_BACKEND_CUDA_H
#define ZRT_BACKEND_CUDA_H

#ifdef __cplusplus
extern "C" {
#endif

/* Number of CUDA devices the runtime can use; 0 when the driver is missing
 * or reports an error (the error is cleared, never sticky). */
int zrt_backend_cuda_probe_count(void);

#ifdef __cplusplus
}
#endif

#endif
