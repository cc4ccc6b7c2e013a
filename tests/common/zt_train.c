/*
 * zt_train.c — zt_train.h: a step with made-up gradients.
 */
#include "zt_train.h"

#include <math.h>
#include <stdlib.h>

#include "dtype.h"
#include "ztest.h"

void zt_fake_grad_step(zrt_engine *eng, zrt_dtype dt, int nmod, const int64_t *numel,
                       const int *grad_param, int accum, int s, int rank, int inf_step,
                       zrt_step_info *si) {
  int64_t maxn = 0;
  for (int m = 0; m < nmod; m++)
    if (numel[m] > maxn) maxn = numel[m];
  uint16_t *g16 = malloc((size_t)maxn * 2);
  ZT_CHECK(g16 != NULL);
  if (!g16) return;
  for (int k = 0; k < accum; k++) {
    for (int m = nmod - 1; m >= 0; m--) {
      for (int64_t i = 0; i < numel[m]; i++)
        zrt_store_f(g16, dt, (size_t)i,
                    1e-2f * (float)((i * 7 + rank * 5 + s * 11 + k * 3 + m) % 29 - 14));
      if (s == inf_step && rank == 0 && k == 1 && m == 1) zrt_store_f(g16, dt, 17, INFINITY);
      void *p;
      ZT_OK(zrt_module_fetch(eng, m));
      ZT_OK(zrt_param_grad(eng, grad_param[m], &p));
      ZT_OK(zrt_engine_memcpy(eng, p, g16, (size_t)numel[m] * 2, ZRT_COPY_H2D));
      ZT_OK(zrt_module_grads_ready(eng, m));
      ZT_OK(zrt_module_release(eng, m));
    }
    ZT_OK(zrt_engine_step(eng, 1.0f + (float)s, si));
  }
  free(g16);
}
