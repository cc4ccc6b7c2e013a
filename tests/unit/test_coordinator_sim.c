/*
 * test_coordinator_sim.c — the replay of the stage-3 coordinator's rules
 * (sharding/coordinator_sim.h) against the coordinator itself: for 400
 * random programs (module sizes, a persistence threshold, prefetch, reuse
 * and max-live settings, and one step's nested fetch/release sequence with
 * repeated and tied modules), the real coordinator over the CPU backend
 * and the self comm runs three optimizer steps the way the engine does
 * (quiesce, freeze the trace, invalidate), and the most non-persistent
 * elements it held gathered at once (read after every call; it only
 * allocates inside fetch) must equal the replay's peak exactly. Plus the
 * GPT example's order by hand: with no prefetch and no reuse the peak is
 * the largest block plus the two modules the head holds at once.
 */
#include <stdlib.h>
#include <string.h>

#include "coordinator.h"
#include "coordinator_sim.h"
#include "dtype.h"
#include "ztest.h"

#define MAXMOD 8
#define MAXEV 96

static zrt_backend *be;
static zrt_comm *comm;
static unsigned rng = 12345;
static unsigned next(void) {
  rng = rng * 1103515245u + 12345u;
  return (rng >> 8) & 0xffffff;
}

typedef struct prog {
  int nmod, nev;
  int64_t numel[MAXMOD], padded[MAXMOD];
  int64_t persist, prefetch, max_live, reuse;
  zrt_sim_event ev[MAXEV];
} prog;

/* Nested fetches: a stack of held modules, at most 3 deep; a module may be
 * fetched again while held (a tied weight). */
static void make_prog(prog *p) {
  p->nmod = 2 + (int)(next() % (MAXMOD - 1));
  for (int m = 0; m < p->nmod; m++) {
    p->numel[m] = 1 + (int64_t)(next() % 200);
    p->padded[m] = (p->numel[m] + 31) / 32 * 32;
  }
  p->persist = next() % 3 == 0 ? (int64_t)(next() % 60) : 0;
  p->prefetch = next() % 3 == 0 ? 0 : (int64_t)(next() % 500);
  p->max_live = next() % 3 == 0 ? (int64_t)1 << 40 : 100 + (int64_t)(next() % 600);
  p->reuse = next() % 3 == 0 ? 0 : (int64_t)(next() % 800);
  int stack[4], depth = 0;
  p->nev = 0;
  int target = 8 + (int)(next() % (MAXEV - 16));
  while (p->nev < target || depth > 0) {
    if (depth > 0 && (depth == 3 || next() % 2 == 0 || p->nev >= target)) {
      p->ev[p->nev++] = (zrt_sim_event){ZRT_SIM_RELEASE, stack[--depth]};
    } else {
      int m = (int)(next() % (unsigned)p->nmod);
      stack[depth++] = m;
      p->ev[p->nev++] = (zrt_sim_event){ZRT_SIM_FETCH, m};
    }
  }
}

static int64_t run_real(const prog *p, void *const *shard) {
  const char *names[MAXMOD] = {"a", "b", "c", "d", "e", "f", "g", "h"};
  zrt_coord_opts o = {.dtype = ZRT_BF16,
                      .prefetch_elems = p->prefetch,
                      .max_live_elems = p->max_live,
                      .reuse_distance = p->reuse,
                      .persist_threshold = p->persist,
                      .nmodules = p->nmod,
                      .numel = p->numel,
                      .padded = p->padded,
                      .names = names};
  zrt_coord *c = NULL;
  ZT_OK(zrt_coord_create(be, comm, &o, &c));
  for (int m = 0; m < p->nmod; m++) zrt_coord_set_shard(c, m, shard[m], 0);
  int64_t peak = 0;
  zrt_coord_stats st;
  for (int step = 0; step < 3; step++) {
    for (int k = 0; k < p->nev; k++) {
      const zrt_sim_event *e = &p->ev[k];
      if (e->kind == ZRT_SIM_FETCH)
        ZT_OK(zrt_coord_fetch(c, e->module));
      else
        ZT_OK(zrt_coord_release(c, e->module));
      zrt_coord_stats_get(c, &st);
      if (st.live_elems > peak) peak = st.live_elems;
    }
    ZT_OK(zrt_coord_quiesce(c));
    zrt_coord_freeze_trace(c);
    zrt_coord_invalidate(c);
  }
  zrt_coord_destroy(c);
  return peak;
}

static int64_t run_sim(const prog *p) {
  zrt_coord_sim s = {.nmodules = p->nmod,
                     .numel = p->numel,
                     .padded = p->padded,
                     .persist_threshold = p->persist,
                     .prefetch_elems = p->prefetch,
                     .max_live_elems = p->max_live,
                     .reuse_distance = p->reuse,
                     .events = p->ev,
                     .nevents = p->nev};
  zrt_coord_sim_peaks pk;
  ZT_CHECK(zrt_coord_sim_run(&s, &pk) == 0);
  ZT_CHECK(pk.grads == 0 && pk.both == pk.live);
  return pk.live;
}

int main(void) {
  ZT_OK(zrt_backend_create("cpu", 0, 0, &be));
  ZT_OK(zrt_comm_create("self", be, 0, &comm));
  void *shard[MAXMOD];
  for (int m = 0; m < MAXMOD; m++) {
    ZT_OK(zrt_backend_alloc(be, 256 * 2, ZRT_MEM_PARAMS16, &shard[m]));
    memset(shard[m], 0, 256 * 2);
  }
  int differ = 0, with_reuse = 0, with_prefetch = 0;
  int64_t max_peak = 0;
  for (int t = 0; t < 400; t++) {
    prog p;
    make_prog(&p);
    int64_t real = run_real(&p, shard), sim = run_sim(&p);
    if (real != sim) {
      if (differ++ < 5)
        printf("program %d: %d modules, %d events, prefetch %lld reuse %lld max_live %lld: "
               "coordinator peak %lld, replay %lld\n",
               t, p.nmod, p.nev, (long long)p.prefetch, (long long)p.reuse, (long long)p.max_live,
               (long long)real, (long long)sim);
    }
    with_reuse += p.reuse > 0;
    with_prefetch += p.prefetch > 0;
    if (real > max_peak) max_peak = real;
  }
  printf("400 random programs (%d with reuse, %d with prefetch, peaks up to %lld elements): %d "
         "differ\n",
         with_reuse, with_prefetch, (long long)max_peak, differ);
  ZT_CHECK(differ == 0);

  /* train_gpt2's order (embedding, 2 blocks, ln_f; the head holds ln_f and
   * the tied embedding at once and writes ln_f's gradients; the backward
   * does not fetch the embedding), with the 16-bit gradient buffers */
  int64_t numel[4] = {100, 300, 300, 10}, padded[4] = {128, 320, 320, 32};
  const zrt_sim_kind F = ZRT_SIM_FETCH, R = ZRT_SIM_RELEASE, G = ZRT_SIM_GRAD,
                     D = ZRT_SIM_GRAD_DONE;
  zrt_sim_event ev[] = {{F, 0}, {R, 0}, {F, 1}, {R, 1}, {F, 2}, {R, 2}, {F, 3}, {F, 0},
                        {G, 3}, {D, 3}, {R, 0}, {R, 3}, {F, 2}, {G, 2}, {D, 2}, {R, 2},
                        {F, 1}, {G, 1}, {D, 1}, {R, 1}, {G, 0}, {D, 0}};
  zrt_coord_sim s = {.nmodules = 4,
                     .numel = numel,
                     .padded = padded,
                     .max_live_elems = 1 << 30,
                     .events = ev,
                     .nevents = (int)(sizeof ev / sizeof ev[0])};
  zrt_coord_sim_peaks pk;
  ZT_CHECK(zrt_coord_sim_run(&s, &pk) == 0);
  printf("gpt order, no prefetch or reuse: live %lld grads %lld both %lld (expected 320, 320, "
         "640: a block and its gradients)\n",
         (long long)pk.live, (long long)pk.grads, (long long)pk.both);
  ZT_CHECK(pk.live == 320 && pk.grads == 320 && pk.both == 640);
  /* reuse 200: block 2 is kept across the head (160 elements in between),
   * so the gathered peak (block 2, ln_f, embedding: 480) meets ln_f's
   * gradients (32), not a block's */
  s.reuse_distance = 200;
  ZT_CHECK(zrt_coord_sim_run(&s, &pk) == 0);
  printf("gpt order, reuse 200: live %lld grads %lld both %lld (expected 480, 320, 640)\n",
         (long long)pk.live, (long long)pk.grads, (long long)pk.both);
  ZT_CHECK(pk.live == 480 && pk.grads == 320 && pk.both == 640);
  zrt_sim_event bad[] = {{ZRT_SIM_FETCH, 4}};
  s.events = bad;
  s.nevents = 1;
  ZT_CHECK(zrt_coord_sim_run(&s, &pk) == -1);
  for (int m = 0; m < MAXMOD; m++) zrt_backend_free(be, shard[m]);
  zrt_comm_destroy(comm);
  zrt_backend_destroy(be);
  ZT_DONE();
}
