/*
 * test_comm_stream_watchdog.c — the watchdog of a stream-ordered comm (the
 * twin, comm/comm.c): rank 1 skips a collective the others issued on device
 * buffers; on the others the comm stream's worker gives up after the
 * timeout (1 s), writes $ZRT_RUN_DIR/rank<R>.status naming the collective
 * it waited for and the last completed one, and the blocking call returns
 * ZRT_ERR_COMM with the watchdog's message; a stream ordered after the
 * failed collective (zrt_comm_wait_on) then fails with the same message (the
 * comm stream's error is sticky, as a failed NCCL kernel's stream). Rank 1
 * never issues it: the comm is dead after a timeout, as an aborted NCCL
 * communicator is, and every rank ends without using it again.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "comm.h"
#include "zt_mpi.h"
#include "ztest.h"

int main(int argc, char **argv) {
  ZT_MPI_INIT(&argc, &argv);
  int R = 0, N = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &R);
  MPI_Comm_size(MPI_COMM_WORLD, &N);
  char dir[256] = "";
  if (R == 0) {
    snprintf(dir, sizeof dir, "%s/zrt_swd_XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(dir)) return 1;
  }
  MPI_Bcast(dir, sizeof dir, MPI_CHAR, 0, MPI_COMM_WORLD);
  setenv("ZRT_RUN_DIR", dir, 1);

  zrt_backend *b = NULL;
  zrt_comm *c = NULL;
  ZT_OK(zrt_backend_create("twin", 0, 0, &b));
  ZT_OK(zrt_comm_create("mpi", b, 1.0, &c));
  ZT_CHECK(c->stream != NULL);
  float *x = NULL;
  ZT_OK(zrt_backend_alloc(b, 1024 * sizeof(float), ZRT_MEM_OTHER, (void **)&x));
  ZT_OK(zrt_backend_memset(b, x, 0, 1024 * sizeof(float), NULL));
  /* #1 completes everywhere: the last completed collective */
  ZT_OK(zrt_comm_all_reduce(c, x, x, 1024, ZRT_F32, ZRT_RED_SUM, NULL));
  MPI_Barrier(MPI_COMM_WORLD);

  if (R != 1) {
    /* #2, which rank 1 skips for now */
    zrt_comm_req *req = NULL;
    ZT_OK(zrt_comm_all_reduce(c, x, x, 1024, ZRT_F32, ZRT_RED_SUM, &req));
    ZT_OK(zrt_comm_wait_on(c, req, NULL)); /* queued: the failure comes later */
    float h = 0;
    zrt_status st = zrt_backend_memcpy(b, &h, x, sizeof h, ZRT_COPY_D2H, NULL);
    const char *msg = zrt_last_error();
    printf("rank %d: %s: %s\n", R, zrt_status_string(st), msg);
    ZT_CHECK(st == ZRT_ERR_COMM);
    ZT_CHECK(strstr(msg, "collective #2 all_reduce (4096 bytes) did not complete within 1s") !=
             NULL);
    ZT_CHECK(strstr(msg, "last completed: #1 all_reduce (4096 bytes)") != NULL);
    char path[320], line[512] = "";
    snprintf(path, sizeof path, "%s/rank%d.status", dir, R);
    FILE *f = fopen(path, "r");
    ZT_CHECK(f != NULL);
    if (f) {
      if (!fgets(line, sizeof line, f)) line[0] = 0;
      fclose(f);
    }
    printf("rank %d status: %s", R, line);
    ZT_CHECK(strstr(line, "\"last_completed_seq\":1,\"last_op\":\"all_reduce\"") != NULL);
    ZT_CHECK(strstr(line, "\"waiting_seq\":2,\"waiting_op\":\"all_reduce\"") != NULL);
  }
  /* Rank 1 never issues #2: after a timeout the twin's comm stream is dead,
   * as an aborted NCCL communicator is (the abandoned MPI request keeps the
   * device buffers as its own; a late peer would have MPI copy into them
   * from whatever thread progresses it, outside any stream). */
  MPI_Barrier(MPI_COMM_WORLD);
  if (R == 0) {
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) printf("could not remove %s\n", dir);
  }
  ZT_MPI_DONE();
}
