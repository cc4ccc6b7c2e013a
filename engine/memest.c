/*
 * memest.c — the per-rank memory model (formulas in memest.h). Pure
 * arithmetic over the layout rules (sharding/layout.h) and the stage table
 * (sharding/stage_policy.h) the engine itself uses; every term mirrors one
 * allocation of engine.c / bucket.c / coordinator.c so that predictions of model
 * states equal measured peaks.
 */
#include "memest.h"

#include <stdlib.h>
#include <string.h>

#include "coordinator_sim.h"
#include "layout.h"

static int64_t zrt_memest_chunk(const zrt_memest_layout *l) {
  return zrt_layout_bucket_chunk_capped(l->reduce_bucket_size, l->world,
                                        l->max_module_padded / l->world, l->comm_bytes,
                                        l->device_capacity);
}

int64_t zrt_memest_offload_tile(const zrt_memest_layout *l) {
  int64_t t =
      ZRT_MIN(l->sub_group_size > 0 ? l->sub_group_size : ((int64_t)1 << 22), (int64_t)1 << 22);
  /* every module pads to a multiple of world, so the largest extent is exact */
  const zrt_stage_policy *pol = zrt_stage_policy_of(l->stage);
  int64_t ext = zrt_layout_master_extent(pol, l->max_module_padded,
                                         l->max_module_padded / ZRT_MAX(l->world, 1), 0)
                    .len;
  if (ext > 0) t = ZRT_MIN(t, ext);
  return ZRT_ALIGN_UP(ZRT_MAX(t, (int64_t)1), (int64_t)1024);
}

int64_t zrt_memest_param_stage(const zrt_memest_layout *l) {
  int64_t t = zrt_memest_offload_tile(l);
  if (l->param_buffer_size > 0) t = ZRT_MIN(t, l->param_buffer_size);
  return ZRT_ALIGN_UP(ZRT_MAX(t, (int64_t)1), (int64_t)2048);
}

void zrt_memest_predict(const zrt_memest_layout *l, zrt_memest_result *o) {
  memset(o, 0, sizeof *o);
  uint64_t P = (uint64_t)l->padded_total, N = (uint64_t)l->world, w = (uint64_t)l->dtype_bytes;
  uint64_t S = P / N; /* sum of per-module parts: exact because each module pads to N */
  const zrt_stage_policy *pol = zrt_stage_policy_of(l->stage);
  uint64_t ext = pol->shard_optimizer ? S : P;
  uint64_t big = (uint64_t)l->max_module_padded;
  uint64_t k = (uint64_t)l->optim_states;
  uint64_t mb = l->master_bytes > 0 ? (uint64_t)l->master_bytes : 4;
  uint64_t sb = l->state_bytes > 0 ? (uint64_t)l->state_bytes : 4;
  /* the master extent split by where each module's optimizer runs: ext_h
   * offloaded (all of it, or the modules past the Twin-Flow split), ext_d
   * on the device */
  uint64_t ext_d = pol->shard_params && l->offload_optimizer && !l->offload_nvme
                       ? (uint64_t)ZRT_MAX(l->twin_device_padded, (int64_t)0) / N
                       : 0;
  ext_d = ZRT_MIN(ext_d, ext);
  uint64_t ext_h = l->offload_optimizer ? ext - ext_d : 0;
  ext_d = ext - ext_h;
  if (l->offload_optimizer && l->offload_nvme) {
    uint64_t stage_buf = 4 * (uint64_t)zrt_memest_offload_tile(l) + 4096;
    o->host[ZRT_MEM_MASTER32] = 2 * stage_buf;
    o->host[ZRT_MEM_OPTIM_STATE] = 2 * k * stage_buf;
    o->nvme_bytes = 2 * (1 + k) * ZRT_ALIGN_UP(4 * ext, (uint64_t)4096);
  } else {
    o->host[ZRT_MEM_MASTER32] = mb * ext_h;
    o->host[ZRT_MEM_OPTIM_STATE] = sb * k * ext_h;
    o->device[ZRT_MEM_MASTER32] = mb * ext_d;
    o->device[ZRT_MEM_OPTIM_STATE] = sb * k * ext_d;
  }
  if (!pol->shard_params) {
    o->device[ZRT_MEM_PARAMS16] = w * P;
  } else {
    uint64_t np = P - (uint64_t)l->persistent_padded, live;
    if (l->live_known) {
      live = (uint64_t)ZRT_MAX(l->live.live, (int64_t)0);
    } else {
      /* saturating: the two windows may each be near INT64_MAX */
      uint64_t pf = (uint64_t)ZRT_MAX(l->prefetch_elems, (int64_t)0);
      uint64_t ru = (uint64_t)ZRT_MAX(l->reuse_elems, (int64_t)0);
      live = big + pf;
      live = ru > UINT64_MAX - live ? UINT64_MAX : live + ru;
      if (l->max_live_elems > 0 && live > (uint64_t)l->max_live_elems)
        live = ZRT_MAX(big, (uint64_t)l->max_live_elems);
    }
    if (live > np) live = np;
    o->device[ZRT_MEM_PARAMS16] = w * ((uint64_t)l->persistent_padded + live);
    if (l->offload_param && l->offload_param_nvme) {
      o->host[ZRT_MEM_PARAMS16] = 4 * (uint64_t)zrt_memest_param_stage(l) *
                                      (uint64_t)ZRT_MAX(l->param_buffer_count, (int64_t)1) +
                                  4096;
      o->nvme_bytes += 2 * ZRT_ALIGN_UP(w * S, (uint64_t)4096);
    } else if (l->offload_param) {
      o->host[ZRT_MEM_PARAMS16] = w * S;
    } else
      o->device[ZRT_MEM_PARAMS16] += w * S;
  }
  /* the accumulator (master extent, the master's dtype) lives with each
   * module's optimizer */
  int grad_host = zrt_layout_grad_acc_host(l->offload_optimizer);
  o->host[ZRT_MEM_GRADS] = mb * ext_h;
  uint64_t g16 = pol->reduce_at_boundary ? P : big, apart = 0;
  if (pol->shard_params && l->live_known) {
    /* the replay knows both transients and when they meet */
    g16 = (uint64_t)ZRT_MAX(l->live.grads, (int64_t)0);
    uint64_t both = (uint64_t)ZRT_MAX(l->live.both, (int64_t)0);
    uint64_t sum = (uint64_t)ZRT_MAX(l->live.live, (int64_t)0) + g16;
    apart = w * (sum > both ? sum - both : 0);
  }
  /* one rank at stages 0/1 with the optimizer on the device: the step
   * reads the working-dtype gradients, no accumulator (engine_step.c's
   * zrt_engine_grad_direct) */
  int direct = pol->reduce_at_boundary && l->world == 1 && !grad_host && mb == 4 && !l->comm_rounds;
  o->device[ZRT_MEM_GRADS] = (direct ? 0 : mb * ext_d) + w * g16;
  uint64_t chunk = (uint64_t)zrt_memest_chunk(l), cb = (uint64_t)l->comm_bytes;
  o->device[ZRT_MEM_COMM] = 2 * (N + 1) * chunk * cb;
  o->device[ZRT_MEM_ACTIVATIONS] = l->activation_bytes;
  {
    uint64_t ad, ah;
    zrt_memest_actckpt(l->actckpt_blocks, l->actckpt_bytes, l->actckpt_cpu, &ad, &ah);
    o->device[ZRT_MEM_ACTIVATIONS] += ad;
    o->host[ZRT_MEM_ACTIVATIONS] += ah + l->program_host_bytes;
  }
  if (l->offload_optimizer) o->host[ZRT_MEM_COMM] = 4 * 4 * (uint64_t)zrt_memest_offload_tile(l);
  if (grad_host) /* the buckets' two host staging slots */
    o->host[ZRT_MEM_COMM] +=
        2 * zrt_layout_host_stage_bytes(zrt_layout_bucket_host_stage(pol, (int64_t)chunk, l->world),
                                        cb);
  o->model_states = o->device[ZRT_MEM_PARAMS16] + o->device[ZRT_MEM_GRADS] +
                    o->device[ZRT_MEM_MASTER32] + o->device[ZRT_MEM_OPTIM_STATE];
  for (int k = 0; k < ZRT_MEM_NCAT; k++) {
    o->device_total += o->device[k];
    o->host_total += o->host[k];
  }
  o->device_total -= apart;
  o->model_states -= apart;
}

void zrt_memest_actckpt(int64_t n, uint64_t bytes, int cpu, uint64_t *device, uint64_t *host) {
  uint64_t nb = n > 0 ? (uint64_t)n : 0;
  *device = (cpu ? ZRT_MIN(nb, (uint64_t)ZRT_MEMEST_ACTCKPT_SLOTS) : nb) * bytes;
  *host = cpu ? nb * bytes : 0;
}

uint64_t zrt_memest_plan_bytes(uint64_t capacity) {
  return capacity / ZRT_MEMEST_PLAN_DEN * ZRT_MEMEST_PLAN_NUM +
         capacity % ZRT_MEMEST_PLAN_DEN * ZRT_MEMEST_PLAN_NUM / ZRT_MEMEST_PLAN_DEN;
}

int64_t zrt_memest_fit_reuse(const zrt_memest_layout *lay, uint64_t capacity, int64_t want) {
  if (!zrt_stage_policy_of(lay->stage)->shard_params || capacity == 0 || want <= 0) return want;
  zrt_memest_layout l0 = *lay;
  l0.reuse_elems = 0;
  zrt_memest_result r0;
  zrt_memest_predict(&l0, &r0);
  uint64_t room = zrt_memest_plan_bytes(capacity);
  uint64_t spare = room > r0.device_total ? room - r0.device_total : 0;
  int64_t fit = (int64_t)(spare / (uint64_t)ZRT_MAX(lay->dtype_bytes, 1));
  return fit < want ? fit : want;
}

int zrt_memest_deepspeed(int stage, double tp, double L, int g, int n, int oo, int op,
                         uint64_t *cpu, uint64_t *gpu) {
  double G = (double)g * n, c, d;
  if (stage <= 0) return 0;
  if (stage < 3) {
    d = oo ? 2 * tp : 4 * tp + (double)(int64_t)(16 * tp / G);
    c = oo ? tp * ZRT_MAX(4 * G, 16.0) * 1.5 : tp * 4 * g * 1.5;
  } else {
    double per = 1.0 / n;
    d = 4 * L;
    if (oo && op) {
      c = tp * 18 * per * 1.5;
    } else if (oo) {
      d += (double)(int64_t)(2 * tp / G);
      c = tp * 16 * per * 1.5;
    } else {
      d += (double)(int64_t)(18 * tp / G);
      c = L * 4 * g * 1.5;
    }
  }
  *cpu = (uint64_t)c;
  *gpu = (uint64_t)d;
  return 1;
}

void zrt_memest_program_layout(const zrt_memest_program *p, int world, int64_t persist_threshold,
                               zrt_memest_layout *lay) {
  lay->world = world;
  lay->padded_total = lay->max_module_padded = lay->persistent_padded = 0;
  for (int m = 0; m < p->nmodules; m++) {
    int64_t pad = zrt_layout_padded(p->numel[m], world);
    lay->padded_total += pad;
    lay->max_module_padded = ZRT_MAX(lay->max_module_padded, pad);
    if (p->numel[m] <= persist_threshold) lay->persistent_padded += pad;
  }
}

/* Module i's elements per rank, for zrt_layout_twin_split. */
typedef struct zrt_memest_units {
  const zrt_memest_program *p;
  int world;
} zrt_memest_units;

static int64_t zrt_memest_unit(const void *arg, int i) {
  const zrt_memest_units *u = arg;
  return zrt_layout_padded(u->p->numel[i], u->world) / u->world;
}

int64_t zrt_memest_program_twin_device(const zrt_memest_program *p, int world,
                                       int64_t sub_group_size, double ratio, int *groups,
                                       int *device_groups) {
  zrt_memest_units u = {.p = p, .world = world};
  int split = zrt_layout_twin_split(p->nmodules, zrt_memest_unit, &u, sub_group_size, ratio, groups,
                                    device_groups);
  int64_t dev = 0;
  for (int i = 0; i < split; i++) dev += zrt_memest_unit(&u, i) * world;
  return dev;
}

int zrt_memest_program_live(const zrt_memest_program *p, const zrt_memest_layout *lay,
                            int64_t persist_threshold, zrt_coord_sim_peaks *out) {
  int64_t *padded = malloc((size_t)ZRT_MAX(p->nmodules, 1) * sizeof(int64_t));
  if (!padded) return -1;
  for (int m = 0; m < p->nmodules; m++) padded[m] = zrt_layout_padded(p->numel[m], lay->world);
  zrt_coord_sim s = {.nmodules = p->nmodules,
                     .numel = p->numel,
                     .padded = padded,
                     .persist_threshold = persist_threshold,
                     .prefetch_elems = lay->prefetch_elems,
                     .max_live_elems =
                         lay->max_live_elems > 0 ? lay->max_live_elems : INT64_MAX / 4,
                     .reuse_distance = lay->reuse_elems,
                     .events = p->events,
                     .nevents = p->nevents};
  int rc = zrt_coord_sim_run(&s, out);
  free(padded);
  return rc;
}

/* The largest value in [0, bad) whose peak fits (0 fits), bisected: which
 * = 0 varies the reuse distance at prefetch other, 1 the prefetch at reuse
 * other. Every value returned was replayed and fits. */
static int64_t zrt_memest_window_search(zrt_memest_peak_fn peak, void *ctx, int which,
                                        int64_t other, int64_t bad, uint64_t target) {
  int64_t lo = 0, hi = bad;
  while (hi - lo > 1) {
    int64_t mid = lo + (hi - lo) / 2;
    uint64_t pk = which ? peak(ctx, mid, other) : peak(ctx, other, mid);
    if (pk != 0 && pk <= target)
      lo = mid;
    else
      hi = mid;
  }
  return lo;
}

int zrt_memest_fit_window(zrt_memest_peak_fn peak, void *ctx, uint64_t target, int64_t *prefetch,
                          int64_t *reuse, uint64_t *want, uint64_t *got) {
  int64_t pf0 = ZRT_MAX(*prefetch, (int64_t)0), ru0 = ZRT_MAX(*reuse, (int64_t)0);
  int64_t pf = pf0, ru = ru0;
  *want = *got = peak(ctx, pf0, ru0);
  if (*want == 0) return -1;
  if (*want <= target) return 0;
  uint64_t no_reuse = ru0 > 0 ? peak(ctx, pf0, 0) : *want;
  if (no_reuse != 0 && no_reuse <= target) {
    ru = zrt_memest_window_search(peak, ctx, 0, pf0, ru0, target);
  } else {
    ru = 0;
    uint64_t none = pf0 > 0 ? peak(ctx, 0, 0) : no_reuse;
    pf = none != 0 && none <= target ? zrt_memest_window_search(peak, ctx, 1, 0, pf0, target) : 0;
  }
  *got = peak(ctx, pf, ru);
  *prefetch = pf;
  *reuse = ru;
  return *got == 0 ? -1 : 0;
}

typedef struct zrt_memest_plan_ctx {
  const zrt_memest_program *p;
  zrt_memest_layout lay;
  int64_t persist;
} zrt_memest_plan_ctx;

static uint64_t zrt_memest_program_peak(void *arg, int64_t prefetch, int64_t reuse) {
  zrt_memest_plan_ctx *c = arg;
  zrt_memest_layout l = c->lay;
  l.prefetch_elems = prefetch;
  l.reuse_elems = reuse;
  if (zrt_memest_program_live(c->p, &l, c->persist, &l.live) != 0) return 0;
  l.live_known = 1;
  zrt_memest_result r;
  zrt_memest_predict(&l, &r);
  return ZRT_MAX(r.device_total, (uint64_t)1);
}

int zrt_memest_program_plan(const zrt_memest_program *p, zrt_memest_layout *lay,
                            int64_t persist_threshold, uint64_t capacity) {
  zrt_memest_plan_ctx c = {.p = p, .lay = *lay, .persist = persist_threshold};
  if (capacity) {
    uint64_t want, got;
    int64_t pf = lay->prefetch_elems, ru = lay->reuse_elems;
    if (zrt_memest_fit_window(zrt_memest_program_peak, &c, zrt_memest_plan_bytes(capacity), &pf,
                              &ru, &want, &got) != 0)
      return -1;
    lay->prefetch_elems = pf;
    lay->reuse_elems = ru;
  }
  if (zrt_memest_program_live(p, lay, persist_threshold, &lay->live) != 0) return -1;
  lay->live_known = 1;
  return 0;
}
