/*
 * nccl_rules.h — the decisions of the NCCL comm that need no GPU to state
 * or test (comm_nccl.c applies them, tests/unit/test_nccl_rules.c checks
 * them): what kind of memory a buffer is, which buffers a collective stages
 * through device scratch and the pinned host bounce and where they go, the
 * route of reduce_scatter and all_gather (even, uneven, in place), when a
 * wait is done, pending, failed or out of time, and whether the ranks of a
 * job share a GPU (NCCL refuses that: "Duplicate GPU").
 *
 * On one GPU NCCL runs only at world size 1 (a second rank on the same GPU
 * is refused), where every collective is the even route; the uneven,
 * offset (in place at a rank's segment) and padded routes run on a GPU only
 * with two GPUs or more. These rules are the whole of those decisions, so
 * the unit test covers every route here.
 */
#ifndef ZRT_NCCL_RULES_H
#define ZRT_NCCL_RULES_H

#include <stddef.h>
#include <sys/types.h>

#include "zrt.h"

typedef enum zrt_nccl_ptr {
  ZRT_NCCL_PTR_DEVICE = 0,       /* device (or managed) memory of this comm's GPU */
  ZRT_NCCL_PTR_HOST = 1,         /* host memory, pageable or registered */
  ZRT_NCCL_PTR_OTHER_DEVICE = 2, /* device memory of another GPU: an error */
} zrt_nccl_ptr;

/* cudaPointerAttributes.type as a number (cudaMemoryTypeUnregistered 0,
 * Host 1, Device 2, Managed 3) and .device, against this comm's device. */
zrt_nccl_ptr zrt_nccl_ptr_kind(int mem_type, int ptr_device, int my_device);

/* Scratch offsets are aligned to this (NCCL and the copy engines prefer
 * 256-byte alignment; cudaMalloc's own is 256). */
#define ZRT_NCCL_SCRATCH_ALIGN 256

/* Host buffers never meet cudaMemcpyAsync directly: a copy from or to
 * pageable memory is synchronous for the host (a D2H into pageable memory
 * returns only when the collective before it ended, so a dead peer would
 * hang the issuing call, before any event exists to time out). Every staged
 * byte goes through a pinned bounce laid out like the scratch (the same
 * offsets): in, the host copies the caller's bytes into the bounce and the
 * stream copies bounce -> scratch; out, the stream copies scratch -> bounce
 * after the collective, and the host copies bounce -> the caller's buffer
 * only once the request's event completed (in wait or test). */
typedef struct zrt_nccl_stage {
  int send_in;          /* caller's send -> bounce + send_off -> scratch + send_off, first */
  int recv_in;          /* caller's recv -> bounce -> scratch + recv_off, first (in place) */
  int recv_out;         /* scratch + recv_off -> bounce, then -> caller's recv after the event */
  size_t send_off;      /* where NCCL reads send (scratch offset) when staged */
  size_t recv_off;      /* where NCCL writes recv when staged */
  size_t scratch_bytes; /* scratch the collective needs (0 = none) */
  size_t bounce_bytes;  /* pinned host bounce it needs (0 = none; else == scratch_bytes) */
} zrt_nccl_stage;

/* Plans a collective reading send_bytes from send and writing recv_bytes to
 * recv. send_at >= 0 means send lies inside recv at that byte offset (in
 * place: all_reduce at 0, all_gather at the rank's segment); -1 disjoint.
 * Host buffers are staged; an in-place host recv is copied in whole so the
 * send inside it is staged with it. OTHER_DEVICE is an error naming what. */
zrt_status zrt_nccl_stage_plan(const char *what, zrt_nccl_ptr send, zrt_nccl_ptr recv,
                               ssize_t send_at, size_t send_bytes, size_t recv_bytes,
                               zrt_nccl_stage *out);

/* reduce_scatter's route. Even counts: ncclReduceScatter of maxc elements
 * per rank on the (staged, zrt_nccl_stage_plan) buffers. Uneven counts:
 * the input padded in scratch (segment q at q*maxc elements, the padding
 * zeroed), ncclReduceScatter into scratch + out_at, then this rank's mine
 * elements out to recv. Host buffers on the uneven route go through the
 * pinned bounce: the whole send at send_bounce_off (host_send), the result
 * at recv_bounce_off (host_recv, copied to the caller after the event).
 * OTHER_DEVICE is an error, as in zrt_nccl_stage_plan. */
typedef struct zrt_nccl_rs_route {
  int even;
  size_t maxc, mine, total; /* elements: the largest count, this rank's, the sum */
  size_t pad_in_bytes;      /* uneven: nranks * maxc * es, zeroed then filled */
  size_t out_at;            /* uneven: scratch offset of the padded result (aligned) */
  size_t scratch_bytes;     /* uneven: out_at + maxc * es */
  int host_send, host_recv; /* uneven: staged through the bounce */
  size_t send_bounce_off, recv_bounce_off, bounce_bytes;
} zrt_nccl_rs_route;
zrt_status zrt_nccl_rs_route_plan(int nranks, int rank, const size_t *counts, size_t es,
                                  zrt_nccl_ptr send, zrt_nccl_ptr recv, zrt_nccl_rs_route *out);

/* all_gather's route: even counts one ncclAllGather of counts[0] elements;
 * uneven counts this rank's own segment copied into recv + my_off (unless in
 * place) and a group of ncclSend (mine elements to every other rank) and
 * ncclRecv (counts[q] elements at q's offset from every other rank q, none
 * for an empty segment). send_at is the byte offset of send inside recv
 * when send is this rank's own segment of recv (in place), else -1: the
 * zrt_nccl_stage_plan argument. */
typedef struct zrt_nccl_ag_route {
  int even;
  size_t my_off, mine, total; /* elements */
  ssize_t send_at;
} zrt_nccl_ag_route;
void zrt_nccl_ag_route_plan(int nranks, int rank, const size_t *counts, size_t es, const void *send,
                            const void *recv, zrt_nccl_ag_route *out);
/* Element offset of rank q's segment in an all_gather's recv. */
size_t zrt_nccl_segment_off(const size_t *counts, int q);

/* A wait's verdict from one poll: ev is what cudaEventQuery said
 * (ZRT_NCCL_EV_*), async_err is 1 when ncclCommGetAsyncError reported an
 * error (ncclSuccess and ncclInProgress are 0), elapsed_s the time since
 * the wait began, timeout_s the watchdog's (<= 0: never). A completed event
 * wins over a timeout that passed meanwhile; any error aborts; the timeout
 * aborts (ncclCommAbort: the kernels may spin on a dead peer forever). */
enum { ZRT_NCCL_EV_DONE = 0, ZRT_NCCL_EV_NOT_READY = 1, ZRT_NCCL_EV_ERROR = 2 };
typedef enum zrt_nccl_wait_verdict {
  ZRT_NCCL_WAIT_PENDING = 0,
  ZRT_NCCL_WAIT_DONE = 1,
  ZRT_NCCL_WAIT_ABORT_ERROR = 2,   /* the event failed or NCCL reported an async error */
  ZRT_NCCL_WAIT_ABORT_TIMEOUT = 3, /* timeout_s passed: abort, name the collective */
} zrt_nccl_wait_verdict;
zrt_nccl_wait_verdict zrt_nccl_wait_decide(int ev, int async_err, double elapsed_s,
                                           double timeout_s);

/* Ranks sharing a GPU: keys[r] (stride bytes each, NUL-terminated) names
 * rank r's GPU as "<host id>/<PCI bus id>". Returns 1 and the first pair
 * (*a < *b) whose keys are equal, else 0. Comparing bus ids, not device
 * counts, is right under a per-rank CUDA_VISIBLE_DEVICES (Slurm
 * --gpus-per-task), where every rank sees one device "0". */
int zrt_nccl_shared_gpu(const char *keys, int nranks, size_t stride, int *a, int *b);

#endif
