/*
 * model_layouts.h — the models `zrt estimate-memory` (and the perf harness,
 * and the memory-model tests) know, described for the memory model
 * (engine/memest.h): the GPT example's presets with the modules
 * examples/gpt2 registers, its fetch order and its activation bytes, a
 * Hugging Face GPT-2 config.json read as that layout, and the Llama-family
 * decoders (llama, mistral, qwen2) counted per module from their
 * config.json. The library knows no model: these layouts live beside the
 * estimate command, and each mirrors its program (train_gpt2) so that the
 * estimate equals the measured pools (cli.test_memest_exact).
 */
#ifndef ZRT_MODEL_LAYOUTS_H
#define ZRT_MODEL_LAYOUTS_H

#include <stdint.h>

#include "memest.h"

/* GPT presets of examples/gpt2 (gpt2_config_preset): "tiny", "gpt2",
 * "gpt2-medium", "gpt2-large", "gpt2-xl"; byte-level vocab of 256. */
typedef struct zrt_model_gpt {
  const char *name;
  int64_t layers, d_model, heads, vocab, max_seq, default_seq;
} zrt_model_gpt;
const zrt_model_gpt *zrt_model_gpt_find(const char *name);

/* A program for the memory model with the arrays it owns. */
typedef struct zrt_model_program {
  zrt_memest_program p;
  int64_t *numel;
  zrt_sim_event *events;
} zrt_model_program;
void zrt_model_program_free(zrt_model_program *m);
/* Parameters of the program (the sum of its modules' elements). */
int64_t zrt_model_params(const zrt_memest_program *p);

/* train_gpt2 training g with grad_accum micro-batches per step: its modules
 * (embeddings wte + wpe, one per block, the final norm) and its fetch order
 * (embedding, blocks, then the head holding the final norm and the tied
 * embedding at once, then the blocks in reverse; the embedding's backward
 * fetches nothing; each module's 16-bit gradients from its backward to
 * grads_ready). 0, or -1 when host memory runs out (*out then empty). */
int zrt_model_gpt_program(const zrt_model_gpt *g, int grad_accum, zrt_model_program *out);

/* Bytes train_gpt2 allocates with zrt_engine_alloc (ZRT_MEM_ACTIVATIONS)
 * for micro batch `batch` and sequence `seq`: gpt2_acts_layout_init's fp32
 * arena, the fp32 wte gradient, the token/target ints, the window's losses
 * (grad_accum rows of batch * seq floats when grad_accum > 1), and for
 * a 16-bit working dtype the fp32 staging of the largest module twice plus
 * wte. cuda: the CUDA backend's figure, where the example lays the arena
 * out with GPT2_ACTS_LSE_ONLY (batch * heads * seq floats per layer for the
 * attention instead of batch * heads * seq^2) and, in a 16-bit run,
 * GPT2_ACTS_HALF16 (ln1, atty, ln2, fch, fch_gelu and lnf at half size, every
 * buffer on 256 bytes), adds its GEMM scratch (gpt2_cuda_scratch_bytes)
 * and drops the wte staging (its GEMMs read the 16-bit wte).
 * nckpt: blocks checkpointed (train_gpt2 --activation_checkpointing), which
 * share one per-layer slot; their inputs are the engine's (actckpt_* of the
 * layout: nckpt blocks of 4 * batch * seq * d_model bytes). */
uint64_t zrt_model_gpt_activations(const zrt_model_gpt *g, int64_t batch, int64_t seq,
                                   int dtype_bytes, int64_t nckpt, int64_t grad_accum, int cuda);

/* Bytes train_gpt2 allocates with zrt_engine_host_alloc (ZRT_MEM_ACTIVATIONS,
 * in the host pool): the token/target ints of every micro-batch of the
 * window (the uploads' sources), rounded up to whole pages of this host. */
uint64_t zrt_model_gpt_host_bytes(int64_t batch, int64_t seq, int64_t grad_accum);

/* DeepSpeed's largest_layer_params for g: the largest of HF GPT-2's leaves
 * (wte V C, wpe T C, c_attn 3C^2 + 3C, c_fc 4C^2 + 4C). */
int64_t zrt_model_gpt_largest_leaf(const zrt_model_gpt *g);

/* A Llama-family decoder (model_type llama, mistral, qwen2) counted per
 * module from its config.json, as transformers builds it: embed_tokens
 * V x H; per decoder layer q_proj H x (heads hd), k_proj and v_proj
 * H x (kv hd), o_proj (heads hd) x H (biases: Llama's attention_bias on all
 * four, Qwen2's fixed bias on q, k, v), gate/up/down H x I each (mlp_bias:
 * I, I, H), two RMSNorm weights H; the final norm H; lm_head V x H unless
 * tie_word_embeddings. */
typedef struct zrt_model_decoder {
  int64_t embed, layer, layers, norm, head, total;
} zrt_model_decoder;

/* A Hugging Face config.json: GPT-2 (n_layer, n_embd, n_head, vocab_size,
 * n_positions, or their GPT2Config aliases) as the GPT layout of the
 * presets into *g (name "hf_config"), or (dec->total set) a Llama-family
 * decoder's per-module counts. Returns 0, or 2 after a message on stderr
 * naming the file and what is wrong. */
int zrt_model_hf_load(const char *path, zrt_model_gpt *g, zrt_model_decoder *dec);

#endif
