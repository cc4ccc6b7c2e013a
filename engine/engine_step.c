/*
 * engine_step.c — zrt_engine_step: micro-step bookkeeping and, at the
 * accumulation boundary, the optimizer step: drain the reductions (stage
 * 0/1 reduce here), one pass per shard for sum of squares + overflow, ONE
 * all-reduce agreeing on {sumsq, nonfinite, loss} and the verdict from it
 * (amp/gradstats.h: norm, overflow, skip, clip), loss-scaler update, the
 * fused unscale * clip * optimizer update of the fp32 master shard (split
 * by parameter so NO_DECAY params get weight_decay 0), the write-back of the
 * 16-bit params (stage 1/2 all-gather), scheduler step, metrics, and the
 * boundary's share of the step breakdown (engine_timing.c).
 * zrt_engine_step is the sequence: accumulate (every micro-step), then at
 * the boundary the phases reduce, verdict, apply (with the non-finite
 * policy) and close, each one static function below.
 *
 * Invariants: every rank takes the same branch (skip or not) because the
 * decision uses only all-reduced values; the scheduler and the optimizer's
 * step count advance only on applied steps; grad_acc is zero at the start of
 * every accumulation window; where the step reads grad16 itself (one rank,
 * stages 0/1, the optimizer on the device: zrt_engine_grad_direct) there is
 * none, and grad16 is zero at the start of every window instead.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_optim.h"
#include "dtype.h"
#include "engine_internal.h"
#include "gradstats.h"
#include "monitor.h"

static int zrt_engine_inject_now(const zrt_engine *eng) {
  int64_t step = eng->global_step + 1;
  for (int i = 0; i < eng->ninject; i++)
    if (eng->inject_steps[i] == step) return 1;
  return 0;
}

/* Device shards whose statistics one scale_check_list call takes. */
#define ZRT_STATS_BATCH 64

/* 1 when the step reads module m's gradient from grad16 itself: stages 0/1
 * reduce once per window, at the boundary, and with one rank that
 * reduction is the identity (when the communication dtype is the working
 * dtype or fp32), so the statistics and the device optimizer
 * read the window's 16-bit sums as they are (widened exactly: the values
 * the fp32 accumulator would hold) and grad16 is zeroed after the step.
 * Per element 2 bytes read by each of the two passes and 2 written by the
 * zeroing, against the buckets' copy, an addition onto the zeroed
 * accumulator, 4-byte reads and two zeroings (28). Such a module has no
 * grad_acc (the build allocates none: engine.c). */
int zrt_engine_grad_direct(const zrt_engine *eng, const zrt_module_entry *me) {
  /* a communication dtype that rounds the working dtype's values (fp16
   * for bf16 gradients, say) makes the reduce no identity: kept */
  return eng->policy->reduce_at_boundary && eng->world == 1 && !me->grad_host &&
         eng->master_dtype == ZRT_F32 &&
         (eng->comm_dtype == eng->dtype || eng->comm_dtype == ZRT_F32);
}
/* The gradient the step reads for m: grad16 (zrt_engine_grad_direct) or
 * the accumulator, at element k; *dt its dtype. */
static void *zrt_engine_step_grad(const zrt_engine *eng, const zrt_module_entry *me, size_t k,
                                  zrt_dtype *dt) {
  if (zrt_engine_grad_direct(eng, me)) {
    *dt = eng->dtype;
    return zrt_engine_at(me->grad16, k, eng->dtype);
  }
  *dt = eng->master_dtype;
  return zrt_engine_at(me->grad_acc, k, eng->master_dtype);
}

/* 1 when some module's gradient accumulator lives in the host pool (the
 * host pool itself may hold only other things: the program's host memory,
 * cpu checkpoints, 16-bit shards). */
static int zrt_engine_any_grad_host(const zrt_engine *eng) {
  for (int m = 0; m < eng->nmodules; m++)
    if (eng->modules[m].grad_host) return 1;
  return 0;
}

/* One pass over the rank's owned gradients: sum of squares of grad*inv and
 * the non-finite flag. At stage 0 the accumulator is replicated, so each
 * rank only looks at its own slice to keep the all-reduced sum exact. The
 * device shards go to the backend in runs (scale_check_list: one host wait
 * per run of up to ZRT_STATS_BATCH modules, not one per module), in module
 * order with the host shards, so the sum's order, hence its bits, is the
 * per-module one. */
static zrt_status zrt_engine_grad_stats(zrt_engine *eng, float inv, double *sumsq, int *nonfinite) {
  *sumsq = 0;
  *nonfinite = 0;
  const void *xs[ZRT_STATS_BATCH];
  size_t ns[ZRT_STATS_BATCH];
  int k = 0;
  zrt_dtype run_dt = eng->master_dtype; /* the run's dtype: one per scale_check_list */
  for (int m = 0; m <= eng->nmodules; m++) {
    zrt_module_entry *me = m < eng->nmodules ? &eng->modules[m] : NULL;
    zrt_dtype dt = eng->master_dtype;
    const void *g =
        me ? zrt_engine_step_grad(
                 eng, me, eng->policy->shard_optimizer ? 0 : (size_t)eng->rank * me->part, &dt)
           : NULL;
    if (k && (!me || me->grad_host || k == ZRT_STATS_BATCH || dt != run_dt)) {
      ZRT_CHECK(zrt_backend_scale_check_list(eng->backend, xs, ns, k, run_dt, inv, sumsq, nonfinite,
                                             NULL));
      k = 0;
    }
    if (!me) break;
    run_dt = dt;
    if (me->grad_host) { /* the host shard: the CPU kernel the CPU backend's slot runs */
      zrt_cpu_sumsq_check(g, eng->master_dtype, (size_t)me->part, inv, sumsq, nonfinite);
    } else {
      xs[k] = g;
      ns[k++] = (size_t)me->part;
    }
  }
  return ZRT_OK;
}

/* The statistics pass as one op of the engine's stream, where host
 * functions are stream ops (the twin): the same per-module kernels in the
 * same order (the device ones run in place on the stream, so no result
 * crosses to the host per module), packed with the window's loss into
 * eng->stats_rec, which the comm stream then reduces in turn: the host
 * waits once, for the all-reduce. */
typedef struct zrt_engine_stats_args {
  zrt_engine *eng;
  float inv;
  double loss_sum;
  int stop; /* this rank asked to stop (zrt_engine_request_stop) */
} zrt_engine_stats_args;

static zrt_status zrt_engine_stats_fn(void *arg) {
  zrt_engine_stats_args a;
  memcpy(&a, arg, sizeof a);
  double sumsq = 0;
  int nonfinite = 0;
  ZRT_CHECK(zrt_engine_grad_stats(a.eng, a.inv, &sumsq, &nonfinite));
  zrt_gradstats_pack(sumsq, nonfinite, a.loss_sum, a.eng->stats_rec);
  a.eng->stats_rec[ZRT_GRADSTATS_REC] = a.stop ? 1.0f : 0.0f;
  return ZRT_OK;
}

/* Fills eng->stats_rec and all-reduces it over the ranks (on return it is
 * the agreed record, on the host). */
static zrt_status zrt_engine_agree_stats(zrt_engine *eng, float inv) {
  if (zrt_backend_host_fn_kernels(eng->backend)) {
    zrt_engine_stats_args a = {eng, inv, eng->st.loss_sum, eng->stop_requested};
    ZRT_CHECK(zrt_backend_launch_host_named(eng->backend, zrt_engine_stats_fn, &a, sizeof a, NULL,
                                            "gradient statistics"));
    /* the all-reduce below reads the record after the function filled it
     * because it is queued behind it: where the engine runs device work as
     * host functions every comm is stream-ordered (comm.c, zrt_comm_create);
     * one that ran on the calling thread would read the record unfilled */
    if (!eng->comm->stream)
      return zrt_error(ZRT_ERR_INTERNAL,
                       "gradient statistics: comm \"%s\" is not stream-ordered on the %s backend, "
                       "whose host functions run on a stream (zrt_comm_create makes every comm "
                       "but nccl stream-ordered there): report this",
                       eng->comm_name, eng->backend_name);
  } else {
    /* the host reads the host gradient shards below, which the buckets'
     * additions (host functions on their stream where those are queued:
     * cuda) may still be writing; the drain ordered the backend's stream
     * after them */
    if (zrt_backend_host_fn_async(eng->backend) && zrt_engine_any_grad_host(eng))
      ZRT_CHECK(zrt_backend_synchronize(eng->backend, NULL));
    double sumsq = 0;
    int nonfinite = 0;
    ZRT_CHECK(zrt_engine_grad_stats(eng, inv, &sumsq, &nonfinite));
    zrt_gradstats_pack(sumsq, nonfinite, eng->st.loss_sum, eng->stats_rec);
    eng->stats_rec[ZRT_GRADSTATS_REC] = eng->stop_requested ? 1.0f : 0.0f;
  }
  eng->stop_requested = 0; /* this boundary carries it */
  return zrt_comm_all_reduce(eng->comm, eng->stats_rec, eng->stats_rec, ZRT_GRADSTATS_REC + 1,
                             ZRT_F32, ZRT_RED_SUM, NULL);
}

/* Stage 1/2: the all-gather of module m's new 16-bit params, timed for
 * the step breakdown (gather_s). */
static zrt_status zrt_engine_step_gather(zrt_engine *eng, int m) {
  if (!eng->policy->gather_after_step) return ZRT_OK;
  double t0 = zrt_now_s();
  zrt_status st = zrt_engine_gather_module(eng, m);
  eng->ph.gather_s += zrt_now_s() - t0;
  return st;
}

/* The optimizer update of one piece, on the backend or through the
 * offload pipe (arg: the step's hyper-parameters). */
static zrt_status zrt_engine_step_piece(zrt_engine *eng, const zrt_engine_piece *pc, void *arg) {
  zrt_module_entry *me = &eng->modules[pc->module];
  zrt_optim_hparams h = *(const zrt_optim_hparams *)arg;
  if (pc->param->flags & ZRT_PARAM_NO_DECAY) h.weight_decay = 0;
  size_t k = pc->k;
  float *s1 = zrt_engine_at(me->s1, k, eng->state_dtype);
  float *s2 = zrt_engine_at(me->s2, k, eng->state_dtype);
  if (me->optim_host && me->grad_host) /* fp32 or bf16 master, grads and states */
    return zrt_offload_pipe_step_host_grad(eng->offload, &h,
                                           zrt_engine_at(me->master, k, eng->master_dtype), s1, s2,
                                           zrt_engine_at(me->grad_acc, k, eng->master_dtype),
                                           eng->master_dtype, pc->w16, eng->dtype, pc->n);
  if (me->optim_host)
    return zrt_engine_offload_step(eng, &h, me->master + k, s1, s2, me->grad_acc + k, pc->w16,
                                   pc->n);
  if (me->shard16_host) {
    /* offload_param cpu alone: the device step updates the masters, the
     * host shard is written from them (a device kernel never writes host
     * memory) */
    ZRT_CHECK(zrt_backend_optim_step(eng->backend, &h, me->master + k, s1, s2, me->grad_acc + k,
                                     ZRT_F32, NULL, eng->dtype, pc->n, NULL));
    return zrt_engine_host16_from_master(eng, me->master + k, pc->w16, (int64_t)pc->n);
  }
  zrt_dtype gdt;
  const void *g = zrt_engine_step_grad(eng, me, k, &gdt);
  return zrt_backend_optim_step(eng->backend, &h, me->master + k, s1, s2, g, gdt, pc->w16,
                                eng->dtype, pc->n, NULL);
}

static zrt_status zrt_engine_apply(zrt_engine *eng, float grad_mul) {
  const zrt_cfg *c = eng->cfg;
  zrt_optim_hparams hp = {
      .type = c->optimizer_type,
      .lr = (float)eng->sched.cur_lr,
      .beta1 = (float)c->beta1,
      .beta2 = (float)c->beta2,
      .eps = (float)c->eps,
      .weight_decay = (float)c->weight_decay,
      .momentum = (float)c->momentum,
      .bias_correction = c->bias_correction,
      .step = eng->applied_steps + 1,
      .grad_mul = grad_mul,
  };
  if (eng->offload_opt == ZRT_OFFLOAD_NVME && eng->nmodules > 0 && eng->modules[0].optim_nvme) {
    /* ZeRO-Infinity: every module in one segmented NVMe step, one commit */
    ZRT_CHECK(zrt_engine_offload_step_nvme(eng, &hp));
    if (eng->pswap) ZRT_CHECK(zrt_engine_param_nvme_write(eng));
    for (int m = 0; m < eng->nmodules; m++) ZRT_CHECK(zrt_engine_step_gather(eng, m));
    if (eng->policy->shard_params) zrt_coord_invalidate(eng->coord);
    return ZRT_OK;
  }
  for (int m = 0; m < eng->nmodules; m++) {
    ZRT_CHECK(zrt_engine_each_piece(eng, m, zrt_engine_step_piece, &hp));
    ZRT_CHECK(zrt_engine_step_gather(eng, m));
  }
  if (eng->pswap) ZRT_CHECK(zrt_engine_param_nvme_write(eng));
  if (eng->policy->shard_params) zrt_coord_invalidate(eng->coord);
  return ZRT_OK;
}

/* Exact transport of byte counts through a float all-gather: 24-bit limbs. */
static void zrt_pack_u64(float *dst, uint64_t v) {
  dst[0] = (float)(v & 0xffffffu);
  dst[1] = (float)((v >> 24) & 0xffffffu);
  dst[2] = (float)(v >> 48);
}
static uint64_t zrt_unpack_u64(const float *src) {
  return (uint64_t)src[0] | ((uint64_t)src[1] << 24) | ((uint64_t)src[2] << 48);
}

/* per rank: peaks by category, device and host peak, then the step's host
 * waits, allocations and scalar D2H reads */
#define ZRT_MEMREC (3 * (ZRT_MEM_NCAT + 5))

/* What one step window moved: collective bytes and NVMe swap bytes (this
 * rank's optimizer and parameter files). */
typedef struct zrt_step_bytes {
  uint64_t comm, nvme_read, nvme_write;
  zrt_backend_counters ctr; /* the backend's counters over the window */
} zrt_step_bytes;

/* Opens the window of the backend's counters (at build, and after each
 * step's metrics, so the metrics' own gather is not counted). */
void zrt_engine_counters_open(zrt_engine *eng) {
  zrt_backend *b = eng->backend;
  eng->st.ctr0.host_waits = ZRT_BACKEND_COUNTER(b, host_waits);
  eng->st.ctr0.allocs = ZRT_BACKEND_COUNTER(b, allocs);
  eng->st.ctr0.d2h_reads = ZRT_BACKEND_COUNTER(b, d2h_reads);
}

/* DeepSpeed's monitor events: x = samples seen (global_samples). */
static zrt_status zrt_engine_monitor_step(zrt_engine *eng, const zrt_step_info *info) {
  int64_t samples = eng->global_step * (int64_t)eng->cfg->train_batch_size;
  ZRT_CHECK(zrt_monitor_scalar(eng->monitor, "Train/Samples/train_loss", info->loss, samples));
  ZRT_CHECK(zrt_monitor_scalar(eng->monitor, "Train/Samples/lr", info->lr, samples));
  if (eng->cfg->fp16_enabled)
    ZRT_CHECK(
        zrt_monitor_scalar(eng->monitor, "Train/Samples/loss_scale", info->loss_scale, samples));
  return zrt_monitor_flush(eng->monitor);
}

/* A number as JSON: non-finite values (a NaN loss, the grad norm of an
 * overflowing step) are null, which every JSON reader accepts. */
static const char *zrt_engine_json_num(double v, char *buf, size_t len) {
  if (isfinite(v))
    snprintf(buf, len, "%.9g", v);
  else
    snprintf(buf, len, "null");
  return buf;
}

/* Test hook (ZRT_TEST_HOOKS=1): the sum and the sum of squares of every
 * fp32 master, each rank over the slice it owns (zrt_engine_shard_range,
 * whatever the stage keeps), in double, gathered and added in rank order on
 * every rank (collective). For comparing backends, not for training. */
static zrt_status zrt_engine_master_sums(zrt_engine *eng, double *sum, double *sqsum) {
  enum { REC = 6 };
  zrt_status st = ZRT_OK;
  double s[2] = {0, 0};
  float *all = calloc((size_t)eng->world * REC, sizeof(float)), *buf = NULL;
  size_t *counts = calloc((size_t)eng->world, sizeof(size_t));
  if (!all || !counts) {
    st = zrt_error(ZRT_ERR_OOM, "metrics: out of host memory for the master sums");
    goto done;
  }
  for (int m = 0; m < eng->nmodules; m++) {
    int64_t off, len, soff, slen;
    zrt_engine_master_extent(eng, m, &off, &len);
    ZRT_CHECK_GOTO(zrt_engine_shard_range(eng, m, eng->rank, &soff, &slen), st, done);
    float *nb = realloc(buf, (size_t)(len ? len : 1) * sizeof(float));
    if (!nb) {
      st = zrt_error(ZRT_ERR_OOM, "metrics: out of host memory for the master sums");
      goto done;
    }
    buf = nb;
    /* buf is pageable: the read is complete when get_master returns */
    ZRT_CHECK_GOTO(zrt_engine_get_master(eng, m, buf), st, done);
    for (int64_t i = ZRT_MAX(soff, off); i < ZRT_MIN(soff + slen, off + len); i++) {
      double w = buf[i - off];
      s[0] += w;
      s[1] += w * w;
    }
  }
  float *mine = all + (size_t)eng->rank * REC;
  for (int k = 0; k < 2; k++) {
    uint64_t u;
    memcpy(&u, &s[k], sizeof u);
    zrt_pack_u64(mine + 3 * k, u);
  }
  for (int r = 0; r < eng->world; r++) counts[r] = REC;
  uint64_t before = eng->comm->bytes_moved;
  ZRT_CHECK_GOTO(zrt_comm_all_gather(eng->comm, mine, all, counts, ZRT_F32, NULL), st, done);
  eng->comm->bytes_moved = before; /* not training traffic */
  *sum = *sqsum = 0;
  for (int r = 0; r < eng->world; r++) {
    double v[2];
    for (int k = 0; k < 2; k++) {
      uint64_t u = zrt_unpack_u64(all + (size_t)r * REC + 3 * k);
      memcpy(&v[k], &u, sizeof u);
    }
    *sum += v[0];
    *sqsum += v[1];
  }
done:
  free(all);
  free(counts);
  free(buf);
  return st;
}

static zrt_status zrt_engine_write_metrics(zrt_engine *eng, const zrt_step_info *info,
                                           double step_time, const zrt_step_bytes *moved) {
  /* every rank contributes its peaks (collective even when only rank 0 writes) */
  float *all = calloc((size_t)eng->world * ZRT_MEMREC, sizeof(float));
  size_t *counts = calloc((size_t)eng->world, sizeof(size_t));
  zrt_status st = ZRT_OK;
  if (!all || !counts) {
    st = zrt_error(ZRT_ERR_OOM, "metrics: out of host memory");
    goto done;
  }
  zrt_mem_stats dev, host;
  zrt_engine_memory(eng, ZRT_MEM_DEVICE, &dev);
  zrt_engine_memory(eng, ZRT_MEM_HOST_PINNED, &host);
  float *mine = all + (size_t)eng->rank * ZRT_MEMREC;
  for (int k = 0; k < ZRT_MEM_NCAT; k++) zrt_pack_u64(mine + 3 * k, dev.peak[k]);
  zrt_pack_u64(mine + 3 * ZRT_MEM_NCAT, dev.peak_total);
  zrt_pack_u64(mine + 3 * (ZRT_MEM_NCAT + 1), host.peak_total);
  zrt_pack_u64(mine + 3 * (ZRT_MEM_NCAT + 2), moved->ctr.host_waits);
  zrt_pack_u64(mine + 3 * (ZRT_MEM_NCAT + 3), moved->ctr.allocs);
  zrt_pack_u64(mine + 3 * (ZRT_MEM_NCAT + 4), moved->ctr.d2h_reads);
  for (int r = 0; r < eng->world; r++) counts[r] = ZRT_MEMREC;
  uint64_t before = eng->comm->bytes_moved;
  ZRT_CHECK_GOTO(zrt_comm_all_gather(eng->comm, mine, all, counts, ZRT_F32, NULL), st, done);
  eng->comm->bytes_moved = before; /* metrics traffic is not training traffic */
  double msum = 0, msq = 0;
  if (eng->test_master_sums) ZRT_CHECK_GOTO(zrt_engine_master_sums(eng, &msum, &msq), st, done);
  if (!eng->metrics) goto done;
  uint64_t peak_cat[ZRT_MEM_NCAT] = {0}, dev_peak = 0, host_peak = 0, waits = 0, allocs = 0,
           reads = 0;
  FILE *f = eng->metrics;
  double tps = step_time > 0
                   ? (double)eng->tokens_per_micro * (double)eng->cfg->gradient_accumulation_steps *
                         eng->world / step_time
                   : 0;
  char jl[32], jlr[32], jsc[32], jgn[32];
  fprintf(f,
          "{\"step\":%lld,\"loss\":%s,\"lr\":%s,\"loss_scale\":%s,\"grad_norm\":%s,"
          "\"skipped\":%s,\"tokens_per_s\":%.6g,\"step_time_s\":%.6g,"
          "\"device_peak_bytes_by_rank\":[",
          (long long)info->step, zrt_engine_json_num(info->loss, jl, sizeof jl),
          zrt_engine_json_num(info->lr, jlr, sizeof jlr),
          zrt_engine_json_num(info->loss_scale, jsc, sizeof jsc),
          zrt_engine_json_num(info->grad_norm, jgn, sizeof jgn), info->skipped ? "true" : "false",
          tps, step_time);
  for (int r = 0; r < eng->world; r++) {
    const float *rec = all + (size_t)r * ZRT_MEMREC;
    uint64_t dp = zrt_unpack_u64(rec + 3 * ZRT_MEM_NCAT);
    fprintf(f, "%s%llu", r ? "," : "", (unsigned long long)dp);
    dev_peak = ZRT_MAX(dev_peak, dp);
    host_peak = ZRT_MAX(host_peak, zrt_unpack_u64(rec + 3 * (ZRT_MEM_NCAT + 1)));
    waits = ZRT_MAX(waits, zrt_unpack_u64(rec + 3 * (ZRT_MEM_NCAT + 2)));
    allocs = ZRT_MAX(allocs, zrt_unpack_u64(rec + 3 * (ZRT_MEM_NCAT + 3)));
    reads = ZRT_MAX(reads, zrt_unpack_u64(rec + 3 * (ZRT_MEM_NCAT + 4)));
    for (int k = 0; k < ZRT_MEM_NCAT; k++)
      peak_cat[k] = ZRT_MAX(peak_cat[k], zrt_unpack_u64(rec + 3 * k));
  }
  fprintf(f,
          "],\"device_peak_bytes\":%llu,\"device_plan_bytes\":%llu,\"host_pinned_peak_bytes\":%llu",
          (unsigned long long)dev_peak, (unsigned long long)eng->plan_device_bytes,
          (unsigned long long)host_peak);
  for (int k = 0; k < ZRT_MEM_NCAT; k++)
    if (k != ZRT_MEM_OTHER)
      fprintf(f, ",\"%s\":%llu", zrt_mem_category_name((zrt_mem_category)k),
              (unsigned long long)peak_cat[k]);
  const zrt_step_timing *t = &eng->timing;
  fprintf(f,
          ",\"other_s\":%.6g,\"forward_s\":%.6g,\"backward_s\":%.6g,\"boundary_s\":%.6g,"
          "\"fetch_s\":%.6g,\"reduce_s\":%.6g,\"optimizer_s\":%.6g,\"gather_s\":%.6g,"
          "\"comm_busy_s\":%.6g,\"comm_wait_s\":%.6g,\"overlap_fraction\":%.6g",
          t->other_s, t->forward_s, t->backward_s, t->boundary_s, t->fetch_s, t->reduce_s,
          t->optimizer_s, t->gather_s, t->comm_busy_s, t->comm_wait_s,
          isfinite(t->overlap_fraction) ? t->overlap_fraction : 0.0);
  if (eng->test_master_sums) fprintf(f, ",\"master_sum\":%.17g,\"master_sqsum\":%.17g", msum, msq);
  zrt_actckpt_state *ak = &eng->ack;
  if (ak->nspan) {
    /* cpu_checkpointing's transfers this step (rank 0; read from done events) */
    fprintf(f, ",\"actckpt_copy_s\":%.6g,\"actckpt_stall_s\":%.6g,\"actckpt_untimed\":%lld",
            ak->stats.copy_s - ak->rep_copy_s, ak->stats.stall_s - ak->rep_stall_s,
            (long long)(ak->stats.untimed - ak->rep_untimed));
    ak->rep_copy_s = ak->stats.copy_s;
    ak->rep_stall_s = ak->stats.stall_s;
    ak->rep_untimed = ak->stats.untimed;
  }
  fprintf(f,
          ",\"comm_bytes\":%llu,\"nvme_read_bytes\":%llu,\"nvme_write_bytes\":%llu,"
          "\"host_waits\":%llu,\"step_allocs\":%llu,\"d2h_reads\":%llu,"
          "\"zero_stage\":%d,\"world_size\":%d}\n",
          (unsigned long long)moved->comm, (unsigned long long)moved->nvme_read,
          (unsigned long long)moved->nvme_write, (unsigned long long)waits,
          (unsigned long long)allocs, (unsigned long long)reads, eng->stage, eng->world);
  fflush(f);
done:
  free(all);
  free(counts);
  return st;
}

zrt_status zrt_engine_request_stop(zrt_engine *eng) {
  if (!eng) return zrt_error(ZRT_ERR_INVALID_ARG, "zrt_engine_request_stop: NULL engine");
  eng->stop_requested = 1;
  return ZRT_OK;
}

/* Micro-step bookkeeping: the window's loss, and at stage 2/3 the
 * reduction of modules whose grads the program touched but never declared.
 * *boundary: this call ends the accumulation window. The step window
 * (comm_bytes0, eng->ph) is NOT opened here: this call comes after the
 * window's first forward/backward, whose stage-2/3 gathers and
 * reduce-scatters and whose compute belong to this step. It opens where the
 * previous boundary (or build) ended; for the first step the bytes count
 * from engine creation (build's gathers included). */
static zrt_status zrt_engine_step_accumulate(zrt_engine *eng, float loss, double t_enter,
                                             zrt_step_info *info, int *boundary) {
  if (eng->st.micro_count == 0) eng->st.loss_sum = 0;
  eng->st.loss_sum += loss;
  eng->st.micro_count++;
  eng->micro_step++;
  if (!eng->policy->reduce_at_boundary)
    for (int m = 0; m < eng->nmodules; m++)
      if (eng->modules[m].grads_pending) ZRT_CHECK(zrt_engine_reduce_pending(eng, m, 1));
  for (int m = 0; m < eng->nmodules; m++) eng->modules[m].grads_reduced = 0;
  zrt_engine_timing_charge(&eng->ph.reduce_s, t_enter, 0);

  info->step = eng->global_step;
  info->loss_scale = zrt_scaler_scale(&eng->scaler);
  info->lr = (float)eng->sched.cur_lr;
  info->skipped_total = eng->skipped_total;
  info->loss = loss;
  *boundary = eng->st.micro_count >= zrt_engine_accum_steps(eng);
  return ZRT_OK;
}

/* Test hook (ZRT_INJECT_NONFINITE_GRADS): a NaN in the last rank's first
 * accumulated gradient at the listed optimizer steps. */
static zrt_status zrt_engine_step_inject(zrt_engine *eng) {
  if (!zrt_engine_inject_now(eng) || eng->rank != eng->world - 1) return ZRT_OK;
  float nan = NAN;
  zrt_module_entry *me = &eng->modules[0];
  if (zrt_engine_grad_direct(eng, me)) { /* the 16-bit gradient the step reads */
    float v[1];                          /* one element of the working dtype */
    zrt_store_f(v, eng->dtype, 0, nan);
    return zrt_backend_memcpy(eng->backend, me->grad16, v, zrt_dtype_size(eng->dtype), ZRT_COPY_H2D,
                              NULL);
  }
  float *at =
      zrt_engine_at(me->grad_acc, !eng->policy->shard_optimizer ? (size_t)eng->rank * me->part : 0,
                    eng->master_dtype);
  if (me->grad_host) {
    float v[1]; /* one element of the master dtype (fp32 or bf16), written in stream order */
    zrt_store_f(v, eng->master_dtype, 0, nan);
    return zrt_engine_host_set(eng, at, v, zrt_dtype_size(eng->master_dtype));
  }
  return zrt_backend_memcpy(eng->backend, at, &nan, sizeof nan, ZRT_COPY_H2D, NULL);
}

/* Phase 1, reduce: every gradient of the window lands in its owner's
 * accumulation shard (stage 0/1 reduce here; stage 2/3 drain the buckets),
 * and stage 3 quiesces its gathers. On return *t_opt is when the optimizer
 * part of the boundary begins. */
static zrt_status zrt_engine_step_reduce(zrt_engine *eng, double *t_opt) {
  double t_red = zrt_now_s();
  if (eng->policy->reduce_at_boundary) {
    for (int m = 0; m < eng->nmodules; m++) {
      zrt_module_entry *me = &eng->modules[m];
      if (zrt_engine_grad_direct(eng, me)) continue; /* read as it is; zeroed after the step */
      ZRT_CHECK(zrt_buckets_reduce(eng->buckets, me->grad16, me->padded, me->part, me->grad_acc,
                                   me->grad_host, eng->policy->reduce_all_reduce, 1));
      /* grad16 is zeroed next: the last bucket must be packed */
      ZRT_CHECK(zrt_buckets_drain(eng->buckets));
      ZRT_CHECK(zrt_backend_memset(eng->backend, me->grad16, 0,
                                   (size_t)me->padded * zrt_dtype_size(eng->dtype), NULL));
    }
  }
  ZRT_CHECK(zrt_buckets_drain(eng->buckets));
  double t_q = zrt_engine_timing_charge(&eng->ph.reduce_s, t_red, 0);
  if (eng->policy->shard_params) ZRT_CHECK(zrt_coord_quiesce(eng->coord));
  *t_opt = zrt_engine_timing_charge(&eng->ph.fetch_s, t_q, 0);
  zrt_coord_freeze_trace(eng->coord);
  return zrt_engine_step_inject(eng);
}

/* Phase 2, verdict: the statistics pass and its one all-reduce, the
 * verdict every rank reaches from the agreed values (norm, overflow, skip,
 * clip), and the loss scaler's update. *scaler_st: the scaler's status (an
 * fp16 scale that cannot back off further), which ends the step without an
 * apply but still closes it. */
static zrt_status zrt_engine_step_verdict(zrt_engine *eng, zrt_step_info *info,
                                          zrt_gradstats_verdict *v, zrt_status *scaler_st) {
  const zrt_cfg *c = eng->cfg;
  int64_t K = zrt_engine_accum_steps(eng);
  /* the inverse of what the window's backward passes multiplied by: under
   * fp16 (scale / K) * world * K, so the accumulated mean is unscaled
   * (test hook: a deliberately wrong factor, the class of a wrong unscale,
   * world or accumulation factor; the gpu harness must catch it) */
  float inv =
      zrt_gradstats_unscale(zrt_engine_backward_scale(eng), eng->world, K) * eng->test_grad_factor;
  ZRT_CHECK(zrt_engine_agree_stats(eng, inv));
  zrt_gradstats_policy gpol = {.may_skip = c->fp16_enabled ||
                                           (c->bf16_enabled && c->bf16_check_grad_overflow),
                               .clipping = c->gradient_clipping};
  zrt_gradstats_verdict_of(eng->stats_rec, eng->world, K, inv, &gpol, v);

  info->loss = v->loss;
  info->stop = eng->stats_rec[ZRT_GRADSTATS_REC] > 0;
  info->grad_norm = v->overflow ? NAN : v->norm;
  info->lr = (float)eng->sched.cur_lr;
  info->loss_scale = zrt_scaler_scale(&eng->scaler);
  *scaler_st = c->fp16_enabled ? zrt_scaler_update(&eng->scaler, v->overflow) : ZRT_OK;
  return ZRT_OK;
}

/* Phase 3, apply: a skipped step only drops stage 3's kept copies; an
 * applied one runs the optimizer (and the 16-bit write-back) and advances
 * the scheduler. Then the accumulators are zeroed for the next window.
 * st: the scaler's status; an overflow at the minimum scale is still
 * counted as a skipped step, but nothing is applied or zeroed. */
static zrt_status zrt_engine_step_apply_phase(zrt_engine *eng, const zrt_gradstats_verdict *v,
                                              double t_opt, zrt_status st, zrt_step_info *info) {
  double gather0 = eng->ph.gather_s;
  if (v->skip) {
    eng->skipped_total++;
    info->skipped = 1;
    zrt_log(eng->rank == 0 ? ZRT_LOG_INFO : ZRT_LOG_DEBUG,
            "step %lld: non-finite gradients, step skipped (loss scale %g -> %g)",
            (long long)eng->global_step + 1, (double)info->loss_scale, eng->scaler.cur_scale);
    /* copies kept for reuse end with the step, applied or not: the memory
     * plan (engine_memplan.c) replays every step from nothing gathered */
    if (eng->policy->shard_params) zrt_coord_invalidate(eng->coord);
  } else if (st == ZRT_OK) {
    st = zrt_engine_apply(eng, v->grad_mul);
    if (st == ZRT_OK) {
      eng->applied_steps++;
      zrt_sched_step(&eng->sched);
    }
  }
  /* the optimizer's share, less the all-gathers it timed as gather_s */
  zrt_engine_timing_charge(&eng->ph.optimizer_s, t_opt, eng->ph.gather_s - gather0);
  for (int m = 0; m < eng->nmodules && st == ZRT_OK; m++) {
    if (zrt_engine_grad_direct(eng, &eng->modules[m])) { /* the window's grad16, read */
      st = zrt_backend_memset(eng->backend, eng->modules[m].grad16, 0,
                              (size_t)eng->modules[m].padded * zrt_dtype_size(eng->dtype), NULL);
      continue;
    }
    int64_t off, len;
    zrt_engine_master_extent(eng, m, &off, &len);
    size_t bytes = (size_t)len * zrt_dtype_size(eng->master_dtype);
    if (eng->modules[m].grad_host)
      st = zrt_engine_host_set(eng, eng->modules[m].grad_acc, NULL, bytes);
    else
      st = zrt_backend_memset(eng->backend, eng->modules[m].grad_acc, 0, bytes, NULL);
  }
  /* the first boundary: the recorded step fixes the stage-3 memory plan */
  if (st == ZRT_OK && eng->plan_recording != 0) st = zrt_engine_plan_first_boundary(eng);
  return st;
}

/* The non-finite policy, never silent: a NaN loss, or non-finite gradients
 * the optimizer applied (bf16 without check_grad_overflow, fp32), leave the
 * master weights non-finite for good. ZRT_ERR_OVERFLOW stops training
 * unless zrt.stop_on_nonfinite is false (then a warning). */
static zrt_status zrt_engine_step_nonfinite(zrt_engine *eng, const zrt_gradstats_verdict *v) {
  const zrt_cfg *c = eng->cfg;
  int applied_bad = v->overflow && !v->skip && !c->fp16_enabled;
  if (!applied_bad && isfinite(v->loss)) return ZRT_OK;
  char what[160];
  if (!isfinite(v->loss))
    snprintf(what, sizeof what, "the loss is %g", (double)v->loss);
  else
    snprintf(what, sizeof what,
             "non-finite gradients were applied (%s): the master weights are no longer finite",
             c->bf16_enabled ? "bf16.check_grad_overflow is false" : "fp32 has no overflow check");
  if (!c->stop_on_nonfinite) {
    zrt_log0(ZRT_LOG_WARN, "step %lld: %s (zrt.stop_on_nonfinite is false: going on)",
             (long long)eng->global_step + 1, what);
    return ZRT_OK;
  }
  return zrt_error(ZRT_ERR_OVERFLOW,
                   "step %lld: %s; training stopped. Look for the first step whose loss or "
                   "grad_norm went bad (lower the learning rate, enable gradient_clipping%s); to "
                   "go on anyway set zrt.stop_on_nonfinite to false (--set "
                   "zrt.stop_on_nonfinite=false)",
                   (long long)eng->global_step + 1, what,
                   c->bf16_enabled && !c->bf16_check_grad_overflow
                       ? ", or set bf16.check_grad_overflow true to skip such steps"
                       : "");
}

/* What this step window moved (collective, NVMe and backend counters),
 * differenced against the window's start, which moves here. */
static zrt_step_bytes zrt_engine_step_moved(zrt_engine *eng) {
  zrt_step_bytes moved = {.comm = eng->comm->bytes_moved - eng->st.comm_bytes0};
  eng->st.comm_bytes0 = eng->comm->bytes_moved; /* the next window starts here */
  uint64_t nrd = 0, nwr = 0;
  zrt_offload_pipe_nvme_add_io_bytes(eng->offload, &nrd, &nwr);
  zrt_nvme_add_io_bytes(zrt_pswap_nvme(eng->pswap), &nrd, &nwr);
  moved.nvme_read = nrd - eng->st.nvme_rd0;
  moved.nvme_write = nwr - eng->st.nvme_wr0;
  eng->st.nvme_rd0 = nrd;
  eng->st.nvme_wr0 = nwr;
  zrt_backend *bk = eng->backend;
  moved.ctr.host_waits = ZRT_BACKEND_COUNTER(bk, host_waits) - eng->st.ctr0.host_waits;
  moved.ctr.allocs = ZRT_BACKEND_COUNTER(bk, allocs) - eng->st.ctr0.allocs;
  moved.ctr.d2h_reads = ZRT_BACKEND_COUNTER(bk, d2h_reads) - eng->st.ctr0.d2h_reads;
  return moved;
}

/* The step's log lines (rank 0, every steps_per_print steps). */
static void zrt_engine_step_log(const zrt_engine *eng, const zrt_step_info *info) {
  const zrt_cfg *c = eng->cfg;
  if (c->steps_per_print <= 0 || eng->global_step % c->steps_per_print != 0 || eng->rank != 0)
    return;
  zrt_log(ZRT_LOG_INFO, "step %lld loss %.6g lr %.3g scale %g grad_norm %.4g skipped %lld",
          (long long)eng->global_step, (double)info->loss, (double)info->lr,
          (double)info->loss_scale, (double)info->grad_norm, (long long)eng->skipped_total);
  if (!c->wall_clock_breakdown) return;
  const zrt_step_timing *t = &eng->timing;
  zrt_log(ZRT_LOG_INFO,
          "step %lld time (ms): step %.2f = other %.2f + forward %.2f + backward %.2f + "
          "boundary %.2f | fetch %.2f reduce %.2f optimizer %.2f gather %.2f | comm in flight "
          "%.2f blocked %.2f (%.0f%% hidden)",
          (long long)eng->global_step, 1e3 * t->step_s, 1e3 * t->other_s, 1e3 * t->forward_s,
          1e3 * t->backward_s, 1e3 * t->boundary_s, 1e3 * t->fetch_s, 1e3 * t->reduce_s,
          1e3 * t->optimizer_s, 1e3 * t->gather_s, 1e3 * t->comm_busy_s, 1e3 * t->comm_wait_s,
          100 * t->overlap_fraction);
}

/* Phase 4, close: the step counts, the window's bytes and timing, the
 * adaptive team, then (unless the step failed) metrics, monitor and logs.
 * st: the status of the phases before; returned unless the metrics fail. */
static zrt_status zrt_engine_step_close(zrt_engine *eng, double t_enter, zrt_status st,
                                        zrt_step_info *info) {
  const zrt_cfg *c = eng->cfg;
  eng->global_step++;
  info->step = eng->global_step;
  info->skipped_total = eng->skipped_total;
  eng->last_grad_norm = info->grad_norm;
  zrt_step_bytes moved = zrt_engine_step_moved(eng);
  double now = zrt_now_s();
  zrt_engine_timing_close(eng, t_enter, now);
  double step_time = eng->timing.step_s;
  zrt_engine_team_step(eng, step_time);
  eng->st.t_start = now;
  eng->st.micro_count = 0;
  if (st != ZRT_OK && st != ZRT_ERR_OVERFLOW) return st;
  zrt_status mst = ZRT_OK;
  zrt_engine_actckpt_harvest(eng); /* the spans of this step's passes that are done */
  if (c->metrics_path[0]) mst = zrt_engine_write_metrics(eng, info, step_time, &moved);
  zrt_engine_counters_open(eng); /* the next window starts after the metrics */
  if (eng->monitor && mst == ZRT_OK) mst = zrt_engine_monitor_step(eng, info);
  if (st == ZRT_ERR_OVERFLOW) return st;
  zrt_engine_step_log(eng, info);
  return mst;
}

zrt_status zrt_engine_step(zrt_engine *eng, float loss, zrt_step_info *info) {
  if (!eng) return zrt_error(ZRT_ERR_INVALID_ARG, "zrt_engine_step: NULL engine");
  if (!eng->built)
    return zrt_error(ZRT_ERR_INVALID_ARG, "zrt_engine_step: call zrt_engine_build first");
  zrt_step_info local;
  double t_enter = zrt_now_s();
  if (!info) info = &local;
  memset(info, 0, sizeof *info);
  int boundary = 0;
  ZRT_CHECK(zrt_engine_step_accumulate(eng, loss, t_enter, info, &boundary));
  if (!boundary) {
    zrt_engine_phase_enter(eng, ZRT_PHASE_OTHER, zrt_now_s()); /* until the next pass */
    return ZRT_OK;
  }
  double t_opt;
  zrt_gradstats_verdict v;
  zrt_status st;
  info->boundary = 1;
  ZRT_CHECK(zrt_engine_step_reduce(eng, &t_opt));
  ZRT_CHECK(zrt_engine_step_verdict(eng, info, &v, &st));
  st = zrt_engine_step_apply_phase(eng, &v, t_opt, st, info);
  if (st == ZRT_OK) st = zrt_engine_step_nonfinite(eng, &v);
  return zrt_engine_step_close(eng, t_enter, st, info);
}
