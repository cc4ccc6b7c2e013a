/*
 * gpt2_model.h — the GPT-2 model of the train_gpt2 example: its shape
 * (presets and overrides), its parameter table in Hugging Face GPT-2 naming,
 * the activation layout, and the per-module forward/backward passes.
 *
 * The passes are written once, generic over the element type (float for
 * training, double for the gradient check, see gpt2_ops_impl.h), and reach
 * every kernel through an ops table so the same pass runs on the CPU kernels
 * (OpenMP) or the CUDA kernels (gpt2_cuda.cu) picked at run time.
 *
 * Invariants: all backward passes ADD into the gradient buffers they are
 * given (the engine's gradient buffers are zero at the start of a
 * micro-batch and several sources feed the tied wte gradient); activation
 * buffers are laid out once by gpt2_acts_layout and never resized.
 * The vocabulary is any size (byte-level text: 256; GPT-2's BPE: 50257);
 * everything keeps GPT-2's names and shapes (HF Conv1D layout: weight [in, out], y = x W + b).
 */
#ifndef GPT2_MODEL_H
#define GPT2_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "zrt.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The byte-level vocabulary of text data and the presets; any other size
 * comes from --vocab_size or an HF config.json (GPT-2's is 50257). */
#define GPT2_VOCAB 256
/* Parameters per transformer block, in registration order. */
#define GPT2_BLOCK_NPARAMS 12

enum {
  GPT2_LN1_W = 0,
  GPT2_LN1_B,
  GPT2_ATTN_W,     /* [C, 3C] */
  GPT2_ATTN_B,     /* [3C] */
  GPT2_ATTNPROJ_W, /* [C, C] */
  GPT2_ATTNPROJ_B,
  GPT2_LN2_W,
  GPT2_LN2_B,
  GPT2_FC_W, /* [C, 4C] */
  GPT2_FC_B,
  GPT2_FCPROJ_W, /* [4C, C] */
  GPT2_FCPROJ_B
};
enum { GPT2_WTE = 0, GPT2_WPE = 1 };     /* embedding module */
enum { GPT2_LNF_W = 0, GPT2_LNF_B = 1 }; /* final module */

typedef struct gpt2_config {
  int n_layer, n_head, n_embd;
  int n_ctx;   /* rows of wpe (HF n_positions) */
  int seq_len; /* T of training / eval */
  int vocab;
} gpt2_config;

/* Fills cfg from a preset name ("tiny", "gpt2", "gpt2-medium", "gpt2-large",
 * "gpt2-xl"); returns -1 on an unknown name. seq_len defaults to n_ctx
 * (tiny: 64). */
int gpt2_config_preset(const char *name, gpt2_config *cfg);
/* Checks divisibility and ranges; on failure writes why into msg. */
int gpt2_config_validate(const gpt2_config *cfg, char *msg, size_t len);
/* Reads DIR/config.json as GPT2LMHeadModel.save_pretrained writes it:
 * n_layer, n_head, n_embd, n_positions, vocab_size into cfg (seq_len
 * untouched), and checks what the kernels fix (layer_norm_epsilon 1e-5,
 * activation gelu_new / gelu_pytorch_tanh, n_inner 4 n_embd, tied head,
 * model_type gpt2). Returns 1 when read, 0 when DIR has no config.json, -1
 * with why (naming the file and key) in msg. */
int gpt2_config_from_hf(const char *dir, gpt2_config *cfg, char *msg, size_t len);

/* One parameter of the table. */
typedef struct gpt2_param_spec {
  char name[64];
  int ndim;
  int64_t shape[2];
  zrt_init init;
  unsigned flags;
} gpt2_param_spec;

/* Specs of a module: which = -1 embedding (2 params), 0..n_layer-1 a block
 * (GPT2_BLOCK_NPARAMS), n_layer the final LN (2 params). Returns the count. */
int gpt2_module_params(const gpt2_config *cfg, int which, gpt2_param_spec *out);
int64_t gpt2_param_numel(const gpt2_param_spec *p);
/* Total parameter count (wte counted once). */
int64_t gpt2_num_params(const gpt2_config *cfg);
/* Floating-point operations of one training token (forward + backward):
 * 6 per matmul weight (L * 12 C^2 in the blocks, V * C in the tied LM
 * head) plus causal attention, 6 * T * C per layer (QK^T and PV over the
 * T / 2 keys a query sees on average, times 3 for the backward).
 * Element-wise kernels are not counted. */
double gpt2_flops_per_token(const gpt2_config *cfg);

/* Activation layout: offsets (in elements) into one buffer, so one
 * zrt_engine_alloc holds every activation and backward scratch. With
 * activation checkpointing the first nckpt layers share one per-layer slot
 * (their inputs are the engine's checkpoints, zrt_actckpt_*, and their
 * activations are recomputed in the backward); the others keep their own. */
typedef struct gpt2_acts_layout {
  size_t encoded; /* [BT, C] residual stream into block 0 */
  size_t ln1, ln1_mean, ln1_rstd, qkv, att, atty, res2, ln2, ln2_mean, ln2_rstd, fch, fch_gelu,
      res3; /* per layer base; stride below */
  size_t layer_stride;
  int nckpt; /* leading layers sharing slot 0 (0 = every layer its own slot) */
  size_t lnf, lnf_mean, lnf_rstd, logits, losses;
  /* the logits' row stride: the vocabulary rounded up to 64 elements
   * (GPT-2's 50257 to 50304, as llm.c pads it), so that every row starts
   * 16-byte aligned: cuBLAS's tensor-core GEMMs (TMA on sm_90) need
   * 16-byte-aligned rows of their operands; the entries past the
   * vocabulary are never written or read */
  size_t logits_ld;
  size_t dres, dC, d4C; /* backward scratch (dC and d4C also forward temporaries) */
  size_t total;
  int half16; /* ln1, atty, ln2, fch, fch_gelu, lnf sized for 16-bit elements */
} gpt2_acts_layout;
/* flags: GPT2_ACTS_LSE_ONLY: the layer's att slot holds B * n_head * T
 * floats (the fused CUDA attention keeps only each row's logsumexp there)
 * instead of the CPU attention's B * n_head * T * T softmax.
 * GPT2_ACTS_HALF16: the slots a bf16 / fp16 CUDA run keeps in 16 bits
 * (gpt2_act16.h: ln1, atty, ln2, fch, fch_gelu, lnf) take half the floats
 * (rounded up to 64 floats), only for ops that write them in 16 bits. */
#define GPT2_ACTS_LSE_ONLY 1
#define GPT2_ACTS_HALF16 2
void gpt2_acts_layout_init(gpt2_acts_layout *L, const gpt2_config *cfg, int B, int nckpt,
                           int flags);
/* Device scratch bytes the CUDA ops (gpt2_cuda.cu) need for batch B in
 * GEMM dtype dt: the 16-bit copies of fp32 GEMM operands (bf16 / fp16),
 * the attention backward's per-row statistics and the column reductions'
 * partials (gpt2_rows.h; any dtype). Plain
 * arithmetic, here so that builds without CUDA (estimate-memory's check,
 * unit.test_memest_cuda_acts) see the same figure. */
size_t gpt2_cuda_scratch_bytes(const gpt2_config *cfg, int B, zrt_dtype dt);
/* Element offset of layer's input in the layout (where its forward reads it). */
size_t gpt2_acts_block_input(const gpt2_acts_layout *L, int layer);
/* Per-layer slots of the layout: n_layer - nckpt, plus the shared one. */
int gpt2_acts_layer_slots(const gpt2_config *cfg, int nckpt);

/* Instantiations: float (training) and double (gradient check). */
#define GPT2_REAL float
#define GPT2_SFX(n) n##_f32
#include "gpt2_ops_decl.h"
#undef GPT2_REAL
#undef GPT2_SFX
#define GPT2_REAL double
#define GPT2_SFX(n) n##_f64
#include "gpt2_ops_decl.h"
#undef GPT2_REAL
#undef GPT2_SFX

/* The CPU ops tables. */
extern const gpt2_ops_f32 gpt2_cpu_ops_f32; /* gemm: the engine in ctx, else loops */
extern const gpt2_ops_f64 gpt2_cpu_ops_f64;

/* fp16 / bf16 <-> fp32 conversions of the working dtype (round to nearest
 * even), used to stage 16-bit weights and gradients through fp32 buffers. */
float gpt2_half_to_float(uint16_t h);
uint16_t gpt2_float_to_half(float f);
float gpt2_bf16_to_float(uint16_t h);
uint16_t gpt2_float_to_bf16(float f);
/* dst[i] = (float)src[i] for a working-dtype array on the host. */
void gpt2_to_f32(float *dst, const void *src, zrt_dtype dt, int64_t n);
/* dst[i] += src[i] for a working-dtype destination on the host. */
void gpt2_add_from_f32(void *dst, const float *src, zrt_dtype dt, int64_t n);

#ifdef __cplusplus
}
#endif
#endif /* GPT2_MODEL_H */
