#!/usr/bin/env python3
"""Reference for Kev's built-in GGUF model: transformers loading the same GGUF file.

    gguf_model_reference.py --gguf MODEL.gguf --out OUTDIR [--new-tokens 40]

For each of three chat prompts (ids from the tokenizer's own chat template, so this
test does not depend on Kev's tokenizer):
  - greedy continuation of --new-tokens tokens, with transformers' KV cache, not
    stopping at end-of-sequence (both sides run the same fixed length);
  - logits of the whole sequence (prompt + continuation) in one forward without a
    cache: OUTDIR/logits_<i>.f32, raw little-endian float32 [n, vocab].
Also writes layer 0's q_proj/k_proj weights as transformers holds them
(OUTDIR/q_proj.f32, k_proj.f32; [out, in] fp32): they pin the undoing of llama.cpp's
q/k row permutation. Prints a JSON summary on stdout.
"""
import argparse
import json
import os

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

QUESTIONS = [
    "What is the capital of France? Answer in two sentences.",
    "Write a short poem about the sea.",
    "Explain what a prime number is to a ten-year-old.",
]


def main():
    # One thread: on a shared 2-core machine a second OpenMP thread stalls at every
    # barrier when the other core is busy (the test measures numbers, not speed).
    torch.set_num_threads(1)
    ap = argparse.ArgumentParser()
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--new-tokens", type=int, default=40)
    args = ap.parse_args()
    folder, name = os.path.split(os.path.abspath(args.gguf))
    tok = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    model.eval()
    os.makedirs(args.out, exist_ok=True)
    sd = model.state_dict()
    for key in ("q_proj", "k_proj"):
        sd[f"model.layers.0.self_attn.{key}.weight"].float().contiguous().numpy().astype("<f4").tofile(
            os.path.join(args.out, f"{key}.f32"))

    prompts = []
    with torch.no_grad():
        for i, q in enumerate(QUESTIONS):
            ids = tok.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True,
                                          tokenize=True, return_dict=False)
            if isinstance(ids, dict) or hasattr(ids, "input_ids"):
                ids = ids["input_ids"]
            ids = [int(t) for t in ids]
            out = model(input_ids=torch.tensor([ids]), use_cache=True)
            past = out.past_key_values
            generated = []
            nxt = int(out.logits[0, -1].argmax())
            for _ in range(args.new_tokens):
                generated.append(nxt)
                out = model(input_ids=torch.tensor([[nxt]]), past_key_values=past, use_cache=True)
                past = out.past_key_values
                nxt = int(out.logits[0, -1].argmax())
            full = torch.tensor([ids + generated])
            logits = model(input_ids=full, use_cache=False).logits[0].float().contiguous()
            logits.numpy().astype("<f4").tofile(os.path.join(args.out, f"logits_{i}.f32"))
            prompts.append({"question": q, "prompt_ids": ids, "generated_ids": generated,
                            "text": tok.decode(generated), "rows": int(logits.shape[0])})
    print(json.dumps({"vocab": int(model.config.vocab_size), "prompts": prompts}))


if __name__ == "__main__":
    main()
