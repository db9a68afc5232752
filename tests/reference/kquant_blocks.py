#!/usr/bin/env python3
"""Random GGUF blocks (K-quants, Q8_0 and Q5_0) and their dequantization by the `gguf` package
(llama.cpp's own Python reader), for Kev's kernel tests.

    kquant_blocks.py --out FILE.gguf --type Q4_K|Q5_K|Q6_K|Q8_0|Q5_0 --rows R --cols C [--seed S]

Writes FILE.gguf with one tensor "w" [R, C] of random blocks (every bit pattern of the
codes and packed scales; d (and Q4_K's, Q5_K's dmin) random finite fp16) and FILE.gguf.f32,
the tensor dequantized by gguf.quants.dequantize, float32, row-major.
"""
import argparse

import gguf
import numpy as np


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--type", default="Q4_K", choices=["Q4_K", "Q5_K", "Q6_K", "Q8_0", "Q5_0"])
    ap.add_argument("--rows", type=int, required=True)
    ap.add_argument("--cols", type=int, required=True)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    qtype = getattr(gguf.GGMLQuantizationType, args.type)
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    assert args.cols % block == 0
    rng = np.random.default_rng(args.seed)
    n = args.rows * args.cols // block
    raw = rng.integers(0, 256, size=(n, size), dtype=np.uint8)
    # d and dmin: finite, of both signs for d, small as real scales are.
    d = rng.uniform(0.0005, 0.01, size=n).astype(np.float16) * np.where(rng.random(n) < 0.1, -1, 1).astype(np.float16)
    dmin = rng.uniform(0.0, 0.01, size=n).astype(np.float16)
    at = 208 if args.type == "Q6_K" else 0  # Q6_K: [ql 128][qh 64][scales 16][d]
    raw[:, at:at + 2] = d.view(np.uint8).reshape(n, 2)
    if args.type in ("Q4_K", "Q5_K"):
        raw[:, 2:4] = dmin.view(np.uint8).reshape(n, 2)
    data = raw.reshape(args.rows, args.cols // block * size)
    w = gguf.GGUFWriter(args.out, "llama")
    w.add_tensor("w", data, raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    ref = gguf.quants.dequantize(data, qtype).astype(np.float32).reshape(args.rows, args.cols)
    ref.tofile(args.out + ".f32")
    print(args.out, args.type, ref.shape)


if __name__ == "__main__":
    main()
