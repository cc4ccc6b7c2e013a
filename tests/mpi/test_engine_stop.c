/*
 * test_engine_stop.c — zrt_engine_request_stop: the ranks agree on a stop
 * through the boundary's statistics all-reduce (no collective of its own).
 * The MLP model, stage 2, gradient accumulation 2, 5 steps: the last rank
 * asks to stop before the boundary of step 3 (during its first
 * micro-batch, so the request waits for that window's boundary), every
 * rank must see zrt_step_info.stop == 1 at step 3's boundary and 0 at every
 * other call, and the request is spent there (steps 4 and 5 read 0).
 * Losses must be those of a run without the request, bitwise (the stop
 * element does not touch the statistics). Exact checks (integers, bits).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "examples/mlp/mlp_model.h"
#include "zt_mpi.h"

#define STEPS 5
#define ACCUM 2
#define STOP_AT 3 /* optimizer step (1-based) whose window carries the request */

/* One run; stops[s] = info.stop at step s's boundary, plus every non-boundary
 * call's stop OR'ed into bad; losses[s] the boundary loss. */
static void run(int ask, int stops[STEPS], float losses[STEPS], int *bad, int *rank_out) {
  zrt_config *cfg = NULL;
  zrt_engine *eng = NULL;
  mlp m;
  memset(&m, 0, sizeof m);
  ZT_OK(zrt_config_create(&cfg));
  /* the model computes on the host: pin the CPU backend (auto picks CUDA on a GPU) */
  ZT_OK(zrt_config_set(cfg, "zrt.backend", zt_host_backend(), "test"));
  ZT_OK(zrt_config_set(cfg, "zero_optimization.stage", "2", "test"));
  ZT_OK(zrt_config_set(cfg, "gradient_accumulation_steps", "2", "test"));
  ZT_OK(zrt_config_set(cfg, "train_micro_batch_size_per_gpu", "4", "test"));
  ZT_OK(zrt_engine_create(cfg, &eng));
  ZT_OK(mlp_register(eng, &m, 16, 32, 4, 4));
  ZT_OK(zrt_engine_build(eng));
  ZT_OK(mlp_alloc(eng, &m));
  zrt_engine_info info;
  ZT_OK(zrt_engine_get_info(eng, &info));
  *rank_out = info.rank;
  for (int s = 0; s < STEPS; s++)
    for (int k = 0; k < ACCUM; k++) {
      float loss = 0;
      zrt_step_info si;
      int64_t base = ((int64_t)(s * ACCUM + k) * info.world_size + info.rank) * 4;
      ZT_OK(mlp_micro(eng, &m, base, &loss));
      if (ask && s + 1 == STOP_AT && k == 0 && info.rank == info.world_size - 1)
        ZT_OK(zrt_engine_request_stop(eng));
      ZT_OK(zrt_engine_step(eng, loss, &si));
      if (si.boundary) {
        stops[s] = si.stop;
        losses[s] = si.loss;
      } else if (si.stop) {
        *bad = 1;
      }
    }
  mlp_free(eng, &m);
  zrt_engine_destroy(eng);
  zrt_config_destroy(cfg);
}

int main(int argc, char **argv) {
  ZT_MPI_INIT(&argc, &argv); /* two engines in turn: MPI outlives each one's comm */
  int stops[STEPS] = {0}, ref_stops[STEPS] = {0}, bad = 0, rank = 0;
  float losses[STEPS] = {0}, ref[STEPS] = {0};
  ZT_CHECK(zrt_engine_request_stop(NULL) == ZRT_ERR_INVALID_ARG);
  run(0, ref_stops, ref, &bad, &rank);
  run(1, stops, losses, &bad, &rank);
  printf("rank %d: stop per step", rank);
  for (int s = 0; s < STEPS; s++) printf(" %d", stops[s]);
  printf(" (asked by the last rank in step %d's window); losses bitwise equal to the run without: "
         "%s\n",
         STOP_AT, memcmp(losses, ref, sizeof ref) ? "no" : "yes");
  for (int s = 0; s < STEPS; s++) {
    ZT_CHECK(stops[s] == (s + 1 == STOP_AT));
    ZT_CHECK(ref_stops[s] == 0);
  }
  ZT_CHECK(!bad);
  ZT_CHECK(!memcmp(losses, ref, sizeof ref));
  ZT_MPI_DONE();
}
