/*
 * test_backend_twin.c — the twin backend (backend/backend_twin.c): its ops
 * bit-equal to the CPU backend's (tolerance: exact, the same kernels), CUDA's
 * stream and event semantics (a wait on the event orders, its absence is
 * visible, a never-recorded event is a no-op, join, sticky errors), copies
 * that block for pageable memory and not for registered memory, the
 * pointer-kind checks at op boundaries, new memory filled with NaN bytes,
 * host functions on a stream worker, the counters and ZRT_TWIN_JITTER's
 * validation, and the guard: in a child process, a kernel op and a host
 * function on device memory work and a host thread's read of it dies with
 * the handler's message naming the address, the category and the thread.
 * The copy guard (ZRT_TWIN_COPY_GUARD): in a child process, a host write to
 * a queued H2D's pinned source dies with its message (behind a slowed op,
 * behind a launched host function, and while host-side work on another
 * stream not ordered before the copy still runs), and lives after a
 * synchronize, behind a host-side function that writes the source in stream
 * order or on another stream that an event orders before the copy, through a
 * D2H-then-H2D round trip and with the guard off; a queued D2H's pinned
 * destination reads 0xFF bytes until the synchronize (only outside the
 * source for an overlapping host copy), its old bytes with the guard off.
 * Slow producers are host functions that sleep
 * ZT_TWIN_SLOW_MS, far longer than the consumer needs to run.
 */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "backend.h"
#include "zt_child.h"
#include "ztest.h"

#define ZT_TWIN_SLOW_MS 60

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static float srand1(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return (float)((double)(rng_state >> 11) * (2.0 / 9007199254740992.0) - 1.0);
}

static void *balloc(zrt_backend *b, size_t bytes) {
  void *p = NULL;
  ZT_OK(zrt_backend_alloc(b, bytes, ZRT_MEM_ACTIVATIONS, &p));
  return p;
}

typedef struct {
  float *dst;
  float value;
  int sleep_ms;
  pthread_t *who;
} write_args;

static zrt_status slow_write(void *a) {
  write_args w;
  memcpy(&w, a, sizeof w);
  if (w.sleep_ms) {
    struct timespec ts = {0, (long)w.sleep_ms * 1000000L};
    nanosleep(&ts, NULL);
  }
  if (w.who) *w.who = pthread_self();
  *w.dst = w.value;
  return ZRT_OK;
}

static zrt_status failing(void *a) {
  (void)a;
  return zrt_error(ZRT_ERR_INTERNAL, "the test's host function fails on purpose");
}

static zrt_backend *twin(void) {
  zrt_backend *b = NULL;
  ZT_OK(zrt_backend_create("twin", 0, 0, &b));
  ZT_CHECK(!strcmp(b->iface->name, "twin") && b->device_id == 0);
  return b;
}

/* Host copy of one float of device memory (a blocking D2H copy). */
static float peek(zrt_backend *b, const float *dev) {
  float h = 0;
  ZT_OK(zrt_backend_memcpy(b, &h, dev, sizeof h, ZRT_COPY_D2H, NULL));
  return h;
}

static void test_same_numerics(void) {
  zrt_backend *t = twin(), *c = NULL;
  ZT_OK(zrt_backend_create("cpu", 0, 0, &c));
  enum { M = 37, N = 29, K = 41 };
  float ha[M * K], hb[K * N], hc[M * N];
  for (int i = 0; i < M * K; i++) ha[i] = srand1();
  for (int i = 0; i < K * N; i++) hb[i] = srand1();
  for (int i = 0; i < M * N; i++) hc[i] = srand1();
  float rc[M * N], rt[M * N];
  for (int dt = 0; dt < 3; dt++) {
    zrt_backend *bs[2] = {c, t};
    float *outs[2] = {rc, rt};
    for (int k = 0; k < 2; k++) {
      zrt_backend *b = bs[k];
      float *a = balloc(b, sizeof ha), *bm = balloc(b, sizeof hb), *cm = balloc(b, sizeof hc);
      void *a16 = balloc(b, sizeof ha), *b16 = balloc(b, sizeof hb);
      ZT_OK(zrt_backend_memcpy(b, a, ha, sizeof ha, ZRT_COPY_H2D, NULL));
      ZT_OK(zrt_backend_memcpy(b, bm, hb, sizeof hb, ZRT_COPY_H2D, NULL));
      ZT_OK(zrt_backend_memcpy(b, cm, hc, sizeof hc, ZRT_COPY_H2D, NULL));
      ZT_OK(zrt_backend_convert(b, a16, (zrt_dtype)dt, a, ZRT_F32, M * K, NULL));
      ZT_OK(zrt_backend_convert(b, b16, (zrt_dtype)dt, bm, ZRT_F32, K * N, NULL));
      ZT_OK(zrt_backend_gemm(b, 0, 0, M, N, K, 0.5f, a16, K, b16, N, (zrt_dtype)dt, 0.25f, cm, N,
                             ZRT_F32, NULL));
      ZT_OK(zrt_backend_accumulate(b, cm, a16, (zrt_dtype)dt, 0.125f, M * N < M * K ? M * N : 0,
                                   NULL));
      zrt_optim_hparams hp;
      memset(&hp, 0, sizeof hp);
      hp.type = ZRT_OPTIM_ADAMW;
      hp.lr = 1e-2f;
      hp.beta1 = 0.9f;
      hp.beta2 = 0.999f;
      hp.eps = 1e-8f;
      hp.weight_decay = 0.1f;
      hp.bias_correction = 1;
      hp.step = 1;
      hp.grad_mul = 1.0f;
      float *s1 = balloc(b, sizeof hc), *s2 = balloc(b, sizeof hc);
      ZT_OK(zrt_backend_memset(b, s1, 0, sizeof hc, NULL));
      ZT_OK(zrt_backend_memset(b, s2, 0, sizeof hc, NULL));
      ZT_OK(zrt_backend_optim_step(b, &hp, cm, s1, s2, a, ZRT_F32, NULL, ZRT_F32, M * N, NULL));
      double sumsq = 0;
      int nf = 0;
      ZT_OK(zrt_backend_scale_check(b, cm, ZRT_F32, M * N, 2.0f, &sumsq, &nf, NULL));
      ZT_OK(zrt_backend_memcpy(b, outs[k], cm, sizeof hc, ZRT_COPY_D2H, NULL));
      outs[k][0] += (float)(sumsq * 0.0); /* read back after the check */
      ZT_CHECK(nf == 0);
      void *ps[7] = {a, bm, cm, a16, b16, s1, s2};
      for (int i = 0; i < 7; i++) zrt_backend_free(b, ps[i]);
    }
    ZT_CHECK(!memcmp(rc, rt, sizeof rc));
  }
  printf("twin gemm/convert/accumulate/optim_step/scale_check: bit-equal to cpu (3 dtypes)"
         "\n");
  zrt_backend_destroy(c);
  zrt_backend_destroy(t);
}

static void test_events(void) {
  zrt_backend *b = twin();
  zrt_stream sa = NULL, sb = NULL;
  ZT_OK(zrt_backend_stream_create(b, &sa));
  ZT_OK(zrt_backend_stream_create(b, &sb));
  zrt_event e = NULL;
  ZT_OK(zrt_backend_event_create(b, &e));
  float *x = balloc(b, 64), *y = balloc(b, 64);
  float one = 1.0f;
  ZT_OK(zrt_backend_memcpy(b, y, &one, 4, ZRT_COPY_H2D, NULL));

  /* never recorded: a wait and a host wait are no-ops (CUDA) */
  ZT_OK(zrt_backend_stream_wait_event(b, sb, e));
  ZT_OK(zrt_backend_event_synchronize(b, e));

  /* producer on A (slow), consumer on B: with the wait B reads A's value */
  write_args w = {x, 7.0f, ZT_TWIN_SLOW_MS, NULL};
  ZT_OK(zrt_backend_launch_host(b, slow_write, &w, sizeof w, sa));
  ZT_OK(zrt_backend_event_record(b, e, sa));
  ZT_OK(zrt_backend_stream_wait_event(b, sb, e));
  ZT_OK(zrt_backend_memcpy(b, y, x, 4, ZRT_COPY_D2D, sb));
  ZT_OK(zrt_backend_synchronize(b, sb));
  ZT_CHECK(peek(b, y) == 7.0f);

  /* without it B runs first and copies what x held before */
  w.value = 9.0f;
  ZT_OK(zrt_backend_launch_host(b, slow_write, &w, sizeof w, sa));
  ZT_OK(zrt_backend_memcpy(b, y, x, 4, ZRT_COPY_D2D, sb));
  ZT_OK(zrt_backend_synchronize(b, sb));
  ZT_CHECK(peek(b, y) == 7.0f);
  ZT_OK(zrt_backend_synchronize(b, NULL));
  ZT_CHECK(peek(b, x) == 9.0f);

  /* the record captures the work queued so far, not later work */
  w.value = 11.0f;
  ZT_OK(zrt_backend_event_record(b, e, sa));
  ZT_OK(zrt_backend_launch_host(b, slow_write, &w, sizeof w, sa));
  ZT_OK(zrt_backend_event_synchronize(b, e));
  ZT_CHECK(peek(b, x) == 9.0f);

  /* a query never waits: pending while the slow producer runs, done after
   * (not a host wait); a failed stream's error comes back from it */
  int done = -1;
  ZT_OK(zrt_backend_synchronize(b, sa));
  ZT_OK(zrt_backend_launch_host(b, slow_write, &w, sizeof w, sa));
  ZT_OK(zrt_backend_event_record(b, e, sa));
  uint64_t hw = ZRT_BACKEND_COUNTER(b, host_waits);
  ZT_OK(zrt_backend_event_query(b, e, &done));
  ZT_CHECK(done == 0 && ZRT_BACKEND_COUNTER(b, host_waits) == hw);
  ZT_OK(zrt_backend_synchronize(b, sa));
  ZT_OK(zrt_backend_event_query(b, e, &done));
  ZT_CHECK(done == 1);
  ZT_OK(zrt_backend_event_query(b, NULL, &done));
  ZT_CHECK(done == 1);

  /* join: B after everything queued on every stream */
  w.value = 13.0f;
  ZT_OK(zrt_backend_launch_host(b, slow_write, &w, sizeof w, sa));
  ZT_OK(zrt_backend_stream_join(b, sb));
  ZT_OK(zrt_backend_memcpy(b, y, x, 4, ZRT_COPY_D2D, sb));
  ZT_OK(zrt_backend_synchronize(b, sb));
  ZT_CHECK(peek(b, y) == 13.0f);
  printf("twin events: wait orders, its absence shows, record captures queued work, query, join"
         "\n");

  zrt_backend_free(b, x);
  zrt_backend_free(b, y);
  zrt_backend_event_destroy(b, e);
  zrt_backend_stream_destroy(b, sa);
  zrt_backend_stream_destroy(b, sb);
  zrt_backend_destroy(b);
}

static void test_copies_and_kinds(void) {
  zrt_backend *b = twin();
  float *x = balloc(b, 4096);
  /* new memory holds NaN bytes, not zeros */
  uint32_t bits = 0;
  ZT_OK(zrt_backend_memcpy(b, &bits, x, 4, ZRT_COPY_D2H, NULL));
  ZT_CHECK(bits == 0xFFFFFFFFu);

  /* pageable D2H blocks until the producer is done and counts a host wait */
  write_args w = {x, 3.0f, ZT_TWIN_SLOW_MS, NULL};
  ZT_OK(zrt_backend_launch_host(b, slow_write, &w, sizeof w, NULL));
  uint64_t hw = ZRT_BACKEND_COUNTER(b, host_waits), rd = ZRT_BACKEND_COUNTER(b, d2h_reads);
  float h = 0;
  ZT_OK(zrt_backend_memcpy(b, &h, x, 4, ZRT_COPY_D2H, NULL));
  ZT_CHECK(h == 3.0f);
  ZT_CHECK(ZRT_BACKEND_COUNTER(b, host_waits) == hw + 1);
  ZT_CHECK(ZRT_BACKEND_COUNTER(b, d2h_reads) == rd + 1);

  /* registered memory: asynchronous, visible after a synchronize */
  float *pinned = aligned_alloc(64, 4096);
  pinned[0] = -1.0f;
  ZT_OK(zrt_backend_host_register(b, pinned, 4096));
  ZT_CHECK(zrt_backend_host_register(b, pinned + 16, 64) == ZRT_ERR_INVALID_ARG);
  w.value = 5.0f;
  ZT_OK(zrt_backend_launch_host(b, slow_write, &w, sizeof w, NULL));
  ZT_OK(zrt_backend_memcpy(b, pinned, x, 4, ZRT_COPY_D2H, NULL));
  ZT_CHECK(__atomic_load_n((volatile uint32_t *)pinned, __ATOMIC_ACQUIRE) == 0xBF800000u);
  ZT_OK(zrt_backend_synchronize(b, NULL));
  ZT_CHECK(pinned[0] == 5.0f);
  /* a kernel may read registered host memory, not pageable memory */
  ZT_OK(zrt_backend_convert(b, x, ZRT_F32, pinned, ZRT_F32, 1, NULL));
  float pageable[4] = {0};
  ZT_CHECK(zrt_backend_convert(b, x, ZRT_F32, pageable, ZRT_F32, 1, NULL) == ZRT_ERR_INVALID_ARG);
  ZT_CONTAINS(zrt_last_error(), "pageable host memory");
  ZT_OK(zrt_backend_synchronize(b, NULL));
  zrt_backend_host_unregister(b, pinned);
  free(pinned);

  /* pageable H2D: the bytes are captured at once (the caller may reuse its
   * buffer), the device write is queued on its stream and is no host wait;
   * a reader on another stream not ordered after it sees the poison (the
   * race of issue 23's gemm_case), one ordered after it sees the data */
  {
    zrt_stream sb = NULL;
    ZT_OK(zrt_backend_stream_create(b, &sb));
    float *y = balloc(b, 64), *seen = aligned_alloc(64, 4096);
    ZT_OK(zrt_backend_host_register(b, seen, 4096));
    float *z = balloc(b, 64);
    ZT_OK(zrt_backend_synchronize(b, NULL)); /* z's poison fill is done everywhere */
    write_args slow = {y, 1.0f, ZT_TWIN_SLOW_MS, NULL};
    ZT_OK(zrt_backend_launch_host(b, slow_write, &slow, sizeof slow, NULL)); /* NULL stream busy */
    float src = 7.0f;
    uint64_t hw2 = ZRT_BACKEND_COUNTER(b, host_waits);
    ZT_OK(zrt_backend_memcpy(b, z, &src, 4, ZRT_COPY_H2D, NULL));
    ZT_CHECK(ZRT_BACKEND_COUNTER(b, host_waits) == hw2);        /* no host wait */
    src = -1.0f;                                                /* captured: reusing it is safe */
    ZT_OK(zrt_backend_memcpy(b, seen, z, 4, ZRT_COPY_D2H, sb)); /* not ordered: a race */
    ZT_OK(zrt_backend_synchronize(b, sb));
    uint32_t raced;
    memcpy(&raced, seen, 4);
    ZT_CHECK(raced == 0xFFFFFFFFu);
    ZT_OK(zrt_backend_stream_join(b, sb)); /* ordered now */
    ZT_OK(zrt_backend_memcpy(b, seen, z, 4, ZRT_COPY_D2H, sb));
    ZT_OK(zrt_backend_synchronize(b, sb));
    ZT_CHECK(seen[0] == 7.0f);
    ZT_OK(zrt_backend_synchronize(b, NULL));
    zrt_backend_host_unregister(b, seen);
    free(seen);
    zrt_backend_free(b, y);
    zrt_backend_free(b, z);
    zrt_backend_stream_destroy(b, sb);
  }

  /* like cudaMemcpyDefault, the pointers give the direction, not the kind */
  h = 0;
  ZT_OK(zrt_backend_memcpy(b, &h, x, 4, ZRT_COPY_H2D, NULL));
  ZT_CHECK(h == 5.0f);
  printf("twin copies: pageable D2H blocks, pageable H2D is queued (a reader on another stream "
         "must be ordered after it), registered is async, operands checked, new memory NaN\n");
  zrt_backend_free(b, x);
  zrt_backend_destroy(b);
}

static void test_host_fn_and_errors(void) {
  zrt_backend *b = twin(), *c = NULL;
  float *x = balloc(b, 64);
  pthread_t who = pthread_self();
  write_args w = {x, 1.0f, 0, &who};
  ZT_OK(zrt_backend_launch_host(b, slow_write, &w, sizeof w, NULL));
  ZT_OK(zrt_backend_synchronize(b, NULL));
  ZT_CHECK(!pthread_equal(who, pthread_self())); /* a stream worker ran it */
  /* cpu: at once on the calling thread */
  ZT_OK(zrt_backend_create("cpu", 0, 0, &c));
  float hx = 0;
  who = (pthread_t)0;
  write_args wc = {&hx, 2.0f, 0, &who};
  ZT_OK(zrt_backend_launch_host(c, slow_write, &wc, sizeof wc, NULL));
  ZT_CHECK(hx == 2.0f && pthread_equal(who, pthread_self()));
  zrt_backend_destroy(c);

  /* an error in a queued op is sticky and reported by the next wait */
  ZT_OK(zrt_backend_launch_host(b, failing, NULL, 0, NULL));
  ZT_CHECK(zrt_backend_synchronize(b, NULL) == ZRT_ERR_INTERNAL);
  ZT_CONTAINS(zrt_last_error(), "fails on purpose");
  ZT_CONTAINS(zrt_last_error(), "host function");
  /* and by a query of an event recorded after it */
  zrt_event e = NULL;
  int done = -1;
  ZT_OK(zrt_backend_event_create(b, &e));
  ZT_OK(zrt_backend_event_record(b, e, NULL));
  ZT_CHECK(zrt_backend_event_query(b, e, &done) == ZRT_ERR_INTERNAL);
  ZT_CONTAINS(zrt_last_error(), "fails on purpose");
  zrt_backend_event_destroy(b, e);
  printf("twin host functions: on a worker; errors sticky, reported by the next wait or query"
         "\n");
  zrt_backend_free(b, x);
  zrt_backend_destroy(b);
}

static void test_jitter_env(void) {
  zrt_backend *b = NULL;
  setenv("ZRT_TWIN_JITTER", "x1", 1);
  ZT_CHECK(zrt_backend_create("twin", 0, 0, &b) == ZRT_ERR_CONFIG);
  ZT_CONTAINS(zrt_last_error(), "ZRT_TWIN_JITTER");
  setenv("ZRT_TWIN_JITTER", "7", 1);
  ZT_OK(zrt_backend_create("twin", 0, 0, &b));
  ZT_CONTAINS(b->description, "jitter");
  zrt_backend_destroy(b);
  unsetenv("ZRT_TWIN_JITTER");
  /* one slow kind of op: LABEL:US, each malformed value named */
  const char *bad_slow[] = {"update",    "update:",   ":3000",
                            "update:3x", "update:-1", "update:20000000"};
  for (size_t i = 0; i < sizeof bad_slow / sizeof *bad_slow; i++) {
    setenv("ZRT_TWIN_SLOW_OP", bad_slow[i], 1);
    ZT_CHECK(zrt_backend_create("twin", 0, 0, &b) == ZRT_ERR_CONFIG);
    ZT_CONTAINS(zrt_last_error(), "ZRT_TWIN_SLOW_OP=\"");
    ZT_CONTAINS(zrt_last_error(), bad_slow[i]);
    ZT_CONTAINS(zrt_last_error(), "expected LABEL:MICROSECONDS");
  }
  setenv("ZRT_TWIN_SLOW_OP", "offload optimizer update:3000", 1);
  ZT_OK(zrt_backend_create("twin", 0, 0, &b));
  ZT_CONTAINS(b->description, "slow ops");
  zrt_backend_destroy(b);
  unsetenv("ZRT_TWIN_SLOW_OP");
  /* the host-function shapes: what the engine is told in each mode */
  setenv("ZRT_TWIN_HOST_FN", "async", 1);
  ZT_CHECK(zrt_backend_create("twin", 0, 0, &b) == ZRT_ERR_CONFIG);
  ZT_CONTAINS(zrt_last_error(), "ZRT_TWIN_HOST_FN=\"async\": expected stream");
  const char *modes[] = {"stream", "cuda", "sync"};
  const int want[3][3] = {{1, 1, 1}, {1, 1, 0}, {0, 0, 0}}; /* async, device, kernels */
  for (int i = 0; i < 3; i++) {
    setenv("ZRT_TWIN_HOST_FN", modes[i], 1);
    ZT_OK(zrt_backend_create("twin", 0, 0, &b));
    printf("twin ZRT_TWIN_HOST_FN=%s: host_fn async %d device %d kernels %d\n", modes[i],
           zrt_backend_host_fn_async(b), zrt_backend_host_fn_device(b),
           zrt_backend_host_fn_kernels(b));
    ZT_CHECK(zrt_backend_host_fn_async(b) == want[i][0] &&
             zrt_backend_host_fn_device(b) == want[i][1] &&
             zrt_backend_host_fn_kernels(b) == want[i][2]);
    zrt_backend_destroy(b);
  }
  unsetenv("ZRT_TWIN_HOST_FN");
  /* slow side streams: a copy on another stream lands late, so a read that
   * no event orders after it sees the allocation's poison; with the event,
   * the copy */
  setenv("ZRT_TWIN_SIDE_DELAY_US", "-3", 1);
  ZT_CHECK(zrt_backend_create("twin", 0, 0, &b) == ZRT_ERR_CONFIG);
  ZT_CONTAINS(zrt_last_error(), "ZRT_TWIN_SIDE_DELAY_US=\"-3\"");
  setenv("ZRT_TWIN_SIDE_DELAY_US", "200000", 1); /* 200 ms: far longer than the reads below */
  ZT_OK(zrt_backend_create("twin", 0, 0, &b));
  ZT_CONTAINS(b->description, "slow side streams");
  zrt_stream sa = NULL;
  zrt_event e = NULL;
  ZT_OK(zrt_backend_stream_create(b, &sa));
  ZT_OK(zrt_backend_event_create(b, &e));
  float *x = balloc(b, 4), *y = balloc(b, 4), *z = balloc(b, 4), five = 5.0f, got = 0;
  ZT_OK(zrt_backend_memcpy(b, x, &five, 4, ZRT_COPY_H2D, NULL));
  ZT_OK(zrt_backend_synchronize(b, NULL));
  ZT_OK(zrt_backend_memcpy(b, y, x, 4, ZRT_COPY_D2D, sa));
  ZT_OK(zrt_backend_memcpy(b, z, y, 4, ZRT_COPY_D2D, NULL)); /* no event: stale */
  ZT_OK(zrt_backend_memcpy(b, &got, z, 4, ZRT_COPY_D2H, NULL));
  ZT_CHECK(isnan(got));
  ZT_OK(zrt_backend_event_record(b, e, sa));
  ZT_OK(zrt_backend_stream_wait_event(b, NULL, e));
  ZT_OK(zrt_backend_memcpy(b, z, y, 4, ZRT_COPY_D2D, NULL));
  ZT_OK(zrt_backend_memcpy(b, &got, z, 4, ZRT_COPY_D2H, NULL));
  ZT_CHECK(got == 5.0f);
  printf("twin slow side streams: a read without the event saw the poison, with it %g\n",
         (double)got);
  zrt_backend_free(b, x);
  zrt_backend_free(b, y);
  zrt_backend_free(b, z);
  zrt_backend_event_destroy(b, e);
  zrt_backend_stream_destroy(b, sa);
  zrt_backend_destroy(b);
  unsetenv("ZRT_TWIN_SIDE_DELAY_US");
}

/* The child: ops on device memory work; then the host reads it and must die
 * (exit code 3 = it survived). */
static void guard_child(void) {
  zrt_backend *b = twin();
  if (!strstr(b->description, "guarded")) {
    fprintf(stderr, "no guard: %s\n", b->description);
    _exit(4);
  }
  float *x = NULL;
  if (zrt_backend_alloc(b, 4096, ZRT_MEM_MASTER32, (void **)&x) != ZRT_OK) _exit(5);
  /* a kernel op (memset) and a host function on device memory */
  if (zrt_backend_memset(b, x, 0, 4096, NULL) != ZRT_OK) _exit(6);
  write_args w = {x + 7, 3.5f, 0, NULL};
  if (zrt_backend_launch_host(b, slow_write, &w, sizeof w, NULL) != ZRT_OK) _exit(7);
  float h[8] = {0};
  if (zrt_backend_memcpy(b, h, x, sizeof h, ZRT_COPY_D2H, NULL) != ZRT_OK) _exit(8);
  if (h[0] != 0.0f || h[7] != 3.5f) _exit(9);
  fprintf(stderr, "ops ok; host reads %p\n", (void *)(x + 7));
  volatile float v = x[7]; /* the host touch: must not return */
  (void)v;
  _exit(3);
}

static void test_guard(void) {
  int fds[2];
  ZT_CHECK(pipe(fds) == 0);
  fflush(NULL);
  pid_t pid = fork();
  ZT_CHECK(pid >= 0);
  if (pid == 0) {
    close(fds[0]);
    dup2(fds[1], 2);
    guard_child();
  }
  close(fds[1]);
  char out[4096];
  size_t got = 0;
  ssize_t r;
  while (got < sizeof out - 1 && (r = read(fds[0], out + got, sizeof out - 1 - got)) > 0)
    got += (size_t)r;
  out[got] = '\0';
  close(fds[0]);
  int status = 0;
  ZT_CHECK(waitpid(pid, &status, 0) == pid);
  printf("guard child: %s", out);
  ZT_CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV);
  ZT_CONTAINS(out, "ops ok");
  ZT_CONTAINS(out, "touched device memory");
  ZT_CONTAINS(out, "category master32");
  /* the address the child printed is the one the handler names */
  const char *a = strstr(out, "host reads ");
  ZT_CHECK(a != NULL);
  char addr[32] = "";
  if (a) sscanf(a + strlen("host reads "), "%31s", addr);
  const char *t = strstr(out, "touched");
  ZT_CONTAINS(t ? t : "", addr);
  ZT_CONTAINS(out, "host thread");
  printf("twin guard: ops on device memory work; a host read dies naming address, category, "
         "thread\n");
}

/* ---- the copy guard (ZRT_TWIN_COPY_GUARD) ----
 * Rule (a): a queued copy from registered host memory whose source bytes
 * change before it runs dies with a message. Rule (b): a queued copy into
 * registered host memory leaves 0xFF bytes there until it runs. The copy
 * runs late behind a device memset slowed by ZRT_TWIN_SLOW_OP (an op with
 * no footprint on host memory: the copy is armed when queued), or behind a
 * kernel-like host function (launch_host: it may read registered memory,
 * not write it, so the copy is armed at once too); a host-side function
 * (enqueue_host) ahead of it may write the source in stream order, so the
 * copy is armed when that function ends. The host's accesses that race the
 * copy are ordered before the worker takes the copy (the worker takes its
 * stream's lock after the slow op, the host took it after the access), so
 * the cases run clean under ThreadSanitizer. */

#define GUARD_SLOW "memset:150000" /* 150 ms: far longer than the host's accesses */
#define GUARD_BYTES 4096

/* Host-side work that rewrites the pinned buffer, 50 ms late: still running
 * when the copy after it is queued. */
static zrt_status fill_fn(void *a) {
  int *p;
  memcpy(&p, a, sizeof p);
  struct timespec ts = {0, 50 * 1000000L};
  nanosleep(&ts, NULL);
  for (int i = 0; i < GUARD_BYTES / 4; i++) p[i] = 1000 + i;
  return ZRT_OK;
}

/* Host-side work on another stream that touches nothing, 300 ms: a
 * footprint that may write any registered memory, still running long after
 * the copy on the default stream starts. */
static zrt_status idle_fn(void *a) {
  (void)a;
  struct timespec ts = {0, 300 * 1000000L};
  nanosleep(&ts, NULL);
  return ZRT_OK;
}

/* arg: the mode (an int), and ZRT_TWIN_COPY_GUARD=0 when mode >= 10.
 * 0 = H2D from pinned memory behind a slowed op, the host rewrites the
 * buffer at once (must die); 1 = the same write after a synchronize (must
 * live, the copy sends the first bytes); 2 = H2D queued behind a 150 ms
 * kernel-like host function, rewritten at once (must die); 3 = a host-side
 * function queued before the copy fills the buffer in stream order while
 * the copy is queued (must live, the copy sends the function's bytes); 4 = a
 * D2H into the buffer and an H2D from it queued behind a slowed op (must
 * live: the round trip's bytes); 5 = mode 0 while a host-side function on
 * another stream, not ordered before the copy, runs past the copy's start
 * (must die: the copy is armed when queued, as nothing ordered before it
 * conflicts; a guard that waited for every earlier op would let it start
 * unarmed, unchecked); 6 = a host-side function on another stream fills the
 * buffer, an event recorded after it, the default stream waits on the event
 * before the copy (must live, the copy sends the function's bytes: the
 * guard follows the event). Exit 0: lived and every value was right. */
static int copy_guard_child(void *arg) {
  int mode = *(int *)arg, off = mode >= 10;
  mode %= 10;
  if (off) setenv("ZRT_TWIN_COPY_GUARD", "0", 1);
  setenv("ZRT_TWIN_SLOW_OP", GUARD_SLOW, 1);
  zrt_backend *b = NULL;
  if (zrt_backend_create("twin", 0, 0, &b) != ZRT_OK) return 10;
  int *pinned = aligned_alloc(4096, GUARD_BYTES), *back = malloc(GUARD_BYTES);
  int *dev = NULL, *busy = NULL;
  if (zrt_backend_alloc(b, GUARD_BYTES, ZRT_MEM_ACTIVATIONS, (void **)&dev) != ZRT_OK) return 11;
  if (zrt_backend_alloc(b, 256, ZRT_MEM_ACTIVATIONS, (void **)&busy) != ZRT_OK) return 11;
  if (zrt_backend_host_register(b, pinned, GUARD_BYTES) != ZRT_OK) return 12;
  for (int i = 0; i < GUARD_BYTES / 4; i++) pinned[i] = i;
  if (zrt_backend_synchronize(b, NULL) != ZRT_OK) return 13; /* the allocations' fills */
  fprintf(stderr, "source %p\n", (void *)pinned);
  int want0 = off && (mode == 0 || mode == 5) ? -5 : 0; /* back[0] after the copy */
  if (mode == 2) {
    write_args w = {(float *)busy, 1.0f, 150, NULL};
    if (zrt_backend_launch_host(b, slow_write, &w, sizeof w, NULL) != ZRT_OK) return 14;
  } else if (zrt_backend_memset(b, busy, 0, 256, NULL) != ZRT_OK) { /* 150 ms */
    return 14;
  }
  if (mode == 3) {
    if (zrt_backend_enqueue_host_named(b, fill_fn, &pinned, sizeof pinned, NULL, "fill") != ZRT_OK)
      return 15;
    want0 = 1000;
  }
  zrt_stream side = NULL;
  zrt_event ev = NULL;
  if (mode >= 5) {
    if (zrt_backend_stream_create(b, &side) != ZRT_OK) return 23;
    if (mode == 5 && zrt_backend_enqueue_host_named(b, idle_fn, NULL, 0, side, "idle") != ZRT_OK)
      return 24;
    if (mode == 6) {
      if (zrt_backend_enqueue_host_named(b, fill_fn, &pinned, sizeof pinned, side, "fill") !=
              ZRT_OK ||
          zrt_backend_event_create(b, &ev) != ZRT_OK ||
          zrt_backend_event_record(b, ev, side) != ZRT_OK ||
          zrt_backend_stream_wait_event(b, NULL, ev) != ZRT_OK)
        return 25;
      want0 = 1000;
    }
  }
  if (mode == 4) { /* the device's bytes into the buffer, then back out of it */
    for (int i = 0; i < GUARD_BYTES / 4; i++) back[i] = 7 * i;
    if (zrt_backend_memcpy(b, dev, back, GUARD_BYTES, ZRT_COPY_H2D, NULL) != ZRT_OK) return 16;
    if (zrt_backend_memcpy(b, pinned, dev, GUARD_BYTES, ZRT_COPY_D2H, NULL) != ZRT_OK) return 17;
  }
  if (zrt_backend_memcpy(b, dev, pinned, GUARD_BYTES, ZRT_COPY_H2D, NULL) != ZRT_OK) return 18;
  if (mode == 1 && zrt_backend_synchronize(b, NULL) != ZRT_OK) return 19;
  if (mode < 3 || mode == 5) pinned[0] = -5; /* the host's write: too early unless synchronized */
  if (zrt_backend_memcpy(b, back, dev, GUARD_BYTES, ZRT_COPY_D2H, NULL) != ZRT_OK) return 20;
  fprintf(stderr, "lived: the device got %d\n", back[0]);
  if (mode == 4) {
    for (int i = 0; i < GUARD_BYTES / 4; i++)
      if (back[i] != 7 * i || pinned[i] != 7 * i) return 21;
  } else if (back[0] != want0) {
    return 22;
  }
  if (ev) zrt_backend_event_destroy(b, ev);
  if (side) zrt_backend_stream_destroy(b, side);
  zrt_backend_host_unregister(b, pinned);
  zrt_backend_free(b, dev);
  zrt_backend_free(b, busy);
  zrt_backend_destroy(b);
  free(pinned);
  free(back);
  return 0;
}

static void test_copy_guard(void) {
  char out[4096];
  /* rule (a): the write after the queued copy dies, naming the source, the
   * bytes, the op and what to do */
  static const int die[] = {0, 2, 5};
  for (int i = 0; i < 3; i++) {
    int mode = die[i];
    int rc = zt_in_child(copy_guard_child, &mode, out, sizeof out);
    printf("copy guard, mode %d (must die): rc %d: %s", mode, rc, out);
    ZT_CHECK(rc == 100);
    ZT_CONTAINS(out, "zrt twin: a queued copy (op \"memcpy\" on twin stream");
    ZT_CONTAINS(out, "reads 4096 bytes of registered host memory at ");
    ZT_CONTAINS(out, "changed after the copy was queued and before it ran");
    ZT_CONTAINS(out, "zrt_engine_host_alloc");
    ZT_CONTAINS(out, "ZRT_TWIN_COPY_GUARD=0");
    const char *a = strstr(out, "source ");
    char addr[32] = "";
    if (a) sscanf(a + strlen("source "), "%31s", addr);
    ZT_CHECK(addr[0] != 0);
    const char *m = strstr(out, "registered host memory at ");
    ZT_CONTAINS(m ? m : "", addr);
    ZT_CHECK(strstr(out, "lived") == NULL);
  }
  /* no false alarm: after a synchronize, behind a host-side function that
   * writes the source in stream order, a round trip through the buffer;
   * and with ZRT_TWIN_COPY_GUARD=0 the too-early write goes through unseen */
  const int live[] = {1, 3, 4, 6, 10, 15};
  for (int i = 0; i < 6; i++) {
    int rc = zt_in_child(copy_guard_child, (void *)&live[i], out, sizeof out);
    printf("copy guard, mode %d (must live): rc %d: %s", live[i], rc, out);
    ZT_CHECK(rc == 0);
  }
  zrt_backend *b = NULL;
  setenv("ZRT_TWIN_COPY_GUARD", "yes", 1);
  ZT_CHECK(zrt_backend_create("twin", 0, 0, &b) == ZRT_ERR_CONFIG);
  ZT_CONTAINS(zrt_last_error(), "ZRT_TWIN_COPY_GUARD=\"yes\": expected 1 (the default");
  setenv("ZRT_TWIN_COPY_GUARD", "0", 1);
  ZT_OK(zrt_backend_create("twin", 0, 0, &b));
  ZT_CONTAINS(b->description, "no copy guard");
  zrt_backend_destroy(b);
  unsetenv("ZRT_TWIN_COPY_GUARD");

  /* rule (b): a queued D2H into registered memory leaves NaN bytes there
   * until it runs, the data after the synchronize; a host-to-host copy onto
   * part of its own source poisons only the bytes outside the source */
  for (int off = 0; off < 2; off++) {
    setenv("ZRT_TWIN_SLOW_OP", GUARD_SLOW, 1);
    if (off) setenv("ZRT_TWIN_COPY_GUARD", "0", 1);
    ZT_OK(zrt_backend_create("twin", 0, 0, &b));
    unsetenv("ZRT_TWIN_SLOW_OP");
    unsetenv("ZRT_TWIN_COPY_GUARD");
    float *x = balloc(b, GUARD_BYTES), *busy = balloc(b, 256);
    float *h = aligned_alloc(4096, 2 * GUARD_BYTES), src[GUARD_BYTES / 4];
    for (int i = 0; i < GUARD_BYTES / 4; i++) src[i] = (float)i + 0.5f;
    ZT_OK(zrt_backend_memcpy(b, x, src, GUARD_BYTES, ZRT_COPY_H2D, NULL));
    ZT_OK(zrt_backend_host_register(b, h, 2 * GUARD_BYTES));
    for (int i = 0; i < 2 * GUARD_BYTES / 4; i++) h[i] = -1.0f;
    ZT_OK(zrt_backend_synchronize(b, NULL));
    ZT_OK(zrt_backend_memset(b, busy, 0, 256, NULL)); /* 150 ms */
    ZT_OK(zrt_backend_memcpy(b, h, x, GUARD_BYTES, ZRT_COPY_D2H, NULL));
    uint32_t early[2];
    memcpy(early, h, 4);
    memcpy(early + 1, h + GUARD_BYTES / 4 - 1, 4);
    ZT_OK(zrt_backend_synchronize(b, NULL));
    int ok = 1;
    for (int i = 0; i < GUARD_BYTES / 4; i++) ok &= h[i] == (float)i + 0.5f;
    printf("copy guard %s: a D2H's destination read before the synchronize: 0x%08x 0x%08x; "
           "after: %s\n",
           off ? "off" : "on", early[0], early[1], ok ? "the data" : "WRONG");
    ZT_CHECK(ok);
    if (off)
      ZT_CHECK(early[0] == 0xBF800000u && early[1] == 0xBF800000u); /* the old -1.0f */
    else
      ZT_CHECK(early[0] == 0xFFFFFFFFu && early[1] == 0xFFFFFFFFu);
    /* registered to registered, overlapping: h[0..1024) onto h[512..1536) */
    ZT_OK(zrt_backend_memset(b, busy, 0, 256, NULL));
    ZT_OK(zrt_backend_memcpy(b, h + 512, h, GUARD_BYTES, ZRT_COPY_H2H, NULL));
    uint32_t in_src, past_src;
    memcpy(&in_src, h + 1000, 4);   /* source and destination: untouched */
    memcpy(&past_src, h + 1100, 4); /* destination only: poisoned */
    printf("copy guard %s: overlapping host copy, queued: in the source 0x%08x, past it 0x%08x\n",
           off ? "off" : "on", in_src, past_src);
    ZT_CHECK(in_src == 0x447A2000u); /* 1000.5f */
    ZT_CHECK(past_src == (off ? 0xBF800000u : 0xFFFFFFFFu));
    ZT_OK(zrt_backend_synchronize(b, NULL));
    zrt_backend_host_unregister(b, h);
    free(h);
    zrt_backend_free(b, x);
    zrt_backend_free(b, busy);
    zrt_backend_destroy(b);
  }
}

/* A host function that holds its stream until the test lets it go
 * (gate[1]); gate[0] says it started. */
static zrt_status hold(void *a) {
  atomic_int *gate;
  memcpy(&gate, a, sizeof gate);
  atomic_store(&gate[0], 1);
  while (!atomic_load(&gate[1])) {
    struct timespec ts = {0, 100000L};
    nanosleep(&ts, NULL);
  }
  return ZRT_OK;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Timing events: pending while the work before the end event runs, then
 * the stream time between the records (across two streams too); the cpu
 * backend has none (ZRT_ERR_UNSUPPORTED), an event never recorded is an
 * error. The held op runs from before the host starts its clock until the
 * host lets it go ZT_TWIN_SLOW_MS later, so the time between the events
 * around it is at least what the host measured. */
static void test_timing_events(void) {
  zrt_backend *b = twin();
  zrt_stream sa = NULL, sb = NULL;
  ZT_OK(zrt_backend_stream_create(b, &sa));
  ZT_OK(zrt_backend_stream_create(b, &sb));
  zrt_event e0 = NULL, e1 = NULL, e2 = NULL;
  ZT_OK(zrt_backend_event_create_timed(b, &e0));
  ZT_OK(zrt_backend_event_create_timed(b, &e1));
  ZT_OK(zrt_backend_event_create_timed(b, &e2));
  int ready = -1;
  double dt = -1;
  ZT_CHECK(zrt_backend_event_elapsed(b, e0, e1, &ready, &dt) == ZRT_ERR_INVALID_ARG);
  ZT_OK(zrt_backend_synchronize(b, NULL));
  atomic_int gate[2] = {0, 0};
  atomic_int *gp = gate;
  ZT_OK(zrt_backend_event_record(b, e0, sa));
  ZT_OK(zrt_backend_launch_host(b, hold, &gp, sizeof gp, sa));
  ZT_OK(zrt_backend_event_record(b, e1, sa));
  while (!atomic_load(&gate[0])) {
    struct timespec ts = {0, 100000L};
    nanosleep(&ts, NULL);
  }
  double t0 = now_s();
  ZT_OK(zrt_backend_stream_wait_event(b, sb, e1));
  ZT_OK(zrt_backend_event_record(b, e2, sb));
  ZT_OK(zrt_backend_event_elapsed(b, e0, e1, &ready, &dt));
  ZT_CHECK(ready == 0 && dt == 0);
  struct timespec ts = {0, (long)ZT_TWIN_SLOW_MS * 1000000L};
  nanosleep(&ts, NULL);
  double held = now_s() - t0;
  atomic_store(&gate[1], 1);
  ZT_OK(zrt_backend_synchronize(b, NULL));
  ZT_OK(zrt_backend_event_elapsed(b, e0, e1, &ready, &dt));
  printf("twin timing events: held %.1f ms on the host, %.1f ms between the events\n", 1e3 * held,
         1e3 * dt);
  ZT_CHECK(ready == 1 && dt >= held);
  double dt2 = -1;
  ZT_OK(zrt_backend_event_elapsed(b, e0, e2, &ready, &dt2));
  ZT_CHECK(ready == 1 && dt2 >= dt); /* e2: on sb, after sb waited for e1 */
  /* an event recorded on an idle stream is reached at its record */
  ZT_OK(zrt_backend_event_record(b, e1, sb));
  ZT_OK(zrt_backend_event_elapsed(b, e2, e1, &ready, &dt));
  ZT_CHECK(ready == 1 && dt >= 0);
  zrt_backend_event_destroy(b, e0);
  zrt_backend_event_destroy(b, e1);
  zrt_backend_event_destroy(b, e2);
  zrt_backend_stream_destroy(b, sa);
  zrt_backend_stream_destroy(b, sb);
  zrt_backend_destroy(b);
  zrt_backend *c = NULL;
  ZT_OK(zrt_backend_create("cpu", 0, 0, &c));
  zrt_event ec = NULL;
  ZT_CHECK(zrt_backend_event_create_timed(c, &ec) == ZRT_ERR_UNSUPPORTED && ec == NULL);
  ZT_CHECK(strstr(zrt_last_error(), "cpu backend has no timing events") != NULL);
  zrt_backend_destroy(c);
}

int main(void) {
  test_same_numerics();
  test_events();
  test_timing_events();
  test_copies_and_kinds();
  test_host_fn_and_errors();
  test_jitter_env();
  test_guard();
  test_copy_guard();
  ZT_DONE();
}
