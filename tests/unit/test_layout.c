/*
 * test_layout.c — white-box test of the flat module layout and partition
 * ranges (sharding/layout.c) on a hand-assembled engine struct (no comm,
 * no backend: the layout is pure arithmetic on the registration table).
 *
 * For world sizes 1..8 and modules of uneven sizes (empty, 1 element,
 * 31/32/33, primes, interleaved registration of two modules) it checks:
 *  - padded is the smallest multiple of world * ZRT_LAYOUT_ALIGN_ELEMS that
 *    holds numel (>= 1 unit for an empty module); part = padded / world, a
 *    multiple of the alignment (64-byte aligned shards of a 16-bit dtype);
 *  - zrt_engine_shard_range: every flat element owned by exactly one rank,
 *    ranks' shards contiguous, in rank order and equal-sized; out-of-range
 *    module / rank rejected with a message naming them;
 *  - parameters back to back in registration order, non-overlapping, inside
 *    [0, numel); zrt_engine_param_at agrees and gives -1 in the padding;
 *  - zrt_engine_master_extent: the whole buffer at stage 0, the rank's shard
 *    otherwise, equal to the shard range;
 *  - zrt_shard_init_values of every rank's shard, concatenated, equals the
 *    world-size-1 init bitwise (zeros in the padding), and each element
 *    equals zrt_engine_param_init_value;
 *  - the bucket rules: the chunk capped by a device capacity keeps the two
 *    slots' staging within 1/ZRT_LAYOUT_BUCKET_CAP_DIV of it (the largest
 *    aligned chunk that does, at least one unit, never above the uncapped
 *    chunk), the host staging of one bucket per slot, and the gradient
 *    accumulator on the host exactly when the optimizer is offloaded;
 *  - the Twin-Flow split (zrt_layout_twin_split) on DeepSpeed's own inputs:
 *    tests/unit/runtime/zero/test_zero_offloadpp.py (Linear(1024, 1024)
 *    layers, 4 ranks, sub_group_size 8, ratio 0.3: every parameter its own
 *    sub-group; 4 layers -> 8 sub-groups, the first 5 on the device; 8
 *    layers -> 16, the first 11) and the expression int((1 - r) * G) at
 *    ratios whose product is not exact in binary (0.9 x 10 -> 0: all on the
 *    CPU), each expected value what CPython 3 prints for DeepSpeed's own
 *    expression; the accumulation rule (a group closes at >= sub_group_size
 *    or at the last unit; 0 = one unit per group; >= total = one group).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_internal.h"
#include "rng.h"
#include "ztest.h"

#define MAXP 16
#define MAXM 4

typedef struct model_spec {
  const char *what;
  int nmodules;
  int nparams;
  int module_of[MAXP];
  int64_t numel[MAXP];
} model_spec;

static const model_spec specs[] = {
    {"one param of 1 element", 1, 1, {0}, {1}},
    {"31 + 32 + 33", 1, 3, {0, 0, 0}, {31, 32, 33}},
    {"primes, two modules interleaved", 2, 5, {0, 1, 0, 1, 0}, {1009, 7, 257, 4099, 3}},
    {"empty module between two", 3, 2, {0, 2}, {100, 12345}},
    {"exact multiple of 8*32", 1, 2, {0, 0}, {128, 128}},
    {"large uneven", 2, 4, {0, 0, 1, 1}, {65536 + 5, 768, 3 * 768 * 768 + 1, 1}},
};

/* Builds the registration tables of spec for `world` ranks (rank 0). */
static void make_engine(zrt_engine *eng, const model_spec *sp, int world, int stage,
                        zrt_param_entry *params, zrt_module_entry *mods, int mod_ids[MAXM][MAXP]) {
  memset(eng, 0, sizeof *eng);
  memset(mods, 0, MAXM * sizeof *mods);
  memset(params, 0, MAXP * sizeof *params);
  eng->world = world;
  eng->stage = stage;
  eng->policy = zrt_stage_policy_of(stage);
  eng->params = params;
  eng->nparams = sp->nparams;
  eng->modules = mods;
  eng->nmodules = sp->nmodules;
  for (int m = 0; m < sp->nmodules; m++) {
    snprintf(mods[m].name, sizeof mods[m].name, "mod%d", m);
    mods[m].params = mod_ids[m];
  }
  for (int i = 0; i < sp->nparams; i++) {
    zrt_param_entry *p = &params[i];
    snprintf(p->name, sizeof p->name, "mod%d.p%d", sp->module_of[i], i);
    p->name_hash = zrt_rng_name_hash(p->name);
    p->module = sp->module_of[i];
    p->ndim = 1;
    p->shape[0] = p->numel = sp->numel[i];
    /* alternate the init kinds so the init check covers each */
    static const zrt_init inits[4] = {{ZRT_INIT_NORMAL, 0.02f},
                                      {ZRT_INIT_UNIFORM, 0.1f},
                                      {ZRT_INIT_ONES, 0},
                                      {ZRT_INIT_CONST, 3.5f}};
    p->init = inits[i % 4];
    zrt_module_entry *me = &mods[p->module];
    me->params[me->nparams++] = i;
  }
  zrt_engine_layout(eng);
}

static int64_t n_checked;

static void check_world(const model_spec *sp, int world, const float *ref_init[MAXM]) {
  static zrt_cfg cfg;
  cfg.seed = 31337;
  zrt_engine eng;
  zrt_param_entry params[MAXP];
  zrt_module_entry mods[MAXM];
  int mod_ids[MAXM][MAXP];
  int bad = 0;
  for (int stage = 0; stage <= 3; stage += 3) {
    make_engine(&eng, sp, world, stage, params, mods, mod_ids);
    eng.cfg = &cfg;
    for (int m = 0; m < sp->nmodules; m++) {
      const zrt_module_entry *me = &mods[m];
      int64_t unit = (int64_t)world * ZRT_LAYOUT_ALIGN_ELEMS;
      int64_t want_numel = 0;
      for (int i = 0; i < sp->nparams; i++)
        if (sp->module_of[i] == m) want_numel += sp->numel[i];
      /* padding rule: smallest multiple of the unit holding numel (>= 1) */
      int64_t want_padded = (ZRT_MAX(want_numel, 1) + unit - 1) / unit * unit;
      if (me->numel != want_numel || me->padded != want_padded || me->part * world != me->padded ||
          me->part % ZRT_LAYOUT_ALIGN_ELEMS || (me->part * 2) % 64 ||
          zrt_layout_padded(want_numel, world) != want_padded) {
        fprintf(stderr,
                "%s world %d module %d: numel %lld padded %lld part %lld (want %lld %lld)\n",
                sp->what, world, m, (long long)me->numel, (long long)me->padded,
                (long long)me->part, (long long)want_numel, (long long)want_padded);
        bad++;
      }
      /* ownership: every element exactly once, shards contiguous and equal */
      unsigned char *owners = calloc((size_t)me->padded, 1);
      int64_t expect_off = 0;
      for (int r = 0; r < world; r++) {
        int64_t off = -1, len = -1;
        ZT_OK(zrt_engine_shard_range(&eng, m, r, &off, &len));
        if (off != expect_off || len != me->part || off + len > me->padded) bad++;
        for (int64_t e = off; e < off + len && e < me->padded; e++) owners[e]++;
        expect_off = off + len;
        /* master extent of rank r (stage 0: the whole buffer) */
        eng.rank = r;
        int64_t mo, ml;
        zrt_engine_master_extent(&eng, m, &mo, &ml);
        if (stage == 0 ? (mo != 0 || ml != me->padded) : (mo != off || ml != len)) bad++;
      }
      eng.rank = 0;
      if (expect_off != me->padded) bad++;
      int64_t not_once = 0;
      for (int64_t e = 0; e < me->padded; e++) not_once += owners[e] != 1;
      if (not_once) {
        fprintf(stderr, "%s world %d module %d: %lld elements not owned exactly once\n", sp->what,
                world, m, (long long)not_once);
        bad++;
      }
      free(owners);
      /* params: registration order, back to back, inside [0, numel) */
      int64_t next = 0;
      for (int k = 0; k < me->nparams; k++) {
        const zrt_param_entry *p = &params[me->params[k]];
        if (k > 0 && me->params[k] <= me->params[k - 1]) bad++;
        if (p->offset != next || p->offset < 0 || p->offset + p->numel > me->numel) bad++;
        next = p->offset + p->numel;
        /* first, last and middle element map back to this param */
        int64_t probe[3] = {p->offset, p->offset + p->numel / 2, p->offset + p->numel - 1};
        for (int j = 0; j < 3; j++)
          if (zrt_engine_param_at(&eng, m, probe[j]) != me->params[k]) bad++;
      }
      if (next != me->numel) bad++;
      for (int64_t e = me->numel; e < me->padded; e++)
        if (zrt_engine_param_at(&eng, m, e) != -1) {
          bad++;
          break;
        }
      /* init: each rank's shard alone reproduces the world-1 values bitwise */
      float *shard = malloc((size_t)me->part * sizeof(float));
      int64_t mism = 0;
      for (int r = 0; r < world; r++) {
        zrt_engine_init_values(&eng, m, (int64_t)r * me->part, me->part, shard);
        for (int64_t e = 0; e < me->part; e++) {
          int64_t g = (int64_t)r * me->part + e;
          float want = 0.0f;
          if (g < me->numel) {
            want = ref_init[m][g];
            int pid = zrt_engine_param_at(&eng, m, g);
            float direct = zrt_engine_param_init_value(&eng, pid, g - params[pid].offset);
            mism += memcmp(&direct, &want, sizeof(float)) != 0;
          }
          mism += memcmp(&shard[e], &want, sizeof(float)) != 0;
          n_checked++;
        }
      }
      free(shard);
      if (mism) {
        fprintf(stderr, "%s world %d module %d: %lld init values differ from world 1\n", sp->what,
                world, m, (long long)mism);
        bad++;
      }
    }
  }
  ZT_CHECK(bad == 0);
}

static void test_specs(void) {
  for (size_t s = 0; s < sizeof specs / sizeof specs[0]; s++) {
    const model_spec *sp = &specs[s];
    /* world-1 reference init of each module, through the same layout code */
    static zrt_cfg cfg;
    cfg.seed = 31337;
    zrt_engine eng;
    zrt_param_entry params[MAXP];
    zrt_module_entry mods[MAXM];
    int mod_ids[MAXM][MAXP];
    make_engine(&eng, sp, 1, 0, params, mods, mod_ids);
    eng.cfg = &cfg;
    float *ref[MAXM] = {0};
    for (int m = 0; m < sp->nmodules; m++) {
      ref[m] = malloc((size_t)mods[m].padded * sizeof(float));
      zrt_engine_init_values(&eng, m, 0, mods[m].padded, ref[m]);
    }
    /* the world-1 init itself against the RNG definition (rng.h) */
    int64_t def_mism = 0;
    for (int i = 0; i < sp->nparams; i++) {
      const zrt_param_entry *p = &params[i];
      for (int64_t e = 0; e < p->numel; e++) {
        double v = 0;
        switch (p->init.kind) {
        case ZRT_INIT_NORMAL:
          v = p->init.a * zrt_rng_normal(cfg.seed, p->name_hash, (uint64_t)e);
          break;
        case ZRT_INIT_UNIFORM:
          v = p->init.a * (2.0 * zrt_rng_uniform(cfg.seed, p->name_hash, (uint64_t)e) - 1.0);
          break;
        case ZRT_INIT_ONES: v = 1.0; break;
        case ZRT_INIT_CONST: v = p->init.a; break;
        case ZRT_INIT_ZEROS: v = 0; break;
        }
        float f = (float)v;
        def_mism += memcmp(&f, &ref[p->module][p->offset + e], sizeof f) != 0;
      }
    }
    ZT_CHECK(def_mism == 0);
    for (int world = 1; world <= 8; world++) check_world(sp, world, (const float **)ref);
    printf("layout %-34s worlds 1..8 stages 0,3: checked (init mismatches vs definition %lld)\n",
           sp->what, (long long)def_mism);
    for (int m = 0; m < sp->nmodules; m++) free(ref[m]);
  }
  printf("init values compared bitwise across world sizes: %lld\n", (long long)n_checked);
}

static void test_range_errors(void) {
  zrt_engine eng;
  zrt_param_entry params[MAXP];
  zrt_module_entry mods[MAXM];
  int mod_ids[MAXM][MAXP];
  make_engine(&eng, &specs[1], 4, 1, params, mods, mod_ids);
  int64_t off = -7, len = -7;
  ZT_CHECK(zrt_engine_shard_range(&eng, 1, 0, &off, &len) == ZRT_ERR_INVALID_ARG);
  ZT_CONTAINS(zrt_last_error(), "module 1 / rank 0 out of range");
  ZT_CHECK(zrt_engine_shard_range(&eng, 0, 4, &off, &len) == ZRT_ERR_INVALID_ARG);
  ZT_CONTAINS(zrt_last_error(), "module 0 / rank 4 out of range");
  ZT_CHECK(zrt_engine_shard_range(&eng, -1, 0, &off, &len) == ZRT_ERR_INVALID_ARG);
  ZT_CHECK(zrt_engine_shard_range(NULL, 0, 0, &off, &len) == ZRT_ERR_INVALID_ARG);
  ZT_CHECK(off == -7 && len == -7); /* untouched on error */
}

static void test_bucket_rules(void) {
  for (int world = 1; world <= 8; world++)
    for (int cb = 2; cb <= 4; cb += 2) {
      int64_t rbs = 500000000, maxpart = 300000000 / world / 32 * 32;
      int64_t free_chunk = zrt_layout_bucket_chunk(rbs, world, maxpart);
      ZT_CHECK(zrt_layout_bucket_chunk_capped(rbs, world, maxpart, cb, 0) == free_chunk);
      uint64_t caps[] = {24ull << 20, 500ull << 20, 80ull << 30, 1000};
      for (int k = 0; k < 4; k++) {
        int64_t c = zrt_layout_bucket_chunk_capped(rbs, world, maxpart, cb, caps[k]);
        uint64_t staged = 2 * ((uint64_t)world + 1) * (uint64_t)c * (uint64_t)cb;
        uint64_t next = staged + 2 * ((uint64_t)world + 1) * ZRT_LAYOUT_ALIGN_ELEMS * (uint64_t)cb;
        ZT_CHECK(c % ZRT_LAYOUT_ALIGN_ELEMS == 0 && c >= ZRT_LAYOUT_ALIGN_ELEMS);
        ZT_CHECK(c <= free_chunk);
        if (c > ZRT_LAYOUT_ALIGN_ELEMS) /* a tiny capacity still gets one unit */
          ZT_CHECK(staged <= caps[k] / ZRT_LAYOUT_BUCKET_CAP_DIV);
        if (c < free_chunk) ZT_CHECK(next > caps[k] / ZRT_LAYOUT_BUCKET_CAP_DIV);
      }
      /* 24 MiB at 2 ranks bf16: 2 slots x 3 x chunk x 2 bytes <= 1.5 MiB */
      if (world == 2 && cb == 2)
        ZT_CHECK(zrt_layout_bucket_chunk_capped(rbs, 2, maxpart, 2, 24ull << 20) == 131072);
    }
  for (int st = 0; st <= 3; st++) {
    const zrt_stage_policy *pol = zrt_stage_policy_of(st);
    ZT_CHECK(zrt_layout_bucket_host_stage(pol, 96, 4) == (st == 0 ? 384 : 96));
  }
  ZT_CHECK(zrt_layout_grad_acc_host(1) == 1 && zrt_layout_grad_acc_host(2) == 1 &&
           zrt_layout_grad_acc_host(0) == 0);
}

static int64_t elems_of(const void *arg, int i) { return ((const int64_t *)arg)[i]; }

static void test_twin_split(void) {
  /* DeepSpeed's sweep: per layer weight 1024*1024 and bias 1024 elements,
   * partition_numel at 4 ranks = numel / 4 */
  int64_t ds[16];
  for (int i = 0; i < 16; i++) ds[i] = i % 2 ? 1024 / 4 : 1024 * 1024 / 4;
  int G, first;
  ZT_CHECK(zrt_layout_twin_split(8, elems_of, ds, 8, 0.3, &G, &first) == 5 && G == 8 && first == 5);
  ZT_CHECK(zrt_layout_twin_split(16, elems_of, ds, 8, 0.3, &G, &first) == 11 && G == 16 &&
           first == 11);
  /* int((1 - r) * G), CPython 3: first sub-group on the CPU */
  static const struct {
    double r;
    int G, first;
  } ex[] = {{0.3, 10, 7}, {0.9, 10, 0}, {0.7, 3, 0}, {0.3, 5, 3},  {0.5, 3, 1}, {0.1, 10, 9},
            {0.2, 10, 8}, {0.0, 4, 4},  {1.0, 4, 0}, {0.7, 10, 3}, {0.5, 4, 2}, {0.3, 4, 2}};
  int64_t ones[16];
  for (int i = 0; i < 16; i++) ones[i] = 1 + i;
  for (size_t k = 0; k < sizeof ex / sizeof ex[0]; k++) {
    int split = zrt_layout_twin_split(ex[k].G, elems_of, ones, 0, ex[k].r, &G, &first);
    ZT_CHECK(G == ex[k].G && first == ex[k].first && split == ex[k].first);
  }
  /* accumulation: {3, 4} {5, 1, 10} with sub_group_size 7 */
  int64_t acc[] = {3, 4, 5, 1, 10};
  ZT_CHECK(zrt_layout_twin_split(5, elems_of, acc, 7, 0.5, &G, &first) == 2 && G == 2 &&
           first == 1);
  ZT_CHECK(zrt_layout_twin_split(5, elems_of, acc, 23, 0.5, &G, &first) == 0 && G == 1);
  ZT_CHECK(zrt_layout_twin_split(5, elems_of, acc, 23, 0.0, &G, &first) == 5 && G == 1);
  ZT_CHECK(zrt_layout_twin_split(5, elems_of, acc, 1000, 1.0, &G, &first) == 0 && G == 1);
  /* {3, 4} {5, 1} {10}: sub_group_size 6 */
  ZT_CHECK(zrt_layout_twin_split(5, elems_of, acc, 6, 0.5, &G, &first) == 2 && G == 3 &&
           first == 1);
  printf("twin-flow split: DeepSpeed's sweep (8 and 16 sub-groups, ratio 0.3) -> 5 and 11 on "
         "the device; %zu ratio x groups cases equal CPython's int((1 - r) * G)\n",
         sizeof ex / sizeof ex[0]);
}

int main(void) {
  test_specs();
  test_range_errors();
  test_bucket_rules();
  test_twin_split();
  ZT_DONE();
}
