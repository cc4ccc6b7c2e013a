/*
 * test_engine_twin_flow.c — Twin-Flow (zero_optimization.offload_optimizer
 * .ratio, stage 3; run by ctest at -n 1, 2 and 4). A program of NMOD uneven
 * modules, one with a NO_DECAY parameter (bf16 and fp16, AdamW with weight
 * decay, clipping 1.0, 2 micro-batches of accumulation, buckets of 1024
 * elements, overlap_comm on) is trained for STEPS optimizer steps with
 * offload_optimizer cpu at ratios 0, 0.3, 0.5, 0.7 and 1 (sub_group_size 0:
 * every module its own sub-group, so G = NMOD = 6 and DeepSpeed's
 * int((1 - r) * G) puts the first 6, 4, 3, 1 and 0 modules on the device),
 * and at ratio 0.5 with sub_group_size SGS so that sub-groups span several
 * modules. Under fp16, step 2 gets non-finite gradients injected into the
 * accumulator (ZRT_INJECT_NONFINITE_GRADS) and step 3 a real fp16 Inf in one
 * rank's gradients, so two steps are skipped. Checks, per rank:
 *  - placement: module m's master, states and fp32 gradient accumulator are
 *    in the host pool exactly when m >= the split (optim_host == grad_host),
 *    ratio 0 creates no host pool at all (no optimizer offload);
 *  - every step's grad norm, skip flag and loss scale, and every module's
 *    final fp32 master and both Adam moments, are bitwise those of ratio 0
 *    (the device optimizer and the CPU optimizer perform the same IEEE
 *    operations in the same order on the CPU backend);
 *  - pools = memest exactly: device and host peaks of params16, grads,
 *    master32, optim_state and comm equal zrt_memest_predict given the
 *    engine's twin_device_padded, which equals the padded elements of the
 *    modules before the split;
 *  - checkpoints: saved at ratio 0.3 after step 3, resumed at ratios 0.7, 1
 *    and 0 (and one saved at ratio 1 resumed at 0.5): bitwise equal to the
 *    run that never stopped;
 *  - refused and ignored combinations: ratio < 1 with offload_optimizer nvme
 *    and with offload_param cpu fail at build with ZRT_ERR_CONFIG naming the
 *    key, why, and the fix; ratio 1.5 is a config range error; at stage 2
 *    the ratio is ignored (DeepSpeed ignores it there): every module is
 *    offloaded and the run equals ratio 1 bitwise.
 */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dtype.h"
#include "memest.h"
#include "zt_engine.h"
#include "zt_memest.h"
#include "zt_mpi.h"
#include "zt_train.h"
#include "ztest.h"

#define NMOD 6
#define STEPS 5
#define ACCUM 2
#define SGS "6000" /* sub-groups of several modules at any world size here */

static char tmpdir[1024];
static int first_param[NMOD]; /* module m's first parameter id (offset 0 of its flat buffer) */

typedef struct outcome {
  float norm[STEPS], scale[STEPS];
  int skipped[STEPS];
  float *state[NMOD][3]; /* master, m, v */
  int64_t len[NMOD];
} outcome;

static void outcome_free(outcome *o) {
  for (int m = 0; m < NMOD; m++)
    for (int k = 0; k < 3; k++) free(o->state[m][k]);
}

static int64_t numel_of(int m) { return 2000 + 1531 * m; }

typedef struct run_opts {
  int stage, fp16;
  const char *ratio, *sgs; /* NULL: defaults (1, 1e9) */
  const char *device;      /* offload_optimizer.device (NULL: cpu) */
  const char *param;       /* offload_param.device (NULL: none) */
} run_opts;

/* Builds the engine; returns the build status (the engine is destroyed and
 * *out NULL on failure). */
static zrt_status make(const run_opts *ro, zrt_engine **out) {
  zrt_config *cfg;
  ZT_OK(zrt_config_create(&cfg));
  char v[64];
  ZT_OK(zrt_config_set(cfg, "zrt.backend", zt_host_backend(), "test"));
  snprintf(v, sizeof v, "%d", ro->stage);
  ZT_OK(zrt_config_set(cfg, "zero_optimization.stage", v, "test"));
  ZT_OK(zrt_config_set(cfg, ro->fp16 ? "fp16.enabled" : "bf16.enabled", "true", "test"));
  if (ro->fp16) ZT_OK(zrt_config_set(cfg, "fp16.initial_scale_power", "8", "test"));
  ZT_OK(zrt_config_set(cfg, "optimizer.type", "AdamW", "test"));
  ZT_OK(zrt_config_set(cfg, "optimizer.params.lr", "0.01", "test"));
  ZT_OK(zrt_config_set(cfg, "optimizer.params.weight_decay", "0.1", "test"));
  ZT_OK(zrt_config_set(cfg, "gradient_clipping", "1.0", "test"));
  ZT_OK(zrt_config_set(cfg, "train_micro_batch_size_per_gpu", "1", "test"));
  snprintf(v, sizeof v, "%d", ACCUM);
  ZT_OK(zrt_config_set(cfg, "gradient_accumulation_steps", v, "test"));
  ZT_OK(zrt_config_set(cfg, "zero_optimization.reduce_bucket_size", "1024", "test"));
  ZT_OK(zrt_config_set(cfg, "zero_optimization.overlap_comm", "true", "test"));
  ZT_OK(zrt_config_set(cfg, "zero_optimization.stage3_param_persistence_threshold", "0", "test"));
  ZT_OK(zrt_config_set(cfg, "zero_optimization.stage3_prefetch_bucket_size", "0", "test"));
  ZT_OK(zrt_config_set(cfg, "zero_optimization.stage3_max_reuse_distance", "0", "test"));
  ZT_OK(zrt_config_set(cfg, "zrt.comm", "mpi", "test"));
  ZT_OK(zrt_config_set(cfg, "zero_optimization.offload_optimizer.device",
                       ro->device ? ro->device : "cpu", "test"));
  if (ro->device && !strcmp(ro->device, "nvme"))
    ZT_OK(zrt_config_set(cfg, "zero_optimization.offload_optimizer.nvme_path", tmpdir, "test"));
  if (ro->param)
    ZT_OK(zrt_config_set(cfg, "zero_optimization.offload_param.device", ro->param, "test"));
  ZT_OK(zrt_config_set(cfg, "zrt.pin_memory_fallback", "true", "test"));
  ZT_OK(zrt_config_set(cfg, "zero_optimization.sub_group_size", ro->sgs ? ro->sgs : "0", "test"));
  if (ro->ratio)
    ZT_OK(zrt_config_set(cfg, "zero_optimization.offload_optimizer.ratio", ro->ratio, "test"));
  zrt_engine *eng = NULL;
  /* a refused combination stops here: the config's offload rule */
  zrt_status cst = zrt_engine_create(cfg, &eng);
  zrt_config_destroy(cfg);
  if (cst != ZRT_OK) return cst;
  for (int m = 0; m < NMOD; m++) {
    char n[32];
    int mod, par;
    snprintf(n, sizeof n, "m%d", m);
    ZT_OK(zrt_module_add(eng, n, &mod));
    snprintf(n, sizeof n, "m%d.w", m);
    int64_t numel = numel_of(m) - (m == 2 ? 300 : 0);
    zrt_init init = {.kind = ZRT_INIT_NORMAL, .a = 0.02f};
    ZT_OK(zrt_param_add(eng, mod, n, 1, &numel, init, 0, &par));
    first_param[m] = par;
    if (m == 2) { /* a NO_DECAY piece: weight decay 0 on both sides of the split */
      int64_t nb = 300;
      zrt_init one = {.kind = ZRT_INIT_CONST, .a = 1.0f};
      ZT_OK(zrt_param_add(eng, mod, "m2.norm", 1, &nb, one, ZRT_PARAM_NO_DECAY, &par));
    }
  }
  zrt_status st = zrt_engine_build(eng);
  if (st != ZRT_OK) {
    zrt_engine_destroy(eng);
    eng = NULL;
  }
  *out = eng;
  return st;
}

static zrt_engine *make_ok(const run_opts *ro) {
  zrt_engine *eng = NULL;
  ZT_OK(make(ro, &eng));
  return eng;
}

/* Optimizer steps [s0, s1): deterministic gradients of rank, step, micro
 * and module (fp16: an Inf at step 3 on rank 0, micro 1, module 1). */
static void train(zrt_engine *eng, int fp16, int s0, int s1, int rank, outcome *o) {
  int64_t numel[NMOD];
  for (int m = 0; m < NMOD; m++) numel[m] = numel_of(m);
  for (int s = s0; s < s1; s++) {
    zrt_step_info si;
    /* a module's parameters are back to back from its first one's grad */
    zt_fake_grad_step(eng, fp16 ? ZRT_F16 : ZRT_BF16, NMOD, numel, first_param, ACCUM, s, rank,
                      fp16 ? 2 : -1, &si);
    ZT_CHECK(si.boundary);
    o->norm[s] = si.grad_norm;
    o->scale[s] = si.loss_scale;
    o->skipped[s] = si.skipped;
  }
}

static void states(zrt_engine *eng, outcome *o) {
  for (int m = 0; m < NMOD; m++) {
    int64_t off;
    zrt_engine_master_extent(eng, m, &off, &o->len[m]);
    for (int k = 0; k < 3; k++) {
      o->state[m][k] = malloc((size_t)o->len[m] * 4);
      ZT_OK(zrt_engine_state_io(eng, m, (zrt_state_array)k, ZRT_IO_READ, o->state[m][k]));
    }
  }
}

static void same(const outcome *a, const outcome *b, const char *what, int rank) {
  int bad = 0;
  for (int s = 0; s < STEPS; s++) {
    if (memcmp(&a->norm[s], &b->norm[s], 4) || a->scale[s] != b->scale[s] ||
        a->skipped[s] != b->skipped[s]) {
      bad++;
      fprintf(stderr, "rank %d %s step %d: norm %.9g/%.9g scale %g/%g skipped %d/%d\n", rank, what,
              s + 1, (double)a->norm[s], (double)b->norm[s], (double)a->scale[s],
              (double)b->scale[s], a->skipped[s], b->skipped[s]);
    }
  }
  double maxd = 0;
  for (int m = 0; m < NMOD; m++)
    for (int k = 0; k < 3; k++) {
      if (a->len[m] != b->len[m]) {
        bad++;
        continue;
      }
      if (memcmp(a->state[m][k], b->state[m][k], (size_t)a->len[m] * 4)) {
        bad++;
        for (int64_t i = 0; i < a->len[m]; i++)
          maxd = fmax(maxd, fabs((double)a->state[m][k][i] - (double)b->state[m][k][i]));
        fprintf(stderr, "rank %d %s: module %d state %d differs\n", rank, what, m, k);
      }
    }
  if (rank == 0)
    printf("%s: norms, skips, scales and master/m/v of %d modules: %s (max diff %g)\n", what, NMOD,
           bad ? "DIFFER" : "bitwise equal", maxd);
  ZT_CHECK(bad == 0);
}

/* Placement and pools vs memest, exactly. split: modules before it on the
 * device. */
static void check_layout(zrt_engine *eng, int split, int world, int rank, const char *what) {
  int64_t devpad = 0;
  for (int m = 0; m < NMOD; m++) {
    zrt_engine_module_view me_ = zt_module(eng, m), *me = &me_;
    ZT_CHECK(me->optim_host == (m >= split));
    ZT_CHECK(me->grad_host == me->optim_host);
    if (m < split) devpad += me->padded;
  }
  ZT_CHECK((zt_probe(eng).host_pool != NULL) == (split < NMOD));
  ZT_CHECK(zrt_engine_twin_split(eng) == split);
  zrt_memest_layout lay;
  zt_memest_layout_of(eng, &lay);
  lay.max_live_elems = zt_view(eng).cfg->stage3_max_live_parameters;
  lay.offload_optimizer = split < NMOD;
  lay.twin_device_padded = zrt_engine_twin_device_padded(eng);
  ZT_CHECK(lay.twin_device_padded == devpad);
  zrt_memest_result want;
  zrt_memest_predict(&lay, &want);
  zrt_mem_stats dev, host;
  ZT_OK(zrt_engine_memory(eng, ZRT_MEM_DEVICE, &dev));
  ZT_OK(zrt_engine_memory(eng, ZRT_MEM_HOST_PINNED, &host));
  static const zrt_mem_category cats[] = {ZRT_MEM_PARAMS16, ZRT_MEM_GRADS, ZRT_MEM_MASTER32,
                                          ZRT_MEM_OPTIM_STATE, ZRT_MEM_COMM};
  int bad = 0;
  for (size_t k = 0; k < sizeof cats / sizeof cats[0]; k++) {
    zrt_mem_category c = cats[k];
    uint64_t hp = zt_probe(eng).host_pool ? host.peak[c] : 0;
    if (dev.peak[c] != want.device[c] || hp != want.host[c]) bad++;
    if (rank == 0)
      printf("%s N %d %-11s device %9zu memest %9llu | host %9llu memest %9llu\n", what, world,
             zrt_mem_category_name(c), dev.peak[c], (unsigned long long)want.device[c],
             (unsigned long long)hp, (unsigned long long)want.host[c]);
  }
  ZT_CHECK(bad == 0);
}

int main(int argc, char **argv) {
  ZT_MPI_INIT(&argc, &argv);
  int rank, world;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  if (rank == 0) {
    const char *base = getenv("ZRT_BUILD_DIR");
    if (!base || access(base, W_OK)) base = getenv("TMPDIR");
    if (!base || access(base, W_OK)) base = "/tmp";
    snprintf(tmpdir, sizeof tmpdir, "%s/zrt_twin_XXXXXX", base);
    ZT_CHECK(mkdtemp(tmpdir) != NULL);
  }
  MPI_Bcast(tmpdir, sizeof tmpdir, MPI_CHAR, 0, MPI_COMM_WORLD);
  /* G = 6 one-module sub-groups: int((1 - r) * 6) modules on the device */
  static const struct {
    const char *ratio;
    int split;
  } R[] = {{"0", 6}, {"0.3", 4}, {"0.5", 3}, {"0.7", 1}, {"1", 0}};
  for (int fp16 = 0; fp16 <= 1; fp16++) {
    if (fp16) { /* the injection is a test hook: it acts with ZRT_TEST_HOOKS=1 */
      setenv("ZRT_TEST_HOOKS", "1", 1);
      setenv("ZRT_INJECT_NONFINITE_GRADS", "2", 1);
    } else {
      unsetenv("ZRT_TEST_HOOKS");
      unsetenv("ZRT_INJECT_NONFINITE_GRADS");
    }
    const char *dt = fp16 ? "fp16" : "bf16";
    outcome ref = {0};
    for (size_t k = 0; k < sizeof R / sizeof R[0]; k++) {
      run_opts ro = {.stage = 3, .fp16 = fp16, .ratio = R[k].ratio};
      outcome o = {0};
      zrt_engine *eng = make_ok(&ro);
      char what[96];
      snprintf(what, sizeof what, "%s stage 3 ratio %s", dt, R[k].ratio);
      train(eng, fp16, 0, STEPS, rank, &o);
      states(eng, &o);
      check_layout(eng, R[k].split, world, rank, what);
      zrt_engine_destroy(eng);
      if (fp16) ZT_CHECK(o.skipped[1] && o.skipped[2] && !o.skipped[0] && !o.skipped[3]);
      if (k == 0) {
        ref = o;
        continue;
      }
      snprintf(what, sizeof what, "%s stage 3 ratio %s vs ratio 0", dt, R[k].ratio);
      same(&ref, &o, what, rank);
      outcome_free(&o);
    }
    /* sub-groups of several modules: the split follows DeepSpeed's accumulation */
    {
      run_opts ro = {.stage = 3, .fp16 = fp16, .ratio = "0.5", .sgs = SGS};
      outcome o = {0};
      zrt_engine *eng = make_ok(&ro);
      int64_t acc = 0;
      int G = 0, grp[NMOD];
      for (int m = 0; m < NMOD; m++) {
        grp[m] = G;
        acc += zt_module(eng, m).part;
        if (acc >= atoll(SGS) || m == NMOD - 1) G++, acc = 0;
      }
      int first = (int)((1.0 - 0.5) * G), split = NMOD;
      for (int m = NMOD - 1; m >= 0; m--)
        if (grp[m] >= first) split = m;
      char what[96];
      snprintf(what, sizeof what, "%s stage 3 ratio 0.5 sub_group_size %s (%d groups, split %d)",
               dt, SGS, G, split);
      ZT_CHECK(G > 1 && G < NMOD && split > 0 && split < NMOD);
      train(eng, fp16, 0, STEPS, rank, &o);
      states(eng, &o);
      check_layout(eng, split, world, rank, what);
      zrt_engine_destroy(eng);
      same(&ref, &o, what, rank);
      outcome_free(&o);
    }
    /* checkpoints across ratios */
    static const struct {
      const char *from, *to;
    } C[] = {{"0.3", "0.7"}, {"0.3", "1"}, {"0.3", "0"}, {"1", "0.5"}};
    for (size_t k = 0; k < sizeof C / sizeof C[0]; k++) {
      char dir[1200];
      snprintf(dir, sizeof dir, "%s/ckpt_%d_%zu", tmpdir, fp16, k);
      outcome o = {0};
      run_opts ra = {.stage = 3, .fp16 = fp16, .ratio = C[k].from};
      zrt_engine *a = make_ok(&ra);
      train(a, fp16, 0, 3, rank, &o);
      ZT_OK(zrt_engine_save(a, dir, NULL));
      zrt_engine_destroy(a);
      run_opts rb = {.stage = 3, .fp16 = fp16, .ratio = C[k].to};
      zrt_engine *b = make_ok(&rb);
      ZT_OK(zrt_engine_load(b, dir, NULL));
      train(b, fp16, 3, STEPS, rank, &o);
      states(b, &o);
      zrt_engine_destroy(b);
      for (int s = 0; s < 3; s++) { /* steps before the save ran in a */
        ZT_CHECK(!memcmp(&o.norm[s], &ref.norm[s], 4));
      }
      char what[96];
      snprintf(what, sizeof what, "%s checkpoint ratio %s -> %s resumed vs uninterrupted", dt,
               C[k].from, C[k].to);
      same(&ref, &o, what, rank);
      outcome_free(&o);
    }
    outcome_free(&ref);
  }
  unsetenv("ZRT_INJECT_NONFINITE_GRADS");
  unsetenv("ZRT_TEST_HOOKS");

  /* stage 2: the ratio is ignored (as DeepSpeed does), the whole optimizer offloaded */
  {
    outcome a = {0}, b = {0};
    run_opts r1 = {.stage = 2, .ratio = "0.5"}, r2 = {.stage = 2};
    zrt_engine *eng = make_ok(&r1);
    for (int m = 0; m < NMOD; m++)
      ZT_CHECK(zt_module(eng, m).optim_host && zt_module(eng, m).grad_host);
    train(eng, 0, 0, STEPS, rank, &a);
    states(eng, &a);
    zrt_engine_destroy(eng);
    eng = make_ok(&r2);
    train(eng, 0, 0, STEPS, rank, &b);
    states(eng, &b);
    zrt_engine_destroy(eng);
    same(&b, &a, "bf16 stage 2 ratio 0.5 (ignored) vs ratio 1", rank);
    outcome_free(&a);
    outcome_free(&b);
  }
  /* refused combinations: the error names the key, why and the fix */
  {
    zrt_engine *eng = NULL;
    run_opts rn = {.stage = 3, .ratio = "0.5", .device = "nvme"};
    ZT_CHECK(make(&rn, &eng) == ZRT_ERR_CONFIG && eng == NULL);
    ZT_CONTAINS(zrt_last_error(), "zero_optimization.offload_optimizer.ratio 0.5");
    ZT_CONTAINS(zrt_last_error(), "nvme is not supported");
    ZT_CONTAINS(zrt_last_error(), "set offload_optimizer.device cpu to split, or ratio 1");
    run_opts rp = {.stage = 3, .ratio = "0.3", .param = "cpu"};
    ZT_CHECK(make(&rp, &eng) == ZRT_ERR_CONFIG && eng == NULL);
    ZT_CONTAINS(zrt_last_error(), "offload_param.device cpu is not supported");
    ZT_CONTAINS(zrt_last_error(), "set offload_optimizer.ratio 1 or remove offload_param");
    zrt_config *cfg;
    ZT_OK(zrt_config_create(&cfg));
    ZT_CHECK(zrt_config_set(cfg, "zero_optimization.offload_optimizer.ratio", "1.5", "test") ==
             ZRT_ERR_CONFIG);
    ZT_CONTAINS(zrt_last_error(), "zero_optimization.offload_optimizer.ratio");
    zrt_config_destroy(cfg);
    if (rank == 0) printf("refused: ratio with nvme, with offload_param, out of range\n");
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) {
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    ZT_CHECK(system(cmd) == 0);
  }
  ZT_MPI_DONE();
}
