/*
 * test_comm_collectives.c — the CPU comms against references computed
 * locally in double (the comm $ZRT_TEST_COMM names, default "auto", which
 * on one machine is the shared-memory comm; ctest runs it for "auto",
 * "mpi", and "auto" with ZRT_COMM_SHM_REGION=4KiB so every collective
 * takes many rounds): all_reduce (out of place, in place; SUM/MAX/MIN),
 * reduce_scatter (SUM/MAX), all_gather (out of place, in place), broadcast,
 * barrier × fp32/fp16/bf16 × blocking/async × even/uneven counts (uneven
 * includes a zero-length segment), plus bytes_moved against the ring
 * formulas, sequence/completion counters, staging-memory accounting,
 * argument-error messages, and that a rank waiting ~200 ms in the shm
 * comm's barrier uses under a quarter of a core (it blocks, not spins).
 * Runs under mpiexec at -n 2 and -n 4.
 *
 * Data: every element is ±(1 + m/1024)·2^e with e in [-4, 2] — exactly
 * representable in fp16 (and rounded to bf16 for bf16 runs) — so a sum over
 * at most 4 ranks needs < 20 significant bits and is exact in fp32.
 * Tolerances: fp32 sums 4·eps32·max|ref| (reduction order may differ, though
 * with these data the sum is exact). Half sums (fp16/bf16 reduce in their
 * own type, each pairwise combine adding once in fp32 and rounding once,
 * comm/comm_mpi.c): at -n 2 there is one combine, so the result must be
 * bit-exact against the correctly rounded double reference (the sum of two
 * such values is exact in fp32); at any N, per element
 *   |got - ref| <= gamma_{N-1}·sum_q |x_q|,  gamma_k = k·u'/(1 - k·u'),
 *   u' = u + 2^-24 + u·2^-24  (u = 2^-8 bf16, 2^-11 fp16: rounding to the
 *   half type after an fp32 add),
 * the recursive-summation bound for any combine order or tree. The max
 * difference and the max of difference / bound are printed. MAX/MIN,
 * gather and broadcast are exact. test_half_wide repeats the sum over data
 * with full mantissas and a 2^8 magnitude range at counts that are not
 * multiples of the 16-lane vector; test_half_special checks NaN and Inf
 * propagation (SUM, MAX, MIN) and fp16 overflow to Inf.
 *
 * test_vs_mpi holds the comm under test to the MPI comm on the same inputs
 * (wide data; counts that take several rounds of the shm comm's regions,
 * fewer elements than ranks, and an odd count, none a multiple of the rank
 * count; all_reduce out of place and in place, reduce_scatter, every redop
 * and dtype; ctest adds 3 ranks with odd 1100-byte regions): all_gather,
 * broadcast, MAX and MIN
 * bitwise at any N; sums bitwise at N = 2 (one add, same rounding, any
 * order); at N > 2 the orders of addition differ, so per element
 * |shm - mpi| <= 2·gamma_{N-1}·sum|x| with the same gamma as above
 * (u = 2^-24 for fp32).
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backend.h"
#include "comm.h"
#include "dtype.h"
#include "zt_data.h"
#include "ztest.h"

static zrt_comm *C;
static zrt_backend *B;
static int R, N;

/* test_half_wide's data: full 16-bit mantissas, exponents in [-4, 4]. */
static int wide;

/* Deterministic value of element i on rank r for test case salt. */
static float val(int r, size_t i, uint32_t salt, zrt_dtype dt) {
  uint32_t h = zt_mix((uint32_t)r * 0x9e3779b9u ^ zt_mix((uint32_t)i * 0x85ebca6bu + salt));
  float m = 1.0f + (float)(h & 1023u) / 1024.0f;
  int e = (int)((h >> 10) % 7u) - 4;
  if (wide) {
    m = 1.0f + (float)(zt_mix(h) & 0xffffu) / 65536.0f;
    e = (int)((h >> 10) % 9u) - 4;
  }
  float v = ldexpf(m, e) * (((h >> 14) & 1u) ? -1.0f : 1.0f);
  return zt_round_to(dt, v);
}

static void *alloc_dt(size_t n, zrt_dtype dt) {
  void *p = calloc(n ? n : 1, zrt_dtype_size(dt));
  if (!p) abort();
  return p;
}

static void fill(void *buf, zrt_dtype dt, int r, size_t off, size_t n, uint32_t salt) {
  for (size_t i = 0; i < n; i++) zrt_store_f(buf, dt, i, val(r, off + i, salt, dt));
}

static double eps_of(zrt_dtype dt) {
  return dt == ZRT_F32 ? FLT_EPSILON : dt == ZRT_F16 ? ldexp(1.0, -10) : ldexp(1.0, -7);
}

/* Unit roundoff of one pairwise half combine (see the header comment). */
static double combine_u(zrt_dtype dt) {
  double u = dt == ZRT_F16 ? ldexp(1.0, -11) : ldexp(1.0, -8);
  return u + ldexp(1.0, -24) + u * ldexp(1.0, -24);
}

/* got (dtype dt) vs ref (double). sum: the reduction tolerance rules of the
 * header comment apply (absum[i] = sum over ranks of |x|, half types);
 * otherwise the result must be exact. */
static void check(const char *what, const void *got, zrt_dtype dt, const double *ref,
                  const double *absum, size_t n, int sum) {
  double *g = malloc((n ? n : 1) * sizeof(double));
  double *rr = malloc((n ? n : 1) * sizeof(double));
  double maxabs = 0;
  for (size_t i = 0; i < n; i++) {
    g[i] = zrt_load_f(got, dt, i);
    rr[i] = zt_round_to(dt, (float)ref[i]);
    if (fabs(ref[i]) > maxabs) maxabs = fabs(ref[i]);
  }
  char label[256];
  snprintf(label, sizeof label, "rank %d %s", R, what);
  if (!sum) {
    ZT_CLOSE_ARRAY(label, g, ref, n, 0.0);
  } else if (dt == ZRT_F32) {
    ZT_CLOSE_ARRAY(label, g, ref, n, 4.0 * eps_of(dt) * maxabs);
  } else {
    double k = N - 1, gam = k * combine_u(dt) / (1.0 - k * combine_u(dt));
    double maxd = 0, maxratio = 0;
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
      double d = fabs(g[i] - ref[i]), b = gam * absum[i];
      double ratio = d != d ? INFINITY : b > 0 ? d / b : d > 0 ? INFINITY : 0;
      if (d > maxd) maxd = d;
      if (ratio > maxratio) maxratio = ratio, at = i;
    }
    if (maxratio > 1.0) {
      fprintf(stderr, "FAIL %s: max diff %g, max diff/bound %g > 1 (element %zu: got %g ref %g)\n",
              label, maxd, maxratio, at, g[at], ref[at]);
      zt_failures++;
    } else if (R == 0 && n) {
      printf("%s: max diff %g, max diff/bound %.3f (bound gamma_%d sum|x|)\n", label, maxd,
             maxratio, N - 1);
    }
    if (N == 2) {
      snprintf(label, sizeof label, "rank %d %s vs correctly rounded", R, what);
      ZT_CLOSE_ARRAY(label, g, rr, n, 0.0);
    }
  }
  free(g);
  free(rr);
}

static double red(zrt_redop op, double acc, double v, int first) {
  if (first) return v;
  return op == ZRT_RED_SUM ? acc + v : op == ZRT_RED_MAX ? fmax(acc, v) : fmin(acc, v);
}

static const char *opname(zrt_redop op) {
  return op == ZRT_RED_SUM ? "sum" : op == ZRT_RED_MAX ? "max" : "min";
}

static void expect_moved(uint64_t before, uint64_t want, const char *what) {
  uint64_t got = C->bytes_moved - before;
  if (got != want) {
    fprintf(stderr, "FAIL rank %d %s: bytes_moved %llu, formula says %llu\n", R, what,
            (unsigned long long)got, (unsigned long long)want);
    zt_failures++;
  }
}

/* Issues through the wrapper; with async, completes through wait (or
 * test polling when poll is set) after the caller had a chance to issue
 * more work. */
static void finish(zrt_comm_req *req, int poll) {
  if (!req) return;
  if (poll) {
    int done = 0;
    while (!done) ZT_OK(zrt_comm_test(C, req, &done));
  } else {
    ZT_OK(zrt_comm_wait(C, req));
  }
}

static void test_all_reduce(zrt_dtype dt, int async, size_t count, zrt_redop op, int in_place,
                            uint32_t salt) {
  void *send = alloc_dt(count, dt), *recv = alloc_dt(count, dt);
  fill(send, dt, R, 0, count, salt);
  double *ref = malloc((count ? count : 1) * sizeof(double));
  double *absum = malloc((count ? count : 1) * sizeof(double));
  for (size_t i = 0; i < count; i++) {
    double acc = 0;
    absum[i] = 0;
    for (int q = 0; q < N; q++) {
      acc = red(op, acc, val(q, i, salt, dt), q == 0);
      absum[i] += fabs(val(q, i, salt, dt));
    }
    ref[i] = acc;
  }
  uint64_t before = C->bytes_moved, seq0 = C->seq, done0 = C->completed;
  zrt_comm_req *req = NULL;
  void *src = in_place ? recv : send;
  if (in_place) memcpy(recv, send, count * zrt_dtype_size(dt));
  ZT_OK(zrt_comm_all_reduce(C, src, recv, count, dt, op, async ? &req : NULL));
  ZT_CHECK(C->seq == seq0 + 1);
  ZT_CHECK(async ? (req != NULL && C->completed == done0) : C->completed == done0 + 1);
  if (async && count) {
    /* Host buffers reduce in place in MPI, every dtype: nothing staged. */
    zrt_mem_stats s;
    zrt_pool_stats(B->pool, &s);
    ZT_CHECK(s.current[ZRT_MEM_COMM] == 0);
  }
  finish(req, salt & 1);
  ZT_CHECK(C->completed == done0 + 1);
  char what[128];
  snprintf(what, sizeof what, "all_reduce %s %s n=%zu %s %s", opname(op), zrt_dtype_name(dt), count,
           in_place ? "in-place" : "out-of-place", async ? "async" : "blocking");
  check(what, recv, dt, ref, absum, count, op == ZRT_RED_SUM);
  size_t bytes = count * zrt_dtype_size(dt);
  expect_moved(before, 2ull * bytes * (uint64_t)(N - 1) / (uint64_t)N, what);
  free(send), free(recv), free(ref), free(absum);
}

static void make_counts(size_t *counts, int uneven, size_t base) {
  for (int q = 0; q < N; q++) {
    counts[q] = base;
    /* Uneven: rank 1's segment is empty, the others differ in length. */
    if (uneven) counts[q] = q == 1 ? 0 : base + (size_t)q * 37 + 3;
  }
}

static void test_reduce_scatter(zrt_dtype dt, int async, int uneven, zrt_redop op, uint32_t salt) {
  size_t counts[8], total = 0, off = 0;
  make_counts(counts, uneven, 257);
  for (int q = 0; q < N; q++) {
    if (q < R) off += counts[q];
    total += counts[q];
  }
  void *send = alloc_dt(total, dt), *recv = alloc_dt(counts[R], dt);
  fill(send, dt, R, 0, total, salt);
  double *ref = malloc((counts[R] ? counts[R] : 1) * sizeof(double));
  double *absum = malloc((counts[R] ? counts[R] : 1) * sizeof(double));
  for (size_t i = 0; i < counts[R]; i++) {
    double acc = 0;
    absum[i] = 0;
    for (int q = 0; q < N; q++) {
      acc = red(op, acc, val(q, off + i, salt, dt), q == 0);
      absum[i] += fabs(val(q, off + i, salt, dt));
    }
    ref[i] = acc;
  }
  /* A second collective issued before waiting on the first: requests are
   * independent and may be completed in any order. */
  float probe = (float)R, probe_out = 0;
  zrt_comm_req *req = NULL, *req2 = NULL;
  uint64_t before = C->bytes_moved;
  ZT_OK(zrt_comm_reduce_scatter(C, send, recv, counts, dt, op, async ? &req : NULL));
  expect_moved(before, (uint64_t)total * zrt_dtype_size(dt) * (uint64_t)(N - 1) / (uint64_t)N,
               "reduce_scatter");
  if (async) ZT_OK(zrt_comm_all_reduce(C, &probe, &probe_out, 1, ZRT_F32, ZRT_RED_SUM, &req2));
  finish(req2, 0);
  finish(req, salt & 1);
  if (async) ZT_CHECK(probe_out == (float)(N * (N - 1) / 2));
  char what[128];
  snprintf(what, sizeof what, "reduce_scatter %s %s %s %s", opname(op), zrt_dtype_name(dt),
           uneven ? "uneven" : "even", async ? "async" : "blocking");
  check(what, recv, dt, ref, absum, counts[R], op == ZRT_RED_SUM);
  free(send), free(recv), free(ref), free(absum);
}

static void test_all_gather(zrt_dtype dt, int async, int uneven, int in_place, uint32_t salt) {
  size_t counts[8], total = 0, off = 0;
  make_counts(counts, uneven, 129);
  for (int q = 0; q < N; q++) {
    if (q < R) off += counts[q];
    total += counts[q];
  }
  size_t es = zrt_dtype_size(dt);
  void *recv = alloc_dt(total, dt);
  void *send = in_place ? (char *)recv + off * es : alloc_dt(counts[R], dt);
  fill(send, dt, R, off, counts[R], salt);
  double *ref = malloc((total ? total : 1) * sizeof(double));
  size_t o = 0;
  for (int q = 0; q < N; q++)
    for (size_t i = 0; i < counts[q]; i++, o++) ref[o] = val(q, o, salt, dt);
  uint64_t before = C->bytes_moved;
  zrt_comm_req *req = NULL;
  ZT_OK(zrt_comm_all_gather(C, send, recv, counts, dt, async ? &req : NULL));
  finish(req, salt & 1);
  char what[128];
  snprintf(what, sizeof what, "all_gather %s %s %s %s", zrt_dtype_name(dt),
           uneven ? "uneven" : "even", in_place ? "in-place" : "out-of-place",
           async ? "async" : "blocking");
  check(what, recv, dt, ref, NULL, total, 0);
  expect_moved(before, (uint64_t)total * es * (uint64_t)(N - 1) / (uint64_t)N, what);
  if (!in_place) free(send);
  free(recv), free(ref);
}

static void test_broadcast(zrt_dtype dt, int async, size_t count, int root, uint32_t salt) {
  void *buf = alloc_dt(count, dt);
  /* Non-roots start from their own data so a no-op broadcast fails. */
  fill(buf, dt, R, 0, count, salt);
  double *ref = malloc((count ? count : 1) * sizeof(double));
  for (size_t i = 0; i < count; i++) ref[i] = val(root, i, salt, dt);
  zrt_comm_req *req = NULL;
  ZT_OK(zrt_comm_broadcast(C, buf, count, dt, root, async ? &req : NULL));
  finish(req, salt & 1);
  char what[128];
  snprintf(what, sizeof what, "broadcast %s n=%zu root %d %s", zrt_dtype_name(dt), count, root,
           async ? "async" : "blocking");
  check(what, buf, dt, ref, NULL, count, 0);
  free(buf), free(ref);
}

/* The sums again over wide data (every mantissa bit of the half type in
 * use, so roundings happen) at counts that are not multiples of 16. */
static void test_half_wide(uint32_t *salt) {
  static const size_t counts[] = {1, 17, 1037, 40003};
  const zrt_dtype dts[2] = {ZRT_F16, ZRT_BF16};
  wide = 1;
  for (int d = 0; d < 2; d++) {
    for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++)
      test_all_reduce(dts[d], (int)(k & 1), counts[k], ZRT_RED_SUM, (int)(k >> 1 & 1), (*salt)++);
    test_reduce_scatter(dts[d], 0, 0, ZRT_RED_SUM, (*salt)++);
    test_reduce_scatter(dts[d], 1, 1, ZRT_RED_SUM, (*salt)++);
  }
  wide = 0;
}

/* Special value of element i on rank r, or NAN-free finite data; the
 * pattern repeats every 6 elements. */
static float special(int r, size_t i, zrt_dtype dt) {
  switch (i % 6) {
  case 0: return r == 0 ? NAN : 1.5f;                                        /* NaN + finite */
  case 1: return r == N - 1 ? INFINITY : -2.0f;                              /* +Inf + finite */
  case 2: return r == 0 ? INFINITY : r == 1 ? -INFINITY : 0.25f;             /* Inf - Inf */
  case 3: return dt == ZRT_F16 ? 40000.0f : zt_round_to(dt, 3.0e38f / 2.5f); /* overflows */
  default: return val(r, i, 77, dt);
  }
}

static double red_nan(zrt_redop op, double acc, double v, int first) {
  if (first || v != v) return v;
  if (acc != acc) return acc;
  return red(op, acc, v, 0);
}

/* NaN and Inf propagate through SUM, MAX and MIN as IEEE arithmetic (and
 * the NaN-propagating MAX/MIN of comm_mpi.c) say; a sum past the half
 * type's largest finite value becomes +Inf. Finite results keep the
 * summation bound. Count 37: a masked vector tail. */
static void test_half_special(zrt_dtype dt, zrt_redop op, int scatter) {
  const size_t n = 37 * (size_t)N;
  size_t counts[8];
  for (int q = 0; q < N; q++) counts[q] = 37;
  size_t off = scatter ? 37 * (size_t)R : 0, nout = scatter ? 37 : n;
  void *send = alloc_dt(n, dt), *recv = alloc_dt(n, dt);
  for (size_t i = 0; i < n; i++) zrt_store_f(send, dt, i, zt_round_to(dt, special(R, i, dt)));
  if (scatter)
    ZT_OK(zrt_comm_reduce_scatter(C, send, recv, counts, dt, op, NULL));
  else
    ZT_OK(zrt_comm_all_reduce(C, send, recv, n, dt, op, NULL));
  double k = N - 1, gam = k * combine_u(dt) / (1.0 - k * combine_u(dt));
  double maxd = 0;
  int bad = 0;
  for (size_t j = 0; j < nout; j++) {
    size_t i = off + j;
    double ref = 0, absum = 0;
    for (int q = 0; q < N; q++) {
      double v = zt_round_to(dt, special(q, i, dt));
      ref = red_nan(op, ref, v, q == 0);
      absum += fabs(v);
    }
    double got = zrt_load_f(recv, dt, j);
    double fmaxv = dt == ZRT_F16 ? 65504.0 : 3.3895313892515355e38;
    int ok;
    if (ref != ref)
      ok = got != got;
    else if (isinf(ref) || fabs(ref) > fmaxv)
      ok = isinf(got) && (got > 0) == (ref > 0);
    else if (op != ZRT_RED_SUM)
      ok = got == ref;
    else
      ok = fabs(got - ref) <= gam * absum, maxd = fmax(maxd, fabs(got - ref));
    if (!ok && bad++ < 5)
      fprintf(stderr, "FAIL rank %d special %s %s %s element %zu: got %g, reference %g\n", R,
              scatter ? "reduce_scatter" : "all_reduce", opname(op), zrt_dtype_name(dt), i, got,
              ref);
  }
  zt_failures += bad;
  if (R == 0)
    printf("special %s %s %s: NaN/Inf propagated, finite max diff %g\n",
           scatter ? "reduce_scatter" : "all_reduce", opname(op), zrt_dtype_name(dt), maxd);
  free(send), free(recv);
}

static void test_errors(void) {
  float x[4] = {0};
  size_t counts[8] = {0};
  zrt_status st = zrt_comm_broadcast(C, x, 4, ZRT_F32, N + 3, NULL);
  ZT_CHECK(st == ZRT_ERR_INVALID_ARG);
  ZT_CONTAINS(zrt_last_error(), "root");
  ZT_CONTAINS(zrt_last_error(), "is not a rank");
  st = zrt_comm_all_reduce(C, x, x, 4, (zrt_dtype)9, ZRT_RED_SUM, NULL);
  ZT_CHECK(st == ZRT_ERR_INVALID_ARG);
  ZT_CONTAINS(zrt_last_error(), "dtype 9");
  st = zrt_comm_reduce_scatter(C, x, x, NULL, ZRT_F32, ZRT_RED_SUM, NULL);
  ZT_CHECK(st == ZRT_ERR_INVALID_ARG);
  ZT_CONTAINS(zrt_last_error(), "counts is NULL");
  st = zrt_comm_all_gather(C, NULL, x, (counts[R] = 2, counts), ZRT_F32, NULL);
  ZT_CHECK(st == ZRT_ERR_INVALID_ARG);
  ZT_CONTAINS(zrt_last_error(), "NULL send buffer");
  zrt_comm *bad = NULL;
  st = zrt_comm_create("gloo", B, 10, &bad);
  ZT_CHECK(st == ZRT_ERR_CONFIG && bad == NULL);
  ZT_CONTAINS(zrt_last_error(), "expected one of auto, self, mpi, shm, hier, nccl");
  st = zrt_comm_create("self", B, 10, &bad);
  ZT_CHECK(st == ZRT_ERR_CONFIG && bad == NULL);
  ZT_CONTAINS(zrt_last_error(), "launcher started");
}

/* The comm under test vs the MPI comm m on the same inputs (header);
 * returns the collectives it issued on the comm under test. */
static unsigned test_vs_mpi(zrt_comm *m) {
  const zrt_dtype dts[3] = {ZRT_F32, ZRT_F16, ZRT_BF16};
  size_t counts[8];
  unsigned issued = 0;
  wide = 1;
  for (int d = 0; d < 3; d++)
    for (int shape = 0; shape < 3; shape++) {
      zrt_dtype dt = dts[d];
      size_t es = zrt_dtype_size(dt);
      /* shape 0: > 3 rounds of a default 1 MiB region per rank (with two
       * rounds in flight, the double buffers both in use), not a multiple of
       * the rank count; 1: fewer elements than ranks (empty segments); 2:
       * an odd count of a few vectors plus a tail */
      size_t total = shape == 0 ? (3u << 20) / es + 1001 : shape == 1 ? (size_t)N - 1 : 16 * 7 + 5;
      for (int q = 0; q < N; q++) counts[q] = total / (size_t)N + (q == 0 ? total % (size_t)N : 0);
      void *x = alloc_dt(total, dt), *a = alloc_dt(total, dt), *b = alloc_dt(total, dt);
      double *absum = malloc(total * sizeof(double));
      fill(x, dt, R, 0, total, 4242u + (uint32_t)d);
      for (size_t i = 0; i < total; i++) {
        absum[i] = 0;
        for (int q = 0; q < N; q++) absum[i] += fabs(val(q, i, 4242u + (uint32_t)d, dt));
      }
      double u = dt == ZRT_F32 ? ldexp(1.0, -24) : combine_u(dt), k = N - 1;
      double bound = N == 2 ? 0.0 : 2.0 * k * u / (1.0 - k * u);
      for (int op = 0; op < 3; op++) {
        /* all_reduce, reduce_scatter, all_reduce in place */
        for (int what = 0; what < 3; what++, issued++) {
          size_t off = 0, n = what == 1 ? counts[R] : total;
          for (int q = 0; q < R && what == 1; q++) off += counts[q];
          if (what == 1) {
            ZT_OK(zrt_comm_reduce_scatter(C, x, a, counts, dt, (zrt_redop)op, NULL));
            ZT_OK(zrt_comm_reduce_scatter(m, x, b, counts, dt, (zrt_redop)op, NULL));
          } else if (what == 2) {
            memcpy(a, x, total * es);
            memcpy(b, x, total * es);
            ZT_OK(zrt_comm_all_reduce(C, a, a, total, dt, (zrt_redop)op, NULL));
            ZT_OK(zrt_comm_all_reduce(m, b, b, total, dt, (zrt_redop)op, NULL));
          } else {
            ZT_OK(zrt_comm_all_reduce(C, x, a, total, dt, (zrt_redop)op, NULL));
            ZT_OK(zrt_comm_all_reduce(m, x, b, total, dt, (zrt_redop)op, NULL));
          }
          double maxd = 0, maxr = 0;
          size_t bad = 0;
          for (size_t i = 0; i < n; i++) {
            double ga = zrt_load_f(a, dt, i), gb = zrt_load_f(b, dt, i);
            double dd = fabs(ga - gb), lim = op == ZRT_RED_SUM ? bound * absum[off + i] : 0.0;
            int same = !memcmp((char *)a + i * es, (char *)b + i * es, es);
            if (dd > maxd) maxd = dd;
            if (lim > 0 && dd / lim > maxr) maxr = dd / lim;
            if (!same && !(dd <= lim)) bad++;
          }
          char label[160];
          snprintf(label, sizeof label, "rank %d %s vs mpi: %s %s n=%zu", R, C->iface->name,
                   what == 1   ? "reduce_scatter"
                   : what == 2 ? "all_reduce in place"
                               : "all_reduce",
                   opname((zrt_redop)op), n);
          if (bad) {
            fprintf(stderr, "FAIL %s: %zu elements differ beyond the bound (max diff %g)\n", label,
                    bad, maxd);
            zt_failures++;
          } else if (R == 0) {
            printf("%s %s: max diff %g (bound %s), max diff/bound %.3f\n", label,
                   zrt_dtype_name(dt), maxd,
                   bound > 0 && op == ZRT_RED_SUM ? "2 gamma sum|x|" : "0", maxr);
          }
        }
      }
      /* all_gather and broadcast move bits */
      size_t off = 0;
      for (int q = 0; q < R; q++) off += counts[q];
      ZT_OK(zrt_comm_all_gather(C, (char *)x + off * es, a, counts, dt, NULL));
      ZT_OK(zrt_comm_all_gather(m, (char *)x + off * es, b, counts, dt, NULL));
      ZT_CHECK(!memcmp(a, b, total * es));
      memcpy(a, x, total * es);
      memcpy(b, x, total * es);
      ZT_OK(zrt_comm_broadcast(C, a, total, dt, N - 1, NULL));
      ZT_OK(zrt_comm_broadcast(m, b, total, dt, N - 1, NULL));
      ZT_CHECK(!memcmp(a, b, total * es));
      issued += 2;
      free(x), free(a), free(b), free(absum);
    }
  wide = 0;
  return issued;
}

int main(void) {
  ZT_OK(zrt_backend_create("cpu", 0, 0, &B));
  const char *want = getenv("ZRT_TEST_COMM");
  if (!want || !*want) want = "auto";
  ZT_OK(zrt_comm_create(want, B, 120.0, &C));
  R = C->rank;
  N = C->world;
  /* one machine, CPU backend: auto is the shared-memory comm */
  const char *expect = !strcmp(want, "auto") ? "shm" : want;
  ZT_CHECK(!strcmp(C->iface->name, expect));
  if (strcmp(C->iface->name, expect))
    fprintf(stderr, "comm %s, expected %s\n", C->iface->name, expect);
  ZT_CHECK(N >= 2 && N <= 8);
  ZT_CHECK(C->local_world == N && C->local_rank == R); /* one machine */
  const char *ew = getenv("OMPI_COMM_WORLD_SIZE");
  ZT_CHECK(ew && atoi(ew) == N);

  const zrt_dtype dts[3] = {ZRT_F32, ZRT_F16, ZRT_BF16};
  uint32_t salt = 1;
  for (int d = 0; d < 3; d++) {
    zrt_dtype dt = dts[d];
    for (int async = 0; async < 2; async++) {
      for (int uneven = 0; uneven < 2; uneven++) {
        size_t n = uneven ? 1037 : 1024;
        test_all_reduce(dt, async, n, ZRT_RED_SUM, 0, salt++);
        test_all_reduce(dt, async, n, ZRT_RED_SUM, 1, salt++);
        test_all_reduce(dt, async, n, ZRT_RED_MAX, uneven, salt++);
        test_all_reduce(dt, async, n, ZRT_RED_MIN, !uneven, salt++);
        test_reduce_scatter(dt, async, uneven, ZRT_RED_SUM, salt++);
        test_reduce_scatter(dt, async, uneven, ZRT_RED_MAX, salt++);
        test_reduce_scatter(dt, async, uneven, ZRT_RED_MIN, salt++);
        test_all_gather(dt, async, uneven, 0, salt++);
        test_all_gather(dt, async, uneven, 1, salt++);
        test_broadcast(dt, async, n, uneven ? N - 1 : 0, salt++);
      }
    }
    test_all_reduce(dt, 1, 0, ZRT_RED_SUM, 0, salt++); /* empty collective */
    test_broadcast(dt, 0, 0, 0, salt++);
  }

  test_half_wide(&salt);
  for (int d = 1; d < 3; d++)
    for (int op = 0; op < 3; op++)
      for (int sc = 0; sc < 2; sc++) test_half_special(dts[d], (zrt_redop)op, sc);

  /* Host buffers: MPI reads and writes them directly, every dtype and op,
   * so the comm staged nothing (16-bit reductions included). */
  zrt_mem_stats s;
  zrt_pool_stats(B->pool, &s);
  ZT_CHECK(s.current[ZRT_MEM_COMM] == 0);
  ZT_CHECK(s.peak[ZRT_MEM_COMM] == 0);

  /* A barrier returns only once every rank entered it: rank 0 creates a
   * file after its last collective and a pause, the others must see it
   * right after the barrier. */
  float tag = R == 0 ? (float)(getpid() % 1000000) : 0.0f;
  ZT_OK(zrt_comm_all_reduce(C, &tag, &tag, 1, ZRT_F32, ZRT_RED_MAX, NULL));
  char marker[256];
  snprintf(marker, sizeof marker, "%s/zrt_barrier_%d", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
           (int)tag);
  if (R == 0) {
    struct timespec ts = {0, 200 * 1000 * 1000};
    nanosleep(&ts, NULL);
    FILE *mf = fopen(marker, "w");
    ZT_CHECK(mf != NULL);
    if (mf) fclose(mf);
  }
  uint64_t seq = C->seq;
  struct timespec c0, c1;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c0);
  double w0 = zrt_now_s();
  ZT_OK(zrt_comm_barrier(C));
  double wall = zrt_now_s() - w0;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c1);
  ZT_CHECK(access(marker, F_OK) == 0);
  /* The ranks that waited ~200 ms for rank 0 in the shm comm's barrier
   * blocked (spins, at most 2 ms of yields, then a futex) instead of
   * spinning: their thread used a small part of a core while waiting. */
  double cpu = (double)(c1.tv_sec - c0.tv_sec) + 1e-9 * (double)(c1.tv_nsec - c0.tv_nsec);
  if (R != 0 && !strcmp(C->iface->name, "shm") && wall > 0.1) {
    ZT_CHECK(cpu < 0.25 * wall);
    if (cpu >= 0.25 * wall)
      fprintf(stderr, "rank %d: %.3f s of CPU in a %.3f s barrier wait\n", R, cpu, wall);
  }
  ZT_OK(zrt_comm_barrier(C));
  if (R == 0) remove(marker);
  seq++;
  ZT_CHECK(C->seq == seq + 1 && C->completed == C->seq);
  ZT_CHECK(!strcmp(C->last_op, "barrier"));
  test_errors();

  /* A second MPI comm lives beside the first (own duplicate of the world,
   * own counters); destroying it must not finalise MPI under the first. */
  zrt_comm *c2 = NULL;
  ZT_OK(zrt_comm_create("mpi", B, 120.0, &c2));
  ZT_CHECK(c2->rank == R && c2->world == N && c2->seq == 0);
  float one = 1.0f, sum = 0;
  ZT_OK(zrt_comm_all_reduce(c2, &one, &sum, 1, ZRT_F32, ZRT_RED_SUM, NULL));
  ZT_CHECK(sum == (float)N && c2->seq == 1);
  unsigned vs_mpi = strcmp(C->iface->name, "mpi") ? test_vs_mpi(c2) : 0;
  zrt_comm_destroy(c2);
  sum = 0;
  ZT_OK(zrt_comm_all_reduce(C, &one, &sum, 1, ZRT_F32, ZRT_RED_SUM, NULL));
  ZT_CHECK(sum == (float)N);
  /* rejected calls get no sequence number */
  ZT_CHECK(C->seq == seq + 2 + vs_mpi);

  zrt_comm_destroy(C);
  zrt_backend_destroy(B);
  ZT_DONE();
}
