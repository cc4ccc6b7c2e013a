/*
 * test_gpt2_flash_emu.c — the fused attention of the GPT example's CUDA path
 * (examples/gpt2/gpt2_flash_attn.h), run here through its C emulation: the
 * same block functions, tiles and online softmax the kernels use, with the
 * threads of a block run one after the other between barriers. Checked
 * against plain causal attention in double (softmax, out, and the backward
 * into dq, dk, dv, written over a NaN-poisoned dqkv as the ops contract
 * says), each shape without and with the qkv GEMM's bias (added on load):
 * head size 64, T = 1, 31, 32, 33, 100 (tiles of 32: a ragged last tile, a
 * single row), 3 heads, batch 2; and heads smaller than the tiles' 64
 * columns (zero-padded): 32 (the tiny preset's, T = 64 and 33), 48
 * (T = 100) and an odd 33 (T = 70). Tolerance: 2e-5 absolute on out (entries
 * are averages of values in [-1, 1]) and on lse, 1e-4 on dqkv (entries of
 * size <= ~5). With ZRT_ATTN_DUMP=DIR the B = 2, T = 100, 3 heads of 64
 * case writes its tensors there for scripts/check_attention_torch.py
 * (cli.test_attention_torch_emu: PyTorch's SDPA against this emulation).
 * The kernels compile from the same text (gpt2_cuda.cu);
 * test_gpt2_cuda (gpu label) runs them against the CPU ops.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../examples/gpt2/gpt2_flash_attn.h"
#include "zt_attn_ref.h"
#include "ztest.h"

/* the CUDA grids, block by block */
static void emu_forward(const float *qkv, const float *bias, float *out, float *lse, int B, int T,
                        int C, int NH) {
  static fa_fwd_smem sm;
  static fa_fwd_ts ts[FA_NT];
  for (int bh = 0; bh < B * NH; bh++)
    for (int qt = 0; qt < (T + FA_TILE - 1) / FA_TILE; qt++)
      fa_forward_block(qkv, bias, out, lse, T, C, NH, qt, bh, &sm, ts);
}

static void emu_backward(float *dqkv, float *dstat, const float *dout, const float *qkv,
                         const float *bias, const float *out, const float *lse, int B, int T, int C,
                         int NH) {
  static fa_dq_smem sq;
  static fa_dq_ts tq[FA_NT];
  static fa_dkv_smem skv;
  static fa_dkv_ts tkv[FA_NT];
  (void)out; /* D from P and dP */
  int nt = (T + FA_TILE - 1) / FA_TILE;
  for (int bh = 0; bh < B * NH; bh++)
    for (int t = 0; t < nt; t++)
      fa_dq_block(dqkv, dstat, dout, qkv, bias, lse, T, C, NH, t, bh, &sq, tq);
  for (int bh = 0; bh < B * NH; bh++)
    for (int t = 0; t < nt; t++)
      fa_dkv_block(dqkv, dout, qkv, bias, lse, dstat, T, C, NH, t, bh, &skv, tkv);
}

/* fp32 inputs; tolerances 2e-5 on out and lse, 1e-4 on dqkv (see the top) */
static const zt_attn_kernel kernel = {emu_forward, emu_backward, NULL,  2e-5,
                                      2e-5,        1e-4,         "f32", FA_HS};

static void one_case(int B, int T, int NH, int hs) {
  zt_attn_case(&kernel, B, T, NH, hs, 42u + (uint64_t)T);
}

int main(void) {
  static const int Ts[] = {1, 31, 32, 33, 100};
  for (size_t i = 0; i < sizeof Ts / sizeof Ts[0]; i++) one_case(2, Ts[i], 3, FA_HS);
  one_case(2, 64, 2, 32);
  one_case(2, 33, 2, 32);
  one_case(1, 100, 3, 48);
  one_case(1, 70, 2, 33); /* an odd head: the tiles' last column pair half padded */
  ZT_DONE();
}
