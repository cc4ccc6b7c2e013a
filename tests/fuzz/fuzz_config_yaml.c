/*
 * fuzz_config_yaml.c — libFuzzer target: arbitrary bytes through the
 * YAML path of the config loader (zrt_config_load_buffer), then resolve
 * and the JSON writer when the load succeeds. The property is "no crash, no
 * leak, no hang, and a failed load leaves the config unchanged"; the seed
 * corpus is tests/fuzz/corpus/fuzz_config_yaml/.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  zrt_config *cfg = NULL;
  if (zrt_config_create(&cfg) != ZRT_OK) return 0;
  zrt_cfg before = *zrt_config_values(cfg);
  zrt_status st =
      zrt_config_load_buffer(cfg, (const char *)data, size, "fuzz.yaml", "/nonexistent");
  if (st != ZRT_OK) {
    /* a failed load must change nothing and say why */
    if (memcmp(&before, zrt_config_values(cfg), sizeof before) || !zrt_last_error()[0]) abort();
  } else if (zrt_config_resolve(cfg, 2) == ZRT_OK) {
    char v[600];
    for (size_t i = 0; i < zrt_config_schema_count(); i++)
      zrt_config_entry(cfg, i, NULL, v, sizeof v, NULL);
  }
  goto out;
out:
  zrt_config_destroy(cfg);
  return 0;
}
