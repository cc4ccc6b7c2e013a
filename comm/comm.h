/*
 * comm.h — the collective-communication vtable (DESIGN.md rule 3).
 *
 * Comms: "self" (world size 1, no MPI), "mpi" (Open MPI, host buffers —
 * and device buffers when the backend is CPU; also bootstraps NCCL ids),
 * "shm" (ranks on one machine, host buffers: one shared-memory segment,
 * Open MPI underneath for bootstrap; comm/comm_shm.c), "hier" (several
 * machines, host buffers: shm within each machine, MPI across;
 * comm/comm_hier.c), "nccl" (GPU
 * buffers). All collectives work on fp32, fp16 and bf16. Half
 * types add in fp32: NCCL stages the whole reduction in fp32 (one rounding
 * at the end); MPI reduces in the 16-bit type, each pairwise combine adding
 * once in fp32 and rounding once, so an N-rank sum is within
 * (N-1)(u + 2^-24)·sum|x_i| (u = 2^-8 bf16, 2^-11 fp16) and at N = 2 equals
 * fp32 staging bit for bit (comm/comm_mpi.c). MAX / MIN are exact. Every
 * collective may be blocking (req == NULL) or asynchronous (*req receives a
 * handle to wait on).
 *
 * Watchdog: every collective gets a sequence number (zrt_comm.seq). A wait
 * that does not complete within timeout_s fails with ZRT_ERR_COMM and a
 * message naming the op, bytes and sequence number; the rank also writes its
 * last completed collective to $ZRT_RUN_DIR/rank<R>.status (when the
 * launcher set ZRT_RUN_DIR) so `zrt launch` can say which rank is behind.
 *
 * The watchdog's message and the status file's format are specified in
 * docs/launch.md ("The comm watchdog"); tools/cmd_launch.c parses the file.
 *
 * Buffers: "send" and "recv" may alias only where stated (all_reduce in
 * place: send == recv).
 *
 * Stream-ordered comms (docs/comms.md, "Stream-ordered collectives"): on a
 * device backend whose host functions run asynchronously on a stream (the
 * twin), a comm other than nccl does not run its collectives on the calling
 * thread. Each one is enqueued as a host function on the comm's own stream
 * (zrt_comm.stream), ordered after the work queued so far on every stream of
 * the backend (zrt_backend_stream_join: events, no host wait), and the
 * stream's worker runs the implementation on the buffers in place, as NCCL
 * runs its kernels on its stream. A request is then an event on that stream:
 * zrt_comm_wait_on orders a stream after it without a host wait, zrt_comm_wait
 * (and a blocking call) waits on the host. Only that worker calls the
 * implementation, so no two threads use it at once; an MPI-based comm
 * there needs MPI_THREAD_MULTIPLE (the program's thread may call MPI while
 * the worker does; zrt asks for it when it starts MPI) and says so when MPI
 * gives less. A collective that fails or times out there makes the comm
 * stream's error sticky: the next wait, or any stream ordered after it,
 * reports it (the watchdog's message included). Elsewhere (cpu, cuda)
 * collectives are issued on the calling thread; nccl and the self comm on a
 * device backend run them on a stream of their own, and their wait_on slot
 * lets zrt_comm_wait_on order a stream after a request without a host wait.
 */
#ifndef ZRT_COMM_H
#define ZRT_COMM_H

#include "backend.h"

typedef enum zrt_redop { ZRT_RED_SUM = 0, ZRT_RED_MAX, ZRT_RED_MIN } zrt_redop;

typedef struct zrt_comm_req zrt_comm_req;

typedef struct zrt_comm_iface {
  const char *name; /* "self", "mpi", "shm", "hier", "nccl" */
  /* recv[i] = op over ranks of send[i], count elements. In place allowed. */
  zrt_status (*all_reduce)(void *ctx, const void *send, void *recv, size_t count, zrt_dtype dt,
                           zrt_redop op, zrt_comm_req **req);
  /* send holds sum(counts) elements laid out rank by rank; rank r receives
   * the reduction of its segment (counts[r] elements) in recv. Uneven ok.
   * counts is read during the call only: the request owns any copy. */
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
  /* Optional (NULL: zrt_comm_wait_on waits on the host): orders stream s
   * (NULL = the backend's stream) after req's collective without a host
   * wait, *ordered = 1; req then stays valid and comm.c completes it later
   * with test (or wait, at the comm's destroy), so the implementation frees
   * nothing still in use. *ordered = 0 and nothing done where this request
   * needs the host to complete it (the nccl comm's copy out of its pinned
   * bounce into the caller's host buffer): comm.c waits on it. Any failure
   * frees req, as wait's do. */
  zrt_status (*wait_on)(void *ctx, zrt_comm_req *req, zrt_stream s, int *ordered);
  void (*destroy)(void *ctx);
  /* Optional (NULL: zrt_comm_mem_alloc's plain host memory): buffers for
   * collectives that the comm can reach on every rank without a copy (the
   * shm comm: shared memory every local rank maps, comm/comm_shm_zc.c).
   * Collective: every rank allocates the same bytes in the same order.
   * mem_free takes any pointer mem_alloc returned (local; the memory
   * lives until every rank freed it). */
  zrt_status (*mem_alloc)(void *ctx, size_t bytes, void **out);
  void (*mem_free)(void *ctx, void *p);
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
  /* Bytes this rank sends by the ring formulas, in the caller's dtype
   * (whatever the implementation stages): all_reduce 2(N-1)/N·bytes,
   * reduce_scatter and all_gather (N-1)/N·total bytes, broadcast
   * (N-1)/N·bytes, barrier 0; 0 at world size 1. Counted at issue. */
  uint64_t bytes_moved;
  /* Host-side time accounting for the step breakdown (seconds, since
   * creation): busy_s sums every completed collective's time from issue to
   * the moment its completion was observed (wait or test); wait_s is the
   * part of it the caller spent blocked in the zrt_comm_* calls (issue,
   * wait, test, barrier). busy_s - wait_s is communication that ran while
   * the caller did something else: hidden behind compute. On CUDA the
   * times are host-side (enqueue and stream waits), not kernel times. */
  double busy_s, wait_s;
  /* Collectives that ran zero-copy: read the peers' buffers in place
   * (buffers from zrt_comm_mem_alloc on every rank; shm comm only). */
  uint64_t zero_copy;
  /* Stream-ordered comms: the stream their collectives run on (created with
   * the comm, destroyed with it); NULL where collectives run on the calling
   * thread. */
  zrt_stream stream;
} zrt_comm;

/* The world size the launcher announces before MPI is up: the largest of
 * OMPI_COMM_WORLD_SIZE (Open MPI's mpiexec), WORLD_SIZE (torchrun-style
 * launchers), PMI_SIZE (MPICH's hydra, srun --mpi=pmi2), PMIX_SIZE (where a
 * PMIx launcher sets it) and SLURM_STEP_NUM_TASKS (srun; not SLURM_NTASKS,
 * which a batch script's single process sees too); 1 when none is set.
 * ZRT_ERR_CONFIG, naming the variable, when one holds anything but a whole
 * number from 1 to 2^24. */
zrt_status zrt_comm_env_world(int *world);

/* want: "auto" | "self" | "mpi" | "shm" | "hier" | "nccl". auto = self
 * when zrt_comm_env_world gives 1 (no launcher announced more ranks); nccl when backend is cuda,
 * NCCL is built and every local rank has its own GPU (NCCL refuses two ranks on one GPU: then mpi
 * with host staging); shm when the buffers are host memory and every rank is on this machine
 * (OMPI_COMM_WORLD_LOCAL_SIZE = world size); else hier when every machine holds the same number (>
 * 1) of contiguous ranks, else mpi. "shm" (asked for or picked) falls back to mpi with a logged
 * reason when shared memory cannot serve the ranks; "hier" likewise when the layout does not allow
 * it (asked for, it also serves 1 rank per machine). The choice and why is logged once. timeout_s
 * becomes c->timeout_s. */
zrt_status zrt_comm_create(const char *want, zrt_backend *backend, double timeout_s,
                           zrt_comm **out);
void zrt_comm_destroy(zrt_comm *c);

/* Dispatch wrappers: count sequence numbers, bytes moved, the watchdog.
 * counts (world entries) are read during the call only: an asynchronous
 * request keeps whatever copy it needs (MPI's int counts/displacements), so
 * the caller's array may be reused or freed as soon as the call returns. */
zrt_status zrt_comm_all_reduce(zrt_comm *c, const void *send, void *recv, size_t count,
                               zrt_dtype dt, zrt_redop op, zrt_comm_req **req);
zrt_status zrt_comm_reduce_scatter(zrt_comm *c, const void *send, void *recv, const size_t *counts,
                                   zrt_dtype dt, zrt_redop op, zrt_comm_req **req);
zrt_status zrt_comm_all_gather(zrt_comm *c, const void *send, void *recv, const size_t *counts,
                               zrt_dtype dt, zrt_comm_req **req);
/* The same with count elements for every rank (the engine's case: every
 * module pads to world parts). No counts array at the call site. */
zrt_status zrt_comm_reduce_scatter_even(zrt_comm *c, const void *send, void *recv, size_t count,
                                        zrt_dtype dt, zrt_redop op, zrt_comm_req **req);
zrt_status zrt_comm_all_gather_even(zrt_comm *c, const void *send, void *recv, size_t count,
                                    zrt_dtype dt, zrt_comm_req **req);
zrt_status zrt_comm_broadcast(zrt_comm *c, void *buf, size_t count, zrt_dtype dt, int root,
                              zrt_comm_req **req);
zrt_status zrt_comm_barrier(zrt_comm *c);
/* Completes req (NULL ok) within c->timeout_s. On the watchdog timeout it
 * returns ZRT_ERR_COMM and req STAYS VALID (the collective is still in
 * flight and its buffers in use: MPI/NCCL cannot cancel it) — wait on it
 * again, or give up on the comm. Any other return frees req. */
zrt_status zrt_comm_wait(zrt_comm *c, zrt_comm_req *req);
zrt_status zrt_comm_test(zrt_comm *c, zrt_comm_req *req, int *done);
/* Orders stream s (NULL = the backend's stream) after req's collective and
 * releases req (NULL ok): no host wait on a stream-ordered comm (a stream
 * wait; a failure reaches s as the comm stream's sticky error) nor on a comm
 * with the iface's wait_on (the self comm on a device backend, nccl: a wait
 * on the request's event); elsewhere, and for an nccl request whose result
 * goes to host memory, zrt_comm_wait. A released request counts as completed
 * (completed, last_op, busy_s) when a later comm call finds it done, or at
 * the comm's destroy, which waits for it. For results that only device work
 * reads. */
zrt_status zrt_comm_wait_on(zrt_comm *c, zrt_comm_req *req, zrt_stream s);

/* Collective buffers (like MPI_Win_allocate_shared): every rank calls it
 * with the same bytes, in the same order relative to the other
 * allocations and collectives. On the shm comm the memory is shared with
 * the other local ranks, and reduce_scatter / all_gather / all_reduce whose
 * buffers all come from here (every rank's send, and recv for all_reduce)
 * read the peers' buffers in place instead of copying through the segment
 * (docs/comms.md, "Zero-copy collectives"); elsewhere it is 64-byte aligned
 * host memory. bytes 0: *out = NULL. Fails with ZRT_ERR_OOM and what to do
 * when /dev/shm is too small. The memory is not counted in any pool: a
 * caller that accounts its buffers reserves the bytes itself. */
zrt_status zrt_comm_mem_alloc(zrt_comm *c, size_t bytes, void **out);
/* Frees what zrt_comm_mem_alloc returned (NULL ok). No collective may be
 * using it on this rank. */
void zrt_comm_mem_free(zrt_comm *c, void *p);

/* A collective buffer counted in the backend's pool under cat (its
 * capacity applies, zrt_mem_stats show it): zrt_comm_mem_alloc when the
 * comm has its own allocator and be is a host backend, else
 * zrt_backend_alloc (device buffers; comms without one). Collective in the
 * first case: every rank, the same bytes, the same order. Free with
 * zrt_comm_buf_free on the same comm and backend. */
zrt_status zrt_comm_buf_alloc(zrt_comm *c, zrt_backend *be, size_t bytes, zrt_mem_category cat,
                              void **out);
/* Collective: every rank passes the status of a local step (a capacity
 * check before a collective allocation). A rank that failed returns its
 * own status and message; when only others failed, ZRT_ERR_OOM naming the
 * lowest failing rank (what: the caller, for the message); else ZRT_OK. */
zrt_status zrt_comm_agree(zrt_comm *c, zrt_status local, const char *what);
void zrt_comm_buf_free(zrt_comm *c, zrt_backend *be, void *p);

/* "2.28.3" from the loaded NCCL library (ncclGetVersion, no GPU needed),
 * or "not built". */
void zrt_comm_nccl_version(char *buf, size_t n);

/* Constructors (registry in comm.c). */
/* Constructors fill c->iface, ctx, rank/world/local_*. backend: where the
 * buffers live (self: NULL = host memory). Comms come only from
 * zrt_comm_create (it allocates private watchdog state behind zrt_comm). */
zrt_status zrt_comm_self_init(zrt_comm *c, zrt_backend *backend);
zrt_status zrt_comm_mpi_init(zrt_comm *c, zrt_backend *backend);
/* The shared-memory comm (comm/comm_shm.c): an MPI comm first, then,
 * when every rank is on this machine and the buffers are host memory, the
 * shared segment on top. When shared memory cannot serve the ranks, c
 * stays the MPI comm (c->iface->name "mpi") and why says why; why is ""
 * when c is the shm comm. */
zrt_status zrt_comm_shm_init(zrt_comm *c, zrt_backend *backend, char *why, size_t whylen);
/* The same two over a sub-communicator: parent points to an MPI_Comm
 * (comm.h does not include mpi.h; NULL = MPI_COMM_WORLD), which the comm
 * duplicates (the caller may free its own handle afterwards). MPI must be
 * initialised already when parent is not NULL. rank / world / local_* are
 * then the ranks within parent. */
zrt_status zrt_comm_mpi_init_on(zrt_comm *c, zrt_backend *backend, const void *parent);
zrt_status zrt_comm_shm_init_on(zrt_comm *c, zrt_backend *backend, const void *parent, char *why,
                                size_t whylen);
/* The hierarchical comm (comm/comm_hier.c, docs/comms.md): shared memory
 * within each machine, MPI across machines among the ranks with the same
 * local index. Collective over all ranks. On success c->iface->name is
 * "hier" and why describes the layout ("2 machines x 2 ranks: ..."); when
 * the layout does not allow it (uneven machines, ranks not placed
 * contiguously, device buffers, or one rank per machine unless
 * allow_single), c stays the flat MPI comm (name "mpi") and why says why.
 * Every rank takes the same branch (the decision uses the all-gathered
 * machine map). */
zrt_status zrt_comm_hier_init(zrt_comm *c, zrt_backend *backend, int allow_single, char *why,
                              size_t whylen);
#ifdef ZRT_HAVE_NCCL
zrt_status zrt_comm_nccl_init(zrt_comm *c, zrt_backend *backend);
void zrt_comm_nccl_probe_version(char *buf, size_t n);
#endif

#endif
