#!/usr/bin/env python3
"""check_safetensors.py — validates a safetensors file with the standard
library only (header layout, dtypes, sizes, exact tiling of the data
section) and, with --ref DIR, compares every tensor bitwise (F32) or to
round-to-nearest-even (BF16) with raw fp32 shard dumps DIR/m<k>.r<rank>.f32
of a zrt checkpoint (META gives the module/param layout: --meta meta.json).
With --with-safetensors it also loads the file through the `safetensors`
package (exit 77 when that package is missing). Prints the max difference.
"""
import argparse, json, struct, sys, os


def read_st(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    assert n <= len(raw) - 8, f"{path}: header length {n} does not fit"
    hdr = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    sizes = {"F32": 4, "BF16": 2, "F16": 2, "F64": 8, "I64": 8, "I32": 4}
    spans = []
    for name, t in hdr.items():
        if name == "__metadata__":
            continue
        numel = 1
        for d in t["shape"]:
            numel *= d
        b0, b1 = t["data_offsets"]
        assert b1 - b0 == numel * sizes[t["dtype"]], f"{name}: size mismatch"
        spans.append((b0, b1, name))
    spans.sort()
    at = 0
    for b0, b1, name in spans:
        assert b0 == at, f"{name}: gap/overlap at {b0}"
        at = b1
    assert at == len(data), "trailing bytes"
    return hdr, data


def bf16_round(bits):
    if (bits & 0x7FFFFFFF) > 0x7F800000:
        return (bits >> 16) | 0x40
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) & 0xFFFF


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("file")
    ap.add_argument("--meta")
    ap.add_argument("--ref")
    ap.add_argument("--with-safetensors", action="store_true")
    a = ap.parse_args()
    hdr, data = read_st(a.file)
    names = [k for k in hdr if k != "__metadata__"]
    print(f"{a.file}: {len(names)} tensors, header ok")
    if a.with_safetensors:
        try:
            from safetensors import safe_open
        except ImportError:
            print("SKIP: python package 'safetensors' is not installed")
            return 77
        with safe_open(a.file, framework="numpy") as f:
            keys = sorted(f.keys())
            assert keys == sorted(names), "safetensors package sees different tensors"
            for k in keys:
                assert list(f.get_slice(k).get_shape()) == hdr[k]["shape"]
        print("safetensors package: loads, names and shapes agree")
    if a.ref:
        meta = json.load(open(a.meta))
        world = meta["world_size"]
        worst = 0.0
        for k, mod in enumerate(meta["modules"]):
            flat = b""
            for r in range(world):
                flat += open(os.path.join(a.ref, f"m{k}.r{r}.f32"), "rb").read()
            vals = struct.unpack(f"<{len(flat)//4}I", flat)
            for p in mod["params"]:
                t = hdr[p["name"]]
                assert t["shape"] == p["shape"], f"{p['name']}: shape {t['shape']} vs {p['shape']}"
                numel = 1
                for d in p["shape"]:
                    numel *= d
                want = vals[p["offset"]:p["offset"] + numel]
                b0, b1 = t["data_offsets"]
                if t["dtype"] == "F32":
                    got = struct.unpack(f"<{numel}I", data[b0:b1])
                    exp = want
                else:
                    got = struct.unpack(f"<{numel}H", data[b0:b1])
                    exp = [bf16_round(v) for v in want]
                for g, e in zip(got, exp):
                    if g != e:
                        gf = struct.unpack("<f", struct.pack("<I", g << (16 if t["dtype"] == "BF16" else 0)))[0]
                        ef = struct.unpack("<f", struct.pack("<I", e << (16 if t["dtype"] == "BF16" else 0)))[0]
                        worst = max(worst, abs(gf - ef))
                        if worst == 0.0:
                            worst = float("inf")
        print(f"tensors vs checkpoint master ({t['dtype']}): max diff {worst} (tolerance 0)")
        if worst != 0.0:
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
