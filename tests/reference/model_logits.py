#!/usr/bin/env python3
"""Reference logits from Hugging Face transformers for Kev's parity tests.

    model_logits.py --model DIR --prompts prompts.json --out OUTDIR

prompts.json: [{"tokens": [ids...], "start": first_position}, ...]. Each prompt runs
alone, without a cache, with position ids start .. start+n-1 (so positions past 1000
are reached without 1000-token prompts). Writes OUTDIR/logits_<i>.f32 (raw
little-endian float32, [n, vocab], row-major) and prints a JSON summary on stdout.
"""
import argparse
import json
import os

import torch
from transformers import AutoModelForCausalLM


def main():
    # One thread: on a shared 2-core machine a second OpenMP thread stalls at every
    # barrier when the other core is busy (the test measures numbers, not speed).
    torch.set_num_threads(1)
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--prompts", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    torch.manual_seed(0)
    model, info = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32, output_loading_info=True)
    bad = {k: v for k, v in info.items() if v and k in ("missing_keys", "unexpected_keys", "mismatched_keys")}
    if bad:
        raise SystemExit(f"transformers did not load {args.model} cleanly: {bad}")
    model.eval()
    with open(args.prompts) as f:
        prompts = json.load(f)
    os.makedirs(args.out, exist_ok=True)
    shapes = []
    with torch.no_grad():
        for i, p in enumerate(prompts):
            ids = torch.tensor([p["tokens"]], dtype=torch.long)
            start = int(p.get("start", 0))
            pos = torch.arange(start, start + ids.shape[1]).unsqueeze(0)
            logits = model(input_ids=ids, position_ids=pos, use_cache=False).logits[0].float().contiguous()
            logits.numpy().astype("<f4").tofile(os.path.join(args.out, f"logits_{i}.f32"))
            shapes.append(list(logits.shape))
    print(json.dumps({"model": args.model, "shapes": shapes, "architecture": type(model).__name__}))


if __name__ == "__main__":
    main()
