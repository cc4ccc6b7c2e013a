/*
 * test_engine_equiv.c — acceptance test of the engine at world size N (run
 * by ctest at -n 2 and -n 4). The MLP of examples/mlp is trained for
 * STEPS optimizer steps (AdamW, weight decay on weights only, 2 micro-batches
 * of accumulation, gradient clipping at 1.0) at ZeRO stages 0-3 x
 * fp32/bf16/fp16. Reference: the same model and global batch trained in
 * plain C double precision inside each rank (one process = the np=1
 * stage-0 run, exactly). Checks:
 *  - partitioned init: every rank's fp32 master shard equals the reference
 *    init bitwise, at every stage (so init is identical across world sizes);
 *  - final fp32 masters vs the reference: |diff| <= 2e-5 (fp32; seen 2.2e-7),
 *    3e-2 (bf16 / fp16: forward and grads in 16 bits; Adam turns the sign
 *    noise of near-zero grads into +-lr updates, so up to 6 steps x lr 1e-2
 *    x 0.5 can differ; seen 2.2e-2);
 *  - offload_optimizer cpu (stages 1-3) and offload_param cpu (stage 3) vs
 *    the same stage without offload: <= 1e-6 (fp32), 3e-2 (16-bit);
 *  - stages 1-3 vs stage 0 at the same dtype: <= 1e-6 (fp32; seen 9e-8),
 *    3e-2 (16-bit: stage 0/1 accumulate micro-batches in the working dtype
 *    like DeepSpeed, stage 2/3 in the fp32 accumulation shard).
 */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "examples/mlp/mlp_model.h"
#include "rng.h"
#include "zt_bits.h"
#include "zt_engine.h"
#include "zt_mpi.h"
#include "ztest.h"

#define STEPS 6
#define ACCUM 2
#define MICRO 4
#define HID 24
#define LR 1e-2
#define WD 0.01
#define CLIP 1.0

/* ---------------------------------------------------- double reference */

typedef struct refp {
  int64_t numel;
  double *v, *m, *s;
  int decay;
} refp;

static void ref_init(const mlp *shape, uint64_t seed, refp p[2 * MLP_LAYERS]) {
  static const char *names[MLP_LAYERS] = {"fc1", "fc2", "head"};
  for (int l = 0; l < MLP_LAYERS; l++) {
    for (int k = 0; k < 2; k++) {
      refp *q = &p[2 * l + k];
      char n[64];
      snprintf(n, sizeof n, "%s.%s", names[l], k ? "bias" : "weight");
      q->numel = k ? shape->dims[l + 1] : (int64_t)shape->dims[l] * shape->dims[l + 1];
      q->v = calloc((size_t)q->numel, sizeof(double));
      q->m = calloc((size_t)q->numel, sizeof(double));
      q->s = calloc((size_t)q->numel, sizeof(double));
      q->decay = !k;
      uint64_t h = zrt_rng_name_hash(n);
      for (int64_t i = 0; i < q->numel; i++) {
        float f = k ? (float)(0.1f * (2.0 * zrt_rng_uniform(seed, h, (uint64_t)i) - 1.0))
                    : (float)((float)(1.0 / sqrt((double)shape->dims[l])) *
                              zrt_rng_normal(seed, h, (uint64_t)i));
        q->v[i] = f;
      }
    }
  }
}

/* accumulates per-sample gradients of 0.5||yhat-y||^2 times w into g */
static void ref_grad(const mlp *sh, refp p[], int64_t idx, double w, double **g) {
  float xf[64], yf[64];
  mlp_sample(sh, idx, xf, yf);
  double a[MLP_LAYERS + 1][64], d[64], dn[64];
  for (int i = 0; i < sh->dims[0]; i++) a[0][i] = xf[i];
  for (int l = 0; l < MLP_LAYERS; l++) {
    int in = sh->dims[l], out = sh->dims[l + 1];
    for (int o = 0; o < out; o++) {
      double s = p[2 * l + 1].v[o];
      for (int i = 0; i < in; i++) s += p[2 * l].v[(size_t)o * in + i] * a[l][i];
      a[l + 1][o] = l < MLP_LAYERS - 1 ? tanh(s) : s;
    }
  }
  int O = sh->dims[MLP_LAYERS];
  for (int o = 0; o < O; o++) d[o] = (a[MLP_LAYERS][o] - yf[o]) * w;
  for (int l = MLP_LAYERS - 1; l >= 0; l--) {
    int in = sh->dims[l], out = sh->dims[l + 1];
    for (int o = 0; o < out; o++) {
      g[2 * l + 1][o] += d[o];
      for (int i = 0; i < in; i++) g[2 * l][(size_t)o * in + i] += d[o] * a[l][i];
    }
    if (l > 0) {
      for (int i = 0; i < in; i++) {
        double s = 0;
        for (int o = 0; o < out; o++) s += d[o] * p[2 * l].v[(size_t)o * in + i];
        dn[i] = s * (1 - a[l][i] * a[l][i]);
      }
      memcpy(d, dn, sizeof(double) * (size_t)in);
    }
  }
}

static void ref_train(const mlp *sh, refp p[], int world) {
  double *g[2 * MLP_LAYERS];
  for (int k = 0; k < 2 * MLP_LAYERS; k++) g[k] = calloc((size_t)p[k].numel, sizeof(double));
  int64_t per = (int64_t)world * MICRO; /* samples per micro-step over all ranks */
  for (int s = 0; s < STEPS; s++) {
    for (int k = 0; k < 2 * MLP_LAYERS; k++) memset(g[k], 0, sizeof(double) * (size_t)p[k].numel);
    for (int64_t j = 0; j < per * ACCUM; j++)
      ref_grad(sh, p, (int64_t)s * per * ACCUM + j, 1.0 / (double)(per * ACCUM), g);
    double ss = 0;
    for (int k = 0; k < 2 * MLP_LAYERS; k++)
      for (int64_t i = 0; i < p[k].numel; i++) ss += g[k][i] * g[k][i];
    double coef = CLIP / (sqrt(ss) + 1e-6);
    if (coef > 1) coef = 1;
    double bc1 = 1 - pow(0.9, s + 1), bc2 = 1 - pow(0.999, s + 1);
    for (int k = 0; k < 2 * MLP_LAYERS; k++)
      for (int64_t i = 0; i < p[k].numel; i++) {
        double gi = g[k][i] * coef, v = p[k].v[i];
        if (p[k].decay) v *= 1 - LR * WD;
        p[k].m[i] = 0.9 * p[k].m[i] + 0.1 * gi;
        p[k].s[i] = 0.999 * p[k].s[i] + 0.001 * gi * gi;
        v -= (LR / bc1) * p[k].m[i] / (sqrt(p[k].s[i]) / sqrt(bc2) + 1e-8);
        p[k].v[i] = v;
      }
  }
  for (int k = 0; k < 2 * MLP_LAYERS; k++) free(g[k]);
}

/* ----------------------------------------------------------- engine run */

static const char *dt_name[3] = {"fp32", "fp16", "bf16"};

/* Trains at (stage, dtype); returns this rank's master extents flattened
 * as param-ordered values (NAN in padding) in out[module] and checks init. */
static void engine_run(int stage, int dt, int off, refp init[], float *out[MLP_LAYERS],
                       int64_t outlen[]) {
  zrt_config *cfg;
  ZT_OK(zrt_config_create(&cfg));
  /* the model computes on the host: pin the CPU backend (auto picks CUDA on a GPU) */
  ZT_OK(zrt_config_set(cfg, "zrt.backend", zt_host_backend(), "test"));
  char v[64];
  snprintf(v, sizeof v, "%d", stage);
  ZT_OK(zrt_config_set(cfg, "zero_optimization.stage", v, "test"));
  ZT_OK(zrt_config_set(cfg, "train_micro_batch_size_per_gpu", "4", "test"));
  ZT_OK(zrt_config_set(cfg, "gradient_accumulation_steps", "2", "test"));
  ZT_OK(zrt_config_set(cfg, "gradient_clipping", "1.0", "test"));
  ZT_OK(zrt_config_set(cfg, "optimizer.type", "AdamW", "test"));
  ZT_OK(zrt_config_set(cfg, "optimizer.params.lr", "0.01", "test"));
  ZT_OK(zrt_config_set(cfg, "optimizer.params.weight_decay", "0.01", "test"));
  ZT_OK(zrt_config_set(cfg, "zero_optimization.reduce_bucket_size", "256", "test"));
  ZT_OK(zrt_config_set(cfg, "zero_optimization.stage3_param_persistence_threshold", "100", "test"));
  ZT_OK(
      zrt_config_set(cfg, "zero_optimization.overlap_comm", stage >= 2 ? "true" : "false", "test"));
  ZT_OK(zrt_config_set(cfg, "zrt.comm", "mpi", "test"));
  if (off >= 1) {
    ZT_OK(zrt_config_set(cfg, "zero_optimization.offload_optimizer.device", "cpu", "test"));
    ZT_OK(zrt_config_set(cfg, "zrt.pin_memory_fallback", "true", "test"));
    /* pinned: on the twin the offload pipe then runs in stream mode (its
     * queued tiles are what twin_equal.sh compares with the cpu's bits) */
    ZT_OK(zrt_config_set(cfg, "zero_optimization.offload_optimizer.pin_memory", "true", "test"));
  }
  if (off >= 2) ZT_OK(zrt_config_set(cfg, "zero_optimization.offload_param.device", "cpu", "test"));
  if (dt == 1) {
    ZT_OK(zrt_config_set(cfg, "fp16.enabled", "true", "test"));
    /* 2^8: the scaled grads of two accumulated micro-batches stay finite in fp16 */
    ZT_OK(zrt_config_set(cfg, "fp16.initial_scale_power", "8", "test"));
  }
  if (dt == 2) ZT_OK(zrt_config_set(cfg, "bf16.enabled", "true", "test"));
  zrt_engine *eng;
  ZT_OK(zrt_engine_create(cfg, &eng));
  mlp m;
  ZT_OK(mlp_register(eng, &m, 16, HID, 4, MICRO));
  ZT_OK(zrt_engine_build(eng));
  ZT_OK(mlp_alloc(eng, &m));
  /* partitioned init equals the reference init bitwise */
  int bad_init = 0;
  static int runs;
  int run_no = runs++;
  for (int mod = 0; mod < MLP_LAYERS; mod++) {
    int64_t off, len;
    zrt_engine_master_extent(eng, mod, &off, &len);
    float *buf = malloc((size_t)len * 4);
    ZT_OK(zrt_engine_get_master(eng, mod, buf));
    for (int64_t e = 0; e < len; e++) {
      int p = zrt_engine_param_at(eng, mod, off + e);
      float want = 0;
      if (p >= 0) want = (float)init[p].v[off + e - zrt_engine_param_entry(eng, p)->offset];
      if (memcmp(&want, &buf[e], 4)) bad_init++;
    }
    free(buf);
  }
  printf("stage %d %s: init mismatches vs reference: %d (must be 0)\n", stage, dt_name[dt],
         bad_init);
  ZT_CHECK(bad_init == 0);
  zrt_engine_info info;
  ZT_OK(zrt_engine_get_info(eng, &info));
  ZT_CHECK(info.zero_stage == stage && (int)info.dtype == dt);
  for (int s = 0; s < STEPS; s++)
    for (int k = 0; k < ACCUM; k++) {
      float loss;
      zrt_step_info si;
      int64_t base = (((int64_t)s * ACCUM + k) * info.world_size + info.rank) * MICRO;
      ZT_OK(mlp_micro(eng, &m, base, &loss));
      ZT_OK(zrt_engine_step(eng, loss, &si));
      ZT_CHECK(si.boundary == (k == ACCUM - 1));
      if (si.boundary) ZT_CHECK(!si.skipped);
    }
  for (int mod = 0; mod < MLP_LAYERS; mod++) {
    int64_t off, len;
    zrt_engine_master_extent(eng, mod, &off, &len);
    float *buf = malloc((size_t)len * 4);
    ZT_OK(zrt_engine_get_master(eng, mod, buf));
    /* keep only parameter elements, in flat order */
    int64_t n = 0;
    for (int64_t e = 0; e < len; e++)
      if (zrt_engine_param_at(eng, mod, off + e) >= 0) buf[n++] = buf[e];
    out[mod] = buf;
    outlen[mod] = n;
    /* the final masters' bits, for the cpu-vs-twin comparison (tests/twin_equal.sh) */
    uint64_t h = 1469598103934665603ull;
    for (int64_t e = 0; e < n * 4; e++)
      h = (h ^ ((const unsigned char *)buf)[e]) * 1099511628211ull;
    zt_bits("bits run %d rank %lld stage %d %s module %d fnv1a %016llx", run_no,
            (long long)info.rank, stage, dt_name[dt], mod, (unsigned long long)h);
  }
  mlp_free(eng, &m);
  zrt_engine_destroy(eng);
  zrt_config_destroy(cfg);
}

int main(int argc, char **argv) {
  /* one write per line: mpiexec forwards each rank's output in the chunks it
   * reads, so block-buffered lines of two ranks could interleave mid-line
   * and a "bits" line compared by tests/twin/twin_equal.sh would be lost */
  setvbuf(stdout, NULL, _IOLBF, 0);
  ZT_MPI_INIT(&argc, &argv);
  int rank, world;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  mlp sh;
  memset(&sh, 0, sizeof sh);
  sh.dims[0] = 16;
  sh.dims[1] = sh.dims[2] = HID;
  sh.dims[3] = 4;
  refp init[2 * MLP_LAYERS], ref[2 * MLP_LAYERS];
  ref_init(&sh, 42, init);
  ref_init(&sh, 42, ref);
  ref_train(&sh, ref, world);
  /* the reference's per-module flat vectors */
  double *refflat[MLP_LAYERS];
  int64_t reflen[MLP_LAYERS];
  for (int l = 0; l < MLP_LAYERS; l++) {
    reflen[l] = ref[2 * l].numel + ref[2 * l + 1].numel;
    refflat[l] = malloc(sizeof(double) * (size_t)reflen[l]);
    memcpy(refflat[l], ref[2 * l].v, sizeof(double) * (size_t)ref[2 * l].numel);
    memcpy(refflat[l] + ref[2 * l].numel, ref[2 * l + 1].v,
           sizeof(double) * (size_t)ref[2 * l + 1].numel);
  }
  for (int dt = 0; dt < 3; dt++) {
    float *s0[MLP_LAYERS] = {0};
    int64_t s0len[MLP_LAYERS];
    for (int stage = 0; stage <= 3; stage++) {
      float *got[MLP_LAYERS], *offgot[3][MLP_LAYERS];
      int64_t glen[MLP_LAYERS], offlen[3][MLP_LAYERS];
      engine_run(stage, dt, 0, init, got, glen);
      for (int l = 0; l < MLP_LAYERS; l++) {
        /* this rank's extent starts at flat element off (stage 0: everything) */
        int64_t padded = 0, part;
        /* recompute the layout: same rule as the engine */
        padded = ((reflen[l] + world * 32 - 1) / (world * 32)) * world * 32;
        part = padded / world;
        int64_t off = stage == 0 ? 0 : (int64_t)rank * part;
        char what[96];
        snprintf(what, sizeof what, "rank %d stage %d %s module %d vs double reference", rank,
                 stage, dt_name[dt], l);
        ZT_CHECK(off + glen[l] <= reflen[l]);
        ZT_CLOSE_ARRAY(what, got[l], refflat[l] + off, glen[l], dt == 0 ? 2e-5 : 3e-2);
        /* offload (optimizer to cpu at stages 1-3, parameters too at stage 3)
         * reaches the same parameters as the same stage on the device */
        for (int off = 1; stage > 0 && off <= (stage == 3 ? 2 : 1); off++) {
          if (l == 0) engine_run(stage, dt, off, init, offgot[off], offlen[off]);
          snprintf(what, sizeof what, "rank %d stage %d %s module %d offload %s vs no offload",
                   rank, stage, dt_name[dt], l, off == 1 ? "optimizer" : "optimizer+param");
          ZT_CHECK(offlen[off][l] == glen[l]);
          ZT_CLOSE_ARRAY(what, offgot[off][l], got[l], glen[l], dt == 0 ? 1e-6 : 3e-2);
          free(offgot[off][l]);
        }
        if (stage == 0) {
          s0[l] = got[l];
          s0len[l] = glen[l];
        } else {
          const float *base = s0[l] + off;
          snprintf(what, sizeof what, "rank %d stage %d %s module %d vs stage 0", rank, stage,
                   dt_name[dt], l);
          ZT_CHECK(off + glen[l] <= s0len[l]);
          ZT_CLOSE_ARRAY(what, got[l], base, glen[l], dt == 0 ? 1e-6 : 3e-2);
          free(got[l]);
        }
      }
    }
    for (int l = 0; l < MLP_LAYERS; l++) free(s0[l]);
  }
  ZT_MPI_DONE();
}
