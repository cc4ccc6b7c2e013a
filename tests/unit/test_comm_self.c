/*
 * test_comm_self.c — the world-size-1 comm: "auto" picks it outside
 * mpiexec; every collective is a copy (bit-exact, half types untouched);
 * blocking and async; in-place variants; sequence numbers, completion
 * counters, last_op, bytes_moved = 0 (nothing leaves the rank); argument
 * errors and their messages. No MPI is initialised.
 */
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "comm.h"
#include "dtype.h"
#include "ztest.h"

static void fill(void *buf, zrt_dtype dt, size_t n, float base) {
  for (size_t i = 0; i < n; i++) zrt_store_f(buf, dt, i, base + (float)i * 0.37f - 11.0f);
}

static void check_same(const char *what, const void *got, const void *want, zrt_dtype dt,
                       size_t n) {
  double *g = malloc(n * sizeof(double)), *w = malloc(n * sizeof(double));
  for (size_t i = 0; i < n; i++) {
    g[i] = zrt_load_f(got, dt, i);
    w[i] = zrt_load_f(want, dt, i);
  }
  ZT_CLOSE_ARRAY(what, g, w, n, 0.0);
  ZT_CHECK(!memcmp(got, want, n * zrt_dtype_size(dt))); /* bit-exact */
  free(g), free(w);
}

int main(void) {
  /* A stray launcher variable must not make "auto" pick MPI here. */
  unsetenv("OMPI_COMM_WORLD_SIZE");
  unsetenv("WORLD_SIZE");
  zrt_backend *b = NULL;
  zrt_comm *c = NULL;
  ZT_OK(zrt_backend_create("cpu", 0, 0, &b));
  ZT_OK(zrt_comm_create("auto", b, 5.0, &c));
  ZT_CHECK(!strcmp(c->iface->name, "self"));
  ZT_CHECK(c->rank == 0 && c->world == 1 && c->local_rank == 0 && c->local_world == 1);
  ZT_CHECK(c->timeout_s == 5.0);

  const zrt_dtype dts[3] = {ZRT_F32, ZRT_F16, ZRT_BF16};
  const size_t n = 333;
  uint64_t issued = 0;
  for (int d = 0; d < 3; d++) {
    zrt_dtype dt = dts[d];
    size_t es = zrt_dtype_size(dt);
    for (int async = 0; async < 2; async++) {
      char *send = calloc(n, es), *recv = calloc(n, es), *want = calloc(n, es);
      zrt_comm_req *req = NULL;
      zrt_comm_req **rp = async ? &req : NULL;
      fill(send, dt, n, (float)d);
      memcpy(want, send, n * es);

      ZT_OK(zrt_comm_all_reduce(c, send, recv, n, dt, ZRT_RED_SUM, rp));
      ZT_OK(zrt_comm_wait(c, req));
      check_same("self all_reduce", recv, want, dt, n);

      memset(recv, 0, n * es);
      memcpy(recv, send, n * es);
      ZT_OK(zrt_comm_all_reduce(c, recv, recv, n, dt, ZRT_RED_MAX, rp));
      if (req) {
        int done = 0;
        ZT_OK(zrt_comm_test(c, req, &done));
        ZT_CHECK(done == 1);
      }
      check_same("self all_reduce in place", recv, want, dt, n);

      size_t counts[1] = {n};
      memset(recv, 0, n * es);
      ZT_OK(zrt_comm_reduce_scatter(c, send, recv, counts, dt, ZRT_RED_MIN, rp));
      ZT_OK(zrt_comm_wait(c, req));
      check_same("self reduce_scatter", recv, want, dt, n);

      memset(recv, 0, n * es);
      ZT_OK(zrt_comm_all_gather(c, send, recv, counts, dt, rp));
      ZT_OK(zrt_comm_wait(c, req));
      check_same("self all_gather", recv, want, dt, n);
      ZT_OK(zrt_comm_all_gather(c, recv, recv, counts, dt, rp)); /* in place */
      ZT_OK(zrt_comm_wait(c, req));
      check_same("self all_gather in place", recv, want, dt, n);

      ZT_OK(zrt_comm_broadcast(c, recv, n, dt, 0, rp));
      ZT_OK(zrt_comm_wait(c, req));
      check_same("self broadcast", recv, want, dt, n);
      issued += 6;
      ZT_CHECK(!strcmp(c->last_op, "broadcast") && c->last_bytes == n * es);
      free(send), free(recv), free(want);
    }
  }
  ZT_CHECK(c->seq == issued && c->completed == issued);
  ZT_CHECK(c->bytes_moved == 0);
  ZT_OK(zrt_comm_barrier(c));
  ZT_CHECK(c->seq == issued + 1 && !strcmp(c->last_op, "barrier"));

  /* Errors name the argument and what is allowed. */
  float x[2] = {1, 2};
  zrt_status st = zrt_comm_broadcast(c, x, 2, ZRT_F32, 1, NULL);
  ZT_CHECK(st == ZRT_ERR_INVALID_ARG);
  ZT_CONTAINS(zrt_last_error(), "root 1 is not a rank (world size 1)");
  st = zrt_comm_all_reduce(c, x, x, 2, ZRT_F32, (zrt_redop)7, NULL);
  ZT_CHECK(st == ZRT_ERR_INVALID_ARG);
  ZT_CONTAINS(zrt_last_error(), "reduction op 7");
  st = zrt_comm_all_reduce(c, NULL, x, 2, ZRT_F32, ZRT_RED_SUM, NULL);
  ZT_CHECK(st == ZRT_ERR_INVALID_ARG);
  ZT_CONTAINS(zrt_last_error(), "NULL send buffer for 2 elements");
  st = zrt_comm_all_gather(c, x, x, NULL, ZRT_F32, NULL);
  ZT_CHECK(st == ZRT_ERR_INVALID_ARG);
  ZT_CONTAINS(zrt_last_error(), "counts is NULL");
  ZT_CHECK(c->seq == issued + 1); /* rejected calls get no sequence number */

  zrt_comm *bad = NULL;
  st = zrt_comm_create("nccl", b, 5.0, &bad);
  ZT_CHECK(st != ZRT_OK && bad == NULL);
  ZT_CONTAINS(zrt_last_error(), "nccl");
  st = zrt_comm_create("tcp", b, 5.0, &bad);
  ZT_CHECK(st == ZRT_ERR_CONFIG && bad == NULL);
  ZT_CONTAINS(zrt_last_error(),
              "comm \"tcp\" is unknown; expected one of auto, self, mpi, shm, hier, nccl");
  setenv("WORLD_SIZE", "4", 1);
  st = zrt_comm_create("self", b, 5.0, &bad);
  ZT_CHECK(st == ZRT_ERR_CONFIG && bad == NULL);
  ZT_CONTAINS(zrt_last_error(), "the launcher started 4 ranks");
  unsetenv("WORLD_SIZE");

  zrt_comm_destroy(c);
  zrt_comm_destroy(NULL);
  zrt_backend_destroy(b);
  ZT_DONE();
}
