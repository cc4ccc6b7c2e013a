/*
 * engine_actckpt.c — activation checkpoints (ZeRO-R's activation part): the
 * zrt_actckpt_* calls of include/zrt.h. A program declares its chain of
 * blocks before build; the engine keeps each checkpointed block's input and
 * hands it back in the backward, where the program recomputes the block.
 *
 * Storage is allocated at build and held until destroy (docs/memory.md,
 * "Activation checkpoints"): device checkpoints, one allocation per block or
 * one buffer (contiguous_memory_optimization); with cpu_checkpointing one
 * host-pool copy per block (or one buffer) plus two device staging slots.
 * The memory model (zrt_memest_actckpt) counts exactly these bytes.
 *
 * Ordering (cpu_checkpointing): a save copies the input into a slot on the
 * engine stream (after the slot's previous copy-out, ev_out), then the copy
 * stream copies the slot to the host after ev_ready. A fetch uses the slot
 * that still holds the block (the last blocks saved), or the prefetch the
 * fetch of the block after it issued, or copies in on demand; the engine
 * stream waits for ev_ready, the host never waits. Then it prefetches the
 * next checkpointed block in backward order into the other slot, after that
 * slot's ev_free (recorded at release). On backends without streams (cpu)
 * every copy completes before it returns and the events are no-ops.
 *
 * Timing (cpu_checkpointing, backends with timing events): each copy is
 * bracketed by two events on the copy stream, each engine-stream wait for a
 * slot by two on the engine stream; the pairs sit in a ring and are read
 * back once done, never waited for (stats copy_s / stall_s: how much of the
 * transfers the compute hid). A pair overwritten while still pending is
 * counted as untimed.
 *
 * Invariants: a slot's holds[] names the block whose input it holds intact;
 * a fetched slot is busy until its release; saved[] is set by save and
 * cleared by release, so a fetch without a save of the same pass fails.
 */
#include <stdlib.h>
#include <string.h>

#include "engine_internal.h"
#include "memest.h"

static zrt_status ack_check(const zrt_engine *eng, const char *fn, int need_built) {
  if (!eng) return zrt_error(ZRT_ERR_INVALID_ARG, "%s: NULL engine", fn);
  if (need_built && !eng->built)
    return zrt_error(ZRT_ERR_INVALID_ARG, "%s: call zrt_engine_build first", fn);
  return ZRT_OK;
}

static zrt_status ack_block(const zrt_engine *eng, int block, const char *fn) {
  const zrt_actckpt_state *a = &eng->ack;
  if (block < 0 || block >= a->nblocks)
    return zrt_error(ZRT_ERR_INVALID_ARG,
                     "%s: block %d is not declared (zrt_actckpt_declare gave %d blocks)", fn, block,
                     a->nblocks);
  if (!a->on[block])
    return zrt_error(ZRT_ERR_INVALID_ARG,
                     "%s: block %d is not checkpointed (zrt_actckpt_is_on says 0: keep its "
                     "activations instead)",
                     fn, block);
  return ZRT_OK;
}

zrt_status zrt_actckpt_wanted(const zrt_engine *eng, int *on) {
  ZRT_CHECK(ack_check(eng, "zrt_actckpt_wanted", 0));
  if (!on) return zrt_error(ZRT_ERR_INVALID_ARG, "zrt_actckpt_wanted: NULL output");
  *on = eng->cfg->activation_checkpointing != 0;
  return ZRT_OK;
}

/* Drops what declare recorded per block (the choice, the saved flags, the
 * table of where each checkpoint lives; the storage itself is freed apart). */
static void ack_forget_blocks(zrt_actckpt_state *a) {
  free(a->on);
  free(a->saved);
  free(a->store);
  free(a->reg);
  a->on = a->saved = a->reg = NULL;
  a->store = NULL;
  a->nblocks = a->n = 0;
}

zrt_status zrt_actckpt_declare(zrt_engine *eng, int nblocks, size_t bytes,
                               const unsigned char *offer) {
  ZRT_CHECK(ack_check(eng, "zrt_actckpt_declare", 0));
  if (eng->built)
    return zrt_error(ZRT_ERR_INVALID_ARG,
                     "zrt_actckpt_declare: call it before zrt_engine_build (the checkpoints' "
                     "storage is planned and allocated at build)");
  if (nblocks < 0 || (nblocks > 0 && bytes == 0))
    return zrt_error(ZRT_ERR_INVALID_ARG,
                     "zrt_actckpt_declare: %d blocks of %zu bytes: give nblocks >= 0 and, with "
                     "blocks, their input's bytes (> 0)",
                     nblocks, bytes);
  zrt_actckpt_state *a = &eng->ack;
  ack_forget_blocks(a);
  a->bytes = 0;
  if (nblocks == 0) return ZRT_OK;
  a->on = calloc((size_t)nblocks, 1);
  a->saved = calloc((size_t)nblocks, 1);
  a->store = calloc((size_t)nblocks, sizeof(void *));
  a->reg = calloc((size_t)nblocks, 1);
  if (!a->on || !a->saved || !a->store || !a->reg)
    return zrt_error(ZRT_ERR_OOM, "zrt_actckpt_declare: out of host memory");
  const zrt_cfg *c = eng->cfg;
  int64_t cap = c->actckpt_number < 0 ? nblocks : c->actckpt_number;
  for (int b = 0; b < nblocks && a->n < cap; b++)
    if (!offer || offer[b]) {
      a->on[b] = 1;
      a->n++;
    }
  a->nblocks = nblocks;
  a->bytes = bytes;
  a->cpu = c->actckpt_cpu;
  a->contiguous = c->actckpt_contiguous;
  a->sync = c->actckpt_sync;
  a->profile = c->actckpt_profile;
  return ZRT_OK;
}

zrt_status zrt_actckpt_is_on(const zrt_engine *eng, int block, int *on, int *count) {
  ZRT_CHECK(ack_check(eng, "zrt_actckpt_is_on", 0));
  if (!on) return zrt_error(ZRT_ERR_INVALID_ARG, "zrt_actckpt_is_on: NULL output");
  *on = block >= 0 && block < eng->ack.nblocks && eng->ack.on[block];
  if (count) *count = eng->ack.n;
  return ZRT_OK;
}

zrt_status zrt_actckpt_get_stats(const zrt_engine *eng, zrt_actckpt_stats *out) {
  ZRT_CHECK(ack_check(eng, "zrt_actckpt_get_stats", 0));
  if (!out) return zrt_error(ZRT_ERR_INVALID_ARG, "zrt_actckpt_get_stats: NULL output");
  /* reading done events back is bookkeeping, not a change the caller sees */
  zrt_engine_actckpt_harvest((zrt_engine *)eng);
  *out = eng->ack.stats;
  return ZRT_OK;
}

/* A pass makes at most 4 spans per checkpointed block (a save's stall and
 * copy-out, a fetch's stall and copy-in): the ring holds two passes. */
static zrt_status ack_spans_create(zrt_engine *eng) {
  zrt_actckpt_state *a = &eng->ack;
  zrt_backend *be = eng->backend;
  zrt_event probe = NULL;
  zrt_status st = zrt_backend_event_create_timed(be, &probe);
  if (st == ZRT_ERR_UNSUPPORTED) return ZRT_OK; /* nothing asynchronous to time (cpu) */
  ZRT_CHECK(st);
  zrt_backend_event_destroy(be, probe);
  int n = 8 * a->n;
  a->span = calloc((size_t)n, sizeof *a->span);
  if (!a->span) return zrt_error(ZRT_ERR_OOM, "activation checkpoints: out of host memory");
  a->nspan = n;
  for (int i = 0; i < n; i++) {
    ZRT_CHECK(zrt_backend_event_create_timed(be, &a->span[i].e0));
    ZRT_CHECK(zrt_backend_event_create_timed(be, &a->span[i].e1));
  }
  return ZRT_OK;
}

/* Reads span i into the stats when its events are done. */
static void ack_span_read(zrt_engine *eng, int i) {
  zrt_actckpt_state *a = &eng->ack;
  struct zrt_actckpt_span *sp = &a->span[i];
  if (!sp->pending) return;
  int ready = 0;
  double dt = 0;
  if (zrt_backend_event_elapsed(eng->backend, sp->e0, sp->e1, &ready, &dt) != ZRT_OK) {
    zrt_log_once("actckpt.untimed", ZRT_LOG_WARN,
                 "activation checkpoint timing: %s (counted as untimed in the stats)",
                 zrt_last_error());
    a->stats.untimed++;
    sp->pending = 0;
    return;
  }
  if (!ready) return;
  if (sp->stall)
    a->stats.stall_s += dt > 0 ? dt : 0;
  else
    a->stats.copy_s += dt > 0 ? dt : 0;
  a->stats.timed++;
  sp->pending = 0;
}

void zrt_engine_actckpt_harvest(zrt_engine *eng) {
  zrt_actckpt_state *a = &eng->ack;
  for (int i = 0; i < a->nspan; i++) ack_span_read(eng, i);
}

/* Opens a span: e0 recorded on stream s (NULL: the engine stream). Returns
 * its index, or -1 without timing. */
static int ack_span_open(zrt_engine *eng, void *s, int stall) {
  zrt_actckpt_state *a = &eng->ack;
  if (!a->nspan) return -1;
  int i = a->next_span;
  a->next_span = (i + 1) % a->nspan;
  struct zrt_actckpt_span *sp = &a->span[i];
  ack_span_read(eng, i);
  if (sp->pending) { /* still running a full ring later: not measurable */
    a->stats.untimed++;
    sp->pending = 0;
  }
  if (zrt_backend_event_record(eng->backend, sp->e0, s) != ZRT_OK) {
    a->stats.untimed++;
    return -1;
  }
  sp->stall = stall;
  return i;
}

static void ack_span_close(zrt_engine *eng, int i, void *s) {
  if (i < 0) return;
  struct zrt_actckpt_span *sp = &eng->ack.span[i];
  if (zrt_backend_event_record(eng->backend, sp->e1, s) != ZRT_OK) {
    eng->ack.stats.untimed++;
    return;
  }
  sp->pending = 1;
}

/* A cpu checkpoint's host copy: registered where the pool is not pinned
 * (zrt_hostpool_stage_alloc); a registration the backend refuses (memory
 * a pin fallback registered already, say) leaves it pageable, said once:
 * its copies then wait for the host. */
static zrt_status ack_host_alloc(zrt_engine *eng, int pinned, size_t bytes, void **out, int *reg,
                                 int *said) {
  zrt_status st = zrt_hostpool_stage_alloc(eng->host_pool, eng->backend, pinned, bytes,
                                           ZRT_MEM_ACTIVATIONS, out, reg);
  if (st == ZRT_OK || st == ZRT_ERR_OOM) return st;
  if (!(*said)++)
    zrt_log(ZRT_LOG_WARN,
            "activation checkpoints in host memory left pageable (registering %zu bytes: %s): "
            "each copy to or from them waits for the host",
            bytes, zrt_last_error());
  *reg = 0;
  return zrt_pool_alloc(eng->host_pool, bytes, ZRT_MEM_ACTIVATIONS, out);
}

zrt_status zrt_engine_actckpt_build(zrt_engine *eng) {
  zrt_actckpt_state *a = &eng->ack;
  a->fetched = -1;
  a->prof_block = -1;
  for (int s = 0; s < ZRT_ACTCKPT_SLOTS; s++) a->holds[s] = -1;
  if (a->n == 0) return ZRT_OK;
  zrt_backend *be = eng->backend;
  if (eng->cfg->actckpt_partition)
    zrt_log0(ZRT_LOG_WARN,
             "activation_checkpointing.partition_activations: DeepSpeed splits each checkpoint "
             "across the tensor-parallel ranks; zrt has no tensor parallelism, so every rank keeps "
             "its whole checkpoints (ignored)");
  if (a->cpu && !eng->host_pool) {
    zrt_hostpool_opts ho = {.numa_node = eng->cfg->numa_node,
                            .pin = 1,
                            .allow_fallback = eng->cfg->pin_memory_fallback,
                            .capacity = 0};
    ZRT_CHECK(zrt_hostpool_create(&ho, be, &eng->hostpool));
    eng->host_pool = zrt_hostpool_pool(eng->hostpool);
  }
  size_t total = (size_t)a->n * a->bytes;
  /* cpu mode: host copies the copy stream reads and writes asynchronously
   * even when the host pool is not pinned (offload's default pool): they
   * are registered then (zrt_hostpool_stage_alloc), else each save's copy
   * to pageable memory would be a host wait */
  const int pinned = eng->hostpool ? zrt_hostpool_pinned(eng->hostpool) : 1;
  int reg = 0, said = 0;
  if (a->contiguous) {
    if (a->cpu)
      ZRT_CHECK(ack_host_alloc(eng, pinned, total, &a->buf, &a->buf_reg, &said));
    else
      ZRT_CHECK(zrt_backend_alloc(be, total, ZRT_MEM_ACTIVATIONS, &a->buf));
  }
  size_t k = 0;
  for (int b = 0; b < a->nblocks; b++) {
    if (!a->on[b]) continue;
    if (a->contiguous) {
      a->store[b] = (char *)a->buf + k++ * a->bytes;
    } else if (a->cpu) {
      ZRT_CHECK(ack_host_alloc(eng, pinned, a->bytes, &a->store[b], &reg, &said));
      a->reg[b] = (unsigned char)reg;
    } else
      ZRT_CHECK(zrt_backend_alloc(be, a->bytes, ZRT_MEM_ACTIVATIONS, &a->store[b]));
  }
  if (a->cpu) {
    int ns = a->n < ZRT_ACTCKPT_SLOTS ? a->n : ZRT_ACTCKPT_SLOTS;
    for (int s = 0; s < ns; s++) {
      ZRT_CHECK(zrt_backend_alloc(be, a->bytes, ZRT_MEM_ACTIVATIONS, &a->slot[s]));
      ZRT_CHECK(zrt_backend_event_create(be, &a->ev_ready[s]));
      ZRT_CHECK(zrt_backend_event_create(be, &a->ev_out[s]));
      ZRT_CHECK(zrt_backend_event_create(be, &a->ev_free[s]));
    }
    ZRT_CHECK(zrt_backend_stream_create(be, &a->copy_stream));
    ZRT_CHECK(ack_spans_create(eng));
  }
  char b1[32], b2[32];
  zrt_log0(ZRT_LOG_INFO, "activation checkpoints: %d of %d blocks, %s each, %s%s%s", a->n,
           a->nblocks, zrt_format_size(a->bytes, b1, sizeof b1),
           a->cpu ? "in host memory, pinned or registered where the platform allows (2 device "
                    "staging slots), "
                  : "on the device, ",
           zrt_format_size(total, b2, sizeof b2),
           a->contiguous ? " in one buffer (contiguous_memory_optimization)" : "");
  return ZRT_OK;
}

void zrt_engine_actckpt_free(zrt_engine *eng) {
  zrt_actckpt_state *a = &eng->ack;
  zrt_backend *be = eng->backend;
  /* first: the destroy waits for the copies to the host still in flight
   * (every backend's stream_destroy does), so no freed checkpoint is
   * written after it went back to the host pool */
  if (a->copy_stream) zrt_backend_stream_destroy(be, a->copy_stream);
  a->copy_stream = NULL;
  for (int b = 0; a->store && b < a->nblocks; b++) {
    if (!a->store[b] || a->contiguous) continue;
    if (a->cpu)
      zrt_hostpool_stage_free(eng->host_pool, be, a->store[b], a->reg[b]);
    else
      zrt_backend_free(be, a->store[b]);
    a->store[b] = NULL;
    a->reg[b] = 0;
  }
  if (a->buf) {
    if (a->cpu)
      zrt_hostpool_stage_free(eng->host_pool, be, a->buf, a->buf_reg);
    else
      zrt_backend_free(be, a->buf);
    a->buf = NULL;
    a->buf_reg = 0;
  }
  for (int s = 0; s < ZRT_ACTCKPT_SLOTS; s++) {
    zrt_backend_free(be, a->slot[s]);
    if (a->ev_ready[s]) zrt_backend_event_destroy(be, a->ev_ready[s]);
    if (a->ev_out[s]) zrt_backend_event_destroy(be, a->ev_out[s]);
    if (a->ev_free[s]) zrt_backend_event_destroy(be, a->ev_free[s]);
    a->slot[s] = a->ev_ready[s] = a->ev_out[s] = a->ev_free[s] = NULL;
  }
  for (int i = 0; i < a->nspan; i++) {
    if (a->span[i].e0) zrt_backend_event_destroy(be, a->span[i].e0);
    if (a->span[i].e1) zrt_backend_event_destroy(be, a->span[i].e1);
  }
  free(a->span);
  a->span = NULL;
  a->nspan = a->next_span = 0;
  ack_forget_blocks(a);
}

/* profile: device-synchronized wall time, as DeepSpeed's timers */
static double ack_prof_now(zrt_engine *eng) {
  zrt_backend_synchronize(eng->backend, NULL);
  return zrt_now_s();
}

void zrt_engine_actckpt_forward_end(zrt_engine *eng) {
  zrt_actckpt_state *a = &eng->ack;
  if (!a->profile || a->prof_block < 0) return;
  zrt_log0(ZRT_LOG_INFO, "activation checkpoint block %d: forward %.3f ms", a->prof_block,
           (ack_prof_now(eng) - a->t_save) * 1e3);
  a->prof_block = -1;
}

zrt_status zrt_actckpt_save(zrt_engine *eng, int block, const void *src) {
  ZRT_CHECK(ack_check(eng, "zrt_actckpt_save", 1));
  ZRT_CHECK(ack_block(eng, block, "zrt_actckpt_save"));
  zrt_actckpt_state *a = &eng->ack;
  zrt_backend *be = eng->backend;
  if (!src) return zrt_error(ZRT_ERR_INVALID_ARG, "zrt_actckpt_save: block %d: NULL input", block);
  if (a->fetched >= 0)
    return zrt_error(ZRT_ERR_INVALID_ARG,
                     "zrt_actckpt_save: block %d while block %d is fetched (release it first)",
                     block, a->fetched);
  zrt_engine_actckpt_forward_end(eng); /* the previous block's forward ends here */
  if (a->sync) ZRT_CHECK(zrt_backend_synchronize(be, NULL));
  if (a->profile) {
    a->t_save = ack_prof_now(eng);
    a->prof_block = block;
  }
  /* a new pass: a slot that held this block from an earlier pass is stale */
  for (int s = 0; s < ZRT_ACTCKPT_SLOTS; s++)
    if (a->holds[s] == block) a->holds[s] = -1;
  if (!a->cpu) {
    ZRT_CHECK(zrt_backend_memcpy(be, a->store[block], src, a->bytes, ZRT_COPY_D2D, NULL));
  } else {
    int ns = a->n < ZRT_ACTCKPT_SLOTS ? a->n : ZRT_ACTCKPT_SLOTS;
    int s = a->next_slot;
    a->next_slot = (s + 1) % ns;
    /* the slot's previous copy to the host must have read it, and a copy
     * into it that no fetch took (a backward cut short) must be done */
    int sp = ack_span_open(eng, NULL, 1);
    ZRT_CHECK(zrt_backend_stream_wait_event(be, NULL, a->ev_out[s]));
    ZRT_CHECK(zrt_backend_stream_wait_event(be, NULL, a->ev_ready[s]));
    ack_span_close(eng, sp, NULL);
    a->busy[s] = 0;
    ZRT_CHECK(zrt_backend_memcpy(be, a->slot[s], src, a->bytes, ZRT_COPY_D2D, NULL));
    ZRT_CHECK(zrt_backend_event_record(be, a->ev_ready[s], NULL));
    ZRT_CHECK(zrt_backend_stream_wait_event(be, a->copy_stream, a->ev_ready[s]));
    sp = ack_span_open(eng, a->copy_stream, 0);
    ZRT_CHECK(zrt_backend_memcpy(be, a->store[block], a->slot[s], a->bytes, ZRT_COPY_D2H,
                                 a->copy_stream));
    ack_span_close(eng, sp, a->copy_stream);
    ZRT_CHECK(zrt_backend_event_record(be, a->ev_out[s], a->copy_stream));
    a->holds[s] = block;
    a->stats.bytes_out += a->bytes;
  }
  a->saved[block] = 1;
  a->stats.saves++;
  return ZRT_OK;
}

/* A slot to fill that is not s: a free one holding nothing still saved
 * (so a block another fetch would find resident stays), else any free one;
 * -1 when both are busy. */
static int ack_free_slot(const zrt_actckpt_state *a, int ns, int s) {
  int any = -1;
  for (int i = 0; i < ns; i++) {
    if (i == s || a->busy[i]) continue;
    if (a->holds[i] < 0 || !a->saved[a->holds[i]]) return i;
    if (any < 0) any = i;
  }
  return any;
}

/* cpu: copies block's host checkpoint into slot s on the copy stream, after
 * the engine stream's last reads of the slot (ev_free). The slot's last
 * copy-out needs no wait: it was queued on this same stream (ev_out is only
 * ever recorded on the copy stream), so the stream's order puts it first. */
static zrt_status ack_copy_in(zrt_engine *eng, int s, int block) {
  zrt_actckpt_state *a = &eng->ack;
  zrt_backend *be = eng->backend;
  ZRT_CHECK(zrt_backend_stream_wait_event(be, a->copy_stream, a->ev_free[s]));
  int sp = ack_span_open(eng, a->copy_stream, 0);
  ZRT_CHECK(
      zrt_backend_memcpy(be, a->slot[s], a->store[block], a->bytes, ZRT_COPY_H2D, a->copy_stream));
  ack_span_close(eng, sp, a->copy_stream);
  ZRT_CHECK(zrt_backend_event_record(be, a->ev_ready[s], a->copy_stream));
  a->holds[s] = block;
  a->stats.bytes_in += a->bytes;
  return ZRT_OK;
}

zrt_status zrt_actckpt_fetch(zrt_engine *eng, int block, const void **input) {
  ZRT_CHECK(ack_check(eng, "zrt_actckpt_fetch", 1));
  ZRT_CHECK(ack_block(eng, block, "zrt_actckpt_fetch"));
  zrt_actckpt_state *a = &eng->ack;
  zrt_backend *be = eng->backend;
  if (!input) return zrt_error(ZRT_ERR_INVALID_ARG, "zrt_actckpt_fetch: NULL output");
  if (a->fetched >= 0)
    return zrt_error(ZRT_ERR_INVALID_ARG,
                     "zrt_actckpt_fetch: block %d while block %d is still fetched (release it "
                     "first: blocks come back one at a time)",
                     block, a->fetched);
  if (!a->saved[block])
    return zrt_error(ZRT_ERR_INVALID_ARG,
                     "zrt_actckpt_fetch: block %d was not saved in this forward "
                     "(zrt_actckpt_save) or was already released",
                     block);
  zrt_engine_actckpt_forward_end(eng);
  if (a->sync) ZRT_CHECK(zrt_backend_synchronize(be, NULL));
  if (a->profile) a->t_fetch = ack_prof_now(eng);
  a->stats.fetches++;
  if (!a->cpu) {
    *input = a->store[block];
    a->stats.resident++;
    a->fetched = block;
    return ZRT_OK;
  }
  int ns = a->n < ZRT_ACTCKPT_SLOTS ? a->n : ZRT_ACTCKPT_SLOTS, s = -1;
  for (int i = 0; i < ns; i++)
    if (a->holds[i] == block) s = i;
  if (s >= 0 && a->busy[s] == 2) {
    a->stats.prefetched++;
  } else if (s >= 0) {
    a->stats.resident++;
  } else {
    /* not resident, not prefetched: the first fetch of a pass whose last
     * saves were overwritten, or a fetch out of backward order */
    s = ack_free_slot(a, ns, -1);
    if (s < 0) return zrt_error(ZRT_ERR_INTERNAL, "zrt_actckpt_fetch: no free staging slot");
    ZRT_CHECK(ack_copy_in(eng, s, block));
    a->stats.on_demand++;
  }
  /* the engine stream reads the slot after its fill (D2D save or H2D copy) */
  int sp = ack_span_open(eng, NULL, 1);
  ZRT_CHECK(zrt_backend_stream_wait_event(be, NULL, a->ev_ready[s]));
  ack_span_close(eng, sp, NULL);
  a->busy[s] = 1;
  a->fetched = block;
  *input = a->slot[s];
  /* prefetch the next checkpointed block in backward order into another slot */
  int nb = -1;
  for (int b = block - 1; b >= 0; b--)
    if (a->on[b] && a->saved[b]) {
      nb = b;
      break;
    }
  if (nb >= 0) {
    int have = 0;
    for (int i = 0; i < ns; i++) have |= a->holds[i] == nb;
    if (!have) {
      int t = ack_free_slot(a, ns, s);
      if (t >= 0) {
        ZRT_CHECK(ack_copy_in(eng, t, nb));
        a->busy[t] = 2; /* prefetched, not yet fetched */
      }
    }
  }
  return ZRT_OK;
}

zrt_status zrt_actckpt_release(zrt_engine *eng, int block) {
  ZRT_CHECK(ack_check(eng, "zrt_actckpt_release", 1));
  ZRT_CHECK(ack_block(eng, block, "zrt_actckpt_release"));
  zrt_actckpt_state *a = &eng->ack;
  zrt_backend *be = eng->backend;
  if (a->fetched != block)
    return zrt_error(ZRT_ERR_INVALID_ARG, "zrt_actckpt_release: block %d is not fetched%s", block,
                     a->fetched >= 0 ? " (another block is)" : "");
  if (a->profile)
    zrt_log0(ZRT_LOG_INFO, "activation checkpoint block %d: backward %.3f ms (recompute included)",
             block, (ack_prof_now(eng) - a->t_fetch) * 1e3);
  if (a->sync) ZRT_CHECK(zrt_backend_synchronize(be, NULL));
  if (a->cpu) {
    for (int s = 0; s < ZRT_ACTCKPT_SLOTS; s++)
      if (a->holds[s] == block && a->busy[s] == 1) {
        ZRT_CHECK(zrt_backend_event_record(be, a->ev_free[s], NULL));
        a->busy[s] = 0;
        a->holds[s] = -1;
      }
  }
  a->saved[block] = 0;
  a->fetched = -1;
  return ZRT_OK;
}
