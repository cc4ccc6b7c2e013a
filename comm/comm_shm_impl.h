/*
 * comm_shm_impl.h — what the shared-memory comm (comm/comm_shm.c) shares
 * with its zero-copy paths (comm/comm_shm_zc.c): the segment's layout, the
 * request and context structs, the reduction kernels' entry. Private to
 * the comm module. Protocol: docs/comms.md, "The shared-memory comm" and
 * "Zero-copy collectives".
 */
#ifndef ZRT_COMM_SHM_IMPL_H
#define ZRT_COMM_SHM_IMPL_H

#include "comm_impl.h"
#include "comm_shm_kernels.h"

/* Bytes of each rank's data (and result) region: one round's payload.
 * Every round costs one phase handshake, so larger regions amortise the
 * handshakes; smaller ones keep what a rank publishes in the caches while
 * the others read it. 1 MiB: at 10 GB/s a round moves data for ~100 us
 * against a handshake of ~1 us, and the two rounds in flight (data and
 * result regions, 4 per rank) stay within a server's L3 at a few ranks. */
#define SHM_REGION_BYTES ((size_t)1 << 20)
/* ZRT_COMM_SHM_REGION (a size, e.g. "4KiB") overrides it, from this
 * smallest value up: the tests shrink the regions so that small
 * collectives take many rounds. */
#define SHM_REGION_MIN ((size_t)1024)
/* Most ranks one segment serves (control lines in the 4 KiB header). */
#define SHM_MAX_RANKS 64
_Static_assert(SHM_MAX_RANKS <= ZRT_SHM_MAX_INPUTS, "the kernels sum at most this many inputs");
/* Elements of the fp32 accumulator a 16-bit reduction works through at a
 * time (8 KiB: stays in L1 with the widened input beside it). */
#define SHM_BLOCK 2048
/* Waiting: spins before yielding, and seconds of waiting between liveness
 * checks of the ranks being waited for. */
#define SHM_SPINS 256
#define SHM_LIVENESS_S 1.0
/* Then, counted from the last phase that went through: yield the core for
 * up to 2 ms (the rank waited for may be on it; with no more ranks than
 * cores it is usually microseconds away on its own core, and a yield on an
 * idle core returns at once), then block on a futex on the phase word of
 * the rank waited for, which that rank wakes when it completes a phase
 * (no oversleep, no core used). With more ranks than cores the yields are
 * skipped: blocking hands the core to a rank that needs it, and the wake
 * brings the waiter back as soon as its phase can start. A futex wait
 * lasts at most until the next liveness check or the caller's timeout. */
#define SHM_YIELD_S 2e-3
#define SHM_MAGIC 0x7a727473686d3031ull /* "zrtshm01" */

typedef struct shm_ctl {
  uint64_t phase; /* phases completed (atomic); its low 32 bits are a futex */
  int32_t pid;
  int32_t waiters; /* ranks blocked on this rank's phase futex (atomic) */
  /* Zero-copy descriptor of the collective in its publish phase (written
   * by this rank in that phase, read by the others before their next one):
   * zc_ok bits SHM_ZC_SEND / SHM_ZC_RECV when the buffer lies in the comm's
   * allocation zc_sid / zc_rid at byte offset zc_soff / zc_roff. */
  uint32_t zc_ok, zc_sid, zc_rid, zc_pad;
  uint64_t zc_soff, zc_roff;
  char pad[64 - 3 * sizeof(uint64_t) - 2 * sizeof(int32_t) - 4 * sizeof(uint32_t)];
} shm_ctl;
_Static_assert(sizeof(shm_ctl) == 64, "one cache line per rank");
#define SHM_ZC_SEND 1u
#define SHM_ZC_RECV 2u

typedef struct shm_hdr {
  uint64_t magic;
  int32_t nranks;
  int32_t pad;
  uint64_t region_bytes;
  char pad2[64 - 3 * sizeof(uint64_t)];
  shm_ctl ctl[SHM_MAX_RANKS];
} shm_hdr;

typedef enum { SHM_AR = 0, SHM_RS, SHM_AG, SHM_BC, SHM_BARRIER } shm_op;
/* A request's zero-copy state (comm/comm_shm_zc.c). */
enum { SHM_ZC_NONE = 0, SHM_ZC_ASK, SHM_ZC_ON, SHM_ZC_OFF };

typedef struct shm_zc_alloc shm_zc_alloc;

typedef struct shm_req {
  zrt_comm_req base; /* first: zrt_comm_req * and shm_req * convert */
  struct shm_req *next;
  shm_op op;
  const void *send;
  void *recv;
  zrt_dtype dt;
  zrt_redop red;
  int root;
  size_t *counts, *offs; /* per rank (reduce_scatter / all_gather / all_reduce segments) */
  size_t maxcount;       /* largest segment: the rounds cover it */
  size_t q;              /* elements per segment per round */
  uint64_t rounds;       /* of q elements per segment (0: nothing to move) */
  uint64_t nph;          /* phases of the copy path (rounds + stages - 1, or 0) */
  uint64_t first, last;  /* phases [first, last) (set when it reaches the head) */
  int started;           /* first / last are set */
  int zc;                /* SHM_ZC_NONE, or a publish phase first: _ASK, then _ON/_OFF */
  int nt;                /* recv written with non-temporal stores (use_nt) */
  int done;
} shm_req;

typedef struct shm_ctx {
  zrt_comm *c;      /* the comm this ctx backs (timeout_s for barrier) */
  zrt_comm mpi;     /* the MPI comm underneath (bootstrap; its ctx reads c) */
  shm_hdr *hdr;     /* the mapping */
  size_t map_bytes; /* of the mapping */
  char *data;       /* 2 x N regions of region bytes (round parity, rank) */
  char *res;        /* 2 x N result regions */
  size_t region;
  int rank, nranks;
  uint64_t phase;       /* phases completed by this rank (mirrors hdr->ctl[rank].phase) */
  shm_req *head, *tail; /* pending, in issue order */
  int inflight;         /* requests not yet freed */
  int laggard;          /* the rank progress() last found behind */
  int cores;            /* cores this process may run on (0: not looked at yet) */
  size_t nt_from;       /* see use_nt (valid when nt_ready) */
  int nt_ready;
  zrt_status broken; /* a rank died: every call fails with broken_msg */
  char broken_msg[512];
  /* zero-copy (comm/comm_shm_zc.c): the live allocations, how many were
   * ever made (collective, so equal on every rank: from the first on every
   * reduce_scatter / all_gather / all_reduce has a publish phase), and the
   * head request's peer buffers once it runs zero-copy */
  shm_zc_alloc *zc_list;
  uint32_t zc_made;
  int zc_plain;     /* ZRT_COMM_SHM_ZC=0 on some rank: allocations are private memory */
  int zc_env_ready; /* zc_plain agreed */
  const char *zc_send[SHM_MAX_RANKS], *zc_recv[SHM_MAX_RANKS];
} shm_ctx;

/* comm_shm.c: the reduction of n inputs in rank order into out (and out2
 * when not NULL) and a copy into recv, as the copy path runs them. */
void zrt_shm_reduce_into(void *out, void *out2, const void *const *in, int n, size_t len,
                         zrt_dtype dt, zrt_redop red, int nt);
void zrt_shm_copy_out(const shm_req *q, void *dst, const void *src, size_t bytes);
/* Progresses until every issued collective completed here (their requests
 * stay valid for the caller's wait): an allocation's MPI handshake must
 * not block a rank that the others wait for in a collective. */
zrt_status zrt_shm_drain(shm_ctx *s);

/* comm_shm_zc.c. The allocation vtable slots (collective; docs/comms.md). */
zrt_status zrt_shm_zc_alloc(void *ctx, size_t bytes, void **out);
void zrt_shm_zc_free(void *ctx, void *p);
/* Unmaps every allocation (destroy). */
void zrt_shm_zc_release(shm_ctx *s);
/* Unlinks this user's /dev/shm/zrt-zc-* and zrt-shm-* names whose creator
 * no longer exists and that are over a minute old (a rank killed between
 * creating a segment and unlinking it leaves its name, and the memory
 * stays reserved until then), with a warning naming each. */
void zrt_shm_sweep_stale(void);
/* Phase 0 of a request with a publish phase: this rank's descriptor. */
void zrt_shm_zc_publish(shm_ctx *s, shm_req *q);
/* Before phase 1 (every rank published): zero-copy when every rank's
 * buffers allow it; sets q->zc and shortens q->last to the zero-copy
 * phases. The same decision on every rank (the same descriptors). */
void zrt_shm_zc_decide(shm_ctx *s, shm_req *q);
/* Zero-copy phase k (0-based after the publish phase). */
void zrt_shm_zc_phase(shm_ctx *s, shm_req *q, uint64_t k);

#endif
