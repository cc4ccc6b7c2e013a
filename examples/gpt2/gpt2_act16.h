/*
 * gpt2_act16.h — the activations a 16-bit run keeps in 16 bits, and the
 * audit that checks no op reads them as fp32. In a bf16 or fp16 CUDA run
 * these slots hold elements of the run's dtype (same element index and row
 * stride; the layout gives them half the floats, GPT2_ACTS_HALF16):
 *   - those only GEMMs read — ln1, atty, ln2, fch_gelu of every layer slot
 *     and lnf: their producers (LayerNorm forward, attention forward, GELU
 *     forward) write 16 bits, the GEMMs read them as they are instead of
 *     rounding an fp32 copy into the scratch (the same bits: both round to
 *     nearest even), and the attention backward reads atty's 16 bits for
 *     D = dO . O;
 *   - fch, the fc GEMM's output (without its bias): the GEMM writes its C
 *     in 16 bits (fp32 accumulation, rounded once), and the GELU forward
 *     and backward read it as they are, adding the bias in fp32 (as
 *     autocast's GELU reads a 16-bit input; unlike the slots above this
 *     rounds a value the fp32 path keeps, so the numbers move by the
 *     rounding);
 *   - the logits, the head GEMM's output: written as a 16-bit C, read so
 *     by the cross-entropy (loss and softmax in fp32, as autocast's
 *     cross-entropy of 16-bit logits), which writes its gradient over
 *     them in 16 bits, where the head's two backward GEMMs read it (half
 *     the bytes of fp32 logits, and no 16-bit copy of the gradient in the
 *     scratch; the loss moves by the logits' rounding);
 *   - d4C, the block backward's wide gradient buffer: the fcproj dX GEMM
 *     writes it as a 16-bit C, the GELU backward reads it so and writes
 *     its gradient over it in 16 bits (summing the fc bias's gradient from
 *     the fp32 values), the MLP's dX and dW GEMMs read that; then the
 *     attention backward writes dqkv there in 16 bits, and the qkv GEMMs
 *     and the qkv bias's gradient read it (the gradient d4C carries into
 *     the GELU backward is rounded, as autocast's is; the rest are the
 *     16-bit copies the ops kept in the scratch before, now in place);
 *   - dC, the N x C buffer of the projections' outputs in the forward
 *     (their GEMMs write 16-bit C, the residual adds read it so and add
 *     the bias in fp32, as autocast's residual of a 16-bit linear output)
 *     and of the dX GEMMs' in the backward (16-bit C, read so as dout by
 *     the LayerNorm and attention backwards): the values move by that
 *     rounding, as autocast's do.
 * The registry (gpt2_a16_set) says which slots those are; the CUDA ops ask
 * it (gpt2_a16_is); gpt2_cuda_scratch_bytes counts on the registry (no
 * GEMM operand to round but dres, no held 16-bit copy in the scratch).
 *
 * The rule "a registered slot is written only by its kind's producer and
 * read only by its kind's readers, always through the slot's own start" is
 * what makes the CUDA path right, and the audit checks it on every backend:
 * gpt2_a16_audit_start wraps any ops table and checks each pointer
 * argument's byte extent against the registry; a violation is kept (the
 * first one, with the op, the argument and the slot) and returned by the
 * table's check(). train_gpt2 registers and audits every 16-bit run, on cpu
 * and the twin too, where the ops still compute in fp32: a pass that a
 * later change makes read a 16-bit slot as fp32 fails there, in CI, before
 * it would compute garbage on a GPU. The audit also checks the CUDA ops'
 * held copies (gpt2_cuda.cu): the cross-entropy's, the GELU backward's and
 * the attention backward's result, kept only as the 16-bit copy their next
 * GEMMs (and the qkv bias's gradient) read, must not be read by anything
 * else, and once another op voids the copy the fp32 range is stale until
 * an op writes it.
 */
#ifndef GPT2_ACT16_H
#define GPT2_ACT16_H

#include "gpt2_model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Registers the 16-bit slots of layout L (config cfg, micro-batch B) over
 * the buffer acts: ln1, atty, ln2, fch, fch_gelu of each of the layout's
 * layer slots, lnf, the logits, dC and d4C. A layout with half16 (GPT2_ACTS_HALF16, for ops that
 * write them in 16 bits) holds each in half the bytes; the audit then
 * counts a producer's or reader's fp32-typed extent at 2 bytes per element.
 * Replaces an earlier registration. ZRT_ERR_OOM when the table cannot be
 * allocated (nothing registered then). */
zrt_status gpt2_a16_set(const gpt2_acts_layout *L, const gpt2_config *cfg, int B,
                        const float *acts);
void gpt2_a16_clear(void);
/* 1 when p is the start of a registered slot (where its 16-bit elements are). */
int gpt2_a16_is(const void *p);

/* Wraps *ops (kept by pointer) into *out: one audit per process. */
void gpt2_a16_audit_start(const gpt2_ops_f32 *ops, gpt2_ops_f32 *out);
/* Since the audit's start: slot writes by a 16-bit producer, slot reads by
 * a GEMM or the attention backward, violations. Any may be NULL. */
void gpt2_a16_audit_counts(long *writes, long *reads, long *violations);

#ifdef __cplusplus
}
#endif
#endif
