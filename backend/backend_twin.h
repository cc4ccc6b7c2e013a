/*
 * backend_twin.h — what the twin's two files share (not a public header):
 * backend_twin.c owns the streams, events and ops; backend_twin_mem.c owns
 * the device mapping, the guard that keeps the host out of it, the carving
 * of blocks and the host registrations.
 *
 * Views: device memory has one address range the program sees (base .. base
 * + size: what zrt_engine_alloc returns, what the pool accounts). With PKU
 * or with no guard the workers touch it at the same addresses (alias ==
 * base). With the mprotect guard that range is PROT_NONE except while a
 * launched host function runs, and the workers reach the same bytes through
 * a second mapping of the same memfd (alias); vtable ops translate their
 * pointer operands with zrt_twin_dev before calling a CPU kernel.
 */
#ifndef ZRT_BACKEND_TWIN_H
#define ZRT_BACKEND_TWIN_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"

/* Allocation unit (CUDA's allocations are 256-byte aligned). */
#define ZRT_TWIN_ALIGN 256
/* Host ranges registered at once (the pinned host pool registers a handful). */
#define ZRT_TWIN_MAX_REGS 1024
/* Streams one twin tracks at once (the CUDA backend's limit is of the same order). */
#define ZRT_TWIN_MAX_STREAMS 64

typedef struct twin_stream twin_stream;
typedef struct twin_fp twin_fp;

typedef enum zrt_twin_guard {
  ZRT_TWIN_GUARD_NONE = 0, /* operand checks at op boundaries only */
  ZRT_TWIN_GUARD_PKU,      /* a protection key only workers enable */
  ZRT_TWIN_GUARD_MPROTECT, /* PROT_NONE outside host functions; workers use an alias */
} zrt_twin_guard;

typedef struct twin_block {
  size_t off, bytes;
  struct twin_block *next;
} twin_block;

typedef struct twin_reg {
  uintptr_t lo, hi;
} twin_reg;

typedef struct twin_ctx {
  zrt_backend *b;
  zrt_backend cpu;      /* the CPU backend's iface (its kernels) */
  unsigned char *base;  /* the program's view of device memory */
  unsigned char *alias; /* the workers' view (== base unless the guard is mprotect) */
  size_t size;
  int memfd; /* -1 unless the guard is mprotect */
  int pkey;  /* -1: no PKU */
  zrt_twin_guard guard;
  pthread_mutex_t guard_mu; /* open_fns and the program view's protection */
  int open_fns;             /* host functions running now (mprotect guard) */
  pthread_mutex_t mu;       /* streams, events, free list, registrations */
  twin_block *free_list;    /* sorted by offset, coalesced */
  twin_stream *streams[ZRT_TWIN_MAX_STREAMS];
  int nstreams;
  twin_stream *def;
  twin_stream *dead; /* destroyed streams (stopped), freed with the backend */
  twin_reg regs[ZRT_TWIN_MAX_REGS];
  int nregs;
  int jitter;
  uint64_t jitter_seed;
  /* ZRT_TWIN_TRACE=DIR: every op's run on its worker is recorded and the
   * records written to DIR/twin_trace.<pid>.txt when the backend goes */
  char trace_dir[512];
  long
      side_delay_us; /* ZRT_TWIN_SIDE_DELAY_US: before each op of a stream other than the default */
  /* ZRT_TWIN_SLOW_OP=LABEL:US: US microseconds before each op whose label
   * contains LABEL (one slow kind of work, the others at speed) */
  char slow_op[128];
  long slow_op_us;
  /* ZRT_TWIN_HOST_FN (docs/engine.md, "The twin backend"): stream (the
   * default: host functions are stream ops and the engine runs its comms and
   * statistics as such), sync (a host function still runs on its stream's
   * worker, but the caller waits for it: the host-waiting shapes of the cpu
   * backend's order, comms staged through host memory), cuda (host functions
   * are stream ops, comms on the comm stream as NCCL's, the statistics on
   * the host, as on CUDA) */
  int host_fn_sync, host_fn_cuda;
  /* ZRT_TWIN_COPY_GUARD (on unless 0; backend_twin.c, "copy guard"): the
   * footprints on registered host memory of the ops queued and not yet
   * finished (fps, in queueing order, seq numbering them), and the guarded
   * copies among them still waiting for earlier ones before they are armed */
  int copy_guard;
  pthread_mutex_t fp_mu; /* fps, guards, fp_seq; taken after a stream's mu, before mu */
  twin_fp *fps, *fps_tail, *guards;
  uint64_t fp_seq;
  int vc_slots; /* the streams given a vector-clock slot so far (under mu) */
  /* guarded copies that started armed (checked) and before they were armed
   * (not checked); logged at debug level when the backend goes */
  _Atomic uint64_t guard_armed, guard_unarmed;
} twin_ctx;

/* The device mapping and its guard (PKU where the CPU has it, else the
 * mprotect guard, else none: each logged once). */
zrt_status zrt_twin_mem_init(twin_ctx *c, size_t device_memory_limit);
void zrt_twin_mem_destroy(twin_ctx *c);
/* A stream worker's thread start: enables the protection key there. */
void zrt_twin_mem_worker_start(twin_ctx *c);
/* A launched host function runs between open and close: the program view
 * is readable and writable (mprotect guard; a no-op otherwise). Nests. */
void zrt_twin_guard_open(twin_ctx *c);
void zrt_twin_guard_close(twin_ctx *c);

/* First-fit carving of the mapping; returns the program-view address. */
zrt_status zrt_twin_carve(twin_ctx *c, size_t bytes, void **out);
/* Gives [off, off+bytes) back (its pages' content is dead). */
zrt_status zrt_twin_give_back(twin_ctx *c, size_t off, size_t bytes);

/* 1 when p lies in either view of device memory. */
int zrt_twin_is_dev(const twin_ctx *c, const void *p);
/* Offset in the mapping of a device address of either view. */
size_t zrt_twin_off(const twin_ctx *c, const void *p);
/* The workers' address of p: a device address moves to the alias view,
 * anything else is returned unchanged. */
static inline void *zrt_twin_dev(const twin_ctx *c, const void *p) {
  const unsigned char *q = (const unsigned char *)p;
  if (q >= c->base && q < c->base + c->size) return c->alias + (q - c->base);
  return (void *)(uintptr_t)p;
}
/* The program's address of p (the inverse of zrt_twin_dev). */
static inline void *zrt_twin_prog(const twin_ctx *c, const void *p) {
  const unsigned char *q = (const unsigned char *)p;
  if (q >= c->alias && q < c->alias + c->size) return c->base + (q - c->alias);
  return (void *)(uintptr_t)p;
}
int zrt_twin_is_reg(twin_ctx *c, const void *p, size_t bytes);
/* A kernel's operand: device memory or registered host memory (a kernel
 * cannot read pageable host memory on a GPU). */
zrt_status zrt_twin_operand(twin_ctx *c, const char *op, const char *arg, const void *p,
                            size_t bytes);

zrt_status zrt_twin_host_register(void *ctx, void *ptr, size_t bytes);
void zrt_twin_host_unregister(void *ctx, void *ptr);

#endif
