/*
 * test_comm_hier.c — the hierarchical comm (comm/comm_hier.c) against the
 * flat MPI comm and a double reference, on the same inputs: all_reduce
 * (out of place, in place), reduce_scatter, all_gather (out of place, in
 * place), broadcast from every root, barrier × fp32/fp16/bf16 × SUM/MAX/MIN
 * × blocking/async (several in flight, completed out of order, by wait and
 * by test) × counts 0, 1, odd, several shm rounds, and uneven segments with
 * empty ones.
 *
 * Run by ctest at -n 2 and -n 4 on one machine (ZRT_TEST_COMM=hier: one
 * machine of N ranks, the cross-machine level is the self comm) and by
 * tests/cli/test_comm_hier.sh over two "machines" on loopback (2 x 2,
 * 2 x 1, and layouts where hier must fall back to mpi). ZRT_TEST_EXPECT
 * names the comm the creation must give (default hier).
 *
 * Bound (docs/comms.md, "The hierarchical comm"): with L ranks per machine
 * and M machines a hier sum is k_h = (L-1) + (M-1) (+1 for fp16/bf16 when
 * L > 1: the node-level sum rounds once to the 16-bit type; +1 more for a
 * 16-bit reduce_scatter when M > 1: its cross level adds the M machine
 * sums in fp32 and rounds once) operations,
 * each an fp32 add (u = 2^-24) or an fp32 add rounded to the 16-bit type
 * (u' = u16 + 2^-24 + u16·2^-24), so |hier - exact| <= gamma_{k_h}·sum|x|
 * (gamma_k = k·u/(1 - k·u), u = u' for 16-bit types, 2^-24 for fp32); the
 * flat MPI comm is within gamma_{N-1}·sum|x| of exact, so
 * |hier - mpi| <= (gamma_{k_h} + gamma_{N-1})·sum|x|. Both are checked per
 * element with the max of difference / bound printed. MAX, MIN, gather and
 * broadcast must equal the MPI comm bit for bit. Data: full 16-bit
 * mantissas, both signs, exponents in [-4, 4], so roundings happen.
 */
#include <float.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "comm.h"
#include "dtype.h"
#include "zt_data.h"
#include "ztest.h"

static zrt_comm *H, *F; /* under test; flat MPI reference */
static zrt_backend *B;
static int R, N, L, M;

static float val(int r, size_t i, uint32_t salt, zrt_dtype dt) {
  uint32_t h = zt_mix((uint32_t)r * 0x9e3779b9u ^ zt_mix((uint32_t)i * 0x85ebca6bu + salt));
  float m = 1.0f + (float)(zt_mix(h) & 0xffffu) / 65536.0f;
  int e = (int)((h >> 10) % 9u) - 4;
  return zt_round_to(dt, ldexpf(m, e) * (((h >> 14) & 1u) ? -1.0f : 1.0f));
}

static void *alloc_dt(size_t n, zrt_dtype dt) {
  void *p = calloc(n ? n : 1, zrt_dtype_size(dt));
  if (!p) abort();
  return p;
}

static void fill(void *buf, zrt_dtype dt, int r, size_t off, size_t n, uint32_t salt) {
  for (size_t i = 0; i < n; i++) zrt_store_f(buf, dt, i, val(r, off + i, salt, dt));
}

static double unit_of(zrt_dtype dt) {
  if (dt == ZRT_F32) return ldexp(1.0, -24);
  double u = dt == ZRT_F16 ? ldexp(1.0, -11) : ldexp(1.0, -8);
  return u + ldexp(1.0, -24) + u * ldexp(1.0, -24);
}

static double gam(int k, zrt_dtype dt) {
  double u = unit_of(dt);
  return k * u / (1.0 - k * u);
}

/* Operations on a path of a hier sum (header); rs: reduce_scatter, whose
 * cross level (M > 1) adds the M machine sums in fp32 and rounds once more. */
static int k_hier(zrt_dtype dt, int rs) {
  if (!strcmp(H->iface->name, "mpi")) return N - 1;
  return (L - 1) + (M - 1) + (dt != ZRT_F32 && L > 1) + (dt != ZRT_F32 && rs && M > 1);
}

static const char *opname(zrt_redop op) {
  return op == ZRT_RED_SUM ? "sum" : op == ZRT_RED_MAX ? "max" : "min";
}

static int cases;

/* got (hier) and ref (flat MPI) over n elements whose world indexes start
 * at off; exact data val(q, off + i). */
static void compare(const char *what, const void *got, const void *flat, zrt_dtype dt, zrt_redop op,
                    size_t off, size_t n, uint32_t salt, int reduce) {
  size_t es = zrt_dtype_size(dt);
  double maxd = 0, maxr_ref = 0, maxr_flat = 0;
  size_t bad = 0;
  int sum = reduce && op == ZRT_RED_SUM;
  int rs = !strncmp(what, "reduce_scatter", 14) || strstr(what, ": reduce_scatter") != NULL;
  double gh = gam(k_hier(dt, rs), dt), gf = gam(N - 1, dt);
  for (size_t i = 0; i < n; i++) {
    int same = !memcmp((const char *)got + i * es, (const char *)flat + i * es, es);
    if (!sum) {
      if (!same && bad++ < 5)
        fprintf(stderr, "FAIL rank %d %s: element %zu: %g, mpi %g (must be equal)\n", R, what, i,
                zrt_load_f(got, dt, i), zrt_load_f(flat, dt, i));
      continue;
    }
    double exact = 0, absum = 0;
    for (int q = 0; q < N; q++) {
      double v = val(q, off + i, salt, dt);
      exact += v;
      absum += fabs(v);
    }
    double g = zrt_load_f(got, dt, i), f = zrt_load_f(flat, dt, i);
    double d_ref = fabs(g - exact), d_flat = fabs(g - f);
    double b_ref = gh * absum, b_flat = (gh + gf) * absum;
    if (d_flat > maxd) maxd = d_flat;
    if (b_ref > 0 && d_ref / b_ref > maxr_ref) maxr_ref = d_ref / b_ref;
    if (b_flat > 0 && d_flat / b_flat > maxr_flat) maxr_flat = d_flat / b_flat;
    if (!(d_ref <= b_ref) || !(d_flat <= b_flat || same)) {
      if (bad++ < 5)
        fprintf(stderr,
                "FAIL rank %d %s: element %zu: hier %.9g, mpi %.9g, exact %.9g, sum|x| %g: "
                "bounds %g (exact) %g (mpi)\n",
                R, what, i, g, f, exact, absum, b_ref, b_flat);
    }
  }
  zt_failures += bad ? 1 : 0;
  cases++;
  if (R == 0 && sum && n)
    printf("%s: max |hier-mpi| %.3g, diff/bound vs exact %.3f, vs mpi %.3f\n", what, maxd, maxr_ref,
           maxr_flat);
}

static void run_all_reduce(zrt_dtype dt, zrt_redop op, size_t n, int in_place, int async,
                           uint32_t salt) {
  size_t es = zrt_dtype_size(dt);
  void *x = alloc_dt(n, dt), *a = alloc_dt(n, dt), *b = alloc_dt(n, dt);
  fill(x, dt, R, 0, n, salt);
  if (in_place) memcpy(a, x, n * es);
  zrt_comm_req *rq = NULL;
  ZT_OK(zrt_comm_all_reduce(H, in_place ? a : x, a, n, dt, op, async ? &rq : NULL));
  ZT_OK(zrt_comm_all_reduce(F, x, b, n, dt, op, NULL));
  ZT_OK(zrt_comm_wait(H, rq));
  char what[160];
  snprintf(what, sizeof what, "all_reduce %s %s n=%zu%s%s", opname(op), zrt_dtype_name(dt), n,
           in_place ? " in-place" : "", async ? " async" : "");
  compare(what, a, b, dt, op, 0, n, salt, 1);
  free(x), free(a), free(b);
}

/* counts: even (base each), or uneven with the empty segments of every
 * rank whose index is 1 mod 3, and others of different odd lengths. */
static void make_counts(size_t *c, int uneven, size_t base) {
  for (int q = 0; q < N; q++) c[q] = uneven ? (q % 3 == 1 ? 0 : base + (size_t)q * 37 + 3) : base;
}

static size_t offset_of(const size_t *c, int r) {
  size_t o = 0;
  for (int q = 0; q < r; q++) o += c[q];
  return o;
}

static void run_reduce_scatter(zrt_dtype dt, zrt_redop op, int uneven, size_t base, int async,
                               uint32_t salt) {
  size_t c[64];
  make_counts(c, uneven, base);
  size_t total = offset_of(c, N), off = offset_of(c, R);
  void *x = alloc_dt(total, dt), *a = alloc_dt(c[R], dt), *b = alloc_dt(c[R], dt);
  fill(x, dt, R, 0, total, salt);
  zrt_comm_req *rq = NULL;
  ZT_OK(zrt_comm_reduce_scatter(H, x, a, c, dt, op, async ? &rq : NULL));
  ZT_OK(zrt_comm_reduce_scatter(F, x, b, c, dt, op, NULL));
  if (rq) {
    int done = 0;
    while (!done) ZT_OK(zrt_comm_test(H, rq, &done));
  }
  char what[160];
  snprintf(what, sizeof what, "reduce_scatter %s %s %s base=%zu%s", opname(op), zrt_dtype_name(dt),
           uneven ? "uneven" : "even", base, async ? " async" : "");
  compare(what, a, b, dt, op, off, c[R], salt, 1);
  free(x), free(a), free(b);
}

static void run_all_gather(zrt_dtype dt, int uneven, size_t base, int in_place, int async,
                           uint32_t salt) {
  size_t c[64];
  make_counts(c, uneven, base);
  size_t total = offset_of(c, N), off = offset_of(c, R), es = zrt_dtype_size(dt);
  void *a = alloc_dt(total, dt), *b = alloc_dt(total, dt), *mine = alloc_dt(c[R], dt);
  fill(mine, dt, R, off, c[R], salt);
  if (in_place) memcpy((char *)a + off * es, mine, c[R] * es);
  zrt_comm_req *rq = NULL;
  ZT_OK(
      zrt_comm_all_gather(H, in_place ? (char *)a + off * es : mine, a, c, dt, async ? &rq : NULL));
  ZT_OK(zrt_comm_all_gather(F, mine, b, c, dt, NULL));
  ZT_OK(zrt_comm_wait(H, rq));
  char what[160];
  snprintf(what, sizeof what, "all_gather %s %s base=%zu%s%s", zrt_dtype_name(dt),
           uneven ? "uneven" : "even", base, in_place ? " in-place" : "", async ? " async" : "");
  compare(what, a, b, dt, ZRT_RED_SUM, 0, total, salt, 0);
  /* and the data itself: every segment from its rank */
  int wrong = 0;
  for (int q = 0; q < N && !wrong; q++)
    for (size_t i = 0; i < c[q] && !wrong; i++) {
      size_t w = offset_of(c, q) + i;
      wrong = zrt_load_f(a, dt, w) != val(q, w, salt, dt);
    }
  ZT_CHECK(!wrong);
  free(a), free(b), free(mine);
}

static void run_broadcast(zrt_dtype dt, size_t n, int root, int async, uint32_t salt) {
  size_t es = zrt_dtype_size(dt);
  void *a = alloc_dt(n, dt), *b = alloc_dt(n, dt);
  fill(a, dt, R, 0, n, salt); /* non-roots start from their own data */
  memcpy(b, a, n * es);
  zrt_comm_req *rq = NULL;
  ZT_OK(zrt_comm_broadcast(H, a, n, dt, root, async ? &rq : NULL));
  ZT_OK(zrt_comm_broadcast(F, b, n, dt, root, NULL));
  ZT_OK(zrt_comm_wait(H, rq));
  char what[160];
  snprintf(what, sizeof what, "broadcast %s n=%zu root %d", zrt_dtype_name(dt), n, root);
  compare(what, a, b, dt, ZRT_RED_SUM, 0, n, salt, 0);
  int wrong = 0;
  for (size_t i = 0; i < n && !wrong; i++) wrong = zrt_load_f(a, dt, i) != val(root, i, salt, dt);
  ZT_CHECK(!wrong);
  free(a), free(b);
}

/* Several collectives in flight at once, completed in reverse order: the
 * hier comm runs them in issue order whatever order they are waited in. */
static void run_inflight(zrt_dtype dt, uint32_t salt) {
  size_t c[64];
  make_counts(c, 1, 1501);
  size_t total = offset_of(c, N), off = offset_of(c, R), es = zrt_dtype_size(dt), n = total - 1;
  void *x = alloc_dt(total, dt), *rs = alloc_dt(c[R], dt), *rs_f = alloc_dt(c[R], dt);
  void *ar = alloc_dt(n, dt), *ar_f = alloc_dt(n, dt), *ag = alloc_dt(total, dt),
       *ag_f = alloc_dt(total, dt);
  fill(x, dt, R, 0, total, salt);
  zrt_comm_req *q[3];
  ZT_OK(zrt_comm_reduce_scatter(H, x, rs, c, dt, ZRT_RED_SUM, &q[0]));
  ZT_OK(zrt_comm_all_reduce(H, x, ar, n, dt, ZRT_RED_SUM, &q[1]));
  ZT_OK(zrt_comm_all_gather(H, (char *)x + off * es, ag, c, dt, &q[2]));
  for (int i = 2; i >= 0; i--) ZT_OK(zrt_comm_wait(H, q[i]));
  ZT_OK(zrt_comm_reduce_scatter(F, x, rs_f, c, dt, ZRT_RED_SUM, NULL));
  ZT_OK(zrt_comm_all_reduce(F, x, ar_f, n, dt, ZRT_RED_SUM, NULL));
  ZT_OK(zrt_comm_all_gather(F, (char *)x + off * es, ag_f, c, dt, NULL));
  char what[160];
  snprintf(what, sizeof what, "in flight x3 %s: reduce_scatter", zrt_dtype_name(dt));
  compare(what, rs, rs_f, dt, ZRT_RED_SUM, off, c[R], salt, 1);
  snprintf(what, sizeof what, "in flight x3 %s: all_reduce", zrt_dtype_name(dt));
  compare(what, ar, ar_f, dt, ZRT_RED_SUM, 0, n, salt, 1);
  snprintf(what, sizeof what, "in flight x3 %s: all_gather", zrt_dtype_name(dt));
  compare(what, ag, ag_f, dt, ZRT_RED_SUM, 0, total, salt, 0);
  free(x), free(rs), free(rs_f), free(ar), free(ar_f), free(ag), free(ag_f);
}

int main(void) {
  ZT_OK(zrt_backend_create("cpu", 0, 0, &B));
  const char *want = getenv("ZRT_TEST_COMM");
  if (!want || !*want) want = "hier";
  const char *expect = getenv("ZRT_TEST_EXPECT");
  if (!expect || !*expect) expect = "hier";
  ZT_OK(zrt_comm_create(want, B, 120.0, &H));
  ZT_OK(zrt_comm_create("mpi", B, 120.0, &F));
  R = H->rank;
  N = H->world;
  L = H->local_world;
  M = N / L;
  if (strcmp(H->iface->name, expect)) {
    fprintf(stderr, "FAIL rank %d: comm %s (asked %s), expected %s\n", R, H->iface->name, want,
            expect);
    return 1;
  }
  ZT_CHECK(F->rank == R && F->world == N && N <= 64);
  if (R == 0)
    printf("comm %s: %d machine(s) x %d rank(s); sum bound gamma_%d (16-bit: all_reduce "
           "gamma_%d, reduce_scatter gamma_%d)\n",
           H->iface->name, M, L, k_hier(ZRT_F32, 0), k_hier(ZRT_BF16, 0), k_hier(ZRT_BF16, 1));

  /* Dead-rank mode (tests/cli/test_comm_hier.sh, under mpiexec with
   * recovery on so the others live on): rank $ZRT_TEST_HIER_DIE is killed
   * by SIGKILL before an all_reduce; every other rank of its machine must
   * fail with the shm comm naming it, in the hier comm's words, well
   * before the 60 s timeout. (Ranks on other machines would wait in the
   * cross level until the watchdog's timeout: they leave at once.) */
  const char *die = getenv("ZRT_TEST_HIER_DIE");
  if (die && *die) {
    int victim = atoi(die);
    float one = 1, sum = 0;
    ZT_OK(zrt_comm_all_reduce(H, &one, &sum, 1, ZRT_F32, ZRT_RED_SUM, NULL));
    ZT_CHECK(sum == (float)N);
    if (R == victim) raise(SIGKILL);
    if (R / L != victim / L) _exit(0); /* other machines: only the watchdog would see it */
    H->timeout_s = 60;
    double t0 = zrt_now_s();
    float x[256] = {0}, y[256];
    zrt_status st = zrt_comm_all_reduce(H, x, y, 256, ZRT_F32, ZRT_RED_SUM, NULL);
    printf("rank %d after %.1fs: %s: %s\n", R, zrt_now_s() - t0, zrt_status_string(st),
           zrt_last_error());
    fflush(stdout);
    {
      ZT_CHECK(st == ZRT_ERR_COMM);
      ZT_CONTAINS(zrt_last_error(), "hier comm, node level on machine");
      char want[64];
      snprintf(want, sizeof want, "rank %d (pid", victim % L);
      ZT_CONTAINS(zrt_last_error(), want);
      ZT_CHECK(zrt_now_s() - t0 < 30);
      /* broken for good: the next call fails at once with the same */
      ZT_CHECK(zrt_comm_all_reduce(H, x, y, 1, ZRT_F32, ZRT_RED_SUM, NULL) == ZRT_ERR_COMM);
      ZT_CONTAINS(zrt_last_error(), "died");
    }
    _exit(zt_failures ? 1 : 0); /* no MPI_Finalize with a rank gone */
  }

  const zrt_dtype dts[3] = {ZRT_F32, ZRT_F16, ZRT_BF16};
  /* 0, 1, odd, and more than 3 rounds of a 4 KiB shm region (the cli test
   * runs with ZRT_COMM_SHM_REGION=4KiB) */
  const size_t ns[5] = {0, 1, 7, 1037, 20011};
  uint32_t salt = 11;
  for (int d = 0; d < 3; d++) {
    zrt_dtype dt = dts[d];
    for (int op = 0; op < 3; op++) {
      for (int k = 0; k < 5; k++)
        run_all_reduce(dt, (zrt_redop)op, ns[k], k & 1, (k >> 1) & 1, salt++);
      for (int uneven = 0; uneven < 2; uneven++) {
        run_reduce_scatter(dt, (zrt_redop)op, uneven, 257, op == 1, salt++);
        run_reduce_scatter(dt, (zrt_redop)op, uneven, 0, 0, salt++);
      }
      run_reduce_scatter(dt, (zrt_redop)op, 0, 5003, 1, salt++);
    }
    for (int uneven = 0; uneven < 2; uneven++)
      for (int ip = 0; ip < 2; ip++)
        run_all_gather(dt, uneven, 129 + 1000 * (size_t)ip, ip, ip ^ uneven, salt++);
    run_all_gather(dt, 0, 0, 0, 0, salt++);
    for (int root = 0; root < N; root++)
      run_broadcast(dt, root & 1 ? 7 : 4099, root, root & 1, salt++);
    run_broadcast(dt, 0, N - 1, 0, salt++);
    run_inflight(dt, salt++);
  }

  /* barrier, and the wrappers' counters over the hier comm */
  uint64_t seq = H->seq;
  ZT_OK(zrt_comm_barrier(H));
  ZT_CHECK(H->seq == seq + 1 && H->completed == H->seq);
  ZT_CHECK(!strcmp(H->last_op, "barrier"));
  /* staging between the levels is the comm's own pool, not the backend's */
  zrt_mem_stats s;
  zrt_pool_stats(B->pool, &s);
  ZT_CHECK(s.peak[ZRT_MEM_COMM] == 0);

  if (R == 0) printf("%d cases compared\n", cases);
  zrt_comm_destroy(F);
  zrt_comm_destroy(H);
  zrt_backend_destroy(B);
  ZT_DONE();
}
