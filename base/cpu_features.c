/*
 * cpu_features.c — which vector ISA this CPU runs (cpuid through
 * __builtin_cpu_supports), chosen once per process and cached (a cached cpu
 * parameter, DESIGN.md rule 5); $ZRT_CPU_ISA = scalar|avx2|avx512 forces a
 * lesser path ($ZRT_ISA is the same knob under the name issue 25 used;
 * $ZRT_CPU_ISA wins when both are set; a request this CPU cannot run is
 * logged and the best path is used instead). Read by every vector kernel:
 * the CPU optimizer, the dtype conversions, the shm comm's SUM, the
 * streaming copy. Also the
 * last-level cache size (the shm comm's non-temporal threshold).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "cpu_features.h"
#include "env.h"

const char *zrt_isa_name(zrt_isa isa) {
  switch (isa) {
  case ZRT_ISA_AVX512: return "avx512";
  case ZRT_ISA_AVX2: return "avx2";
  default: return "scalar";
  }
}

int zrt_isa_has_avx512bf16(void) {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512bf16");
}

int zrt_isa_supported(zrt_isa isa) {
  __builtin_cpu_init();
  switch (isa) {
  case ZRT_ISA_SCALAR: return 1;
  case ZRT_ISA_AVX2:
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
           __builtin_cpu_supports("f16c");
  case ZRT_ISA_AVX512:
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("f16c");
  }
  return 0;
}

static int zrt_isa_cached = -1; /* atomic: stream workers and teams ask too */

zrt_isa zrt_isa_best(void) {
  int cached = __atomic_load_n(&zrt_isa_cached, __ATOMIC_RELAXED);
  if (cached >= 0) return (zrt_isa)cached;
  zrt_isa best = zrt_isa_supported(ZRT_ISA_AVX512) ? ZRT_ISA_AVX512
                 : zrt_isa_supported(ZRT_ISA_AVX2) ? ZRT_ISA_AVX2
                                                   : ZRT_ISA_SCALAR;
  const char *var = "ZRT_CPU_ISA", *env = zrt_env(var);
  if (!env || !*env) env = zrt_env(var = "ZRT_ISA");
  if (env && *env) {
    int want = !strcasecmp(env, "scalar")   ? ZRT_ISA_SCALAR
               : !strcasecmp(env, "avx2")   ? ZRT_ISA_AVX2
               : !strcasecmp(env, "avx512") ? ZRT_ISA_AVX512
                                            : -1;
    if (want < 0)
      zrt_log(ZRT_LOG_WARN,
              "%s=%s is not one of scalar|avx2|avx512; using %s (the best this CPU has)", var, env,
              zrt_isa_name(best));
    else if (!zrt_isa_supported((zrt_isa)want))
      zrt_log(ZRT_LOG_WARN, "%s=%s: this CPU cannot run it; using %s", var, env,
              zrt_isa_name(best));
    else
      best = (zrt_isa)want;
  }
  zrt_log_once("cpu_optim_isa", ZRT_LOG_DEBUG, "cpu kernels: %s path%s", zrt_isa_name(best),
               best == ZRT_ISA_AVX512 && zrt_isa_has_avx512bf16() ? " with AVX512_BF16" : "");
  __atomic_store_n(&zrt_isa_cached, (int)best, __ATOMIC_RELAXED);
  return best;
}

size_t zrt_cpu_llc_bytes(void) {
  static size_t llc = (size_t)-1; /* atomic: the copy kernels ask from any thread */
  size_t cached = __atomic_load_n(&llc, __ATOMIC_RELAXED);
  if (cached != (size_t)-1) return cached;
  size_t best = 0;
  int best_level = 0;
  for (int i = 0; i < 16; i++) {
    char path[96], buf[64];
    int level = 0;
    uint64_t size = 0;
    snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/level", i);
    FILE *f = fopen(path, "r");
    if (!f) break;
    if (fscanf(f, "%d", &level) != 1) level = 0;
    fclose(f);
    snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
    f = fopen(path, "r");
    if (!f) continue;
    if (fgets(buf, sizeof buf, f)) {
      buf[strcspn(buf, "\n")] = 0;
      if (!zrt_parse_size(buf, &size)) size = 0;
    }
    fclose(f);
    if (level > best_level && size) {
      best_level = level;
      best = (size_t)size;
    }
  }
  if (!best) {
    long v = sysconf(_SC_LEVEL3_CACHE_SIZE);
    best = v > 0 ? (size_t)v : 0;
  }
  __atomic_store_n(&llc, best, __ATOMIC_RELAXED);
  return best;
}
