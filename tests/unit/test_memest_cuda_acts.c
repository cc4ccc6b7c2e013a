/*
 * test_memest_cuda_acts.c — `zrt estimate-memory --backend cuda`'s
 * activations (tools/model_layouts.c, zrt_model_gpt_activations with cuda)
 * against what train_gpt2 accounts on CUDA, to the byte: the example's own
 * arena (gpt2_acts_layout_init with GPT2_ACTS_LSE_ONLY, and in a 16-bit
 * run GPT2_ACTS_HALF16), its GEMM scratch (gpt2_cuda_scratch_bytes), dwte,
 * the token ints, the window's losses, and in a 16-bit run the staging of
 * the largest module (from the example's own module table) twice without
 * wte's (train_gpt2.c's zrt_engine_set_activation_bytes sum). Over the
 * tiny and gpt2 presets, B = 1, 3, 8, T = the preset's and 33 (an odd
 * B*T: the 16-bit layout's 256-byte alignment), fp32 / bf16 / fp16, 0, 2
 * and all blocks checkpointed, accumulation 1 and 3; and the CPU figure
 * (cuda 0) against the plain layout the same way (cli.test_memest_exact
 * checks that one against the pools). Also: on CUDA a bf16 GPT-2 124M at
 * B = 8 needs 4.5 GiB less than on the CPU (the attention's rows).
 */
#include "../../examples/gpt2/gpt2_model.c"

#include <stdio.h>
#include <stdlib.h>

#include "model_layouts.h"
#include "ztest.h"

/* train_gpt2's activation bytes for this run (its set_activation_bytes) */
static uint64_t trainer_bytes(const gpt2_config *cfg, int B, int nckpt, zrt_dtype dt, int accum,
                              int cuda) {
  gpt2_acts_layout L;
  int flags = cuda ? GPT2_ACTS_LSE_ONLY | (dt != ZRT_F32 ? GPT2_ACTS_HALF16 : 0) : 0;
  gpt2_acts_layout_init(&L, cfg, B, nckpt, flags);
  uint64_t N = (uint64_t)B * (uint64_t)cfg->seq_len, wte_n = (uint64_t)cfg->vocab * cfg->n_embd;
  /* the weights' staging (train_gpt2's reads16: on CUDA the blocks'
   * weight matrices and the embedding are read as 16-bit tensors) and the
   * gradients' (grad_direct: a 16-bit run stages the embedding's wte
   * gradient in dwte, and on CUDA the weight matrices' dW GEMMs add into
   * the engine's 16-bit gradients), each the largest module's */
  int64_t max_mod = 0, max_staged = 0;
  for (int m = -1; m <= cfg->n_layer; m++) {
    gpt2_param_spec spec[GPT2_BLOCK_NPARAMS];
    int np = gpt2_module_params(cfg, m, spec);
    int64_t wst = 0, staged = 0;
    for (int p = 0; p < np; p++) {
      int gemm_w =
          m >= 0 && m < cfg->n_layer &&
          (p == GPT2_ATTN_W || p == GPT2_ATTNPROJ_W || p == GPT2_FC_W || p == GPT2_FCPROJ_W);
      if (!(cuda && (gemm_w || m == -1))) wst += gpt2_param_numel(&spec[p]);
      if (!(m == -1 && p == GPT2_WTE) && !(cuda && gemm_w)) staged += gpt2_param_numel(&spec[p]);
    }
    if (wst > max_mod) max_mod = wst;
    if (staged > max_staged) max_staged = staged;
  }
  uint64_t act = (uint64_t)L.total * 4 + wte_n * 4 + 2 * N * sizeof(int) +
                 (cuda ? gpt2_cuda_scratch_bytes(cfg, B, dt) : 0) +
                 (accum > 1 ? (uint64_t)accum * N * 4 : 0);
  if (dt != ZRT_F32) act += (uint64_t)(max_mod + max_staged) * 4 + (cuda ? 0 : wte_n * 4);
  return act;
}

int main(void) {
  static const char *const models[] = {"tiny", "gpt2"};
  static const zrt_dtype dts[] = {ZRT_F32, ZRT_BF16, ZRT_F16};
  int cases = 0, bad = 0;
  /* the presets' byte-level vocabulary, and GPT-2's 50257 (logits rows
   * padded to 50304, gpt2_acts_layout's logits_ld) */
  static const int64_t vocabs[] = {0, 50257};
  for (int mv = 0; mv < 4; mv++) {
    const int mi = mv / 2;
    const zrt_model_gpt *g0 = zrt_model_gpt_find(models[mi]);
    ZT_CHECK(g0 != NULL);
    if (!g0) continue;
    zrt_model_gpt gv = *g0;
    if (vocabs[mv % 2]) gv.vocab = vocabs[mv % 2];
    const zrt_model_gpt *g = &gv;
    for (int B = 1; B <= 8; B += B == 1 ? 2 : 5)
      for (int ti = 0; ti < 2; ti++)
        for (int d = 0; d < 3; d++)
          for (int ck = 0; ck < 3; ck++)
            for (int accum = 1; accum <= 3; accum += 2)
              for (int cuda = 0; cuda < 2; cuda++) {
                gpt2_config cfg = {0};
                ZT_CHECK(gpt2_config_preset(models[mi], &cfg) == 0);
                cfg.vocab = (int)g->vocab;
                cfg.seq_len = ti ? 33 : (int)g->default_seq;
                int nckpt = ck == 0 ? 0 : ck == 1 ? 2 : cfg.n_layer;
                int w = dts[d] == ZRT_F32 ? 4 : 2;
                uint64_t want = trainer_bytes(&cfg, B, nckpt, dts[d], accum, cuda);
                uint64_t got = zrt_model_gpt_activations(g, B, cfg.seq_len, w, nckpt, accum, cuda);
                cases++;
                if (got != want) {
                  bad++;
                  printf(
                      "%s V=%d B=%d T=%d %s nckpt=%d accum=%d %s: estimate %llu, train_gpt2 %llu\n",
                      models[mi], cfg.vocab, B, cfg.seq_len, zrt_dtype_name(dts[d]), nckpt, accum,
                      cuda ? "cuda" : "cpu", (unsigned long long)got, (unsigned long long)want);
                }
              }
  }
  printf("%d shapes, %d differ\n", cases, bad);
  ZT_CHECK(cases == 4 * 3 * 2 * 3 * 3 * 2 * 2 && bad == 0);
  const zrt_model_gpt *g = zrt_model_gpt_find("gpt2");
  uint64_t cpu = zrt_model_gpt_activations(g, 8, 1024, 2, 0, 1, 0);
  uint64_t cu = zrt_model_gpt_activations(g, 8, 1024, 2, 0, 1, 1);
  printf("gpt2 bf16 B=8: activations %.1f MiB on cpu, %.1f MiB on cuda\n", cpu / 1048576.0,
         cu / 1048576.0);
  ZT_CHECK(cpu > cu && cpu - cu > (uint64_t)4 << 30);
  ZT_DONE();
}
