/*
 * test_comm_zero_copy.c — the shm comm's zero-copy collectives (buffers
 * from zrt_comm_mem_alloc on every rank) against the same comm's copy path
 * (the same calls on malloc'd buffers) and the MPI comm: reduce_scatter,
 * all_reduce (out of place, in place), all_gather (out of place, in place)
 * × fp32/fp16/bf16 × SUM/MAX/MIN × counts that take several rounds of the
 * copy path's regions, fewer elements than ranks, and an odd count.
 * Zero-copy vs copy path: bitwise at any N (the same kernels add in the
 * same rank order). Zero-copy vs MPI: bitwise at N = 2 (one add, one
 * rounding), and for MAX / MIN / gathers at any N; sums at N > 2 within
 * 2·gamma_{N-1}·sum|x| per element (the MPI comm's order differs; the
 * bound of test_comm_collectives.c). zrt_comm.zero_copy must count every
 * zero-copy collective, and none where one rank's buffer is private (the
 * mixed case: every rank takes the copy path). Also: asynchronous requests
 * waited out of issue order, an allocation larger than /dev/shm's free
 * space (the message says what to do; nothing left behind), no
 * /dev/shm/zrt-zc-* file of this process after any allocation, and with
 * ZRT_TEST_ZC_DIE=1 the last rank dies before a zero-copy all_reduce:
 * the others' error names it (ctest matches the message). The engine's
 * gradient buckets (sharding/bucket.c) over the comm: staging counted
 * exactly in the pool, every bucket zero-copy, the same gradients as over
 * the MPI comm. zrt_comm_buf_alloc refused by the last rank's pool alone:
 * every rank returns an error at once (the others name that rank). A
 * comm's creation sweeps /dev/shm names whose creator died over a minute
 * ago, and only those.
 * ZRT_TEST_COMM=mpi runs the same against the generic allocator (plain
 * memory, the MPI comm's own paths).
 */
#include <dirent.h>
#include <fcntl.h>
#include <float.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "backend.h"
#include "bucket.h"
#include "comm.h"
#include "dtype.h"
#include "zt_data.h"
#include "ztest.h"

static zrt_comm *C, *M;
static zrt_backend *B0; /* the unlimited CPU backend of main */
static int R, N, ZC;    /* ZC: the comm under test is shm with shared allocations */

/* Full-mantissa values with exponents in [-4, 4], rounded to dt. */
static float val(int r, size_t i, uint32_t salt, zrt_dtype dt) {
  uint32_t h = zt_mix((uint32_t)r * 0x9e3779b9u ^ zt_mix((uint32_t)i * 0x85ebca6bu + salt));
  float m = 1.0f + (float)(zt_mix(h) & 0xffffu) / 65536.0f;
  float v = ldexpf(m, (int)((h >> 10) % 9u) - 4) * (((h >> 14) & 1u) ? -1.0f : 1.0f);
  uint32_t tmp[1];
  zrt_store_f(tmp, dt, 0, v);
  return zrt_load_f(tmp, dt, 0);
}

static void fill(void *buf, zrt_dtype dt, size_t n, uint32_t salt) {
  for (size_t i = 0; i < n; i++) zrt_store_f(buf, dt, i, val(R, i, salt, dt));
}

static void *shared(size_t bytes) {
  void *p = NULL;
  ZT_OK(zrt_comm_mem_alloc(C, bytes, &p));
  return p;
}

static void *priv(size_t bytes) {
  void *p = calloc(bytes ? bytes : 1, 1);
  if (!p) abort();
  return p;
}

/* Files of this process's allocations left in /dev/shm. */
static int leftovers(void) {
  char pre[64];
  snprintf(pre, sizeof pre, "zrt-zc-%d-%d-", (int)getuid(), (int)getpid());
  DIR *d = opendir("/dev/shm");
  int n = 0;
  if (!d) return 0;
  for (struct dirent *e; (e = readdir(d));) n += !strncmp(e->d_name, pre, strlen(pre));
  closedir(d);
  return n;
}

static double combine_u(zrt_dtype dt) {
  double u = dt == ZRT_F32 ? ldexp(1.0, -24) : dt == ZRT_F16 ? ldexp(1.0, -11) : ldexp(1.0, -8);
  return dt == ZRT_F32 ? u : u + ldexp(1.0, -24) + u * ldexp(1.0, -24);
}

/* what: 0 reduce_scatter, 1 all_reduce, 2 all_reduce in place, 3
 * all_gather, 4 all_gather in place. Runs it on (zero-copy buffers, private
 * buffers, the MPI comm) and compares; mixed: rank 1's send is private. */
static void one(int what, zrt_dtype dt, zrt_redop op, size_t total, int mixed, uint32_t salt) {
  size_t es = zrt_dtype_size(dt), counts[64], offs[64], o = 0;
  for (int q = 0; q < N; q++) {
    counts[q] = total / (size_t)N + ((size_t)q < total % (size_t)N);
    offs[q] = o;
    o += counts[q];
  }
  int gather = what >= 3;
  size_t sn = gather ? counts[R] : total, rn = what == 0 ? counts[R] : total;
  size_t sb = sn * es, rb = rn * es;
  int mine_private = mixed && R == 1;
  /* allocations are collective: the same size on every rank (counts[0] is
   * the largest segment) */
  size_t sa = (gather ? counts[0] : total) * es, ra = (what == 0 ? counts[0] : total) * es;
  char *za = shared(sa), *zr = shared(ra), *zs = mine_private ? priv(sb) : za;
  char *ps = priv(sb), *pr = priv(rb), *ms = priv(sb), *mr = priv(rb);
  char *x = priv(total * es);
  fill(x, dt, total, salt);
  const char *mysrc = gather ? x + offs[R] * es : x;
  memcpy(zs, mysrc, sb);
  memcpy(ps, mysrc, sb);
  memcpy(ms, mysrc, sb);
  uint64_t z0 = C->zero_copy;
  switch (what) {
  case 0:
    ZT_OK(zrt_comm_reduce_scatter(C, zs, zr, counts, dt, op, NULL));
    ZT_OK(zrt_comm_reduce_scatter(C, ps, pr, counts, dt, op, NULL));
    ZT_OK(zrt_comm_reduce_scatter(M, ms, mr, counts, dt, op, NULL));
    break;
  case 1:
  case 2:
    if (what == 2) { /* in place: recv holds the input */
      memcpy(zr, x, rb);
      memcpy(pr, x, rb);
      memcpy(mr, x, rb);
    }
    ZT_OK(zrt_comm_all_reduce(C, what == 2 ? zr : zs, zr, total, dt, op, NULL));
    ZT_OK(zrt_comm_all_reduce(C, what == 2 ? pr : ps, pr, total, dt, op, NULL));
    ZT_OK(zrt_comm_all_reduce(M, what == 2 ? mr : ms, mr, total, dt, op, NULL));
    break;
  default:
    if (what == 4) { /* in place: send is recv at this rank's offset */
      memcpy(zr + offs[R] * es, mysrc, sb);
      memcpy(pr + offs[R] * es, mysrc, sb);
      memcpy(mr + offs[R] * es, mysrc, sb);
    }
    ZT_OK(zrt_comm_all_gather(C, what == 4 ? zr + offs[R] * es : zs, zr, counts, dt, NULL));
    ZT_OK(zrt_comm_all_gather(C, what == 4 ? pr + offs[R] * es : ps, pr, counts, dt, NULL));
    ZT_OK(zrt_comm_all_gather(M, what == 4 ? mr + offs[R] * es : ms, mr, counts, dt, NULL));
  }
  /* zero-copy ran exactly when every rank's buffers are shared (in place,
   * rank 1's send is its shared recv, or lies in it) */
  int expect_zc = ZC && total && !(mixed && what != 2 && what != 4);
  ZT_CHECK(C->zero_copy - z0 == (uint64_t)expect_zc);
  double u = combine_u(dt), k = N - 1, gam = 2.0 * k * u / (1.0 - k * u);
  size_t off = what == 0 ? offs[R] : 0, bad_copy = 0, bad_mpi = 0;
  for (size_t i = 0; i < rn; i++) {
    if (memcmp(zr + i * es, pr + i * es, es)) bad_copy++;
    if (!memcmp(zr + i * es, mr + i * es, es)) continue;
    double lim = 0;
    if (!gather && op == ZRT_RED_SUM && N > 2)
      for (int q = 0; q < N; q++) lim += gam * fabs(val(q, off + i, salt, dt));
    if (!(fabs(zrt_load_f(zr, dt, i) - zrt_load_f(mr, dt, i)) <= lim)) bad_mpi++;
  }
  const char *names[5] = {"reduce_scatter", "all_reduce", "all_reduce in place", "all_gather",
                          "all_gather in place"};
  if (bad_copy || bad_mpi) {
    fprintf(stderr,
            "FAIL rank %d %s %s op %d n=%zu%s: %zu differ from the copy path, %zu from mpi\n", R,
            names[what], zrt_dtype_name(dt), (int)op, total, mixed ? " mixed" : "", bad_copy,
            bad_mpi);
    zt_failures++;
  }
  if (mine_private) free(zs);
  zrt_comm_mem_free(C, za);
  zrt_comm_mem_free(C, zr);
  free(ps);
  free(pr);
  free(ms);
  free(mr);
  free(x);
}

/* Three asynchronous zero-copy collectives in flight, waited newest first:
 * each equals its blocking copy-path twin. */
static void async_out_of_order(zrt_dtype dt, size_t total) {
  size_t es = zrt_dtype_size(dt), cnt = total / (size_t)N, b = cnt * (size_t)N * es;
  char *a_s = shared(b), *a_r = shared(cnt * es), *g_s = shared(cnt * es), *g_r = shared(b);
  char *r_s = shared(b), *r_r = shared(b), *ref = priv(b), *refin = priv(b);
  fill(a_s, dt, cnt * (size_t)N, 901);
  fill(g_s, dt, cnt, 902);
  fill(r_s, dt, cnt * (size_t)N, 903);
  uint64_t z0 = C->zero_copy;
  zrt_comm_req *q[3];
  ZT_OK(zrt_comm_reduce_scatter_even(C, a_s, a_r, cnt, dt, ZRT_RED_SUM, &q[0]));
  ZT_OK(zrt_comm_all_gather_even(C, g_s, g_r, cnt, dt, &q[1]));
  ZT_OK(zrt_comm_all_reduce(C, r_s, r_r, cnt * (size_t)N, dt, ZRT_RED_SUM, &q[2]));
  for (int i = 2; i >= 0; i--) ZT_OK(zrt_comm_wait(C, q[i]));
  ZT_CHECK(C->zero_copy - z0 == (ZC ? 3u : 0u));
  memcpy(refin, a_s, b);
  ZT_OK(zrt_comm_reduce_scatter_even(C, refin, ref, cnt, dt, ZRT_RED_SUM, NULL));
  ZT_CHECK(!memcmp(ref, a_r, cnt * es));
  memcpy(refin, g_s, cnt * es);
  ZT_OK(zrt_comm_all_gather_even(C, refin, ref, cnt, dt, NULL));
  ZT_CHECK(!memcmp(ref, g_r, b));
  memcpy(refin, r_s, b);
  ZT_OK(zrt_comm_all_reduce(C, refin, ref, cnt * (size_t)N, dt, ZRT_RED_SUM, NULL));
  ZT_CHECK(!memcmp(ref, r_r, b));
  char *bufs[6] = {a_s, a_r, g_s, g_r, r_s, r_r};
  for (int i = 0; i < 6; i++) zrt_comm_mem_free(C, bufs[i]);
  free(ref);
  free(refin);
}

/* The engine's gradient buckets over the comm: their staging (2 slots of
 * world·chunk + chunk elements) counted exactly in the backend pool's comm
 * category, every bucket zero-copy on the shm comm, and the reduced
 * gradients equal to the same buckets over the MPI comm (bf16 sums at
 * N = 2: bitwise; at N > 2 the fp32 accumulators within 2·gamma·sum|x|). */
static void buckets(zrt_backend *B) {
  const int64_t chunk = 1000, part = 2500, padded = part * N; /* 3 buckets per module */
  zrt_mem_stats m0, m1;
  zrt_pool_stats(B->pool, &m0);
  zrt_buckets *bz = NULL, *bm = NULL;
  ZT_OK(zrt_buckets_create(B, C, ZRT_BF16, ZRT_BF16, chunk, &bz));
  zrt_pool_stats(B->pool, &m1);
  ZT_CHECK(m1.current[ZRT_MEM_COMM] - m0.current[ZRT_MEM_COMM] ==
           2 * (size_t)chunk * (size_t)(N + 1) * 2);
  ZT_OK(zrt_buckets_create(B, M, ZRT_BF16, ZRT_BF16, chunk, &bm));
  uint16_t *g = priv((size_t)padded * 2);
  float *az = priv((size_t)padded * 4), *am = priv((size_t)padded * 4);
  fill(g, ZRT_BF16, (size_t)padded, 77);
  uint64_t z0 = C->zero_copy;
  for (int ar = 0; ar < 2; ar++) {
    memset(az, 0, (size_t)padded * 4);
    memset(am, 0, (size_t)padded * 4);
    ZT_OK(zrt_buckets_reduce(bz, g, padded, part, az, 0, ar, 1));
    ZT_OK(zrt_buckets_drain(bz));
    ZT_OK(zrt_buckets_reduce(bm, g, padded, part, am, 0, ar, 1));
    ZT_OK(zrt_buckets_drain(bm));
    size_t n = ar ? (size_t)padded : (size_t)part, bad = 0;
    double u = ldexp(1.0, -8) + ldexp(1.0, -24) + ldexp(1.0, -32), k = N - 1;
    double gam = 2.0 * k * u / (1.0 - k * u);
    for (size_t i = 0; i < n; i++) {
      if (!memcmp(&az[i], &am[i], 4)) continue;
      double lim = 0;
      size_t gi = ar ? i : (size_t)R * (size_t)part + i;
      for (int q = 0; q < N && N > 2; q++) lim += gam * fabs(val(q, gi, 77, ZRT_BF16));
      if (!(fabs((double)az[i] - (double)am[i]) <= lim)) bad++;
    }
    if (bad) {
      fprintf(stderr, "FAIL rank %d buckets %s: %zu elements differ from the mpi comm's\n", R,
              ar ? "all_reduce" : "reduce_scatter", bad);
      zt_failures++;
    }
  }
  /* 3 buckets per module, twice */
  ZT_CHECK(C->zero_copy - z0 == (ZC ? 6u : 0u));
  zrt_buckets_destroy(bz);
  zrt_buckets_destroy(bm);
  zrt_pool_stats(B->pool, &m1);
  ZT_CHECK(m1.current[ZRT_MEM_COMM] == m0.current[ZRT_MEM_COMM]);
  free(g);
  free(az);
  free(am);
}

/* More than /dev/shm holds: a clear error on every rank, nothing left. */
static void too_big(void) {
  struct statvfs vf;
  if (statvfs("/dev/shm", &vf) != 0) return;
  size_t big = (size_t)vf.f_bavail * vf.f_frsize + ((size_t)1 << 30);
  float b = (float)big; /* the same size on every rank: the largest */
  ZT_OK(zrt_comm_all_reduce(M, &b, &b, 1, ZRT_F32, ZRT_RED_MAX, NULL));
  void *p = (void *)1;
  zrt_status st = zrt_comm_mem_alloc(C, (size_t)b, &p);
  ZT_CHECK(st == ZRT_ERR_OOM && p == NULL);
  const char *msg = zrt_last_error();
  if (R == 0) printf("rank 0: %s\n", msg);
  ZT_CONTAINS(msg, "shared memory");
  if (strstr(msg, "rank 0 could not")) return; /* the others point to rank 0's message */
  ZT_CONTAINS(msg, "--shm-size");
  ZT_CONTAINS(msg, "ZRT_COMM_SHM_ZC=0");
}

/* zrt_comm_buf_alloc where only the last rank's pool is too small: every
 * rank returns an error (none waits in the collective allocation), the
 * last with its pool's capacity message, the others naming it. */
static void reserve_refused(void) {
  zrt_backend *b = NULL;
  ZT_OK(zrt_backend_create("cpu", R == N - 1 ? (size_t)64 << 10 : 0, 0, &b));
  void *p = NULL;
  zrt_status st = zrt_comm_buf_alloc(C, b, (size_t)1 << 20, ZRT_MEM_COMM, &p);
  const char *msg = zrt_last_error();
  printf("rank %d: %s: %s\n", R, zrt_status_string(st), msg);
  ZT_CHECK(st != ZRT_OK && p == NULL);
  if (R == N - 1)
    ZT_CHECK(!strstr(msg, "could not reserve its share"));
  else {
    char want[64];
    snprintf(want, sizeof want, "rank %d could not reserve its share", N - 1);
    ZT_CONTAINS(msg, want);
  }
  /* the comm goes on: the next allocation and collective work */
  ZT_OK(zrt_comm_buf_alloc(C, B0, 4096, ZRT_MEM_COMM, &p));
  ZT_OK(zrt_comm_barrier(C));
  zrt_comm_buf_free(C, B0, p);
  zrt_backend_destroy(b);
}

/* Rank 0 makes three names in /dev/shm: one whose creator died over a
 * minute ago (stale), one whose creator died just now (young: it could be
 * in its handshake window), one of a live process (pid 1). Creating a comm
 * sweeps the first only. */
static void sweep_stale(zrt_backend *b) {
  char names[3][64];
  if (R == 0) {
    pid_t dead = fork();
    if (dead == 0) _exit(0);
    waitpid(dead, NULL, 0);
    int pids[3] = {(int)dead, (int)dead, 1};
    for (int i = 0; i < 3; i++) {
      snprintf(names[i], sizeof names[i], "/zrt-zc-%d-%d-%d", (int)getuid(), pids[i], 900 + i);
      int fd = shm_open(names[i], O_RDWR | O_CREAT, 0600);
      ZT_CHECK(fd >= 0 && ftruncate(fd, 4096) == 0);
      struct timespec t[2] = {{time(NULL) - 120, 0}, {time(NULL) - 120, 0}};
      if (i != 1) ZT_CHECK(futimens(fd, t) == 0);
      close(fd);
    }
  }
  zrt_comm *c2 = NULL;
  ZT_OK(zrt_comm_create("auto", b, 120.0, &c2));
  if (R == 0) {
    for (int i = 0; i < 3; i++) {
      int fd = shm_open(names[i], O_RDWR, 0600);
      printf("sweep: %s %s\n", names[i], fd >= 0 ? "kept" : "removed");
      ZT_CHECK((fd >= 0) == (i != 0));
      if (fd >= 0) {
        close(fd);
        shm_unlink(names[i]);
      }
    }
  }
  zrt_comm_destroy(c2);
}

int main(void) {
  zrt_backend *B = NULL;
  ZT_OK(zrt_backend_create("cpu", 0, 0, &B));
  B0 = B;
  const char *want = getenv("ZRT_TEST_COMM");
  ZT_OK(zrt_comm_create(want && *want ? want : "auto", B, 120.0, &C));
  ZT_OK(zrt_comm_create("mpi", B, 120.0, &M));
  R = C->rank;
  N = C->world;
  const char *ze = getenv("ZRT_COMM_SHM_ZC");
  ZC = !strcmp(C->iface->name, "shm") && !(ze && !strcmp(ze, "0"));
  if (R == 0) printf("comm %s, zero-copy %s, %d ranks\n", C->iface->name, ZC ? "on" : "off", N);

  if (getenv("ZRT_TEST_ZC_DIE")) { /* the last rank dies before a zero-copy all_reduce */
    float *s = shared(4096 * sizeof(float)), *r = shared(4096 * sizeof(float));
    fill(s, ZRT_F32, 4096, 5);
    ZT_OK(zrt_comm_all_reduce(C, s, r, 4096, ZRT_F32, ZRT_RED_SUM, NULL));
    ZT_CHECK(C->zero_copy == (uint64_t)ZC);
    if (R == N - 1) raise(SIGKILL);
    zrt_status st = zrt_comm_all_reduce(C, s, r, 4096, ZRT_F32, ZRT_RED_SUM, NULL);
    ZT_CHECK(st == ZRT_ERR_COMM);
    printf("rank %d: %s: %s\n", R, zrt_status_string(st), zrt_last_error());
    fflush(stdout);
    _exit(zt_failures ? 1 : 0); /* MPI cannot finalise with a rank gone */
  }

  const zrt_dtype dts[3] = {ZRT_F32, ZRT_F16, ZRT_BF16};
  uint32_t salt = 1;
  for (int d = 0; d < 3; d++) {
    size_t es = zrt_dtype_size(dts[d]);
    /* > 3 rounds of a 1 MiB region per rank, fewer elements than ranks, a
     * few vectors plus a tail; none a multiple of the rank count */
    size_t totals[3] = {(3u << 20) / es + 1001, (size_t)N - 1, 16 * 7 + 5};
    for (int t = 0; t < 3; t++)
      for (int what = 0; what < 5; what++)
        for (int op = 0; op < (what >= 3 ? 1 : 3); op++)
          one(what, dts[d], (zrt_redop)op, totals[t], 0, salt++);
    for (int what = 0; what < 5; what++) one(what, dts[d], ZRT_RED_SUM, 16 * 7 + 5, 1, salt++);
    async_out_of_order(dts[d], 4096 * (size_t)N + 0);
  }
  buckets(B);
  if (C->iface->mem_alloc) reserve_refused();
  if (!strcmp(C->iface->name, "shm")) sweep_stale(B);
  if (R == 0) printf("zero-copy collectives: %llu\n", (unsigned long long)C->zero_copy);
  ZT_CHECK(leftovers() == 0);
  if (ZC) too_big();
  ZT_CHECK(leftovers() == 0);
  /* allocations still live at destroy are released with the comm */
  void *keep = shared(1 << 16);
  ZT_CHECK(keep != NULL);
  zrt_comm_destroy(M);
  zrt_comm_destroy(C);
  ZT_CHECK(leftovers() == 0);
  zrt_backend_destroy(B);
  ZT_DONE();
}
