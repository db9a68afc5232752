#!/usr/bin/env python3
"""Reference logits from Hugging Face transformers for Kev's parity tests.

    model_logits.py --model DIR|FILE.gguf --prompts prompts.json --out OUTDIR
                    [--device cpu|cuda] [--dtype fp32|fp16|bf16] [--greedy N]

prompts.json: [{"tokens": [ids...], "start": first_position}, ...]. Each prompt runs
alone, without a cache, with position ids start .. start+n-1 (so positions past 1000
are reached without 1000-token prompts). Writes OUTDIR/logits_<i>.f32 (raw
little-endian float32, [n, vocab], row-major) and prints a JSON summary on stdout.
With --greedy N it also writes OUTDIR/greedy_<i>.json: the N tokens greedy decoding
picks after the prompt (with the cache, in --dtype on --device), the reference of
kev-bench parity --greedy, and OUTDIR/greedy_margins_<i>.json: at each of those steps the
margin between the two best logits. --device cuda runs on the GPU (packaging/gpu-check.sh).
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
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="fp32", choices=["fp32", "fp16", "bf16"])
    ap.add_argument("--greedy", type=int, default=0)
    args = ap.parse_args()
    torch.manual_seed(0)
    dtype = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[args.dtype]
    source = dict(pretrained_model_name_or_path=args.model)
    if args.model.endswith(".gguf"):
        folder, name = os.path.split(os.path.abspath(args.model))
        source = dict(pretrained_model_name_or_path=folder, gguf_file=name)
    model, info = AutoModelForCausalLM.from_pretrained(**source, dtype=dtype, output_loading_info=True,
                                                       attn_implementation="eager")
    bad = {k: v for k, v in info.items() if v and k in ("missing_keys", "unexpected_keys", "mismatched_keys")}
    if bad:
        raise SystemExit(f"transformers did not load {args.model} cleanly: {bad}")
    model.eval()
    model.to(args.device)
    with open(args.prompts) as f:
        prompts = json.load(f)
    os.makedirs(args.out, exist_ok=True)
    shapes = []
    with torch.no_grad():
        for i, p in enumerate(prompts):
            ids = torch.tensor([p["tokens"]], dtype=torch.long, device=args.device)
            start = int(p.get("start", 0))
            pos = torch.arange(start, start + ids.shape[1], device=args.device).unsqueeze(0)
            logits = model(input_ids=ids, position_ids=pos, use_cache=False).logits[0].float().contiguous()
            logits.cpu().numpy().astype("<f4").tofile(os.path.join(args.out, f"logits_{i}.f32"))
            shapes.append(list(logits.shape))
            if args.greedy > 0:
                # Each step's margin between the two best logits, in the reference's own
                # dtype: where two runs part, it says whether the step was a near-tie.
                def pick(step_logits):
                    top = step_logits.float().topk(2)
                    return int(top.indices[0]), float(top.values[0] - top.values[1])

                out = model(input_ids=ids, position_ids=pos, use_cache=True)
                token, margin = pick(out.logits[0, -1])
                past, tokens, margins = out.past_key_values, [token], [margin]
                for t in range(1, args.greedy):
                    step_pos = torch.tensor([[start + ids.shape[1] + t - 1]], device=args.device)
                    out = model(input_ids=torch.tensor([[tokens[-1]]], device=args.device), position_ids=step_pos,
                                past_key_values=past, use_cache=True)
                    past = out.past_key_values
                    token, margin = pick(out.logits[0, -1])
                    tokens.append(token)
                    margins.append(margin)
                with open(os.path.join(args.out, f"greedy_{i}.json"), "w") as f:
                    json.dump(tokens, f)
                with open(os.path.join(args.out, f"greedy_margins_{i}.json"), "w") as f:
                    json.dump(margins, f)
    print(json.dumps({"model": args.model, "shapes": shapes, "architecture": type(model).__name__}))


if __name__ == "__main__":
    main()
