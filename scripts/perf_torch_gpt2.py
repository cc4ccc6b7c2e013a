#!/usr/bin/env python3
"""perf_torch_gpt2.py — the PyTorch CPU baseline of `zrt-perf step`: times
full training steps (forward, backward, AdamW) of the same byte-level GPT-2
as examples/gpt2 (pre-LN blocks, GELU-tanh MLP, tied LM head, vocab 256)
at the same global batch, in float32 on the CPU, and prints one line
{"tokens_per_s": x, ...}. Dimension flags of 0 take the --model preset.
The first step is warm-up and is not timed. Batches are random bytes: the
cost of a step does not depend on the data.

A fair peer: torch's own thread setting (torch.get_num_threads() as it
starts, the machine's cores) and --threads are both measured, in alternated
rounds, and the faster is reported ("tokens_per_s"; both in "by_threads").
Runs on torch >= 1.13 (Debian 12's python3-torch): before 2.0 there is no
F.scaled_dot_product_attention, so the same causal attention is written
out (softmax(q k^T / sqrt(d)) with the future masked).

On a GPU (the peer of the CUDA path): --device cuda --dtype bf16 runs the
steps under torch.autocast(bfloat16) (fp32 master weights, as zrt's bf16
runs), --vocab 50257 gives GPT-2's vocabulary, --compile times
torch.compile(model) instead of eager; the line then also carries the bf16
matmul peak torch measures on the card ("gemm_peak_flops", 4096^3) and
"mfu" = 6 * params * tokens/s over it, the llm.c convention.
"""
import argparse
import json
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

PRESETS = {  # layers, heads, embd, ctx — docs/gpt2.md
    "tiny": (2, 2, 64, 64),
    "gpt2": (12, 12, 768, 1024),
    "gpt2-medium": (24, 16, 1024, 1024),
    "gpt2-large": (36, 20, 1280, 1024),
    "gpt2-xl": (48, 25, 1600, 1024),
}


def attention(q, k, v):
    """Causal self-attention of (B, H, T, D) tensors."""
    if hasattr(F, "scaled_dot_product_attention"):  # torch >= 2.0: the fused kernel
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    T = q.size(-2)
    att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
    mask = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
    att = att.masked_fill(~mask, float("-inf"))
    return F.softmax(att, dim=-1) @ v


class Block(nn.Module):
    def __init__(self, C, H):
        super().__init__()
        self.H = H
        self.ln_1 = nn.LayerNorm(C)
        self.c_attn = nn.Linear(C, 3 * C)
        self.c_proj = nn.Linear(C, C)
        self.ln_2 = nn.LayerNorm(C)
        self.c_fc = nn.Linear(C, 4 * C)
        self.mlp_proj = nn.Linear(4 * C, C)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.H, C // self.H).transpose(1, 2) for t in (q, k, v))
        y = attention(q, k, v)
        x = x + self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, L, H, C, ctx, V=256):
        super().__init__()
        self.wte = nn.Embedding(V, C)
        self.wpe = nn.Embedding(ctx, C)
        self.h = nn.ModuleList(Block(C, H) for _ in range(L))
        self.ln_f = nn.LayerNorm(C)
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.normal_(p, std=0.02)

    def forward(self, idx, tgt):
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for b in self.h:
            x = b(x)
        logits = self.ln_f(x) @ self.wte.weight.t()
        return F.cross_entropy(logits.view(-1, logits.size(-1)), tgt.view(-1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--n_layer", type=int, default=0)
    ap.add_argument("--n_head", type=int, default=0)
    ap.add_argument("--n_embd", type=int, default=0)
    ap.add_argument("--seq_len", type=int, default=0)
    ap.add_argument("--batch_size", type=int, default=8, help="global batch")
    ap.add_argument("--steps", type=int, default=4, help="steps including one warm-up")
    ap.add_argument("--threads", type=int, default=0,
                    help="threads to measure beside torch's own setting (0: only torch's)")
    ap.add_argument("--rounds", type=int, default=2, help="alternated rounds per thread setting")
    ap.add_argument("--device", default="cpu", help="cpu or cuda")
    ap.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"],
                    help="bf16: autocast to bfloat16 (fp32 master weights)")
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--compile", action="store_true", help="time torch.compile(model)")
    a = ap.parse_args()
    dev = torch.device(a.device)
    cuda = dev.type == "cuda"

    def sync():
        if cuda:
            torch.cuda.synchronize()
    L, H, C, ctx = PRESETS[a.model]
    L, H, C = a.n_layer or L, a.n_head or H, a.n_embd or C
    T = a.seq_len or ctx
    ctx = max(ctx, T)
    own = torch.get_num_threads()  # torch's default: the cores it sees
    modes = [own] if a.threads <= 0 or a.threads == own else [own, a.threads]
    torch.manual_seed(0)
    model = GPT(L, H, C, ctx, a.vocab).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    run = torch.compile(model) if a.compile else model
    amp = torch.autocast(device_type=dev.type, dtype=torch.bfloat16, enabled=a.dtype == "bf16")
    times = {m: [] for m in modes}
    steps = max(a.steps, 2)
    loss = None
    # alternated rounds: every mode sees the same background load
    for rnd in range(a.rounds):
        for m in modes:
            torch.set_num_threads(m)
            for s in range(steps):
                idx = torch.randint(0, a.vocab, (a.batch_size, T), device=dev)
                tgt = torch.randint(0, a.vocab, (a.batch_size, T), device=dev)
                sync()
                t0 = time.perf_counter()
                with amp:
                    loss = run(idx, tgt)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                sync()
                if s > 0:  # the first step of a round warms the thread pool up
                    times[m].append(time.perf_counter() - t0)
    med = {m: sorted(t)[len(t) // 2] for m, t in times.items()}
    best = min(med, key=med.get)
    nparams = sum(p.numel() for p in model.parameters())
    extra = {}
    if cuda:
        n = 4096
        dt = torch.bfloat16 if a.dtype == "bf16" else torch.float32
        x, y = torch.randn(n, n, device=dev, dtype=dt), torch.randn(n, n, device=dev, dtype=dt)
        for _ in range(3):
            x @ y
        sync()
        reps, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < 0.5:
            x @ y
            reps += 1
        sync()
        peak = 2.0 * n ** 3 * reps / (time.perf_counter() - t0)
        tps = a.batch_size * T / med[best]
        extra = {"device": torch.cuda.get_device_name(dev), "dtype": a.dtype,
                 "gemm_peak_flops": peak,
                 "mfu": 6.0 * nparams * tps / peak}
    print(json.dumps({"tokens_per_s": a.batch_size * T / med[best], "step_s": med[best],
                      "threads": best,
                      "by_threads": {str(m): a.batch_size * T / med[m] for m in modes},
                      "params": nparams, "compile": a.compile,
                      "loss": float(loss.detach()), "torch": torch.__version__, **extra}))


if __name__ == "__main__":
    main()
