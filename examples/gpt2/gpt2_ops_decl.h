/*
 * gpt2_ops_decl.h — declarations instantiated once per element type by
 * gpt2_model.h (GPT2_REAL = float / double, GPT2_SFX adds _f32 / _f64): the
 * ops table every kernel is reached through, and the per-module passes.
 * No include guard on purpose: it is included once per instantiation.
 *
 * Ops contract: element counts are in elements; backward kernels ADD into
 * weight gradients and into dinp unless noted ("=" writes). Pointers are in
 * the memory of the backend the table belongs to.
 */

typedef struct GPT2_SFX(gpt2_ops) {
  void *ctx; /* handed to gemm (the engine on the training path) */
  /* C = alpha op(A) op(B) + beta C, row-major. */
  zrt_status (*gemm)(void *ctx, int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha,
                     const GPT2_REAL *a, int64_t lda, const GPT2_REAL *b, int64_t ldb, float beta,
                     GPT2_REAL *c, int64_t ldc);
  void (*zero)(GPT2_REAL *p, size_t n);
  void (*encoder_forward)(GPT2_REAL *out, const int *tok, const GPT2_REAL *wte,
                          const GPT2_REAL *wpe, int B, int T, int C);
  void (*encoder_backward)(GPT2_REAL *dwte, GPT2_REAL *dwpe, const GPT2_REAL *dout, const int *tok,
                           int B, int T, int C);
  void (*layernorm_forward)(GPT2_REAL *out, GPT2_REAL *mean, GPT2_REAL *rstd, const GPT2_REAL *inp,
                            const GPT2_REAL *w, const GPT2_REAL *b, int N, int C);
  void (*layernorm_backward)(GPT2_REAL *dinp, GPT2_REAL *dw, GPT2_REAL *db, const GPT2_REAL *dout,
                             const GPT2_REAL *inp, const GPT2_REAL *w, const GPT2_REAL *mean,
                             const GPT2_REAL *rstd, int N, int C);
  void (*bias_backward)(GPT2_REAL *db, const GPT2_REAL *dout, int N, int OC);
  /* qkv [B,T,3C] + bias [3C] (the qkv GEMM's, added as q, k, v are read;
   * NULL: none) -> out [B,T,C]; att [B,NH,T,T] keeps the softmax (its
   * upper triangle is zero). ctx as for gemm. */
  zrt_status (*attention_forward)(void *ctx, GPT2_REAL *out, GPT2_REAL *att, const GPT2_REAL *qkv,
                                  const GPT2_REAL *bias, int B, int T, int C, int NH);
  /* WRITES dqkv ("=": every element, no zeroing before it). qkv, bias: the
   * forward's. out: the forward's output (the CUDA kernels take D_i =
   * dO_i . out_i from it; the CPU's use att). */
  zrt_status (*attention_backward)(void *ctx, GPT2_REAL *dqkv, const GPT2_REAL *dout,
                                   const GPT2_REAL *qkv, const GPT2_REAL *bias,
                                   const GPT2_REAL *out, const GPT2_REAL *att, int B, int T, int C,
                                   int NH);
  /* The bias of the GEMM that wrote inp / b (qkv for the attention) is
   * added where it is read: the passes keep every linear's output without
   * it, one pass over the rows instead of two. bias NULL: none. */
  /* out = gelu(inp + bias). */
  void (*gelu_forward)(GPT2_REAL *out, const GPT2_REAL *inp, const GPT2_REAL *bias, int N, int OC);
  /* dinp = dout * gelu'(inp + bias) (writes, may alias dout); db non-NULL:
   * then db += dinp's column sums (bias_backward of dinp, fused). */
  void (*gelu_backward)(GPT2_REAL *dinp, GPT2_REAL *db, const GPT2_REAL *inp, const GPT2_REAL *bias,
                        const GPT2_REAL *dout, int N, int OC);
  /* out = a + (b + bias) (may alias a or b). */
  void (*residual_forward)(GPT2_REAL *out, const GPT2_REAL *a, const GPT2_REAL *b,
                           const GPT2_REAL *bias, int N, int C);
  /* losses[i] = -log softmax(logits[i])[targets[i]] over the V entries of
   * row i (rows ld >= V apart; the entries past V never read); when
   * dloss != 0 those V are overwritten by dloss * (softmax - onehot). */
  void (*crossentropy)(GPT2_REAL *losses, GPT2_REAL *logits, const int *targets, int N, int V,
                       int ld, GPT2_REAL dloss);
  /* Reports a failure of the kernels issued so far (CUDA); NULL = none. */
  zrt_status (*check)(void);
} GPT2_SFX(gpt2_ops);

/* Per-module passes. w / g: the module's weight / gradient pointers in
 * parameter-table order. acts: the buffer laid out by L for batch B. A
 * block's `in` is its input (the residual stream, [B*T, C]): NULL = where
 * the layout keeps it (the embedding's output or the previous layer's res3);
 * a checkpointed block's backward and its recompute pass the checkpoint. */
zrt_status GPT2_SFX(gpt2_embed_forward)(const GPT2_SFX(gpt2_ops) * ops, const gpt2_config *cfg,
                                        const gpt2_acts_layout *L, GPT2_REAL *acts,
                                        const int *tokens, int B, GPT2_REAL *const *w);
zrt_status GPT2_SFX(gpt2_block_forward)(const GPT2_SFX(gpt2_ops) * ops, const gpt2_config *cfg,
                                        const gpt2_acts_layout *L, GPT2_REAL *acts, int B,
                                        int layer, const GPT2_REAL *in, GPT2_REAL *const *w);
/* Final LN, LM head (tied wte), cross-entropy into acts[L->losses]. When g
 * is non-NULL also the backward: the loss gradient is dloss per position
 * (loss scale / (B*T) for a mean loss), adding into g (ln_f) and dwte, and
 * writing the residual-stream gradient into acts[L->dres]. */
zrt_status GPT2_SFX(gpt2_head)(const GPT2_SFX(gpt2_ops) * ops, const gpt2_config *cfg,
                               const gpt2_acts_layout *L, GPT2_REAL *acts, int B,
                               const int *targets, GPT2_REAL *const *w, const GPT2_REAL *wte,
                               GPT2_REAL dloss, GPT2_REAL *const *g, GPT2_REAL *dwte);
zrt_status GPT2_SFX(gpt2_block_backward)(const GPT2_SFX(gpt2_ops) * ops, const gpt2_config *cfg,
                                         const gpt2_acts_layout *L, GPT2_REAL *acts, int B,
                                         int layer, const GPT2_REAL *in, GPT2_REAL *const *w,
                                         GPT2_REAL *const *g);
zrt_status GPT2_SFX(gpt2_embed_backward)(const GPT2_SFX(gpt2_ops) * ops, const gpt2_config *cfg,
                                         const gpt2_acts_layout *L, GPT2_REAL *acts,
                                         const int *tokens, int B, GPT2_REAL *const *g);
