/*
 * test_comm_stream.c — stream-ordered collectives and stream-ordered frees
 * on the twin (comm/comm.c, docs/comms.md "Stream-ordered collectives"),
 * one process (the self comm; MPI is not initialised):
 *  - on the twin the comm gets a stream of its own, on cpu it does not;
 *  - a collective issued after a slow host function on the engine's stream
 *    reads what that function wrote (the comm stream is ordered after every
 *    stream's queued work), and zrt_comm_wait_on hands its result to the
 *    engine's stream without a host wait (the backend's host_waits counter
 *    does not move until the test reads the result back);
 *  - a blocking collective costs exactly one host wait;
 *  - a failure queued before a collective reaches its wait (sticky error);
 *  - zrt_backend_free_on returns a block after its stream's work without
 *    waiting for another stream that is busy (zrt_backend_free would).
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend.h"
#include "comm.h"
#include "zt_free_on.h"
#include "ztest.h"

typedef struct {
  float *dst;
  float value;
  int sleep_ms;
  atomic_int *flag; /* set to 1 when done (NULL: none) */
} slow_args;

static zrt_status slow_write(void *a) {
  slow_args w;
  memcpy(&w, a, sizeof w);
  struct timespec ts = {w.sleep_ms / 1000, (long)(w.sleep_ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
  if (w.dst) *w.dst = w.value;
  if (w.flag) atomic_store(w.flag, 1);
  return ZRT_OK;
}

static zrt_status failing(void *a) {
  (void)a;
  return zrt_error(ZRT_ERR_INTERNAL, "the test's host function fails on purpose");
}

static float peek(zrt_backend *b, const float *dev) {
  float h = 0;
  ZT_OK(zrt_backend_memcpy(b, &h, dev, sizeof h, ZRT_COPY_D2H, NULL));
  return h;
}

static void test_cpu_not_streamed(void) {
  zrt_backend *b = NULL;
  zrt_comm *c = NULL;
  ZT_OK(zrt_backend_create("cpu", 0, 0, &b));
  ZT_OK(zrt_comm_create("self", b, 5.0, &c));
  ZT_CHECK(c->stream == NULL); /* cpu: collectives run on the calling thread, as before */
  zrt_comm_destroy(c);
  zrt_backend_destroy(b);
}

static void test_ordering(zrt_backend *b, zrt_comm *c) {
  float *x = NULL, *y = NULL;
  ZT_OK(zrt_backend_alloc(b, sizeof(float), ZRT_MEM_OTHER, (void **)&x));
  ZT_OK(zrt_backend_alloc(b, sizeof(float), ZRT_MEM_OTHER, (void **)&y));
  float z = 0;
  ZT_OK(zrt_backend_memcpy(b, x, &z, sizeof z, ZRT_COPY_H2D, NULL));
  ZT_OK(zrt_backend_synchronize(b, NULL));

  /* x = 7 after 100 ms on the engine's stream, then y = all_reduce(x) */
  slow_args w = {x, 7.0f, 100, NULL};
  ZT_OK(zrt_backend_launch_host(b, slow_write, &w, sizeof w, NULL));
  uint64_t hw = ZRT_BACKEND_COUNTER(b, host_waits);
  zrt_comm_req *req = NULL;
  ZT_OK(zrt_comm_all_reduce(c, x, y, 1, ZRT_F32, ZRT_RED_SUM, &req));
  ZT_OK(zrt_comm_wait_on(c, req, NULL));
  ZT_CHECK(ZRT_BACKEND_COUNTER(b, host_waits) == hw); /* no host wait so far */
  float got = peek(b, y);                             /* the one wait: a D2H read */
  printf("  stream-ordered all_reduce after a slow producer: %g (want 7), host waits %llu\n",
         (double)got, (unsigned long long)(ZRT_BACKEND_COUNTER(b, host_waits) - hw));
  ZT_CHECK(got == 7.0f);
  ZT_CHECK(ZRT_BACKEND_COUNTER(b, host_waits) == hw + 1);

  /* blocking: the host waits once, and the result is there */
  w.value = 9.0f;
  w.sleep_ms = 50;
  ZT_OK(zrt_backend_launch_host(b, slow_write, &w, sizeof w, NULL));
  hw = ZRT_BACKEND_COUNTER(b, host_waits);
  ZT_OK(zrt_comm_all_reduce(c, x, y, 1, ZRT_F32, ZRT_RED_SUM, NULL));
  ZT_CHECK(ZRT_BACKEND_COUNTER(b, host_waits) == hw + 1);
  ZT_CHECK(peek(b, y) == 9.0f);
  ZT_CHECK(c->completed >= 2 && !strcmp(c->last_op, "all_reduce"));
  zrt_backend_free(b, x);
  zrt_backend_free(b, y);
}

static void test_sticky(zrt_backend *b, zrt_comm *c) {
  float *x = NULL;
  ZT_OK(zrt_backend_alloc(b, sizeof(float), ZRT_MEM_OTHER, (void **)&x));
  ZT_OK(zrt_backend_launch_host(b, failing, NULL, 0, NULL));
  zrt_status st = zrt_comm_all_reduce(c, x, x, 1, ZRT_F32, ZRT_RED_SUM, NULL);
  printf("  a collective after a failed op: %s: %s\n", zrt_status_string(st), zrt_last_error());
  ZT_CHECK(st != ZRT_OK && strstr(zrt_last_error(), "on purpose") != NULL);
}

int main(void) {
  unsetenv("OMPI_COMM_WORLD_SIZE");
  unsetenv("WORLD_SIZE");
  test_cpu_not_streamed();
  zrt_backend *b = NULL;
  zrt_comm *c = NULL;
  ZT_OK(zrt_backend_create("twin", 0, 0, &b));
  ZT_OK(zrt_comm_create("auto", b, 5.0, &c));
  ZT_CHECK(!strcmp(c->iface->name, "self") && c->stream != NULL);
  test_ordering(b, c);
  zt_check_free_on(b); /* tests/common/zt_free_on.h */
  test_sticky(b, c);
  zrt_comm_destroy(c);
  zrt_backend_destroy(b);
  ZT_DONE();
}
