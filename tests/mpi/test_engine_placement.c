/*
 * test_engine_placement.c — the device a rank takes comes from the local
 * rank MPI derives, not from a launcher's variables (issue 23: engine.c
 * read OMPI_COMM_WORLD_LOCAL_RANK / LOCAL_RANK before MPI was up, so under
 * srun or MPICH's mpiexec, which set neither, every rank took GPU 0).
 *
 * Before MPI starts, each rank removes Open MPI's and torchrun's local-rank
 * and local-size variables, sets LOCAL_RANK=0 on every rank (a stale or
 * wrong variable must not win), and replaces OMPI_COMM_WORLD_SIZE by
 * PMI_SIZE (MPICH's and srun --mpi=pmi2's). zrt_engine_placement — what
 * zrt_engine_create calls before it creates the backend — must then still
 * see a multi-rank job and give every rank its own local rank; on one
 * machine that is its world rank, so with 8 visible GPUs rank r takes
 * device r (zrt_device_for_local_rank), and with one GPU all share it.
 * Exact checks (integers).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bootstrap.h"
#include "device_rules.h"
#include "zt_engine.h"
#include "ztest.h"

int main(void) {
  const char *ws = getenv("OMPI_COMM_WORLD_SIZE");
  if (!ws) ZT_SKIP("not started by Open MPI's mpiexec (OMPI_COMM_WORLD_SIZE unset)");
  char world_s[32];
  snprintf(world_s, sizeof world_s, "%s", ws);
  static const char *gone[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE",
                               "LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "WORLD_SIZE"};
  for (size_t i = 0; i < sizeof gone / sizeof gone[0]; i++) unsetenv(gone[i]);
  setenv("LOCAL_RANK", "0", 1);
  setenv("PMI_SIZE", world_s, 1);
  int world = atoi(world_s), env_world = -1;
  ZT_CHECK(zrt_comm_env_world(&env_world) == ZRT_OK && env_world == world);

  zrt_bootstrap *boot = NULL;
  int lr = -1, lw = -1;
  ZT_OK(zrt_engine_placement(&boot, &lr, &lw));
  ZT_CHECK(boot != NULL);
  if (!boot) ZT_DONE();
  int rank = boot->rank;
  printf("rank %d of %d: local rank %d of %d, device %d of 8, device %d of 1\n", rank, boot->world,
         lr, lw, zrt_device_for_local_rank(lr, 8), zrt_device_for_local_rank(lr, 1));
  ZT_CHECK(boot->world == world);
  ZT_CHECK(lr == rank && lw == world); /* one machine: local rank = rank */
  ZT_CHECK(zrt_device_for_local_rank(lr, 8) == rank % 8);
  ZT_CHECK(zrt_device_for_local_rank(lr, 1) == 0);
  ZT_CHECK(zrt_ranks_sharing_device(lw, 1, 0) == world);
  /* every rank a different device when there are enough */
  int mine = zrt_device_for_local_rank(lr, 8), *all = calloc((size_t)world, sizeof(int));
  ZT_OK(zrt_bootstrap_allgather(boot, &mine, all, sizeof mine));
  for (int a = 0; a < world; a++)
    for (int b = a + 1; b < world; b++) ZT_CHECK(world > 8 || all[a] != all[b]);
  free(all);
  zrt_bootstrap_destroy(boot);
  ZT_DONE();
}
