/*
 * zt_train.h — a training step with made-up gradients, for the engine tests
 * that compare two runs bit for bit (tests/mpi/test_engine_offload_grads.c,
 * test_engine_twin_flow.c): the program's side of a step without a model.
 */
#ifndef ZT_TRAIN_H
#define ZT_TRAIN_H

#include <stdint.h>

#include "zrt.h"

/* One optimizer step s of `accum` micro-batches. Per micro-batch k the
 * nmod modules, in reverse order, are fetched, get numel[m] deterministic
 * 16-bit (dt) gradients of (rank, s, k, m) written from the gradient of
 * parameter grad_param[m] on (the module's parameters lie back to back from
 * it), and are reported ready and released; then zrt_engine_step with loss
 * 1 + s. With inf_step == s, rank 0's micro-batch 1 of module 1 carries an
 * Inf at element 17 (an fp16 overflow). The last micro-batch's step info
 * goes to *si. */
void zt_fake_grad_step(zrt_engine *eng, zrt_dtype dt, int nmod, const int64_t *numel,
                       const int *grad_param, int accum, int s, int rank, int inf_step,
                       zrt_step_info *si);

#endif
