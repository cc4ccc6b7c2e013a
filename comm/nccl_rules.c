/*
 * nccl_rules.c — the NCCL comm's GPU-free rules (nccl_rules.h): pointer
 * kinds, the staging plan of a collective, and the shared-GPU check over
 * PCI bus ids, the reduce_scatter / all_gather routes and the wait verdict.
 * No CUDA or NCCL types here: the unit tests run every branch on a machine
 * without a GPU.
 */
#include "nccl_rules.h"

#include <string.h>

#include "internal.h"

zrt_nccl_ptr zrt_nccl_ptr_kind(int mem_type, int ptr_device, int my_device) {
  if (mem_type == 2 || mem_type == 3)
    return (mem_type == 3 || ptr_device == my_device) ? ZRT_NCCL_PTR_DEVICE
                                                      : ZRT_NCCL_PTR_OTHER_DEVICE;
  return ZRT_NCCL_PTR_HOST; /* unregistered (pageable) or registered host memory */
}

static size_t align_up(size_t x) {
  return (x + ZRT_NCCL_SCRATCH_ALIGN - 1) / ZRT_NCCL_SCRATCH_ALIGN * ZRT_NCCL_SCRATCH_ALIGN;
}

zrt_status zrt_nccl_stage_plan(const char *what, zrt_nccl_ptr send, zrt_nccl_ptr recv,
                               ssize_t send_at, size_t send_bytes, size_t recv_bytes,
                               zrt_nccl_stage *out) {
  memset(out, 0, sizeof *out);
  if (send == ZRT_NCCL_PTR_OTHER_DEVICE || recv == ZRT_NCCL_PTR_OTHER_DEVICE)
    return zrt_error(ZRT_ERR_INVALID_ARG,
                     "NCCL comm %s: the %s buffer is on another GPU than this rank's; pass memory "
                     "from this rank's backend (zrt_engine_alloc) or host memory",
                     what, send == ZRT_NCCL_PTR_OTHER_DEVICE ? "send" : "receive");
  if (send_at >= 0 && (size_t)send_at + send_bytes > recv_bytes)
    return zrt_error(ZRT_ERR_INTERNAL, "NCCL comm %s: in-place send [%zd, +%zu) outside recv %zu",
                     what, send_at, send_bytes, recv_bytes);
  size_t at = 0;
  if (recv == ZRT_NCCL_PTR_HOST && recv_bytes) {
    out->recv_out = 1;
    out->recv_off = 0;
    at = align_up(recv_bytes);
    if (send_at >= 0) {
      out->recv_in = 1; /* the send part travels inside recv */
      out->send_off = (size_t)send_at;
    }
  }
  if (send == ZRT_NCCL_PTR_HOST && send_bytes && !(send_at >= 0 && out->recv_in)) {
    out->send_in = 1;
    out->send_off = at;
    at += align_up(send_bytes);
  }
  out->scratch_bytes = at;
  out->bounce_bytes = at; /* the host side of every staged byte, same offsets */
  return ZRT_OK;
}

static zrt_status other_device(const char *what, zrt_nccl_ptr send, zrt_nccl_ptr recv) {
  zrt_nccl_stage unused;
  return zrt_nccl_stage_plan(what, send, recv, -1, 0, 0, &unused);
}

zrt_status zrt_nccl_rs_route_plan(int nranks, int rank, const size_t *counts, size_t es,
                                  zrt_nccl_ptr send, zrt_nccl_ptr recv, zrt_nccl_rs_route *out) {
  memset(out, 0, sizeof *out);
  if (nranks < 1 || rank < 0 || rank >= nranks)
    return zrt_error(ZRT_ERR_INTERNAL, "NCCL comm reduce_scatter: rank %d of %d", rank, nranks);
  out->even = 1;
  for (int q = 0; q < nranks; q++) {
    if (counts[q] > out->maxc) out->maxc = counts[q];
    if (counts[q] != counts[0]) out->even = 0;
    out->total += counts[q];
  }
  out->mine = counts[rank];
  if (out->even || !out->maxc) return ZRT_OK;
  ZRT_CHECK(other_device("reduce_scatter", send, recv));
  out->pad_in_bytes = (size_t)nranks * out->maxc * es;
  out->out_at = align_up(out->pad_in_bytes);
  out->scratch_bytes = out->out_at + out->maxc * es;
  size_t at = 0;
  if (send == ZRT_NCCL_PTR_HOST && out->total) {
    out->host_send = 1;
    out->send_bounce_off = 0;
    at = align_up(out->total * es);
  }
  if (recv == ZRT_NCCL_PTR_HOST && out->mine) {
    out->host_recv = 1;
    out->recv_bounce_off = at;
    at += align_up(out->mine * es);
  }
  out->bounce_bytes = at;
  return ZRT_OK;
}

size_t zrt_nccl_segment_off(const size_t *counts, int q) {
  size_t off = 0;
  for (int i = 0; i < q; i++) off += counts[i];
  return off;
}

void zrt_nccl_ag_route_plan(int nranks, int rank, const size_t *counts, size_t es, const void *send,
                            const void *recv, zrt_nccl_ag_route *out) {
  memset(out, 0, sizeof *out);
  out->even = 1;
  for (int q = 0; q < nranks; q++) {
    out->total += counts[q];
    if (counts[q] != counts[0]) out->even = 0;
  }
  out->my_off = zrt_nccl_segment_off(counts, rank);
  out->mine = counts[rank];
  out->send_at = (const char *)send == (const char *)recv + out->my_off * es
                     ? (ssize_t)(out->my_off * es)
                     : -1;
}

zrt_nccl_wait_verdict zrt_nccl_wait_decide(int ev, int async_err, double elapsed_s,
                                           double timeout_s) {
  if (ev == ZRT_NCCL_EV_DONE) return ZRT_NCCL_WAIT_DONE;
  if (ev != ZRT_NCCL_EV_NOT_READY || async_err) return ZRT_NCCL_WAIT_ABORT_ERROR;
  if (timeout_s > 0 && elapsed_s >= timeout_s) return ZRT_NCCL_WAIT_ABORT_TIMEOUT;
  return ZRT_NCCL_WAIT_PENDING;
}

int zrt_nccl_shared_gpu(const char *keys, int nranks, size_t stride, int *a, int *b) {
  for (int i = 0; i < nranks; i++)
    for (int j = i + 1; j < nranks; j++)
      if (!strncmp(keys + (size_t)i * stride, keys + (size_t)j * stride, stride)) {
        *a = i;
        *b = j;
        return 1;
      }
  return 0;
}
