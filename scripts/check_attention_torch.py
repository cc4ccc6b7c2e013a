#!/usr/bin/env python3
"""check_attention_torch.py — the GPT example's fused CUDA attention against
PyTorch's scaled_dot_product_attention (causal), forward and backward, on
the tensors test_gpt2_cuda writes (B=2, T=1024, 12 heads of 64):

    ZRT_ATTN_DUMP=/tmp/attn build-gpu/tests/test_gpt2_cuda
    python3 scripts/check_attention_torch.py /tmp/attn

PyTorch runs in float64 (on the GPU when there is one; before torch 2.0,
which has no scaled_dot_product_attention, the same causal softmax attention
written out): out must match within 1e-4 and dqkv (dqkv0 + the gradient;
zrt's backward writes dqkv, and the tests dump zeros as dqkv0) within 1e-3 absolute for the fp32-core kernels (shape.json's
dtype "f32"), 4e-3 and 1e-2 for the tensor-core ones ("bf16": P and dS
rounded to bf16 for the products; their inputs are bf16 values already),
the tolerances test_gpt2_cuda and the emulations' tests use against their
own double reference. Prints
one JSON line with the max differences; exit 1 when over tolerance, 77 when
torch is not installed.
"""
import json
import os
import sys

try:
    import numpy as np
    import torch
    import torch.nn.functional as F

    # SDPA, or before torch 2.0 the same causal attention written out
    from perf_torch_gpt2 import attention
except ImportError as e:  # no torch here: a skip, as ctest understands it
    print(f"check_attention_torch: skipped: {e}")
    sys.exit(77)


def main():
    d = sys.argv[1] if len(sys.argv) > 1 else "/tmp/attn"
    shape = json.load(open(os.path.join(d, "shape.json")))
    B, T, NH, HS = shape["B"], shape["T"], shape["NH"], shape["HS"]
    C = NH * HS
    dev = "cuda" if torch.cuda.is_available() else "cpu"

    def load(name, *dims):
        a = np.fromfile(os.path.join(d, name + ".f32"), dtype=np.float32).reshape(*dims)
        return torch.from_numpy(a).to(dev, torch.float64)

    qkv, dout = load("qkv", B, T, 3 * C), load("dout", B, T, C)
    dqkv0, out, dqkv = load("dqkv0", B, T, 3 * C), load("out", B, T, C), load("dqkv", B, T, 3 * C)
    x = qkv.clone().requires_grad_(True)
    q, k, v = (t.view(B, T, NH, HS).transpose(1, 2) for t in x.split(C, dim=2))
    y = attention(q, k, v)
    y = y.transpose(1, 2).reshape(B, T, C)
    y.backward(dout)
    d_out = (out - y.detach()).abs().max().item()
    d_dqkv = (dqkv - (dqkv0 + x.grad)).abs().max().item()
    dtype = shape.get("dtype", "f32")
    tols = {"f32": (1e-4, 1e-3), "fp32": (1e-4, 1e-3), "bf16": (4e-3, 1e-2)}
    if dtype not in tols:
        print(f"check_attention_torch: {d}/shape.json names dtype {dtype!r}; expected one of "
              f"{sorted(tols)}", file=sys.stderr)
        sys.exit(2)
    tol_out, tol_dqkv = tols[dtype]
    ok = d_out <= tol_out and d_dqkv <= tol_dqkv
    print(json.dumps({"dtype": dtype, "max_diff_out": d_out, "max_diff_dqkv": d_dqkv,
                      "tol_out": tol_out, "tol_dqkv": tol_dqkv, "ok": ok,
                      "torch": torch.__version__, "device": dev,
                      "sdpa": hasattr(F, "scaled_dot_product_attention")}))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
