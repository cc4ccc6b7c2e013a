# DeepSpeed CPUAdam (JIT-built cpu_adam op, -O3, this CPU's SIMD) on one fp32
# parameter of N elements, AdamW; median and best step (zrt-perf optimizer reports its best); with fp32 only and with the bf16/fp16 param copy.
import sys, time, json, torch
# DeepSpeed 0.9.2 builds cpu_adam without -O3 when there is no CUDA (TorchCPUOpBuilder.cxx_args adds
# super().cxx_args(), which holds -O3, only in its CUDA branch): an -O0 build is no fair peer. Add -O3
# (DS_O3=0 keeps DeepSpeed's own flags); the build goes to its own TORCH_EXTENSIONS_DIR.
import os
if os.environ.get("DS_O3", "1") == "1":
    from deepspeed.ops.op_builder import builder as _b
    _orig = _b.TorchCPUOpBuilder.cxx_args
    _b.TorchCPUOpBuilder.cxx_args = lambda self: ["-O3"] + _orig(self)
from deepspeed.ops.adam import DeepSpeedCPUAdam
n = int(sys.argv[1]); steps = int(sys.argv[2]); threads = int(sys.argv[3])
torch.set_num_threads(threads)
p = torch.nn.Parameter(torch.randn(n) * 0.02)
p.grad = torch.randn(n) * 1e-3
opt = DeepSpeedCPUAdam([p], lr=1e-3, weight_decay=0.01, adamw_mode=True)
half = torch.empty(n, dtype=torch.bfloat16)
res = {}
for mode in ("fp32", "copy16"):
    ts = []
    for s in range(steps + 1):
        t0 = time.perf_counter()
        if mode == "fp32":
            opt.step()
        else:
            opt.step()
            with torch.no_grad():
                half.copy_(p)  # the bf16 working copy, as a separate torch pass
        if s: ts.append(time.perf_counter() - t0)
    med = sorted(ts)[len(ts) // 2]
    best = min(ts)
    res[mode] = {"elements_per_s": n / med, "step_s": med,
                 "best_elements_per_s": n / best, "best_step_s": best}
print(json.dumps(res))
