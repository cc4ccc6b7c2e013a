/*
 * zt_optim.h — the optimizer hyperparameters the unit tests share: Adam or
 * AdamW at step 1 with PyTorch's default betas and eps, bias correction
 * on, no weight decay, gradients taken as they are (grad_mul 1).
 */
#ifndef ZT_OPTIM_H
#define ZT_OPTIM_H

#include "optim.h"

static inline zrt_optim_hparams zt_adam_step1(zrt_optim_type type, float lr) {
  return (zrt_optim_hparams){.type = type,
                             .lr = lr,
                             .beta1 = 0.9f,
                             .beta2 = 0.999f,
                             .eps = 1e-8f,
                             .bias_correction = 1,
                             .step = 1,
                             .grad_mul = 1.0f};
}

#endif
