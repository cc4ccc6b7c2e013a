/*
 * test_pool.c — the accounted pool (base/pool.h): per-category current
 * and peak bytes against a hand-kept ledger, peak reset, capacity edges
 * (exactly full, one byte over, larger than the capacity), the OOM message
 * text, a refusing raw allocator, free of a pointer the pool does not own,
 * bookkeeping growth past many live allocations, and that destroy returns
 * every leftover to the raw allocator. Adopted memory (zrt_pool_adopt, the
 * comm's collective buffers): counted and held to the capacity like an
 * allocation, never handed to the raw allocator (free and destroy), and
 * zrt_pool_reserve checks without counting.
 */
#include <stdlib.h>
#include <string.h>

#include "pool.h"
#include "ztest.h"

typedef struct counting_alloc {
  int allocs, frees;
  size_t live_bytes;
  int refuse; /* 1: the raw allocator says no */
} counting_alloc;

static zrt_status raw_alloc(void *ctx, size_t bytes, void **out) {
  counting_alloc *c = ctx;
  if (c->refuse) return zrt_error(ZRT_ERR_OOM, "raw allocator refused %zu bytes", bytes);
  void *p = NULL;
  if (posix_memalign(&p, 64, bytes)) return zrt_error(ZRT_ERR_OOM, "posix_memalign");
  c->allocs++;
  c->live_bytes += bytes;
  *out = p;
  return ZRT_OK;
}

static void raw_free(void *ctx, void *ptr, size_t bytes) {
  counting_alloc *c = ctx;
  c->frees++;
  c->live_bytes -= bytes;
  free(ptr);
}

static void check_stats(zrt_pool *p, const size_t *cur, const size_t *peak, const char *where) {
  zrt_mem_stats st;
  zrt_pool_stats(p, &st);
  size_t tot = 0;
  for (int c = 0; c < ZRT_MEM_NCAT; c++) {
    if (st.current[c] != cur[c] || st.peak[c] != peak[c]) {
      fprintf(stderr, "FAIL %s: %s current %zu (want %zu) peak %zu (want %zu)\n", where,
              zrt_mem_category_name((zrt_mem_category)c), st.current[c], cur[c], st.peak[c],
              peak[c]);
      zt_failures++;
    }
    tot += cur[c];
  }
  ZT_CHECK(st.current_total == tot);
}

static void test_accounting(void) {
  counting_alloc ca = {0};
  zrt_pool *p = NULL;
  ZT_OK(zrt_pool_create("test", 0, raw_alloc, raw_free, &ca, &p));
  size_t cur[ZRT_MEM_NCAT] = {0}, peak[ZRT_MEM_NCAT] = {0};
  void *a = NULL, *b = NULL, *c = NULL;
  ZT_OK(zrt_pool_alloc(p, 1000, ZRT_MEM_PARAMS16, &a));
  ZT_OK(zrt_pool_alloc(p, 3000, ZRT_MEM_MASTER32, &b));
  ZT_OK(zrt_pool_alloc(p, 500, ZRT_MEM_PARAMS16, &c));
  ZT_CHECK(a && b && c);
  ZT_CHECK(((uintptr_t)a % 64) == 0 && ((uintptr_t)b % 64) == 0);
  cur[ZRT_MEM_PARAMS16] = peak[ZRT_MEM_PARAMS16] = 1500;
  cur[ZRT_MEM_MASTER32] = peak[ZRT_MEM_MASTER32] = 3000;
  check_stats(p, cur, peak, "after 3 allocs");
  zrt_mem_stats st;
  zrt_pool_stats(p, &st);
  ZT_CHECK(st.peak_total == 4500 && st.capacity == 0);

  zrt_pool_free(p, a);
  cur[ZRT_MEM_PARAMS16] = 500;
  check_stats(p, cur, peak, "after free (peak stays)");
  zrt_pool_stats(p, &st);
  ZT_CHECK(st.current_total == 3500 && st.peak_total == 4500);

  zrt_pool_reset_peak(p);
  peak[ZRT_MEM_PARAMS16] = 500;
  check_stats(p, cur, peak, "after reset_peak");
  zrt_pool_stats(p, &st);
  ZT_CHECK(st.peak_total == 3500);

  /* zero-byte requests are real (distinct, freeable) allocations of 1 byte */
  void *z = NULL;
  ZT_OK(zrt_pool_alloc(p, 0, ZRT_MEM_OTHER, &z));
  ZT_CHECK(z != NULL);
  cur[ZRT_MEM_OTHER] = peak[ZRT_MEM_OTHER] = 1;
  check_stats(p, cur, peak, "zero-byte alloc");
  zrt_pool_free(p, z);
  cur[ZRT_MEM_OTHER] = 0;
  check_stats(p, cur, peak, "zero-byte free");

  /* free(NULL) is a no-op */
  zrt_pool_free(p, NULL);
  check_stats(p, cur, peak, "free NULL");

  /* a pointer the pool never gave out: logged and ignored */
  int frees_before = ca.frees;
  char stack_thing[16];
  zrt_pool_free(p, stack_thing);
  ZT_CHECK(ca.frees == frees_before);
  check_stats(p, cur, peak, "free of unknown pointer");
  /* double free is the same case */
  zrt_pool_free(p, a);
  ZT_CHECK(ca.frees == frees_before);
  check_stats(p, cur, peak, "double free");

  /* invalid category */
  void *bad = NULL;
  ZT_CHECK(zrt_pool_alloc(p, 8, ZRT_MEM_NCAT, &bad) == ZRT_ERR_INVALID_ARG);
  ZT_CHECK(bad == NULL);

  /* destroy returns leftovers (b, c) to the raw allocator */
  zrt_pool_destroy(p);
  ZT_CHECK(ca.allocs == ca.frees);
  ZT_CHECK(ca.live_bytes == 0);
  printf("accounting: %d raw allocs, %d raw frees\n", ca.allocs, ca.frees);
  zrt_pool_destroy(NULL);
}

static void test_capacity(void) {
  counting_alloc ca = {0};
  zrt_pool *p = NULL;
  const size_t cap = 4096;
  ZT_OK(zrt_pool_create("devtest", cap, raw_alloc, raw_free, &ca, &p));
  zrt_pool_set_hint(p, "try a smaller model");
  ZT_CHECK(zrt_pool_capacity(p) == cap);
  void *a = NULL, *b = NULL, *c = NULL;
  ZT_OK(zrt_pool_alloc(p, 1000, ZRT_MEM_GRADS, &a));
  ZT_OK(zrt_pool_alloc(p, cap - 1000, ZRT_MEM_OPTIM_STATE, &b)); /* exactly full */
  zrt_mem_stats st;
  zrt_pool_stats(p, &st);
  ZT_CHECK(st.current_total == cap && st.capacity == cap);

  int allocs_before = ca.allocs;
  zrt_status s = zrt_pool_alloc(p, 1, ZRT_MEM_ACTIVATIONS, &c); /* one byte over */
  ZT_CHECK(s == ZRT_ERR_OOM);
  ZT_CHECK(c == NULL);
  ZT_CHECK(ca.allocs == allocs_before); /* refused before touching the allocator */
  const char *msg = zrt_last_error();
  printf("oom message: %s\n", msg);
  ZT_CONTAINS(msg, "devtest memory exhausted");
  ZT_CONTAINS(msg, "cannot allocate 1 B for activations");
  ZT_CONTAINS(msg, "in use 4.00 KiB");
  ZT_CONTAINS(msg, "limit 4.00 KiB");
  ZT_CONTAINS(msg, "grads 1000 B");
  ZT_CONTAINS(msg, "optim_state 3.02 KiB");
  ZT_CONTAINS(msg, "params16 0 B");
  ZT_CONTAINS(msg, "try a smaller model");

  zrt_pool_free(p, a);
  ZT_OK(zrt_pool_alloc(p, 1000, ZRT_MEM_ACTIVATIONS, &c)); /* fits again after the free */
  zrt_pool_free(p, c);
  zrt_pool_free(p, b);

  /* larger than the whole capacity, with nothing in use */
  s = zrt_pool_alloc(p, cap + 1, ZRT_MEM_MASTER32, &c);
  ZT_CHECK(s == ZRT_ERR_OOM);
  ZT_CONTAINS(zrt_last_error(), "cannot allocate 4.00 KiB for master32");
  /* SIZE_MAX must not wrap the capacity arithmetic */
  s = zrt_pool_alloc(p, (size_t)-1, ZRT_MEM_MASTER32, &c);
  ZT_CHECK(s == ZRT_ERR_OOM);
  ZT_OK(zrt_pool_alloc(p, cap, ZRT_MEM_MASTER32, &c)); /* whole capacity in one piece */
  zrt_pool_free(p, c);
  zrt_pool_stats(p, &st);
  ZT_CHECK(st.current_total == 0);
  ZT_CHECK(st.peak_total == cap);

  /* the raw allocator refusing is also OOM, with the pool's accounting */
  ca.refuse = 1;
  s = zrt_pool_alloc(p, 64, ZRT_MEM_COMM, &c);
  ZT_CHECK(s == ZRT_ERR_OOM);
  ZT_CONTAINS(zrt_last_error(), "the allocator refused");
  ZT_CONTAINS(zrt_last_error(), "for comm");
  ca.refuse = 0;
  zrt_pool_stats(p, &st);
  ZT_CHECK(st.current_total == 0);
  zrt_pool_destroy(p);
  ZT_CHECK(ca.allocs == ca.frees && ca.live_bytes == 0);
}

static void test_many(void) {
  /* Enough live pointers to grow the bookkeeping table several times, and
   * interleaved frees to leave tombstones behind. */
  counting_alloc ca = {0};
  zrt_pool *p = NULL;
  ZT_OK(zrt_pool_create("many", 0, raw_alloc, raw_free, &ca, &p));
  enum { N = 5000 };
  static void *ptrs[N];
  size_t want[ZRT_MEM_NCAT] = {0}, peak[ZRT_MEM_NCAT] = {0};
  for (int i = 0; i < N; i++) {
    zrt_mem_category c = (zrt_mem_category)(i % ZRT_MEM_NCAT);
    size_t sz = 16 + (size_t)(i % 97);
    ZT_OK(zrt_pool_alloc(p, sz, c, &ptrs[i]));
    want[c] += sz;
    if (want[c] > peak[c]) peak[c] = want[c];
    if (i % 3 == 2) { /* free an earlier one */
      int j = i - 2;
      zrt_pool_free(p, ptrs[j]);
      want[j % ZRT_MEM_NCAT] -= 16 + (size_t)(j % 97);
      ptrs[j] = NULL;
    }
  }
  check_stats(p, want, peak, "5000 allocations");
  for (int i = 0; i < N; i++)
    if (ptrs[i]) {
      zrt_pool_free(p, ptrs[i]);
      want[i % ZRT_MEM_NCAT] -= 16 + (size_t)(i % 97);
    }
  check_stats(p, want, peak, "all freed");
  ZT_CHECK(ca.live_bytes == 0 && ca.allocs == ca.frees);
  zrt_pool_destroy(p);
}

static void test_adopt(void) {
  counting_alloc ca = {0};
  zrt_pool *p = NULL;
  ZT_OK(zrt_pool_create("host", 1000, raw_alloc, raw_free, &ca, &p));
  static char outside[2][600];
  size_t cur[ZRT_MEM_NCAT] = {0}, peak[ZRT_MEM_NCAT] = {0};
  ZT_OK(zrt_pool_reserve(p, 600, ZRT_MEM_COMM));
  check_stats(p, cur, peak, "reserve counts nothing");
  ZT_OK(zrt_pool_adopt(p, outside[0], 600, ZRT_MEM_COMM));
  cur[ZRT_MEM_COMM] = peak[ZRT_MEM_COMM] = 600;
  check_stats(p, cur, peak, "adopted");
  ZT_CHECK(ca.allocs == 0);
  /* the capacity holds for both */
  ZT_CHECK(zrt_pool_reserve(p, 600, ZRT_MEM_COMM) == ZRT_ERR_OOM);
  ZT_CONTAINS(zrt_last_error(), "over the capacity");
  ZT_CHECK(zrt_pool_adopt(p, outside[1], 600, ZRT_MEM_COMM) == ZRT_ERR_OOM);
  void *q = NULL;
  ZT_CHECK(zrt_pool_alloc(p, 500, ZRT_MEM_GRADS, &q) == ZRT_ERR_OOM);
  ZT_OK(zrt_pool_alloc(p, 400, ZRT_MEM_GRADS, &q));
  cur[ZRT_MEM_GRADS] = peak[ZRT_MEM_GRADS] = 400;
  check_stats(p, cur, peak, "adopted + allocated");
  zrt_pool_free(p, outside[0]); /* stops counting; the raw allocator never sees it */
  cur[ZRT_MEM_COMM] = 0;
  check_stats(p, cur, peak, "adopted freed");
  ZT_CHECK(ca.frees == 0);
  ZT_OK(zrt_pool_adopt(p, outside[1], 600, ZRT_MEM_COMM));
  zrt_pool_destroy(p); /* returns the allocation, not the adopted memory */
  ZT_CHECK(ca.allocs == 1 && ca.frees == 1 && ca.live_bytes == 0);
}

int main(void) {
  ZT_CHECK(zrt_pool_create("x", 0, NULL, raw_free, NULL, &(zrt_pool *){NULL}) ==
           ZRT_ERR_INVALID_ARG);
  test_accounting();
  test_capacity();
  test_many();
  test_adopt();
  ZT_DONE();
}
