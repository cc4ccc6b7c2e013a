/*
 * comm_impl.h — what comm.c (the dispatch wrappers and the watchdog) shares
 * with the comm implementations (comm_self.c, comm_mpi.c, comm_nccl.c).
 * Private to the comm module; not a contract for other modules.
 *
 * Every implementation's request struct starts with a zrt_comm_req, so the
 * wrappers can tag it with the sequence number, op name and payload bytes
 * the watchdog reports. Invariant: an implementation's wait() that runs out
 * of time sets req->timed_out, returns ZRT_ERR_COMM and leaves the request
 * valid (the collective is still in flight, its buffers still in use), so
 * the caller may wait on it again; every other return frees the request.
 */
#ifndef ZRT_COMM_IMPL_H
#define ZRT_COMM_IMPL_H

#include "comm.h"

struct zrt_comm_req {
  uint64_t seq;   /* set by the wrapper after issue */
  const char *op; /* static op name */
  size_t bytes;   /* this rank's payload in the caller's dtype */
  int timed_out;  /* set by wait() when it gave up: request still valid */
  double t_issue; /* zrt_now_s() before the implementation's issue call */
  /* comm.c: the requests ordered with the iface's wait_on that it has not
   * yet found complete, oldest first */
  zrt_comm_req *next_ordered;
};

/* Polls done(arg) with short sleeps until it reports completion or
 * timeout_s passes (<= 0: forever). Returns 1 when done, 0 on timeout and
 * -1 when done() failed (its status is in *st). Shared by the MPI and NCCL
 * waits so their timeout behaviour is the same. */
int zrt_comm_poll(zrt_status (*done)(void *arg, int *flag), void *arg, double timeout_s,
                  zrt_status *st);

/* The completion epilogue of a staged collective (the MPI comm's):
 * n elements of the staging result src (dtype src_dt) go into
 * the caller's dst (dtype dst_dt) — converted when the dtypes differ,
 * copied otherwise. Where the buffers live is the copy kind:
 *   ZRT_COPY_H2D  src in host staging, dst on the device: a conversion runs
 *                 on the host in place in src (narrowing only), then one
 *                 copy to the device and a synchronise;
 *   ZRT_COPY_H2H  both host memory: convert in place in src, then memcpy
 *                 unless dst == src; the backend is not touched (may be
 *                 NULL).
 * n == 0 or dst == NULL: nothing to do. */
typedef struct zrt_comm_fin {
  void *src, *dst;
  size_t n;
  zrt_dtype src_dt, dst_dt;
} zrt_comm_fin;

zrt_status zrt_comm_fin_run(zrt_backend *be, const zrt_comm_fin *f, zrt_copy_kind kind);

/* The thread level MPI runs at in this process (MPI_Query_thread; -1 when
 * MPI is not initialised) and its name ("MPI_THREAD_MULTIPLE", ...). A
 * stream-ordered MPI-based comm needs MPI_THREAD_MULTIPLE (comm.h). */
int zrt_comm_mpi_thread_level(int *multiple);
const char *zrt_comm_mpi_thread_name(int level);

/* The NCCL comm bootstraps its unique id over an MPI comm it owns:
 * MPI_Bcast of bytes from root on that comm's duplicate of MPI_COMM_WORLD.
 * ctx is an MPI comm's ctx (zrt_comm.ctx after zrt_comm_mpi_init). */
zrt_status zrt_comm_mpi_bcast_bytes(void *ctx, void *buf, size_t bytes, int root);
/* MPI_Allgather of `bytes` bytes per rank into all (world * bytes). */
zrt_status zrt_comm_mpi_allgather_bytes(void *ctx, const void *mine, void *all, size_t bytes);

/* The MPI comm's machine map: per rank of its communicator, a hash of the
 * host name and boot id (equal hashes: one machine). Lives as long as the
 * comm. ctx is an MPI comm's ctx. */
const uint64_t *zrt_comm_mpi_hosts(void *ctx);
/* Non-blocking all-to-all of raw elements on an MPI comm (host buffers):
 * rank r's send holds scounts[q] elements for each rank q in rank order,
 * its recv receives rcounts[q] from each q in rank order. *req completes
 * through the comm's wait / test like its collectives (the hierarchical
 * comm's cross-level reduce-scatter). */
zrt_status zrt_comm_mpi_alltoallv(void *ctx, const void *send, const size_t *scounts, void *recv,
                                  const size_t *rcounts, zrt_dtype dt, zrt_comm_req **req);

#endif
