/*
 * train_mlp.c — a small real training program using only include/zrt.h: a
 * 3-layer tanh MLP regression on deterministic data (examples/mlp/
 * mlp_model.h), every ZeRO stage and precision chosen by the config.
 *
 *   train_mlp [--steps N] [--seed S] [--metrics PATH] [--config FILE]
 *             [--hidden H] [--micro B] [--set key=value ...]
 *
 * The config comes from $ZRT_CONFIG_FILE (zrt launch) and the environment,
 * then --config, then --set overrides. Prints one line per optimizer step
 * (rank 0) and exits non-zero with the library's message on error.
 *
 * The model computes on the host, launched on the engine's compute stream
 * (zrt_engine_launch), so it runs on the CPU backend, or on the twin
 * (zrt.backend twin: the same program under a GPU's ordering and memory
 * rules); any other backend value is replaced by cpu at program priority (a
 * GPU machine's "auto" would pick CUDA).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mlp_model.h"

#define TRY(call)                                                                                  \
  do {                                                                                             \
    zrt_status s_ = (call);                                                                        \
    if (s_ != ZRT_OK) {                                                                            \
      fprintf(stderr, "train_mlp: %s failed: %s: %s\n", #call, zrt_status_string(s_),              \
              zrt_last_error());                                                                   \
      rc = s_ == ZRT_ERR_OVERFLOW ? 3 : 1;                                                         \
      goto out;                                                                                    \
    }                                                                                              \
  } while (0)

int main(int argc, char **argv) {
  int rc = 0;
  long steps = 20, hidden = 32, micro = 8;
  zrt_config *cfg = NULL;
  zrt_engine *eng = NULL;
  mlp m;
  memset(&m, 0, sizeof m);
  TRY(zrt_config_from_env(&cfg));
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--help")) {
      printf("usage: train_mlp [--steps N] [--seed S] [--metrics PATH] [--config FILE] "
             "[--hidden H] [--micro B] [--set key=value]...\n");
      return 0;
    }
    if (!v) {
      fprintf(stderr, "train_mlp: %s needs a value\n", a);
      return 2;
    }
    i++;
    if (!strcmp(a, "--steps"))
      steps = atol(v);
    else if (!strcmp(a, "--hidden"))
      hidden = atol(v);
    else if (!strcmp(a, "--micro"))
      micro = atol(v);
    else if (!strcmp(a, "--seed"))
      TRY(zrt_config_set(cfg, "zrt.seed", v, "--seed"));
    else if (!strcmp(a, "--metrics"))
      TRY(zrt_config_set(cfg, "zrt.metrics_path", v, "--metrics"));
    else if (!strcmp(a, "--config"))
      TRY(zrt_config_load_file(cfg, v));
    else if (!strcmp(a, "--set")) {
      char key[256];
      const char *eq = strchr(v, '=');
      if (!eq || (size_t)(eq - v) >= sizeof key) {
        fprintf(stderr, "train_mlp: --set wants key=value, got '%s'\n", v);
        return 2;
      }
      memcpy(key, v, (size_t)(eq - v));
      key[eq - v] = 0;
      TRY(zrt_config_set(cfg, key, eq + 1, "--set"));
    } else {
      fprintf(stderr, "train_mlp: unknown option %s (see --help)\n", a);
      return 2;
    }
  }
  /* the model computes on the host (launched on the stream): cpu, or the
   * twin when asked for; never "auto" (it would pick CUDA on a GPU machine) */
  char be[32] = "";
  TRY(zrt_config_get(cfg, "zrt.backend", be, sizeof be));
  if (strcmp(be, "twin")) TRY(zrt_config_set(cfg, "zrt.backend", "cpu", "program"));
  char mb[32];
  snprintf(mb, sizeof mb, "%ld", micro);
  TRY(zrt_config_set(cfg, "train_micro_batch_size_per_gpu", mb, "program"));
  TRY(zrt_engine_create(cfg, &eng));
  zrt_engine_info info;
  TRY(zrt_engine_get_info(eng, &info));
  if (strcmp(info.backend, "cpu") && strcmp(info.backend, "twin")) {
    fprintf(stderr,
            "train_mlp: the engine runs on the %s backend, but this example's model computes on "
            "the host and cannot use device memory; drop zrt.backend=%s (ZRT_BACKEND / --set) "
            "to run it on the CPU, or use examples/gpt2 (train_gpt2), which has CUDA kernels\n",
            info.backend, info.backend);
    rc = 1;
    goto out;
  }
  TRY(mlp_register(eng, &m, 16, (int)hidden, 4, (int)micro));
  TRY(zrt_engine_build(eng));
  TRY(mlp_alloc(eng, &m));
  TRY(zrt_engine_get_info(eng, &info));
  TRY(zrt_engine_set_tokens_per_micro(eng, micro));
  for (long s = 0; s < steps; s++) {
    zrt_step_info si;
    for (int64_t k = 0; k < info.grad_accum; k++) {
      int64_t base = ((s * info.grad_accum + k) * info.world_size + info.rank) * micro;
      float loss;
      TRY(mlp_micro(eng, &m, base, &loss));
      TRY(zrt_engine_step(eng, loss, &si));
    }
    if (info.rank == 0)
      printf("step %lld loss %.6f lr %.3g scale %g grad_norm %.4g%s\n", (long long)si.step,
             (double)si.loss, (double)si.lr, (double)si.loss_scale, (double)si.grad_norm,
             si.skipped ? " (skipped)" : "");
  }
out:
  if (eng) mlp_free(eng, &m);
  zrt_engine_destroy(eng);
  zrt_config_destroy(cfg);
  return rc;
}
