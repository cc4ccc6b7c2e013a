/*
 * comm.h — the collective-communication vtable (DESIGN.md rule 3).
 *
 * Comms: "self" (world size 1, no MPI), "mpi" (Open MPI, host buffers —
 * and device buffers when the backend is CPU; also bootstraps NCCL ids),
 * "nccl" (GPU buffers). All collectives work on fp32, fp16 and bf16; half
 * types are reduced with fp32 accumulation. Every collective may be blocking
 * (req == NULL) or asynchronous (*req receives a handle to wait on).
 *
 * Watchdog: every collective gets a sequence number (zrt_comm.seq). A wait
 * that does not complete within timeout_s fails with ZRT_ERR_COMM and a
 * message naming the op, bytes and sequence number; the rank also writes its
 * last completed collective to $ZRT_RUN_DIR/rank<R>.status (when the
 * launcher set ZRT_RUN_DIR) so `zrt launch` can say which rank is behind.
 *
 * Buffers: "send" and "recv" may alias only where stated (all_reduce in
 * place: send == recv).
 */
#ifndef ZRT_COMM_H
#define ZRT_COMM_H

#include "backend.h"

typedef enum zrt_redop { ZRT_RED_SUM = 0, ZRT_RED_MAX, ZRT_RED_MIN } zrt_redop;

typedef struct zrt_comm_req zrt_comm_req;

typedef struct zrt_comm_iface {
  const char *name; /* "self", "mpi", "nccl" */
  /* recv[i] = op over ranks of send[i], count elements. In place allowed. */
  zrt_status (*all_reduce)(void *ctx, const void *send, void *recv, size_t count, zrt_dtype dt,
                           zrt_redop op, zrt_comm_req **req);
  /* send holds sum(counts) elements laid out rank by rank; rank r receives
   * the reduction of its segment (counts[r] elements) in recv. Uneven ok. */
  zrt_status (*reduce_scatter)(void *ctx, const void *send, void *recv, const size_t *counts,
                               zrt_dtype dt, zrt_redop op, zrt_comm_req **req);
  /* Each rank contributes counts[rank] elements from send; recv receives
   * all segments rank by rank (sum(counts) elements). send may point into
   * recv at this rank's own offset (in place). */
  zrt_status (*all_gather)(void *ctx, const void *send, void *recv, const size_t *counts,
                           zrt_dtype dt, zrt_comm_req **req);
  zrt_status (*broadcast)(void *ctx, void *buf, size_t count, zrt_dtype dt, int root,
                          zrt_comm_req **req);
  zrt_status (*barrier)(void *ctx);
  /* Waits at most timeout_s (<= 0: forever); frees req. */
  zrt_status (*wait)(void *ctx, zrt_comm_req *req, double timeout_s);
  /* Non-blocking completion test: *done = 1 when complete (req then freed). */
  zrt_status (*test)(void *ctx, zrt_comm_req *req, int *done);
  void (*destroy)(void *ctx);
} zrt_comm_iface;

typedef struct zrt_comm {
  const zrt_comm_iface *iface;
  void *ctx;
  int rank, world;
  int local_rank, local_world;
  double timeout_s;   /* comm_timeout_s; <= 0 disables the watchdog */
  uint64_t seq;       /* collectives issued */
  uint64_t completed; /* collectives completed */
  char last_op[64];   /* last completed collective, for the watchdog */
  size_t last_bytes;
  uint64_t bytes_moved; /* bytes this rank sent, by the algorithm's formula */
} zrt_comm;

/* want: "auto" | "self" | "mpi" | "nccl". auto = self when WORLD_SIZE is
 * unset or 1 and not under mpiexec; nccl when backend is cuda; else mpi. */
zrt_status zrt_comm_create(const char *want, zrt_backend *backend, double timeout_s,
                           zrt_comm **out);
void zrt_comm_destroy(zrt_comm *c);

/* Dispatch wrappers: count sequence numbers, bytes moved, the watchdog. */
zrt_status zrt_comm_all_reduce(zrt_comm *c, const void *send, void *recv, size_t count,
                               zrt_dtype dt, zrt_redop op, zrt_comm_req **req);
zrt_status zrt_comm_reduce_scatter(zrt_comm *c, const void *send, void *recv, const size_t *counts,
                                   zrt_dtype dt, zrt_redop op, zrt_comm_req **req);
zrt_status zrt_comm_all_gather(zrt_comm *c, const void *send, void *recv, const size_t *counts,
                               zrt_dtype dt, zrt_comm_req **req);
zrt_status zrt_comm_broadcast(zrt_comm *c, void *buf, size_t count, zrt_dtype dt, int root,
                              zrt_comm_req **req);
zrt_status zrt_comm_barrier(zrt_comm *c);
zrt_status zrt_comm_wait(zrt_comm *c, zrt_comm_req *req); /* NULL req ok */
zrt_status zrt_comm_test(zrt_comm *c, zrt_comm_req *req, int *done);

/* Constructors (registry in comm.c). */
zrt_status zrt_comm_self_init(zrt_comm *c);
zrt_status zrt_comm_mpi_init(zrt_comm *c, zrt_backend *backend);
#ifdef ZRT_HAVE_NCCL
zrt_status zrt_comm_nccl_init(zrt_comm *c, zrt_backend *backend);
#endif

#endif
