/*
 * zt_free_on.h — the check both stream-ordered backends take for
 * zrt_backend_free_on (test_comm_stream on the twin, test_backend_cuda on
 * CUDA and on the twin): a block used only on the engine's stream and
 * returned with free_on goes back after that stream's work alone, so the
 * engine's stream drains while another stream is still busy (a host
 * function sleeping 300 ms); zrt_backend_free joins every stream first and
 * drains only after it. The pool's next block then works on the other
 * stream.
 */
#ifndef ZT_FREE_ON_H
#define ZT_FREE_ON_H

#include <stdatomic.h>
#include <stdio.h>
#include <time.h>

#include "backend.h"
#include "ztest.h"

typedef struct zt_free_on_flag {
  int sleep_ms;
  atomic_int *done;
} zt_free_on_flag;

static zrt_status zt_free_on_sleep(void *arg) {
  const zt_free_on_flag *a = arg;
  struct timespec ts = {a->sleep_ms / 1000, (long)(a->sleep_ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
  atomic_store(a->done, 1);
  return ZRT_OK;
}

static void zt_check_free_on(zrt_backend *b) {
  zrt_stream sb = NULL;
  ZT_OK(zrt_backend_stream_create(b, &sb));
  for (int on = 1; on >= 0; on--) {
    void *x = NULL;
    ZT_OK(zrt_backend_alloc(b, 1 << 20, ZRT_MEM_OTHER, &x));
    ZT_OK(zrt_backend_memset(b, x, 0, 1 << 20, NULL)); /* used on the engine's stream only */
    atomic_int done = 0;
    zt_free_on_flag w = {300, &done};
    ZT_OK(zrt_backend_enqueue_host_named(b, zt_free_on_sleep, &w, sizeof w, sb, "test slow flag"));
    if (on)
      zrt_backend_free_on(b, x, NULL);
    else
      zrt_backend_free(b, x);
    zrt_event e = NULL; /* the engine's stream alone: an event on it */
    ZT_OK(zrt_backend_event_create(b, &e));
    ZT_OK(zrt_backend_event_record(b, e, NULL));
    ZT_OK(zrt_backend_event_synchronize(b, e));
    zrt_backend_event_destroy(b, e);
    int busy = !atomic_load(&done);
    printf("%s free_on: the engine's stream drained while the other stream was %s (%s)\n",
           b->iface->name, busy ? "still busy" : "done", on ? "free_on" : "free");
    ZT_CHECK(on ? busy : !busy); /* free_on waits for its stream alone; free for every stream */
    ZT_OK(zrt_backend_synchronize(b, sb));
    /* the pool's next block (maybe the same bytes) works on the other stream */
    void *y = NULL;
    ZT_OK(zrt_backend_alloc(b, 1 << 20, ZRT_MEM_OTHER, &y));
    ZT_OK(zrt_backend_memset(b, y, 1, 1 << 20, sb));
    ZT_OK(zrt_backend_synchronize(b, sb));
    zrt_backend_free(b, y);
  }
  zrt_backend_stream_destroy(b, sb);
}

#endif
