#!/usr/bin/env python3
"""gpt2_cuda_budget.py — the physical floor of one training step of the GPT
example on CUDA, kernel by kernel, from the sequence of ops the passes issue
(examples/gpt2/gpt2_ops_impl.h, gpt2_cuda.cu), before any GPU measured it:

  - a GEMM costs its 2mnk FLOPs on tensor cores (bf16 in, fp32 accumulate)
    plus its bytes: each fp32 activation operand rounded into the scratch
    (read 4 B, write 2 B per element: cu_gemm's to16), its 16-bit operands
    read once, C written in fp32 or, into a 16-bit slot, bf16 (and read
    too when beta is 1);
  - every other kernel costs the bytes it must move at least once (fp32
    activations: 4 B per element read or written);
  - the fused attention costs its multiply-adds per head element of each
    visible (query, key) pair plus reading qkv and writing its outputs: in a
    bf16 or fp16 run (gpt2_flash_tc.h) on tensor cores, forward 2 (q.k, p v),
    backward 7 (dq kernel: q.k, dO.v, dS k; dkv kernel: q.k, dO.v, P^T dO,
    dS^T q; D = dO . out read from the forward's output), each linear's
    output gradient rounded once for dX and read again by dW, and the
    cross-entropy's gradient written once in 16 bits (over the bf16 logits,
    or as a held copy) that the head's two GEMMs read (no fp32 gradient,
    no rounding pass); in an fp32
    run (gpt2_flash_attn.h) on the CUDA cores in fp32, forward 2, backward 9
    (dq's two passes 5, dk/dv's 4).

Each class is timed at its peak (tensor bf16 dense, fp32 CUDA-core FMA, HBM
bandwidth; H100 SXM datasheet figures by default) and the classes are summed
(no overlap between kernels of one stream): the step cannot run faster, so
zrt's MFU (gpt2_flops_per_token over the bf16 GEMM peak, train_gpt2's
convention) cannot exceed flops / (peak * floor). The floor counts bytes,
not occupancy: the column sums' grids (gpt2_rows.h rw_col_plan,
rw_ln_plan) are sized to fill the GPU so that bandwidth is the bound.
Nine shapes: zrt_cuda_now
(a bf16 run today: tensor-core attention, the bf16 gradient copy, rounded
operands reused, the activations only GEMMs read, ln1 / atty / ln2 /
fch_gelu / lnf, in bf16: gpt2_act16.h, the others fp32; no bias-add pass:
each linear's bias is added by its reader, the attention as it loads q, k,
v, GELU, the residual adds; the fc bias's gradient summed by the GELU
backward's pass, which writes its gradient only in 16 bits (over d4C, in
place) for the MLP's two backward GEMMs; the attention backward writes
dqkv without a zeroing pass, in a 16-bit run only in bf16 (in d4C) for
the qkv GEMMs and the qkv bias's gradient; fch, the fc GEMM's output, in bf16 too,
written by the GEMM and read so by the GELU forward and backward; the
LayerNorm backward summing its weight's and bias's gradients in its own
walk; the logits in bf16, written by the head GEMM, read so by the
cross-entropy, which writes its bf16 gradient over them; d4C in bf16,
written by the fcproj dX GEMM, read so by the GELU backward; dC in bf16,
the projections' outputs read by the residual adds and the dX GEMMs'
read by the LayerNorm and attention backwards), fp32_dc (the same with an
fp32 dC), fp32_d4c (and an fp32 d4C), fp32_logits (and fp32 logits with
the gradient as a held bf16 copy),
separate_ln_colsums (session 15's kernels: the same with the
LayerNorms' column sums in a second pass over dout and inp),
separate_bias_adds (session 14's kernels: the same with the bias-add
passes, the bias gradient pass, the zeroing and the GELU gradient in fp32), fp32_activations (session 13's kernels: every
activation fp32), fp32_core_attention (the kernels before session 13:
CUDA-core attention, the gradient in place, every operand rounded per GEMM),
and the shape PyTorch's eager bf16 run takes (autocast: 16-bit activations
between the kernels, the bias in the GEMM's epilogue (addmm), flash
attention on tensor cores with its 5 backward products, writing its
gradients), as the peer's bound.
Prints one JSON object; --table adds a readable table on stderr.

Usage: perf/gpt2_cuda_budget.py [--batch 8] [--seq 1024] [--tensor_tflops 989]
       [--fp32_tflops 67] [--hbm_tbs 3.35] [--table]
"""
import argparse
import json
import sys


def step_budget(B, T, C, L, NH, V, act_bytes, attn_tensor, bwd_products=7, ce_copy16=False,
                reuse=False, act16=False, bias_fwd_fused=False, bias_grad_fused=False,
                attn_writes=False, gelu_copy16=False, fch16=False, dqkv16=False, ln_fused=False,
                logits16=False, d4c16=False, dc16=False, dw16=False):
    """Per-class totals of one step (forward + backward, embedding to head).
    dw16: the blocks' dW GEMMs add into the engine's bf16 gradients (C read
    and written in bf16) instead of an fp32 staging.
    act16: the activations only GEMMs read (ln1, atty, ln2, fch_gelu, lnf)
    are written in bf16 by their producers and read as they are (the GEMMs'
    operands and the attention backward's out), gpt2_act16.h. fch16: fch
    too, written in bf16 by the fc GEMM and read so by the GELU forward and
    backward. dqkv16: the attention backward writes dqkv only as the bf16
    copy the qkv GEMMs and the qkv bias's gradient read.
    bias_fwd_fused: no pass adds a linear's bias; its reader adds it (the
    attention as it loads q, k, v; GELU; the residual adds) or, for the
    peer, the GEMM's epilogue. bias_grad_fused: the fc bias's gradient is
    summed by the GELU backward's pass (gpt2_rows.h). attn_writes: the
    attention backward writes dqkv, no zeroing pass before it. gelu_copy16:
    the GELU backward writes its gradient only as the 16-bit copy the MLP's
    dX and dW GEMMs read (no fp32 write, no rounding pass). ln_fused: the
    LayerNorm backward sums its weight's and bias's gradients in the same
    walk (gpt2_rows.h): dout and inp read once, plus the partials [S, 2C]
    written and read by the fold (rw_ln_plan's S). logits16: the head GEMM
    writes the logits in bf16 and the cross-entropy reads them so, writing
    its bf16 gradient over them (gpt2_act16.h's logits slot). d4c16: the
    fcproj dX GEMM writes d4C in bf16 and the GELU backward reads it so
    (gpt2_act16.h's d4C slot). dc16: dC too, the N x C outputs of the
    projections (read by the residual adds) and of the backward's dX GEMMs
    (read by the LayerNorm and attention backwards as dout)."""
    N = B * T
    hs = C // NH
    k = {"gemm_flops": 0.0, "gemm_bytes": 0.0, "elem_bytes": 0.0, "attn_fma": 0.0,
         "attn_tensor_flops": 0.0, "attn_bytes": 0.0, "param_bytes": 0.0}
    a = act_bytes  # bytes per activation element between kernels

    def gemm(m, n, kk, a_act, b_act, beta=0, c16=False):
        """m x k times k x n; a_act / b_act: the operand is an fp32 activation
        (2: one the previous GEMM rounded, read from its copy when reused);
        c16: C written in bf16 (a 16-bit slot)."""
        k["gemm_flops"] += 2.0 * m * n * kk
        for act, cnt in ((a_act, m * kk), (b_act, kk * n)):
            if act and a == 4 and not (act == 2 and reuse):
                k["gemm_bytes"] += cnt * (4 + 2)  # to16: read fp32, write bf16
            k["gemm_bytes"] += cnt * 2  # the GEMM reads the 16-bit operand
        k["gemm_bytes"] += m * n * (2 if c16 else a) * (2 if beta else 1)

    def elem(n_read, n_write):
        k["elem_bytes"] += (n_read + n_write) * a

    g16 = 0 if act16 else 1  # a GEMM operand that is one of act16's slots

    def produce(n_read, n_write):
        """a producer of one of act16's slots: its output in bf16 when act16"""
        k["elem_bytes"] += n_read * a + n_write * (2 if act16 else a)

    ln_r = -(-N // 256)  # rw_ln_plan: chunks of 32-row multiples, about 256 blocks
    ln_S = -(-N // (32 if ln_r < 32 else -(-ln_r // 32) * 32))

    def ln_backward(reads_dinp):
        """dinp (read dout, inp, and dinp when it adds; write dinp), then the
        weight's and bias's column sums: fused, the partials only"""
        elem((2 if reads_dinp else 1) * N * C, N * C)
        k["elem_bytes"] += N * C * (2 if dc16 else a)  # dout
        if ln_fused:
            k["elem_bytes"] += (2 * ln_S * 2 * C * 4) if ln_S > 1 else 0
        else:
            elem(2 * N * C, 0)  # its column sums (dout, inp again)

    pairs = B * NH * T * (T + 1) / 2  # visible (query, key) pairs of the causal mask

    def attention(fwd, d16=False):
        if attn_tensor:
            k["attn_tensor_flops"] += 2.0 * (2 if fwd else bwd_products) * pairs * hs
        else:
            k["attn_fma"] += (2 if fwd else 9) * pairs * hs
        # qkv read; forward writes out, backward reads dout (and the tensor
        # cores' kernels the forward's out, for D) and adds into dqkv (reads
        # and writes it), or with attn_writes writes it; out in bf16 with act16
        o = 2 if act16 else a
        extra = N * C * o if attn_tensor and not fwd else 0
        dqkv = 3 * N * C * 2 if d16 else (1 if attn_writes else 2) * 3 * N * C * a
        do = N * C * (2 if dc16 else a)  # dout
        k["attn_bytes"] += 3 * N * C * a + N * C * o if fwd else 3 * N * C * a + do + dqkv + extra

    def residual():
        """out = a + b: b a projection's output (in bf16 with dc16)"""
        k["elem_bytes"] += N * C * a + N * C * (2 if dc16 else a) + N * C * a

    # forward
    elem(N, N * C)  # encoder: tokens, wte/wpe rows (read N C each, counted once), out
    for _ in range(L):
        produce(N * C, N * C)  # ln1
        gemm(N, 3 * C, C, g16, 0)  # qkv
        if not bias_fwd_fused:
            elem(3 * N * C, 3 * N * C)  # bias
        attention(True)
        gemm(N, C, C, g16, 0, c16=dc16)  # attn proj
        if not bias_fwd_fused:
            elem(N * C, N * C)  # bias
        residual()
        produce(N * C, N * C)  # ln2
        gemm(N, 4 * C, C, g16, 0, c16=fch16)  # fc (fch in bf16 with fch16)
        if not bias_fwd_fused:
            elem(4 * N * C, 4 * N * C)  # bias
        if fch16:  # gelu: reads the bf16 fch, writes the bf16 fch_gelu
            k["elem_bytes"] += 4 * N * C * 2 + 4 * N * C * 2
        else:
            produce(4 * N * C, 4 * N * C)  # gelu
        gemm(N, C, 4 * C, g16, 0, c16=dc16)  # fc proj
        if not bias_fwd_fused:
            elem(N * C, N * C)  # bias
        residual()
    produce(N * C, N * C)  # lnf
    gemm(N, V, C, g16, 0, c16=logits16)  # logits (wte is the 16-bit weight)
    if ce_copy16:  # a bf16 run: the gradient written as the bf16 copy the head's GEMMs read
        # cross-entropy: its passes read the row from L2 after the first
        k["elem_bytes"] += N * V * (2 if logits16 else a) + N * V * 2
    else:
        elem(N * V, N * V)  # cross-entropy, the gradient in place
    # backward: head
    gemm(N, C, V, 0 if ce_copy16 else 1, 0, c16=dc16)  # dlnf = dlogits wte
    gemm(V, C, N, 0 if ce_copy16 else 1, g16, beta=1)  # dwte += dlogits^T lnf
    ln_backward(False)  # lnf backward
    for _ in range(L):
        gemm(N, 4 * C, C, 1, 0, c16=d4c16)  # d4C = dres W_fcproj^T
        gemm(4 * C, C, N, g16, 2, beta=1, c16=dw16)  # dW_fcproj (dout: the dX GEMM's copy)
        elem(N * C, 0)  # bias backward
        if gelu_copy16:  # gelu backward: its gradient as the copy both GEMMs read
            k["elem_bytes"] += (4 * N * C * (2 if d4c16 else a) + 4 * N * C * (2 if fch16 else a)
                                + 4 * N * C * 2)
            gemm(N, C, 4 * C, 0, 0, c16=dc16)  # dC
            gemm(C, 4 * C, N, g16, 0, beta=1, c16=dw16)  # dW_fc
        else:
            elem(2 * 4 * N * C, 4 * N * C)  # gelu backward
            gemm(N, C, 4 * C, 1, 0)  # dC
            gemm(C, 4 * C, N, g16, 2, beta=1, c16=dw16)  # dW_fc (dout: the dX GEMM's copy)
        if not bias_grad_fused:
            elem(4 * N * C, 0)  # bias backward
        ln_backward(True)  # ln2 backward: dinp (read dout, inp, dinp; write dinp)
        gemm(N, C, C, 1, 0, c16=dc16)  # dC
        gemm(C, C, N, g16, 2, beta=1, c16=dw16)  # dW_attnproj (dout: the dX GEMM's copy)
        elem(N * C, 0)  # bias backward
        if not attn_writes:
            elem(0, 3 * N * C)  # zero d4C (the dqkv the attention adds into)
        attention(False, dqkv16)
        if dqkv16:  # the held bf16 dqkv: no rounding pass; the bias gradient reads it too
            gemm(N, C, 3 * C, 0, 0, c16=dc16)  # dC
            gemm(C, 3 * C, N, g16, 0, beta=1, c16=dw16)  # dW_attn
            k["elem_bytes"] += 3 * N * C * 2  # bias backward
        else:
            gemm(N, C, 3 * C, 1, 0)  # dC
            gemm(C, 3 * C, N, g16, 2, beta=1, c16=dw16)  # dW_attn (dout: the dX GEMM's copy)
            elem(3 * N * C, 0)  # bias backward
        ln_backward(True)  # ln1 backward
    elem(N * C, 2 * N * C)  # encoder backward (atomics into dwte, dwpe)
    return k


def param_passes(T, C, L, V, mode, accum=1):
    """Bytes of the step's parameter-sized passes outside the model's
    kernels, one GPU, stage 0, bf16 (the benchmark's run), accum
    micro-steps a step (the program's passes run in each, the engine's
    once). mode "zrt": train_gpt2 and the engine as they are -- each
    module's fp32 gradient staging zeroed (4 B an element; the tied wte's
    staging is dwte, zeroed by the head: 4 B), the gradients added into the
    engine's bf16 ones (flush: read 4 + 2, write 2) but the weight
    matrices' (their dW GEMMs add into the engine's bf16 gradients: the
    GEMM bytes, dw16), the blocks' non-GEMM weights converted to fp32 twice
    (forward and backward; read 2, write 4: the GEMMs and the encoder read
    the 16-bit tensors), the engine's statistics pass and fused AdamW
    reading the window's bf16 gradient sums as they are (one rank, stage
    0, zrt_engine_grad_direct: 2 B each; AdamW also reads master and both
    moments, 12, and writes them and the bf16 weight, 14) and grad16's
    zeroing (2). mode "zrt_s16": the same before session 17 (the buckets'
    copy and an addition onto the zeroed fp32 accumulator, grad16's and the
    accumulator's zeroing, 4-byte reads: 54 B an element instead of 32;
    wte's gradient in its own
    zeroed staging with dwte added into it: 16 B an element of wte more;
    the embedding's weights converted to fp32 for the encoder: 6 B an
    element of wte and wpe; the weight matrices' gradients staged and
    flushed: 12 B an element).
    mode "torch": PyTorch eager under autocast with torch.optim.AdamW's
    default foreach path and zero_grad(set_to_none) -- the GEMMs' weights
    cast to bf16 each forward (read 4, write 2), their bf16 gradients
    converted into fp32 .grad (read 2, write 4), the tied wte's two
    gradients summed (read 8, write 4), and the foreach kernels (mul_ of
    the weights 8, lerp_ of exp_avg 12, mul_ and addcmul_ of exp_avg_sq 8 +
    12, sqrt, div_ and add_ of its root 3 x 8, addcdiv_ of the weights 16:
    80 B an element; the biases' casts left out)."""
    gemm_w = L * 12.0 * C * C
    nongemm = L * 13.0 * C
    wte, wpe, lnf = float(V) * C, float(T) * C, 2.0 * C
    P = gemm_w + nongemm + wte + wpe + lnf
    if mode == "torch":
        return 6.0 * (gemm_w + wte) * 2 + 12.0 * wte + 80.0 * P
    # the stagings zeroed (the weight matrices' dW GEMMs add into the
    # engine's gradients, wte's is dwte, zeroed by the head) and flushed
    staged_zero = 4.0 * (P - gemm_w - wte) + 4.0 * wte
    flush = 8.0 * (P - gemm_w)
    to_f32 = 6.0 * 2 * nongemm + 6.0 * lnf
    # the statistics and AdamW read the window's bf16 sums as they are (one
    # rank, stage 0: zrt_engine_grad_direct), then grad16 is zeroed
    engine = 2.0 * P + 28.0 * P + 2.0 * P
    if mode == "zrt_s16":  # the buckets' copy and accumulate, fp32 reads, two zeroings
        engine = (4.0 + 10.0 + 2.0) * P + 4.0 * P + 30.0 * P + 4.0 * P
        staged_zero += 4.0 * gemm_w + 4.0 * wte + 12.0 * wte  # every staging, wte's + dwte
        flush += 8.0 * gemm_w
        to_f32 += 6.0 * (wte + wpe)
    return accum * (staged_zero + flush + to_f32) + engine


def seconds(k, tensor, fp32, hbm):
    return {
        "gemm_tensor_s": k["gemm_flops"] / tensor,
        "gemm_bytes_s": k["gemm_bytes"] / hbm,
        "elementwise_s": k["elem_bytes"] / hbm,
        "attention_compute_s": 2.0 * k["attn_fma"] / fp32 + k["attn_tensor_flops"] / tensor,
        "attention_bytes_s": k["attn_bytes"] / hbm,
        "param_passes_s": k["param_bytes"] / hbm,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--embd", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--tensor_tflops", type=float, default=989.0, help="bf16 dense peak")
    ap.add_argument("--fp32_tflops", type=float, default=67.0, help="fp32 CUDA-core peak")
    ap.add_argument("--hbm_tbs", type=float, default=3.35, help="HBM bandwidth, TB/s")
    ap.add_argument("--table", action="store_true")
    a = ap.parse_args()
    B, T, C, L, NH, V = a.batch, a.seq, a.embd, a.layers, a.heads, a.vocab
    tensor, fp32, hbm = a.tensor_tflops * 1e12, a.fp32_tflops * 1e12, a.hbm_tbs * 1e12
    # train_gpt2's FLOPs per token (gpt2_model.c gpt2_flops_per_token), the MFU numerator
    fpt = 6.0 * (L * 12.0 * C * C + V * C) + 6.0 * L * T * C
    step_flops = fpt * B * T
    out = {"shape": {"batch": B, "seq": T, "layers": L, "embd": C, "heads": NH, "vocab": V},
           "peaks": {"tensor_bf16_flops": tensor, "fp32_flops": fp32, "hbm_bytes_per_s": hbm},
           "flops_per_step": step_flops}
    # name, activation bytes, tensor-core attention, its backward products, the
    # 16-bit gradient copy, operand reuse, act16, bias adds fused, fc bias
    # gradient fused, attention backward writes dqkv, GELU backward's 16-bit copy, fch in bf16,
    # the attention backward's 16-bit dqkv copy, the LayerNorm backward's column sums fused,
    # the logits in bf16
    T_, F_ = True, False
    shapes = (("zrt_cuda_now", 4, T_, 7, T_, T_, T_, T_, T_, T_, T_, T_, T_, T_, T_, T_, T_),
              ("fp32_dc", 4, T_, 7, T_, T_, T_, T_, T_, T_, T_, T_, T_, T_, T_, T_, F_),
              ("fp32_d4c", 4, T_, 7, T_, T_, T_, T_, T_, T_, T_, T_, T_, T_, T_, F_, F_),
              ("fp32_logits", 4, T_, 7, T_, T_, T_, T_, T_, T_, T_, T_, T_, T_, F_, F_, F_),
              ("separate_ln_colsums", 4, T_, 7, T_, T_, T_, T_, T_, T_, T_, T_, T_, F_, F_, F_, F_),
              ("separate_bias_adds", 4, T_, 7, T_, T_, T_, F_, F_, F_, F_, F_, F_, F_, F_, F_, F_),
              ("fp32_activations", 4, T_, 7, T_, T_, F_, F_, F_, F_, F_, F_, F_, F_, F_, F_, F_),
              ("fp32_core_attention", 4, F_, 9, F_, F_, F_, F_, F_, F_, F_, F_, F_, F_, F_, F_, F_),
              ("bf16_activations_tensor_attention", 2, T_, 5, T_, F_, F_, T_, F_, T_, F_, F_, F_, F_,
               F_, F_, F_))
    for (name, act, tens, bwd, ce16, reuse, a16, bfw, bgr, aw, gc16, f16, d16, lnf, l16, d4,
         dc) in shapes:
        peer = name.startswith("bf16_act")
        # every zrt shape: train_gpt2's dW GEMMs add into the engine's bf16 gradients
        k = step_budget(B, T, C, L, NH, V, act, tens, bwd, ce16, reuse, a16, bfw, bgr, aw, gc16,
                        f16, d16, lnf, l16, d4, dc, dw16=not peer)
        # the op list's GEMMs are the formula's non-attention FLOPs, exactly
        gemm_want = 6.0 * (L * 12.0 * C * C + V * C) * B * T
        if abs(k["gemm_flops"] - gemm_want) > 1e-9 * gemm_want:
            sys.exit("gpt2_cuda_budget: the GEMMs listed give %.6g FLOPs, gpt2_flops_per_token's "
                     "GEMM part %.6g: the op list is out of step with the model" % (k["gemm_flops"], gemm_want))
        k["param_bytes"] = param_passes(T, C, L, V, "torch" if peer else "zrt")
        s = seconds(k, tensor, fp32, hbm)
        floor = sum(s.values())
        model = floor - s["param_passes_s"]
        if name == "zrt_cuda_now":
            now_model = model  # unrounded, for the accumulation figures
        out[name] = {**{kk: round(v, 6) for kk, v in s.items()}, "floor_s": round(floor, 6),
                     "max_tokens_per_s": round(B * T / floor), "max_mfu": round(step_flops / (tensor * floor), 4),
                     "model_floor_s": round(model, 6),
                     "model_max_mfu": round(step_flops / (tensor * model), 4),
                     "bytes": {kk: k[kk] for kk in ("gemm_bytes", "elem_bytes", "attn_bytes", "param_bytes")},
                     "attention_fma": k["attn_fma"]}
    out["param_passes_bytes"] = {m: param_passes(T, C, L, V, m) for m in ("zrt", "zrt_s16", "torch")}
    # zrt now with gradient accumulation: K micro-steps of the model's
    # kernels and of the program's staging passes, the engine's once
    out["zrt_cuda_now_by_accum"] = {}
    for K in (1, 2, 4, 8):
        f = K * now_model + param_passes(T, C, L, V, "zrt", K) / hbm
        out["zrt_cuda_now_by_accum"][str(K)] = {
            "floor_s": round(f, 6), "max_mfu": round(K * step_flops / (tensor * f), 4)}
    print(json.dumps(out, indent=1))
    if a.table:
        rows = ["gemm_tensor_s", "gemm_bytes_s", "elementwise_s", "attention_compute_s", "attention_bytes_s",
                "param_passes_s", "floor_s", "max_mfu", "model_floor_s", "model_max_mfu"]
        hdr = ("zrt now", "fp32 dC", "fp32 d4C", "fp32 logits", "separate LN", "separate bias", "fp32 acts",
               "fp32-core attn", "bf16 act+flash")
        print("%-22s" % "ms per step (floor)" + "".join(" %14s" % h for h in hdr), file=sys.stderr)
        for r in rows:
            f = (lambda v: "%.3f" % v) if r.endswith("max_mfu") else (lambda v: "%.2f" % (1e3 * v))
            print("%-22s" % r + "".join(" %14s" % f(out[n][r]) for n, *_ in shapes), file=sys.stderr)


if __name__ == "__main__":
    main()
