/*
 * engine_offload.c — the engine's side of ZeRO-Offload and ZeRO-Infinity:
 * creates the NUMA-pinned host pool, the offload pipe and the parameter
 * swapper at build, marks where each module's optimizer state, gradient
 * accumulator and 16-bit shard live, and runs the offloaded optimizer step.
 * How the files, staging and write-backs work: docs/offload.md, "The
 * engine's side (engine_offload.c)".
 *
 * Where the pipe runs in stream mode (the twin) a step is queued, not done,
 * when zrt_engine_apply returns: the host touches pipe-held memory (host
 * masters and states, host gradient shards) only through the calls here,
 * which synchronize the pipe first (outside the step path) or queue the
 * touch in stream order (zrt_engine_host_set, on the step path).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dtype.h"

#include "engine_internal.h"
#include "memest.h"

/* nvme_path must be an existing, writable directory: checked here so the
 * error names the config key rather than a swap file. which: "optimizer" or
 * "param"; what: what lives there. */
static zrt_status zrt_engine_nvme_check_path(const char *path, const char *which,
                                             const char *what) {
  struct stat sb;
  const char *why = NULL;
  if (!path || !*path)
    why = "is not set";
  else if (stat(path, &sb) != 0)
    why = strerror(errno);
  else if (!S_ISDIR(sb.st_mode))
    why = "is not a directory";
  else if (access(path, W_OK | X_OK) != 0)
    why = "is not writable";
  if (!why) return ZRT_OK;
  return zrt_error(ZRT_ERR_CONFIG,
                   "zero_optimization.offload_%s.nvme_path '%s': %s — with "
                   "offload_%s.device nvme %s lives in swap files there; "
                   "create the directory on the NVMe drive (writable by this user) or set "
                   "nvme_path to an existing one",
                   which, path ? path : "", why, which, what);
}

/* Master elements [e0, e0+n) of the file-set order into dst: from the
 * optimizer swap files, or gathered from the host-pool masters (the
 * parameter swapper's source). */
static zrt_status zrt_engine_master_span(void *arg, int64_t e0, int64_t n, float *dst) {
  zrt_engine *eng = arg;
  ZRT_CHECK(zrt_offload_pipe_sync(eng->offload)); /* a queued step writes the masters */
  if (eng->offload_opt == ZRT_OFFLOAD_NVME)
    return zrt_offload_pipe_nvme_range(eng->offload, 0, 0, (size_t)e0, (size_t)n, dst);
  int copied = 0;
  for (int m = 0; m < eng->nmodules; m++) {
    const zrt_module_entry *me = &eng->modules[m];
    int64_t off, len;
    zrt_engine_master_extent(eng, m, &off, &len);
    int64_t lo = ZRT_MAX(e0, me->nvme_off), hi = ZRT_MIN(e0 + n, me->nvme_off + len);
    if (lo >= hi) continue;
    if (me->optim_host) /* fp32 or bf16 masters, widened exactly */
      zrt_dtype_convert_host(
          dst + (lo - e0), ZRT_F32,
          zrt_engine_at(me->master, (size_t)(lo - me->nvme_off), eng->master_dtype),
          eng->master_dtype, (size_t)(hi - lo));
    else { /* offload_param nvme alone: the masters are device memory */
      ZRT_CHECK(zrt_backend_memcpy(eng->backend, dst + (lo - e0), me->master + (lo - me->nvme_off),
                                   (size_t)(hi - lo) * 4, ZRT_COPY_D2H, NULL));
      copied = 1;
    }
  }
  /* dst is the swapper's staging, pinned when the host pool is: then the
   * copies are asynchronous (CUDA's cudaMemcpyAsync to pinned memory, the
   * twin alike) and the caller reads dst next */
  if (copied) ZRT_CHECK(zrt_backend_synchronize(eng->backend, NULL));
  return ZRT_OK;
}

zrt_status zrt_engine_host16_from_master(zrt_engine *eng, const float *master, void *dst16,
                                         int64_t n) {
  const int64_t chunk = 1 << 20;
  size_t ws = zrt_dtype_size(eng->dtype);
  /* transient staging of one chunk, not model state */
  float *tmp = malloc((size_t)ZRT_MAX(ZRT_MIN(chunk, n), (int64_t)1) * sizeof(float));
  if (!tmp) return zrt_error(ZRT_ERR_OOM, "engine: out of host memory writing a host 16-bit shard");
  /* each D2H copy is queued on the backend's stream behind the step's
   * writes of the masters (device optimizer steps run there; an offload
   * pipe orders that stream after its run) and returns complete (pageable
   * destination); the first one also finds done every earlier read of
   * dst16 that compute consumed (a fetch's H2D copy is waited for on that
   * stream before its module's compute): no synchronize first (the mutation
   * run found the one here surviving; docs/engine.md, "Mutation run") */
  zrt_status st = ZRT_OK;
  for (int64_t t0 = 0; t0 < n && st == ZRT_OK; t0 += chunk) {
    int64_t k = ZRT_MIN(chunk, n - t0);
    st = zrt_backend_memcpy(eng->backend, tmp, master + t0, (size_t)k * 4, ZRT_COPY_D2H, NULL);
    if (st != ZRT_OK) break;
    /* the same round-to-nearest-even as the backends' optimizer write-back */
    for (int64_t i = 0; i < k; i++)
      zrt_store_f((char *)dst16 + (size_t)t0 * ws, eng->dtype, (size_t)i, tmp[i]);
  }
  free(tmp);
  return st;
}

static int64_t zrt_engine_module_part(const void *arg, int i) {
  return ((const zrt_engine *)arg)->modules[i].part;
}

int zrt_engine_twin_split(const zrt_engine *eng) {
  double r = eng->cfg->offload_optimizer.ratio;
  if (!eng->policy->shard_params || r >= 1.0) return 0;
  return zrt_layout_twin_split(eng->nmodules, zrt_engine_module_part, eng, eng->cfg->sub_group_size,
                               r, NULL, NULL);
}

int64_t zrt_engine_twin_device_padded(const zrt_engine *eng) {
  int64_t dev = 0;
  for (int m = 0, split = zrt_engine_twin_split(eng); m < split; m++) dev += eng->modules[m].padded;
  return dev;
}

/* offload_optimizer.ratio (Twin-Flow) against the resolved stage and the
 * other offload settings: ignored below stage 3 (as DeepSpeed does),
 * refused with nvme or offload_param, and ratio 0 turns the optimizer
 * offload off (every sub-group on the device). */
static zrt_status zrt_engine_twin_resolve(zrt_engine *eng) {
  const zrt_cfg *c = eng->cfg;
  double r = c->offload_optimizer.ratio;
  if (eng->offload_opt == ZRT_OFFLOAD_NONE || r >= 1.0) return ZRT_OK;
  if (!eng->policy->shard_params) {
    zrt_log0(ZRT_LOG_WARN,
             "zero_optimization.offload_optimizer.ratio %g is ignored at stage %d (Twin-Flow "
             "splits the optimizer only at stage 3, as in DeepSpeed): the whole optimizer is "
             "offloaded; set zero_optimization.stage 3 to split it, or drop the ratio",
             r, eng->stage);
    return ZRT_OK;
  }
  /* the refusals are config/'s rule, the one `zrt config check` applies */
  char why[600];
  if (zrt_config_offload_rule(eng->stage, eng->offload_opt, eng->offload_par, r, why, sizeof why))
    return zrt_error(ZRT_ERR_CONFIG, "%s", why);
  int G, first;
  int split = zrt_layout_twin_split(eng->nmodules, zrt_engine_module_part, eng, c->sub_group_size,
                                    r, &G, &first);
  if (split == eng->nmodules) {
    eng->offload_opt = ZRT_OFFLOAD_NONE;
    zrt_log0(ZRT_LOG_INFO,
             "offload: Twin-Flow ratio %g: all %d optimizer sub-groups stay on the device (no "
             "optimizer offload)",
             r, G);
  } else {
    char dev[64] = "none stepped on the device";
    if (split > 0) snprintf(dev, sizeof dev, "modules 0..%d stepped on the device", split - 1);
    zrt_log0(ZRT_LOG_INFO,
             "offload: Twin-Flow ratio %g: %d of %d optimizer sub-groups (sub_group_size %lld) "
             "on the CPU: modules %d..%d in host memory, %s",
             r, G - first, G, (long long)c->sub_group_size, split, eng->nmodules - 1, dev);
  }
  return ZRT_OK;
}

zrt_status zrt_engine_offload_setup(zrt_engine *eng) {
  const zrt_cfg *c = eng->cfg;
  ZRT_CHECK(zrt_engine_twin_resolve(eng));
  int oo = eng->offload_opt != ZRT_OFFLOAD_NONE;
  int op = eng->offload_par != ZRT_OFFLOAD_NONE;
  if (!oo && !op) return ZRT_OK;
  char why[600]; /* config/'s rule, the one `zrt config check` applies, at the resolved stage */
  if (zrt_config_offload_rule(eng->stage, eng->offload_opt, eng->offload_par,
                              c->offload_optimizer.ratio, why, sizeof why))
    return zrt_error(ZRT_ERR_CONFIG, "%s", why);
  int pnvme = op && eng->offload_par == ZRT_OFFLOAD_NVME;
  if (pnvme)
    ZRT_CHECK(zrt_engine_nvme_check_path(c->offload_param.nvme_path, "param",
                                         "the 16-bit parameter shard"));
  zrt_hostpool_opts ho = {.numa_node = c->numa_node,
                          .pin = c->offload_optimizer.pin_memory || c->offload_param.pin_memory,
                          .allow_fallback = c->pin_memory_fallback,
                          .capacity = 0};
  ZRT_CHECK(zrt_hostpool_create(&ho, eng->backend, &eng->hostpool));
  eng->host_pool = zrt_hostpool_pool(eng->hostpool);
  int nvme = eng->offload_opt == ZRT_OFFLOAD_NVME;
  zrt_memest_layout lay = {0};
  lay.world = eng->world;
  lay.stage = eng->stage;
  lay.sub_group_size = c->sub_group_size;
  for (int m = 0; m < eng->nmodules; m++)
    lay.max_module_padded = ZRT_MAX(lay.max_module_padded, eng->modules[m].padded);
  char prefix[32];
  snprintf(prefix, sizeof prefix, "zrt_rank%d", eng->rank);
  zrt_offload_opts oo_opts = {.tile_elems = (size_t)zrt_memest_offload_tile(&lay),
                              .nvme = nvme,
                              .nvme_path = c->offload_optimizer.nvme_path,
                              .buffer_count = (int)c->offload_optimizer.buffer_count,
                              .nvme_prefix = prefix};
  if (nvme)
    ZRT_CHECK(zrt_engine_nvme_check_path(c->offload_optimizer.nvme_path, "optimizer",
                                         "the optimizer state"));
  /* offload_param alone (DeepSpeed supports it): the optimizer stays on the
   * device, no pipe; the steps write the host (or NVMe) 16-bit shard from
   * the device masters (zrt_engine_host16_from_master, master_span) */
  if (oo) {
    ZRT_CHECK(zrt_offload_pipe_create(eng->backend, eng->hostpool, &oo_opts, &eng->offload));
    ZRT_CHECK(zrt_offload_pipe_set_state_dtypes(eng->offload, eng->master_dtype, eng->state_dtype));
  }
  /* offload_param cpu: the shards the optimizer writes are host memory */
  ZRT_CHECK(zrt_offload_pipe_set_param16_host(eng->offload, op && !pnvme));
  int64_t total = 0, pieces = 0;
  int split = zrt_engine_twin_split(eng); /* Twin-Flow: modules before it stay on the device */
  for (int m = 0; m < eng->nmodules; m++) {
    zrt_module_entry *me = &eng->modules[m];
    me->optim_host = oo && !nvme && m >= split;
    me->optim_nvme = nvme;
    me->shard16_host = op && !pnvme;
    me->shard16_nvme = pnvme;
    int64_t off, len;
    zrt_engine_master_extent(eng, m, &off, &len);
    me->nvme_off = total;
    total += len;
    for (int i = 0; i < me->nparams; i++) {
      const zrt_param_entry *p = &eng->params[me->params[i]];
      if (ZRT_MAX(p->offset, off) < ZRT_MIN(p->offset + p->numel, off + len)) pieces++;
    }
  }
  if (pnvme) {
    char pprefix[48];
    snprintf(pprefix, sizeof pprefix, "zrt_rank%d_param", eng->rank);
    lay.param_buffer_size = c->offload_param.buffer_size;
    lay.param_buffer_count = c->offload_param.buffer_count;
    int64_t *foff = malloc((size_t)ZRT_MAX(eng->nmodules, 1) * 2 * sizeof(int64_t));
    if (!foff) return zrt_error(ZRT_ERR_OOM, "offload: out of host memory");
    int64_t *flen = foff + ZRT_MAX(eng->nmodules, 1);
    for (int m = 0; m < eng->nmodules; m++) {
      foff[m] = eng->modules[m].nvme_off;
      flen[m] = eng->modules[m].part;
    }
    zrt_pswap_opts po = {.nvme_path = c->offload_param.nvme_path,
                         .prefix = pprefix,
                         .dtype = eng->dtype,
                         .nslots = (int)ZRT_MAX(c->offload_param.buffer_count, 1),
                         .stage_elems = zrt_memest_param_stage(&lay),
                         .nmodules = eng->nmodules,
                         .file_off = foff,
                         .len = flen,
                         .source = zrt_engine_master_span,
                         .source_arg = eng};
    zrt_status st = zrt_pswap_create(eng->backend, eng->host_pool, &po, &eng->pswap);
    free(foff);
    if (st != ZRT_OK)
      return zrt_error_context(st, "zero_optimization.offload_param.device nvme (nvme_path '%s'): ",
                               c->offload_param.nvme_path);
    char b[32];
    zrt_log(ZRT_LOG_INFO,
            "offload: 16-bit parameter shards in an NVMe file under %s (%s on disk for this "
            "rank), %d staging buffers of %lld elements",
            c->offload_param.nvme_path,
            zrt_format_size(zrt_nvme_disk_bytes(zrt_pswap_nvme(eng->pswap)), b, sizeof b),
            zrt_pswap_nslots(eng->pswap), (long long)po.stage_elems);
  }
  const char *pwhere =
      pnvme ? ", 16-bit parameter shards in NVMe" : ", 16-bit parameter shards in host memory";
  if (nvme) {
    eng->nvme_elems = total;
    eng->nvme_segs = calloc((size_t)ZRT_MAX(pieces, 1), sizeof *eng->nvme_segs);
    if (!eng->nvme_segs) return zrt_error(ZRT_ERR_OOM, "offload: out of host memory");
    zrt_status st =
        zrt_offload_pipe_nvme_open(eng->offload, (size_t)total, zrt_engine_optim_states(eng));
    if (st != ZRT_OK)
      return zrt_error_context(st,
                               "zero_optimization.offload_optimizer.device nvme (nvme_path "
                               "'%s'): ",
                               c->offload_optimizer.nvme_path);
    char b[32];
    zrt_log(ZRT_LOG_INFO,
            "offload: optimizer state in NVMe files under %s (%s on disk for this rank), "
            "staging in host memory (NUMA node %d, %s)%s",
            c->offload_optimizer.nvme_path,
            zrt_format_size(zrt_offload_pipe_nvme_disk_bytes(eng->offload), b, sizeof b),
            zrt_hostpool_node(eng->hostpool),
            zrt_hostpool_pinned(eng->hostpool) ? "pinned" : "unpinned", op ? pwhere : "");
    return ZRT_OK;
  }
  if (!oo) {
    zrt_log(ZRT_LOG_INFO,
            "offload: 16-bit parameter shards in %s (NUMA node %d, %s); optimizer state, fp32 "
            "masters and gradients on the device (offload_param without offload_optimizer)",
            pnvme ? "NVMe" : "host memory", zrt_hostpool_node(eng->hostpool),
            zrt_hostpool_pinned(eng->hostpool) ? "pinned" : "unpinned");
    return ZRT_OK;
  }
  zrt_log(ZRT_LOG_INFO, "offload: optimizer state in host memory (NUMA node %d, %s)%s",
          zrt_hostpool_node(eng->hostpool),
          zrt_hostpool_pinned(eng->hostpool) ? "pinned" : "unpinned",
          op ? (pnvme ? pwhere : ", 16-bit parameter shards too") : "");
  return ZRT_OK;
}

int zrt_engine_optim_states(const zrt_engine *eng) {
  return zrt_optim_nstates(eng->cfg->optimizer_type, (float)eng->cfg->momentum);
}

zrt_status zrt_engine_offload_built(zrt_engine *eng) {
  if (eng->offload_opt == ZRT_OFFLOAD_NVME && eng->offload)
    ZRT_CHECK(zrt_offload_pipe_nvme_sync(eng->offload));
  if (eng->pswap) ZRT_CHECK(zrt_engine_param_nvme_write(eng));
  return ZRT_OK;
}

zrt_status zrt_engine_param_nvme_write(zrt_engine *eng) {
  /* queued reads are of the generation this replaces */
  zrt_coord_drop_reads(eng->coord);
  return zrt_pswap_write(eng->pswap);
}

zrt_status zrt_engine_param_nvme_read(zrt_engine *eng, int module, void *dst) {
  return zrt_pswap_read(eng->pswap, module, dst);
}

zrt_status zrt_engine_state_io(zrt_engine *eng, int module, zrt_state_array which, zrt_io_dir dir,
                               float *buf) {
  int write = dir == ZRT_IO_WRITE;
  if ((int)which < 0 || (int)which > zrt_engine_optim_states(eng))
    return zrt_error(ZRT_ERR_INVALID_ARG,
                     "engine: optimizer state %d does not exist for this optimizer", (int)which);
  zrt_module_entry *me = &eng->modules[module];
  int64_t off, len;
  zrt_engine_master_extent(eng, module, &off, &len);
  ZRT_CHECK(zrt_offload_pipe_sync(eng->offload)); /* a queued step reads and writes them */
  if (me->optim_nvme)
    return zrt_offload_pipe_nvme_range(eng->offload, (int)which, write, (size_t)me->nvme_off,
                                       (size_t)len, buf);
  float *p = which == ZRT_STATE_MASTER ? me->master : which == ZRT_STATE_S1 ? me->s1 : me->s2;
  zrt_dtype dt = which == ZRT_STATE_MASTER ? eng->master_dtype : eng->state_dtype;
  if (dt != ZRT_F32) {
    /* bf16 arrays (host memory, by the config rule): widened exactly on a
     * read, rounded to nearest even on a write */
    if (!me->optim_host)
      return zrt_error(ZRT_ERR_INTERNAL, "engine: bf16 state of '%s' outside host memory",
                       me->name);
    if (write)
      zrt_dtype_convert_host(p, dt, buf, ZRT_F32, (size_t)len);
    else
      zrt_dtype_convert_host(buf, ZRT_F32, p, dt, (size_t)len);
    return ZRT_OK;
  }
  if (write)
    return zrt_backend_memcpy(eng->backend, p, buf, (size_t)len * 4,
                              me->optim_host ? ZRT_COPY_H2H : ZRT_COPY_H2D, NULL);
  return zrt_backend_memcpy(eng->backend, buf, p, (size_t)len * 4,
                            me->optim_host ? ZRT_COPY_H2H : ZRT_COPY_D2H, NULL);
}

zrt_status zrt_engine_nvme_refresh_module(zrt_engine *eng, int module) {
  zrt_module_entry *me = &eng->modules[module];
  size_t ws = zrt_dtype_size(eng->dtype);
  int64_t off, len;
  zrt_engine_master_extent(eng, module, &off, &len);
  if (me->shard16_nvme) return zrt_engine_param_nvme_write(eng);
  int sh = eng->policy->shard_params;
  char *dst = sh ? (char *)me->shard16 : (char *)me->full16 + (size_t)off * ws;
  int host = sh && me->shard16_host;
  const int64_t chunk = 1 << 20;
  /* transient staging of one chunk, not model state */
  float *tmp = malloc((size_t)ZRT_MIN(chunk, len) * sizeof(float));
  if (!tmp) return zrt_error(ZRT_ERR_OOM, "engine: out of host memory refreshing '%s'", me->name);
  zrt_status st = ZRT_OK;
  for (int64_t t0 = 0; t0 < len; t0 += chunk) {
    int64_t n = ZRT_MIN(chunk, len - t0);
    ZRT_CHECK_GOTO(zrt_offload_pipe_nvme_range(eng->offload, 0, 0, (size_t)(me->nvme_off + t0),
                                               (size_t)n, tmp),
                   st, done);
    /* in place: 16-bit element i lands at or before float i */
    for (int64_t i = 0; i < n; i++) zrt_store_f(tmp, eng->dtype, (size_t)i, tmp[i]);
    if (host)
      memcpy(dst + (size_t)t0 * ws, tmp, (size_t)n * ws);
    else
      ZRT_CHECK_GOTO(zrt_backend_memcpy(eng->backend, dst + (size_t)t0 * ws, tmp, (size_t)n * ws,
                                        ZRT_COPY_H2D, NULL),
                     st, done);
  }
done:
  free(tmp);
  return st;
}

/* Appends one piece as a segment of the NVMe step (arg: the no-decay
 * hyper-parameters the NO_DECAY pieces point at). */
static zrt_status zrt_engine_nvme_segment(zrt_engine *eng, const zrt_engine_piece *pc, void *arg) {
  zrt_module_entry *me = &eng->modules[pc->module];
  eng->nvme_segs[eng->nvme_nsegs++] = (zrt_offload_segment){
      .file_off = (size_t)me->nvme_off + pc->k,
      .n = pc->n,
      .grad_dev = me->grad_acc + pc->k,
      .grad_host = me->grad_host,
      .param16_dev = pc->w16,
      .hp = (pc->param->flags & ZRT_PARAM_NO_DECAY) ? (const zrt_optim_hparams *)arg : NULL,
  };
  return ZRT_OK;
}

zrt_status zrt_engine_offload_step_nvme(zrt_engine *eng, const zrt_optim_hparams *hp) {
  zrt_optim_hparams nd = *hp;
  nd.weight_decay = 0;
  eng->nvme_nsegs = 0;
  for (int m = 0; m < eng->nmodules; m++)
    ZRT_CHECK(zrt_engine_each_piece(eng, m, zrt_engine_nvme_segment, &nd));
  return zrt_offload_pipe_nvme_step_segments(eng->offload, hp, eng->nvme_segs, eng->nvme_nsegs,
                                             ZRT_F32, eng->dtype);
}

zrt_status zrt_engine_offload_step(zrt_engine *eng, const zrt_optim_hparams *hp, float *master,
                                   float *s1, float *s2, const float *grad, void *param16,
                                   size_t n) {
  return zrt_offload_pipe_step(eng->offload, hp, master, s1, s2, grad, eng->master_dtype, param16,
                               eng->dtype, n);
}

/* Host memory written in stream order (zrt_engine_host_set). */
typedef struct zrt_engine_host_set_args {
  void *dst;
  size_t bytes;
  int fill; /* 1: memset(dst, 0); 0: copy val */
  unsigned char val[16];
} zrt_engine_host_set_args;

static zrt_status zrt_engine_host_set_fn(void *arg) {
  const zrt_engine_host_set_args *a = arg;
  if (a->fill)
    memset(a->dst, 0, a->bytes);
  else
    memcpy(a->dst, a->val, a->bytes);
  return ZRT_OK;
}

zrt_status zrt_engine_host_set(zrt_engine *eng, void *dst, const void *val, size_t bytes) {
  zrt_engine_host_set_args a = {.dst = dst, .bytes = bytes, .fill = val == NULL};
  if (val) {
    if (bytes > sizeof a.val)
      return zrt_error(ZRT_ERR_INTERNAL, "zrt_engine_host_set: %zu value bytes (at most %zu)",
                       bytes, sizeof a.val);
    memcpy(a.val, val, bytes);
  }
  /* where host functions are stream ops the buckets' additions and the
   * offload pipe may still use dst: behind them on the backend's stream
   * (which the drain and the pipe ordered after both) */
  if (zrt_backend_host_fn_async(eng->backend))
    return zrt_backend_enqueue_host_named(eng->backend, zrt_engine_host_set_fn, &a, sizeof a, NULL,
                                          val ? "host store" : "host memset");
  return zrt_engine_host_set_fn(&a);
}

void zrt_engine_offload_free(zrt_engine *eng, void *host_ptr) {
  if (!host_ptr || !eng->host_pool) return;
  /* queued work (the pipe, the boundary's zeroing, the buckets' additions)
   * may still use host memory: the host waits once before the first free
   * (teardown, after the last step) */
  if (zrt_backend_host_fn_async(eng->backend) && !eng->host_freeing) {
    eng->host_freeing = 1;
    if (zrt_backend_synchronize(eng->backend, NULL) != ZRT_OK)
      zrt_log(ZRT_LOG_WARN, "offload: queued work failed before teardown: %s", zrt_last_error());
  }
  zrt_pool_free(eng->host_pool, host_ptr);
}

void zrt_engine_offload_teardown(zrt_engine *eng) {
  zrt_pswap_destroy(eng->pswap);
  eng->pswap = NULL;
  free(eng->nvme_segs);
  eng->nvme_segs = NULL;
  zrt_offload_pipe_destroy(eng->offload);
  eng->offload = NULL;
  zrt_hostpool_destroy(eng->hostpool);
  eng->hostpool = NULL;
  eng->host_pool = NULL;
}
