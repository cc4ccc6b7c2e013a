/*
 * hello_zrt.c — the smallest program a user builds outside the zrt tree
 * against an installed zrt (tests/cli/test_install.sh builds it with
 * pkg-config, shared and static, and with find_package(zrt); the README's
 * "Install" section shows the CMake project beside it).
 *
 * It checks that the library it runs with is the one its header describes
 * (zrt_version against ZRT_VERSION_*), then trains one parameter vector w
 * (64 elements, the engine's seeded init) on loss 0.5*|w|^2 (grad w) for
 * --steps optimizer steps on the CPU backend, printing one line per step on
 * rank 0. Every rank computes the same loss and gradient, so the printed
 * numbers are the same at every world size (the engine initialises the
 * parameter as a function of seed, name and index, and the mean of equal
 * gradients is that gradient): the test compares 1 rank with 2.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zrt.h>

#define N 64

#define TRY(call)                                                                                  \
  do {                                                                                             \
    zrt_status s_ = (call);                                                                        \
    if (s_ != ZRT_OK) {                                                                            \
      fprintf(stderr, "hello_zrt: %s: %s: %s\n", #call, zrt_status_string(s_), zrt_last_error());  \
      rc = 1;                                                                                      \
      goto out;                                                                                    \
    }                                                                                              \
  } while (0)

int main(int argc, char **argv) {
  int rc = 0, steps = 3;
  for (int i = 1; i + 1 < argc; i += 2)
    if (!strcmp(argv[i], "--steps")) steps = atoi(argv[i + 1]);
  zrt_config *cfg = NULL;
  zrt_engine *eng = NULL;
  int major = -1, minor = -1, patch = -1;
  TRY(zrt_version(&major, &minor, &patch));
  if (major != ZRT_VERSION_MAJOR || minor != ZRT_VERSION_MINOR || patch != ZRT_VERSION_PATCH) {
    fprintf(stderr, "hello_zrt: built with zrt.h %s but runs with libzrt %d.%d.%d\n",
            ZRT_VERSION_STRING, major, minor, patch);
    return 1;
  }
  TRY(zrt_config_from_env(&cfg));
  TRY(zrt_config_set(cfg, "zrt.backend", "cpu", "program"));
  TRY(zrt_config_set(cfg, "train_micro_batch_size_per_gpu", "1", "program"));
  TRY(zrt_engine_create(cfg, &eng));
  zrt_engine_info info;
  TRY(zrt_engine_get_info(eng, &info));
  if (info.dtype != ZRT_F32) {
    fprintf(stderr, "hello_zrt: computes in fp32; the config chose %s\n",
            zrt_dtype_name(info.dtype));
    rc = 1;
    goto out;
  }
  int mod, w;
  const int64_t shape[1] = {N};
  TRY(zrt_module_add(eng, "hello", &mod));
  TRY(zrt_param_add(eng, mod, "hello.w", 1, shape, (zrt_init){ZRT_INIT_NORMAL, 0.5f}, 0, &w));
  TRY(zrt_engine_build(eng));
  if (info.rank == 0)
    printf("zrt %d.%d.%d (header %s), %d rank(s), comm %s\n", major, minor, patch,
           ZRT_VERSION_STRING, info.world_size, info.comm);
  for (int s = 0; s < steps; s++) {
    zrt_step_info si;
    float x[N], acc[N], loss = 0;
    void *p, *g;
    for (int64_t k = 0; k < info.grad_accum; k++) {
      TRY(zrt_module_fetch(eng, mod));
      TRY(zrt_param_data(eng, w, &p));
      TRY(zrt_engine_memcpy(eng, x, p, sizeof x, ZRT_COPY_D2H));
      TRY(zrt_module_release(eng, mod));
      loss = 0;
      for (int i = 0; i < N; i++) loss += 0.5f * x[i] * x[i];
      /* grads accumulate over the micro-batches of a step: grad += w */
      TRY(zrt_param_grad(eng, w, &g));
      TRY(zrt_engine_memcpy(eng, acc, g, sizeof acc, ZRT_COPY_D2H));
      for (int i = 0; i < N; i++) acc[i] += x[i];
      TRY(zrt_engine_memcpy(eng, g, acc, sizeof acc, ZRT_COPY_H2D));
      TRY(zrt_module_grads_ready(eng, mod));
      TRY(zrt_engine_step(eng, loss, &si));
    }
    if (info.rank == 0)
      printf("step %lld loss %.9g grad_norm %.9g\n", (long long)si.step, (double)si.loss,
             (double)si.grad_norm);
  }
out:
  zrt_engine_destroy(eng);
  zrt_config_destroy(cfg);
  return rc;
}
