/*
 * test_comm_staged.c — the mpi comm over device memory when it is not
 * stream-ordered (comm_mpi.c's staging through host memory: CUDA with the
 * mpi comm), on the twin with ZRT_TWIN_HOST_FN=sync and side streams slowed
 * to 20 ms an op (ZRT_TWIN_SIDE_DELAY_US, set here before the backend
 * reads it):
 *  - the comm is not stream-ordered in that mode (no comm stream);
 *  - an all_reduce and a broadcast whose input a copy on another stream
 *    wrote (queued just before, landing 20 ms later) read what it wrote:
 *    the staging copy starts after every stream's queued work (load_stage's
 *    join) and the root's broadcast staging likewise;
 *  - the results are on the device when the call returns: read back
 *    through the backend, exact (integers in fp32, tolerance 0).
 * Labelled twin too (scripts/twin-mutants.sh runs it).
 */
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "comm.h"
#include "ztest.h"

#define N 4099

/* dev <- host values on stream s (a slowed side stream: the copy lands
 * about 20 ms after the call returns; pageable source: captured now). */
static void side_write(zrt_backend *b, zrt_stream s, float *dev, float v) {
  float *h = malloc(N * sizeof(float));
  for (int i = 0; i < N; i++) h[i] = v + (float)(i % 7);
  ZT_OK(zrt_backend_memcpy(b, dev, h, N * sizeof(float), ZRT_COPY_H2D, s));
  free(h);
}

static long count_bad(zrt_backend *b, const float *dev, float base) {
  float *h = malloc(N * sizeof(float));
  ZT_OK(zrt_backend_memcpy(b, h, dev, N * sizeof(float), ZRT_COPY_D2H, NULL));
  long bad = 0;
  for (int i = 0; i < N; i++) bad += h[i] != base + (float)(i % 7);
  free(h);
  return bad;
}

int main(void) {
  setenv("ZRT_TWIN_HOST_FN", "sync", 1);
  setenv("ZRT_TWIN_SIDE_DELAY_US", "20000", 1);
  zrt_backend *b = NULL;
  ZT_OK(zrt_backend_create("twin", 0, 0, &b));
  zrt_comm *c = NULL;
  ZT_OK(zrt_comm_create("mpi", b, 60.0, &c));
  int r = c->rank, w = c->world;
  ZT_CHECK(c->stream == NULL); /* staged, not stream-ordered */
  zrt_stream s = NULL;
  ZT_OK(zrt_backend_stream_create(b, &s));
  float *x = NULL;
  ZT_OK(zrt_backend_alloc(b, N * sizeof(float), ZRT_MEM_COMM, (void **)&x));
  ZT_OK(zrt_backend_memset(b, x, 0, N * sizeof(float), NULL));
  ZT_OK(zrt_backend_synchronize(b, NULL));

  /* all_reduce: rank r writes r + 1 (+ i % 7) on the side stream */
  side_write(b, s, x, (float)(r + 1));
  ZT_OK(zrt_comm_all_reduce(c, x, x, N, ZRT_F32, ZRT_RED_SUM, NULL));
  /* sum over ranks of (r + 1 + i % 7) = w(w+1)/2 + w * (i % 7) */
  float *h = malloc(N * sizeof(float));
  ZT_OK(zrt_backend_memcpy(b, h, x, N * sizeof(float), ZRT_COPY_D2H, NULL));
  long bad = 0;
  for (int i = 0; i < N; i++) bad += h[i] != (float)(w * (w + 1) / 2) + (float)(w * (i % 7));
  printf("rank %d: all_reduce of a side stream's write: %ld of %d wrong (tolerance 0)\n", r, bad,
         N);
  ZT_CHECK(bad == 0);

  /* broadcast from the last rank, whose input the side stream writes */
  if (r == w - 1) side_write(b, s, x, 1000.0f);
  ZT_OK(zrt_comm_broadcast(c, x, N, ZRT_F32, w - 1, NULL));
  bad = count_bad(b, x, 1000.0f);
  printf("rank %d: broadcast of a side stream's write: %ld of %d wrong (tolerance 0)\n", r, bad, N);
  ZT_CHECK(bad == 0);

  free(h);
  zrt_backend_free(b, x);
  zrt_backend_stream_destroy(b, s);
  zrt_comm_destroy(c);
  zrt_backend_destroy(b);
  ZT_DONE();
}
