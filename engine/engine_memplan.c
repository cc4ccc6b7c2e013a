/*
 * engine_memplan.c — the device memory plan the engine keeps for the whole
 * run (docs/memory.md, "A plan the engine keeps").
 *
 * At build, before any allocation: the least this configuration needs on
 * the device (the memory model with one module gathered and its 16-bit
 * gradients, no prefetch, no reuse, and the activations the program
 * declared); a build whose floor exceeds the device is refused with that
 * figure instead of failing somewhere in the first steps.
 *
 * At stage 3 the program's calls of the first optimizer step are recorded
 * (fetch, release, first gradient access, grads_ready). The first step runs
 * without prefetch or reuse (the coordinator has no trace yet); from the
 * second on it prefetches and keeps copies by the trace, which is what used
 * to run a job out of memory after its first step. At the first boundary
 * the recorded step is replayed with the coordinator's own policy
 * (sharding/coordinator_sim.c over sharding/coord_policy.c) and added to
 * what the pools hold besides the gathered copies and the 16-bit
 * gradients; the reuse distance, then the
 * prefetch budget, are lowered until that steady state fits the share of
 * the device the engine plans in (zrt_memest_plan_bytes), and what changed
 * is logged once.
 *
 * Invariants: every rank takes the same decision (the bytes are agreed
 * over the ranks, and the replay is a pure function of the recorded calls,
 * which the coordinator already requires to be the same on every rank).
 * From the second step on, the device peak is plan_device_bytes to the
 * byte when the program's own allocations are the same every step: every
 * later step holds at least the copies the first one held at each call, so
 * the replayed peak is the run's peak.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_internal.h"
#include "memest.h"

const char *zrt_engine_actckpt_hint(const zrt_engine *eng, uint64_t acts, uint64_t total, char *buf,
                                    size_t len) {
  buf[0] = 0;
  if (len == 0 || acts == 0 || acts <= total / 2) return buf;
  const zrt_actckpt_state *a = &eng->ack;
  char b[32];
  if (a->n == 0 && eng->cfg->activation_checkpointing)
    snprintf(buf, len,
             "a program that checkpoints its blocks (zrt.activation_checkpointing is true but "
             "this program declared none with zrt_actckpt_declare), ");
  else if (a->n == 0)
    snprintf(buf, len,
             "activation checkpointing (the activations are %s of it: --set "
             "zrt.activation_checkpointing=true or a DeepSpeed activation_checkpointing section, "
             "for a program that recomputes its blocks with zrt_actckpt_*, e.g. train_gpt2 "
             "--activation_checkpointing), ",
             zrt_format_size(acts, b, sizeof b));
  else if (!a->cpu && a->n > ZRT_ACTCKPT_SLOTS)
    snprintf(buf, len,
             "--set activation_checkpointing.cpu_checkpointing=true (the %d checkpoints to pinned "
             "host memory, %d staging slots stay: %s less on the device), ",
             a->n, ZRT_ACTCKPT_SLOTS,
             zrt_format_size((uint64_t)(a->n - ZRT_ACTCKPT_SLOTS) * a->bytes, b, sizeof b));
  return buf;
}

zrt_status zrt_engine_plan_check_build(zrt_engine *eng, const zrt_memest_layout *lay) {
  if (eng->policy->shard_params) {
    free(eng->plan_events);
    eng->plan_events = NULL;
    eng->plan_nevents = eng->plan_cap_events = 0;
    eng->plan_recording = 1;
  }
  uint64_t cap = lay->device_capacity;
  if (cap == 0) return ZRT_OK;
  zrt_memest_layout floor = *lay;
  floor.live_known = 0;
  floor.prefetch_elems = 0;
  floor.reuse_elems = 0;
  zrt_memest_result r;
  zrt_memest_predict(&floor, &r);
  if (r.device_total <= cap) return ZRT_OK;
  char t[32], c[32], ms[32], bk[32], ac[32], change[768] = "";
  const zrt_stage_policy *pol = zrt_stage_policy_of(lay->stage);
  const char *off = lay->offload_param       ? " with optimizer and parameter offload"
                    : lay->offload_optimizer ? " with optimizer offload"
                                             : "";
  /* only the changes that lower this figure; checkpointing first where the
   * activations are the larger part of it */
  zrt_engine_actckpt_hint(eng, r.device[ZRT_MEM_ACTIVATIONS], r.device_total, change,
                          sizeof change);
  if (lay->activation_bytes)
    snprintf(change + strlen(change), sizeof change - strlen(change),
             "a smaller train_micro_batch_size_per_gpu or sequence (the activations), ");
  if (!lay->offload_param)
    snprintf(change + strlen(change), sizeof change - strlen(change), "%s",
             pol->shard_params ? "offload_optimizer and offload_param (device cpu), more ranks, "
                               : "a higher zero_optimization.stage or offload_optimizer, more "
                                 "ranks, ");
  snprintf(change + strlen(change), sizeof change - strlen(change),
           "a lower zero_optimization.reduce_bucket_size (the buckets) or a larger "
           "zrt.device_memory_limit");
  eng->plan_refused = 1; /* the device's OOM, as a refused allocation would be */
  return zrt_error(ZRT_ERR_OOM,
                   "zrt_engine_build: stage %d%s needs at least %s per rank on the device (model "
                   "states %s%s, gradient buckets %s, activations the program declared %s) and "
                   "the device has %s; change: %s (`zrt estimate-memory` shows the figures)",
                   lay->stage, off, zrt_format_size(r.device_total, t, sizeof t),
                   zrt_format_size(r.model_states, ms, sizeof ms),
                   pol->shard_params
                       ? ": one gathered module and its 16-bit gradients, no prefetch, no reuse"
                       : "",
                   zrt_format_size(r.device[ZRT_MEM_COMM], bk, sizeof bk),
                   zrt_format_size(r.device[ZRT_MEM_ACTIVATIONS], ac, sizeof ac),
                   zrt_format_size(cap, c, sizeof c), change);
}

void zrt_engine_plan_record(zrt_engine *eng, zrt_sim_kind kind, int module) {
  if (eng->plan_recording <= 0) return;
  if (eng->plan_nevents == eng->plan_cap_events) {
    int nc = eng->plan_cap_events ? eng->plan_cap_events * 2 : 256;
    zrt_sim_event *e = realloc(eng->plan_events, (size_t)nc * sizeof *e);
    if (!e) {
      eng->plan_recording = -1; /* reported at the boundary */
      return;
    }
    eng->plan_events = e;
    eng->plan_cap_events = nc;
  }
  eng->plan_events[eng->plan_nevents++] = (zrt_sim_event){kind, module};
}

void zrt_engine_plan_free(zrt_engine *eng) {
  free(eng->plan_events);
  eng->plan_events = NULL;
  eng->plan_nevents = eng->plan_cap_events = 0;
  eng->plan_recording = 0;
}

typedef struct zrt_plan {
  zrt_engine *eng;
  zrt_coord_sim sim;
  uint64_t fixed; /* device bytes besides the gathered copies and 16-bit gradients */
  uint64_t ws;
} zrt_plan;

/* The steady device peak with prefetch pf and reuse ru; 0 when the replay
 * ran out of host memory. */
static uint64_t zrt_plan_peak(void *arg, int64_t pf, int64_t ru) {
  zrt_plan *p = arg;
  zrt_coord_sim s = p->sim;
  s.prefetch_elems = pf;
  s.reuse_distance = ru;
  zrt_coord_sim_peaks pk;
  if (zrt_coord_sim_run(&s, &pk) != 0) return 0;
  return p->fixed + p->ws * (uint64_t)ZRT_MAX(pk.both, (int64_t)0);
}

/* The largest of the ranks' values (exactly: 24-bit limbs in fp32). */
static zrt_status zrt_plan_agree_max(zrt_engine *eng, uint64_t *v) {
  if (eng->world <= 1) return ZRT_OK;
  float *all = calloc((size_t)eng->world * 3, sizeof(float));
  size_t *counts = calloc((size_t)eng->world, sizeof(size_t));
  zrt_status st = ZRT_OK;
  if (!all || !counts) {
    st = zrt_error(ZRT_ERR_OOM, "stage 3 memory plan: out of host memory");
    goto done;
  }
  float *mine = all + (size_t)eng->rank * 3;
  mine[0] = (float)(*v & 0xffffffu);
  mine[1] = (float)((*v >> 24) & 0xffffffu);
  mine[2] = (float)(*v >> 48);
  for (int r = 0; r < eng->world; r++) counts[r] = 3;
  uint64_t before = eng->comm->bytes_moved;
  ZRT_CHECK_GOTO(zrt_comm_all_gather(eng->comm, mine, all, counts, ZRT_F32, NULL), st, done);
  eng->comm->bytes_moved = before; /* planning traffic is not training traffic */
  for (int r = 0; r < eng->world; r++) {
    const float *f = all + (size_t)r * 3;
    uint64_t x = (uint64_t)f[0] | ((uint64_t)f[1] << 24) | ((uint64_t)f[2] << 48);
    if (x > *v) *v = x;
  }
done:
  free(all);
  free(counts);
  return st;
}

zrt_status zrt_engine_plan_first_boundary(zrt_engine *eng) {
  if (!eng->policy->shard_params || eng->plan_recording == 0) return ZRT_OK;
  int lost = eng->plan_recording < 0;
  eng->plan_recording = 0;
  zrt_status st = ZRT_OK;
  int64_t *numel = NULL;
  if (lost) {
    st = zrt_error(ZRT_ERR_OOM, "stage 3 memory plan: out of host memory recording the first "
                                "step's fetch order");
    goto done;
  }
  zrt_plan p = {.eng = eng, .ws = zrt_dtype_size(eng->dtype)};
  /* what stays from step to step: every category's peak but the two the
   * replay counts, whose lasting part is what they hold now (shards,
   * persistent copies, fp32 accumulators) */
  zrt_mem_stats d;
  ZRT_CHECK_GOTO(zrt_engine_memory(eng, ZRT_MEM_DEVICE, &d), st, done);
  zrt_coord_stats cs;
  zrt_coord_stats_get(eng->coord, &cs);
  uint64_t g16 = 0;
  for (int m = 0; m < eng->nmodules; m++)
    if (eng->modules[m].grad16) g16 += (uint64_t)eng->modules[m].padded * p.ws;
  for (int k = 0; k < ZRT_MEM_NCAT; k++)
    if (k != ZRT_MEM_PARAMS16 && k != ZRT_MEM_GRADS) p.fixed += d.peak[k];
  p.fixed += d.current[ZRT_MEM_PARAMS16] - (uint64_t)cs.live_elems * p.ws;
  p.fixed += d.current[ZRT_MEM_GRADS] - g16;
  ZRT_CHECK_GOTO(zrt_plan_agree_max(eng, &p.fixed), st, done);

  int n = ZRT_MAX(eng->nmodules, 1);
  numel = malloc((size_t)n * 2 * sizeof(int64_t));
  if (!numel) {
    st = zrt_error(ZRT_ERR_OOM, "stage 3 memory plan: out of host memory");
    goto done;
  }
  int64_t *padded = numel + n;
  for (int m = 0; m < eng->nmodules; m++) {
    numel[m] = eng->modules[m].numel;
    padded[m] = eng->modules[m].padded;
  }
  /* the coordinator's options exactly (coordinator_sim.h) */
  p.sim = (zrt_coord_sim){.nmodules = eng->nmodules,
                          .numel = numel,
                          .padded = padded,
                          .persist_threshold = eng->cfg->stage3_param_persistence_threshold,
                          .max_live_elems = eng->cfg->stage3_max_live_parameters,
                          .events = eng->plan_events,
                          .nevents = eng->plan_nevents};
  size_t cap = d.capacity;
  uint64_t target = cap ? zrt_memest_plan_bytes(cap) : UINT64_MAX;
  int64_t pf0 = eng->prefetch_elems, ru0 = eng->reuse_distance, pf = pf0, ru = ru0;
  uint64_t want = 0, got = 0;
  if (zrt_memest_fit_window(zrt_plan_peak, &p, target, &pf, &ru, &want, &got) != 0) {
    st =
        zrt_error(ZRT_ERR_OOM, "stage 3 memory plan: out of host memory replaying the fetch order");
    goto done;
  }
  char b1[32], b2[32], b3[32], b4[32];
  if (cap && got > cap) {
    char hint[512];
    zrt_engine_actckpt_hint(eng, d.peak[ZRT_MEM_ACTIVATIONS], got, hint, sizeof hint);
    st = zrt_error(ZRT_ERR_OOM,
                   "stage 3 memory plan: the first step's fetch order, replayed without prefetch "
                   "or reuse, needs %s per rank on the device (%s of it besides the gathered "
                   "copies and 16-bit gradients: model states, buckets and the program's "
                   "allocations at their peaks) and the device has %s; the steps to come cannot "
                   "be promised. Change: %sa smaller train_micro_batch_size_per_gpu or sequence, "
                   "more ranks, or a larger zrt.device_memory_limit",
                   zrt_format_size(got, b1, sizeof b1), zrt_format_size(p.fixed, b2, sizeof b2),
                   zrt_format_size(cap, b3, sizeof b3), hint);
    goto done;
  }
  if (pf != pf0 || ru != ru0) {
    zrt_coord_set_window(eng->coord, pf, ru);
    eng->prefetch_elems = pf;
    eng->reuse_distance = ru;
    char what[160] = "";
    if (ru != ru0)
      snprintf(what, sizeof what, "stage3_max_reuse_distance %lld -> %lld", (long long)ru0,
               (long long)ru);
    if (pf != pf0)
      snprintf(what + strlen(what), sizeof what - strlen(what),
               "%sstage3_prefetch_bucket_size %lld -> %lld", ru != ru0 ? ", " : "", (long long)pf0,
               (long long)pf);
    zrt_log0(ZRT_LOG_INFO,
             "stage 3 memory plan: the first step's fetch order replayed needs %s per rank from "
             "the second step on, over %s (90%% of the %s device); %s elements: %s per rank%s",
             zrt_format_size(want, b1, sizeof b1), zrt_format_size(target, b2, sizeof b2),
             zrt_format_size(cap, b3, sizeof b3), what, zrt_format_size(got, b4, sizeof b4),
             got > target ? " (above the 90% share, within the device: the first step's own peak)"
                          : "");
  } else {
    zrt_log(ZRT_LOG_DEBUG,
            "stage 3 memory plan: the first step's fetch order replayed needs %s per rank from "
            "the second step on",
            zrt_format_size(got, b1, sizeof b1));
  }
  eng->plan_device_bytes = got;
done:
  free(numel);
  zrt_engine_plan_free(eng);
  return st;
}
