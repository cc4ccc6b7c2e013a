/*
 * zt_attn_dump.h — writes one attention case's tensors for
 * scripts/check_attention_torch.py (PyTorch's causal attention against
 * zrt's): qkv (as the kernels read it: with the bias added and rounded to
 * their operand type), dout, dqkv0 (zeros: the backward writes dqkv; the
 * checker adds the gradient onto it), out and dqkv as
 * raw float32 (DIR/NAME.f32) and the shape and the kernels' dtype ("f32":
 * the fp32-core kernels; "bf16": the tensor-core ones, whose inputs are
 * already bf16 values) as DIR/shape.json. Used by test_gpt2_cuda (the GPU's
 * kernels, ZRT_ATTN_DUMP) and test_gpt2_flash_emu / test_gpt2_flash_tc_emu
 * (their C emulations).
 */
#ifndef ZT_ATTN_DUMP_H
#define ZT_ATTN_DUMP_H

#include <stdio.h>

#include "ztest.h"

static inline void zt_attn_dump(const char *dir, const float *qkv, const float *dout,
                                const float *dqkv0, const float *out, const float *dqkv, int B,
                                int T, int NH, int hs, const char *dtype) {
  size_t nqkv = (size_t)B * T * 3 * NH * hs, nout = (size_t)B * T * NH * hs;
  const struct {
    const char *name;
    const float *p;
    size_t n;
  } f[] = {{"qkv", qkv, nqkv},
           {"dout", dout, nout},
           {"dqkv0", dqkv0, nqkv},
           {"out", out, nout},
           {"dqkv", dqkv, nqkv}};
  char path[4096];
  for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
    snprintf(path, sizeof path, "%s/%s.f32", dir, f[i].name);
    FILE *fp = fopen(path, "wb");
    ZT_CHECK(fp && fwrite(f[i].p, 4, f[i].n, fp) == f[i].n);
    if (fp) fclose(fp);
  }
  snprintf(path, sizeof path, "%s/shape.json", dir);
  FILE *fp = fopen(path, "w");
  ZT_CHECK(fp != NULL);
  if (fp) {
    fprintf(fp, "{\"B\": %d, \"T\": %d, \"NH\": %d, \"HS\": %d, \"dtype\": \"%s\"}\n", B, T, NH, hs,
            dtype);
    fclose(fp);
  }
}

#endif
