/*
 * test_coord_policy.c — the stage-3 policy (sharding/coord_policy.h) on
 * small hand-worked cases, each decision against the answer worked out by
 * hand from the rules of docs/engine.md, "Stage 3" (exact: the decisions
 * are integers): the trace records the first step and a later fetch finds
 * its position at or after the last one (wrapping); eviction frees the
 * retained copy used farthest ahead, and only for a blocking gather that
 * does not fit max_live; prefetch walks the trace after the fetch, skips
 * current copies, stops at the budget (counted in parameter elements), at
 * max_live (padded) and at the step's end; a released copy is kept when
 * its next use comes within the reuse distance of non-persistent padded
 * elements and max_live is not exceeded; a boundary frees what nobody
 * holds. Both executors (coordinator.c, coordinator_sim.c) ask these.
 */
#include "coord_policy.h"
#include "ztest.h"

/* Four modules: numel 100, 300, 300, 10 (padded 128, 320, 320, 32), the
 * last persistent below a threshold of 16. */
static const int64_t numel[4] = {100, 300, 300, 10}, padded[4] = {128, 320, 320, 32};

static void init(zrt_cpol *p, int64_t prefetch, int64_t max_live, int64_t reuse) {
  zrt_cpol_settings s = {.prefetch_elems = prefetch,
                         .max_live_elems = max_live,
                         .reuse_distance = reuse,
                         .persist_threshold = 16};
  ZT_CHECK(zrt_cpol_init(p, &s, 4, numel, padded) == 0);
}

/* One fetch as an executor does it, without prefetch: pos returned. */
static int fetch(zrt_cpol *p, int m) {
  int pos = -2;
  ZT_CHECK(zrt_cpol_fetch(p, m, &pos) == 0);
  if (!p->mods[m].valid) {
    zrt_cpol_on_alloc(p, m);
    zrt_cpol_set_valid(p, m, 1);
  }
  zrt_cpol_on_use(p, m);
  return pos;
}

/* Records the trace 0 1 2 3 1 0 (every module released after its fetch,
 * nothing kept), then the boundary. */
static void record(zrt_cpol *p) {
  const int order[6] = {0, 1, 2, 3, 1, 0};
  for (int k = 0; k < 6; k++) {
    ZT_CHECK(fetch(p, order[k]) == -1);
    if (zrt_cpol_on_release(p, order[k])) zrt_cpol_on_free(p, order[k]);
  }
  zrt_cpol_freeze(p);
  for (int m = 0; m < 4; m++)
    if (zrt_cpol_stale(p, m)) zrt_cpol_on_free(p, m);
  zrt_cpol_on_boundary(p);
}

static void test_trace(void) {
  zrt_cpol p;
  init(&p, 0, 1 << 30, 0);
  record(&p);
  ZT_CHECK(p.ntrace == 6 && p.trace_done && p.trace_pos == -1);
  ZT_CHECK(p.live_elems == 0 && p.mods[3].copy && !p.mods[3].valid); /* persistent: held, stale */
  /* the second fetch of module 1 is found at position 4, not 1 */
  int got[6];
  const int order[6] = {0, 1, 2, 3, 1, 0};
  for (int k = 0; k < 6; k++) {
    got[k] = fetch(&p, order[k]);
    if (zrt_cpol_on_release(&p, order[k])) zrt_cpol_on_free(&p, order[k]);
  }
  printf("trace positions of the second step: %d %d %d %d %d %d (expected 0..5)\n", got[0], got[1],
         got[2], got[3], got[4], got[5]);
  for (int k = 0; k < 6; k++) ZT_CHECK(got[k] == k);
  /* out of order: module 2 after position 5 wraps to 2; a later 1 is 4 */
  ZT_CHECK(fetch(&p, 2) == 2);
  ZT_CHECK(fetch(&p, 1) == 4);
  zrt_cpol_fini(&p);
}

static void test_evict(void) {
  /* second step, at position 2 (module 2), with 0 and 1 retained: 0 is
   * used next at 5, 1 at 4, so 0 goes first; max_live 700 holds two of
   * the three (448 + 320 > 700, 320 + 320 <= 700) */
  zrt_cpol p;
  init(&p, 0, 700, 0);
  record(&p);
  ZT_CHECK(fetch(&p, 0) == 0 && fetch(&p, 1) == 1);
  zrt_cpol_on_release(&p, 0);
  zrt_cpol_on_keep(&p, 0);
  zrt_cpol_on_release(&p, 1);
  zrt_cpol_on_keep(&p, 1);
  int pos;
  ZT_CHECK(zrt_cpol_fetch(&p, 2, &pos) == 0 && pos == 2);
  ZT_CHECK(p.live_elems == 448);
  ZT_CHECK(zrt_cpol_evict_for(&p, 2, 0) == -1); /* a prefetch never evicts */
  ZT_CHECK(zrt_cpol_evict_for(&p, 3, 1) == -1); /* persistent: not counted */
  int v = zrt_cpol_evict_for(&p, 2, 1);
  printf("evict for module 2 at 448 + 320 > 700 elements live: module %d (expected 0)\n", v);
  ZT_CHECK(v == 0);
  zrt_cpol_on_free(&p, v);
  ZT_CHECK(p.live_elems == 320 && zrt_cpol_evict_for(&p, 2, 1) == -1); /* 640 fits */
  zrt_cpol_fini(&p);
}

static void test_prefetch(void) {
  zrt_cpol p;
  /* budget 610 elements: after the fetch at 0, module 1 (300) and 2 (300),
   * then module 3 (10) fits too: 610 <= 610 (counted in parameter
   * elements: in padded ones module 2 would not fit); the second 1 and
   * the second 0 are current */
  init(&p, 610, 1 << 30, 0);
  record(&p);
  ZT_CHECK(fetch(&p, 0) == 0);
  zrt_cpol_cursor cur = zrt_cpol_prefetch_begin(&p, 0);
  int got[6], n = 0;
  for (int i; (i = zrt_cpol_prefetch_next(&p, &cur)) >= 0;) {
    int m = p.trace[i];
    zrt_cpol_on_alloc(&p, m);
    zrt_cpol_set_valid(&p, m, 1);
    got[n++] = i;
  }
  printf("prefetch after position 0, budget 610: %d positions (%d %d %d expected 1 2 3)\n", n,
         n > 0 ? got[0] : -1, n > 1 ? got[1] : -1, n > 2 ? got[2] : -1);
  ZT_CHECK(n == 3 && got[0] == 1 && got[1] == 2 && got[2] == 3);
  /* from position 3: module 1 at 4 is current (skipped), module 0 at 5 is not */
  zrt_cpol_set_valid(&p, 0, 0);
  cur = zrt_cpol_prefetch_begin(&p, 3);
  ZT_CHECK(zrt_cpol_prefetch_next(&p, &cur) == 5);
  /* at the trace's last position nothing follows (not across the step) */
  cur = zrt_cpol_prefetch_begin(&p, 5);
  ZT_CHECK(zrt_cpol_prefetch_next(&p, &cur) == -1);
  /* while recording (pos -1) nothing is prefetched */
  cur = zrt_cpol_prefetch_begin(&p, -1);
  ZT_CHECK(zrt_cpol_prefetch_next(&p, &cur) == -1);
  zrt_cpol_fini(&p);

  /* budget 599: module 1 (300) then module 2 (300 > 299) stops it */
  init(&p, 599, 1 << 30, 0);
  record(&p);
  ZT_CHECK(fetch(&p, 0) == 0);
  cur = zrt_cpol_prefetch_begin(&p, 0);
  ZT_CHECK(zrt_cpol_prefetch_next(&p, &cur) == 1);
  zrt_cpol_on_alloc(&p, 1);
  zrt_cpol_set_valid(&p, 1, 1);
  ZT_CHECK(zrt_cpol_prefetch_next(&p, &cur) == -1);
  zrt_cpol_fini(&p);

  /* max_live 767: 128 live + 320 (module 1) fits, + 320 (module 2) = 768 does not */
  init(&p, 1 << 20, 767, 0);
  record(&p);
  ZT_CHECK(fetch(&p, 0) == 0);
  cur = zrt_cpol_prefetch_begin(&p, 0);
  ZT_CHECK(zrt_cpol_prefetch_next(&p, &cur) == 1);
  zrt_cpol_on_alloc(&p, 1);
  zrt_cpol_set_valid(&p, 1, 1);
  int next = zrt_cpol_prefetch_next(&p, &cur);
  printf("prefetch with max_live 767 at 448 live: %d (expected -1)\n", next);
  ZT_CHECK(next == -1);
  zrt_cpol_fini(&p);
}

static void test_keep(void) {
  /* module 1 at position 1 is used again at 4; in between modules 2
   * (320 padded) and 3 (persistent, not counted): 320 elements */
  zrt_cpol p;
  int64_t between = -1;
  init(&p, 0, 1 << 30, 321);
  record(&p);
  ZT_CHECK(fetch(&p, 0) == 0 && fetch(&p, 1) == 1);
  ZT_CHECK(zrt_cpol_on_release(&p, 1) == 1);
  ZT_CHECK(zrt_cpol_keep(&p, 1, &between) == 1);
  printf("keep module 1 at reuse 321: between %lld (expected 320)\n", (long long)between);
  ZT_CHECK(between == 320);
  zrt_cpol_set_window(&p, 0, 320); /* 320 is not below 320 */
  ZT_CHECK(zrt_cpol_keep(&p, 1, &between) == 0);
  zrt_cpol_set_window(&p, 0, 1 << 20);
  /* 0 at 0 is used again at 5, after 1, 2 and 1 again (3 persistent) */
  ZT_CHECK(zrt_cpol_keep(&p, 0, &between) == 1);
  ZT_CHECK(between == 960);
  p.s.max_live_elems = 447; /* 448 live: over max_live, nothing is kept */
  ZT_CHECK(zrt_cpol_keep(&p, 1, &between) == 0);
  p.s.max_live_elems = 1 << 30;
  zrt_cpol_set_valid(&p, 1, 0); /* a copy not current is never kept */
  ZT_CHECK(zrt_cpol_keep(&p, 1, &between) == 0);
  /* nested fetches: only the outermost release decides; persistent never */
  ZT_CHECK(fetch(&p, 2) == 2 && fetch(&p, 2) == 2);
  ZT_CHECK(zrt_cpol_on_release(&p, 2) == 0 && zrt_cpol_on_release(&p, 2) == 1);
  ZT_CHECK(fetch(&p, 3) == 3 && zrt_cpol_on_release(&p, 3) == 0);
  /* the boundary: copies nobody holds are stale; a held one is not */
  ZT_CHECK(zrt_cpol_on_release(&p, 0) == 1);
  ZT_CHECK(fetch(&p, 1) == 4);
  ZT_CHECK(zrt_cpol_stale(&p, 0) && zrt_cpol_stale(&p, 2) && !zrt_cpol_stale(&p, 1) &&
           !zrt_cpol_stale(&p, 3));
  zrt_cpol_fini(&p);
}

int main(void) {
  test_trace();
  test_evict();
  test_prefetch();
  test_keep();
  ZT_DONE();
}
