/*
 * test_comm_self_device.c — the world-size-1 comm on a device backend with
 * no host wait per collective (comm/comm_self.c, docs/comms.md "The self
 * comm"), on the twin in three shapes: ZRT_TWIN_HOST_FN=sync and cuda,
 * CUDA's (the self comm gets the backend and runs its copies on a stream of
 * its own: comm.c streams no self comm where the statistics run on the
 * host), and the default stream mode (the stream-ordered comm of
 * comm/comm.c, as NCCL's kernels are ordered): the same contract in all. Every op of a stream other
 * than the default one is slowed (ZRT_TWIN_SIDE_DELAY_US: the comm stream's copy lands late), and
 * so is every memset, the producers here (ZRT_TWIN_SLOW_OP), so a missing order shows as a stale
 * read:
 *  - a collective reads what a slow producer on the compute stream wrote
 *    (the comm stream joins every stream), and a consumer on the compute
 *    stream ordered with zrt_comm_wait_on reads its result; the backend's
 *    host-wait counter does not move until the test reads the result back;
 *  - the control: a consumer not ordered after the collective reads the
 *    old result (the slowed copy makes a missing order visible);
 *  - a blocking collective, and zrt_comm_wait, cost one host wait each and
 *    the result is there after; zrt_comm_test completes without waiting;
 *  - an in-place collective (nothing to copy) ordered with wait_on orders a
 *    reader on the compute stream after the input's producer on another
 *    stream;
 *  - requests released with wait_on count as completed once a later call
 *    finds them done; the destroy waits for one still in flight.
 * Hand mutations of comm_self.c this kills (checked when written): the
 * stream join before the copy, the event record after it, the stream wait
 * in wait_on, the join in wait_on for a collective with nothing to copy,
 * the event synchronize in wait.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend.h"
#include "comm.h"
#include "ztest.h"

/* 1 in a ThreadSanitizer build (gcc's __SANITIZE_THREAD__, clang's feature) */
#if defined(__SANITIZE_THREAD__)
#define ZT_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define ZT_TSAN 1
#endif
#endif
#ifndef ZT_TSAN
#define ZT_TSAN 0
#endif

#define N 1024
/* A memset (the producers) sleeps 150 ms first, every op of a side stream
 * (the comm stream's joins and copy) 80 ms: an unordered consumer on the
 * compute stream runs 80 ms or more before the copy lands. */
#define SLOW_OP "memset:150000"
#define SIDE_DELAY_US "80000"

/* The float whose four bytes are all v (what memset writes). */
static float byte_float(unsigned char v) {
  uint32_t u = 0x01010101u * v;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

static float *dalloc(zrt_backend *b) {
  float *p = NULL;
  ZT_OK(zrt_backend_alloc(b, N * sizeof(float), ZRT_MEM_OTHER, (void **)&p));
  return p;
}

static void put(zrt_backend *b, float *dev, float v) {
  float h[N];
  for (int i = 0; i < N; i++) h[i] = v;
  ZT_OK(zrt_backend_memcpy(b, dev, h, sizeof h, ZRT_COPY_H2D, NULL));
  ZT_OK(zrt_backend_synchronize(b, NULL));
}

/* Elements of dev (read back on the compute stream: one host wait) that
 * differ from want. */
static int count_bad(zrt_backend *b, const float *dev, float want) {
  float h[N];
  ZT_OK(zrt_backend_memcpy(b, h, dev, sizeof h, ZRT_COPY_D2H, NULL));
  int bad = 0;
  for (int i = 0; i < N; i++) bad += h[i] != want;
  return bad;
}

static uint64_t host_waits(zrt_backend *b) { return ZRT_BACKEND_COUNTER(b, host_waits); }

static void run(const char *mode) {
  setenv("ZRT_TWIN_HOST_FN", mode, 1);
  zrt_backend *b = NULL;
  zrt_comm *c = NULL;
  ZT_OK(zrt_backend_create("twin", 0, 0, &b));
  ZT_OK(zrt_comm_create("auto", b, 30.0, &c));
  ZT_CHECK(!strcmp(c->iface->name, "self"));
  /* sync and cuda: the self comm's own stream (comm.c gave it the
   * backend); stream: stream-ordered through host functions on comm.c's
   * stream */
  ZT_CHECK(strcmp(mode, "stream") ? c->stream == NULL : c->stream != NULL);
  printf("ZRT_TWIN_HOST_FN=%s: %s\n", mode, b->description);
  float *x = dalloc(b), *y = dalloc(b), *z = dalloc(b), *z2 = dalloc(b);
  zrt_stream ps = NULL; /* a producer's stream other than the compute stream */
  ZT_OK(zrt_backend_stream_create(b, &ps));
  put(b, x, 1.0f);
  put(b, y, 0.0f);
  put(b, z, 0.0f);
  put(b, z2, 0.0f);

  /* the join and wait_on: a slow producer on the compute stream, the
   * collective, a consumer on the compute stream (z = y) */
  float v1 = byte_float(0x40);
  uint64_t hw = host_waits(b);
  ZT_OK(zrt_backend_memset(b, x, 0x40, N * sizeof(float), NULL));
  zrt_comm_req *req = NULL;
  ZT_OK(zrt_comm_all_reduce(c, x, y, N, ZRT_F32, ZRT_RED_SUM, &req));
  ZT_OK(zrt_comm_wait_on(c, req, NULL));
  ZT_OK(zrt_backend_accumulate(b, z, y, ZRT_F32, 1.0f, N, NULL));
  uint64_t hw_on = host_waits(b) - hw;
  int bad = count_bad(b, z, v1);
  printf("  all_reduce after a slow producer, consumer after wait_on: %d of %d stale "
         "(tolerance 0), host waits before the read-back %llu (want 0)\n",
         bad, N, (unsigned long long)hw_on);
  ZT_CHECK(bad == 0);
  ZT_CHECK(hw_on == 0);

  /* the control: a consumer not ordered after the collective runs before
   * the slowed copy lands and reads the old result. That read races the
   * copy on purpose, so under TSan (scripts/tsan.sh) the consumer is left
   * out and only the wait is checked. */
  float v2 = byte_float(0x41);
  ZT_OK(zrt_backend_memset(b, x, 0x41, N * sizeof(float), NULL));
  ZT_OK(zrt_comm_all_reduce(c, x, y, N, ZRT_F32, ZRT_RED_SUM, &req));
  if (!ZT_TSAN) ZT_OK(zrt_backend_accumulate(b, z2, y, ZRT_F32, 1.0f, N, NULL));
  hw = host_waits(b);
  ZT_OK(zrt_comm_wait(c, req));
  uint64_t hw_wait = host_waits(b) - hw;
  int stale = ZT_TSAN ? N : N - count_bad(b, z2, v1); /* z2 = the previous result */
  bad = count_bad(b, y, v2);
  printf("  control, no order: the consumer read the old result in %d of %d (want all%s); after "
         "zrt_comm_wait (host waits %llu, want 1) %d stale\n",
         stale, N, ZT_TSAN ? ", not run under TSan" : "", (unsigned long long)hw_wait, bad);
  ZT_CHECK(stale == N);
  ZT_CHECK(hw_wait == 1 && bad == 0);

  /* blocking: one host wait, then the result reads back on the compute
   * stream (not ordered after the comm stream: the host wait did it) */
  float v3 = byte_float(0x42);
  ZT_OK(zrt_backend_memset(b, x, 0x42, N * sizeof(float), NULL));
  hw = host_waits(b);
  ZT_OK(zrt_comm_reduce_scatter_even(c, x, y, N, ZRT_F32, ZRT_RED_SUM, NULL));
  uint64_t hw_block = host_waits(b) - hw;
  bad = count_bad(b, y, v3);
  printf("  blocking reduce_scatter: host waits %llu (want 1), %d stale\n",
         (unsigned long long)hw_block, bad);
  ZT_CHECK(hw_block == 1 && bad == 0);

  /* test: polls without a host wait until the copy landed */
  float v4 = byte_float(0x43);
  ZT_OK(zrt_backend_memset(b, x, 0x43, N * sizeof(float), NULL));
  ZT_OK(zrt_comm_all_gather_even(c, x, y, N, ZRT_F32, &req));
  hw = host_waits(b);
  int done = 0, polls = 0;
  while (!done) {
    ZT_OK(zrt_comm_test(c, req, &done));
    polls++;
    struct timespec pause = {0, 200000}; /* 0.2 ms: the copy takes 80 ms or more */
    if (!done) nanosleep(&pause, NULL);
  }
  uint64_t hw_test = host_waits(b) - hw;
  bad = count_bad(b, y, v4);
  printf("  all_gather completed by zrt_comm_test after %d polls, host waits %llu (want 0), %d "
         "stale\n",
         polls, (unsigned long long)hw_test, bad);
  ZT_CHECK(polls > 1 && hw_test == 0 && bad == 0);

  /* in place (nothing to copy): the input's producer on another stream,
   * the reader on the compute stream after wait_on */
  float v5 = byte_float(0x44);
  put(b, z, 0.0f);
  ZT_OK(zrt_backend_memset(b, x, 0x44, N * sizeof(float), ps));
  ZT_OK(zrt_comm_all_reduce(c, x, x, N, ZRT_F32, ZRT_RED_MAX, &req));
  hw = host_waits(b);
  ZT_OK(zrt_comm_wait_on(c, req, NULL));
  ZT_OK(zrt_backend_accumulate(b, z, x, ZRT_F32, 1.0f, N, NULL));
  uint64_t hw_inplace = host_waits(b) - hw;
  bad = count_bad(b, z, v5);
  printf("  in-place all_reduce, producer on another stream, reader after wait_on: %d stale, "
         "host waits %llu (want 0)\n",
         bad, (unsigned long long)hw_inplace);
  ZT_CHECK(bad == 0 && hw_inplace == 0);

  /* bookkeeping: what wait_on released counts once a later call finds it
   * done (here: a blocking collective after everything finished) */
  ZT_OK(zrt_backend_synchronize(b, NULL));
  ZT_OK(zrt_comm_all_reduce(c, x, x, 0, ZRT_F32, ZRT_RED_SUM, NULL));
  printf("  issued %llu, completed %llu, last %s\n", (unsigned long long)c->seq,
         (unsigned long long)c->completed, c->last_op);
  ZT_CHECK(c->completed == c->seq && !strcmp(c->last_op, "all_reduce"));

  /* the destroy with a collective still in flight (it waits for it) */
  ZT_OK(zrt_backend_memset(b, x, 0x45, N * sizeof(float), NULL));
  ZT_OK(zrt_comm_all_reduce(c, x, y, N, ZRT_F32, ZRT_RED_SUM, &req));
  ZT_OK(zrt_comm_wait_on(c, req, NULL));
  zrt_comm_destroy(c);
  bad = count_bad(b, y, byte_float(0x45));
  ZT_CHECK(bad == 0);

  zrt_backend_stream_destroy(b, ps);
  zrt_backend_free(b, x);
  zrt_backend_free(b, y);
  zrt_backend_free(b, z);
  zrt_backend_free(b, z2);
  zrt_backend_destroy(b);
}

int main(void) {
  unsetenv("OMPI_COMM_WORLD_SIZE");
  unsetenv("WORLD_SIZE");
  setenv("ZRT_TWIN_SLOW_OP", SLOW_OP, 1);
  setenv("ZRT_TWIN_SIDE_DELAY_US", SIDE_DELAY_US, 1);
  setenv("ZRT_TWIN_JITTER", "31", 0); /* ctest's seed, where it gives one */
  run("sync");
  run("cuda");
  run("stream");
  ZT_DONE();
}
