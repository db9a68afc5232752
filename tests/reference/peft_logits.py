#!/usr/bin/env python3
"""LoRA reference for Kev's tests: random PEFT adapters, and logits from transformers + peft.

    peft_logits.py make-adapter --model DIR --out ADIR [--seed 0] [--rank 4] [--alpha 8]
                                [--targets q_proj,k_proj,...] [--regex RE] [--rslora]
                                [--tokens 1,2,3 [--scale 1.0]]   (then prints logits as below)
    peft_logits.py logits --model DIR|FILE.gguf --adapter ADIR --tokens 1,2,3 [--scale 1.0]

make-adapter writes a PEFT LoRA adapter (adapter_config.json + adapter_model.safetensors)
for the model with random A and B (PEFT starts B at zero, which would test nothing).
logits prints {"base": [[...]], "lora": [[...]]}: fp32 logits of every position without
and with the adapter (scaled by --scale x alpha/r), through PEFT's own LoRA layers.
"""
import argparse
import json
import os
import sys

import torch
from peft import LoraConfig, PeftModel, get_peft_model
from transformers import AutoModelForCausalLM


def load_base(path):
    if path.endswith(".gguf"):
        d, f = os.path.split(os.path.abspath(path))
        return AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float32)
    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)


def make_adapter(args):
    torch.manual_seed(args.seed)
    base = load_base(args.model)
    targets = args.regex if args.regex else args.targets.split(",")
    cfg = LoraConfig(r=args.rank, lora_alpha=args.alpha, target_modules=targets, use_rslora=args.rslora,
                     lora_dropout=0.0, bias="none", task_type="CAUSAL_LM")
    model = get_peft_model(base, cfg)
    gen = torch.Generator().manual_seed(args.seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_A" in name or "lora_B" in name:
                p.copy_(0.05 * torch.randn(p.shape, generator=gen))
    model.save_pretrained(args.out, safe_serialization=True)
    if args.tokens:  # the logits too, in the same run (one Python start-up)
        args.adapter = args.out
        logits(args)
    else:
        print(json.dumps({"out": args.out, "targets": targets}))


def logits(args):
    base = load_base(args.model)
    ids = torch.tensor([[int(t) for t in args.tokens.split(",")]])
    with torch.no_grad():
        base_logits = base(input_ids=ids).logits[0].float()
        model = PeftModel.from_pretrained(base, args.adapter)
        for module in model.modules():
            if hasattr(module, "scaling") and isinstance(module.scaling, dict):
                for k in module.scaling:
                    module.scaling[k] *= args.scale
        lora_logits = model(input_ids=ids).logits[0].float()
    json.dump({"base": base_logits.tolist(), "lora": lora_logits.tolist()}, sys.stdout)


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("make-adapter")
    m.add_argument("--model", required=True)
    m.add_argument("--out", required=True)
    m.add_argument("--seed", type=int, default=0)
    m.add_argument("--rank", type=int, default=4)
    m.add_argument("--alpha", type=float, default=8)
    m.add_argument("--targets", default="q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj")
    m.add_argument("--regex", default="")
    m.add_argument("--rslora", action="store_true")
    m.add_argument("--tokens", default="")
    m.add_argument("--scale", type=float, default=1.0)
    lg = sub.add_parser("logits")
    lg.add_argument("--model", required=True)
    lg.add_argument("--adapter", required=True)
    lg.add_argument("--tokens", required=True)
    lg.add_argument("--scale", type=float, default=1.0)
    args = ap.parse_args()
    make_adapter(args) if args.cmd == "make-adapter" else logits(args)


if __name__ == "__main__":
    main()
