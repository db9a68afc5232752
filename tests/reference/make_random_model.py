#!/usr/bin/env python3
"""Write a deterministic random-weight Hugging Face model folder for Kev's tests.

    make_random_model.py --preset tiny-llama --out DIR [--seed 0] [--set KEY=JSON ...]

Presets:
  tiny-llama     Llama, untied lm_head, GQA 4/2, llama3 RoPE scaling
  tiny-qwen2     Qwen2, q/k/v bias, tied head, linear RoPE scaling
  tiny-qwen3     Qwen3, per-head q/k norm, explicit head_dim != hidden/heads, tied
  tiny-mistral   Mistral (the Llama decoder with a sliding window of 24), untied
  tiny-phi3      Phi-3 (fused qkv_proj and gate_up_proj), untied, no window
  tiny-phi4      Phi-4-mini's RoPE on it: partial rotary 0.75, LongRoPE (long from position
                 1500, context 4096), tied
  tiny-qwen2-window  tiny-qwen2 with use_sliding_window: a 16-token window from layer 1 on
                 (max_window_layers 1)
  tiny-gemma2    Gemma 2: (1 + w) norms around attention and MLP, GeGLU, scaled embeddings,
                 attention and final soft-caps (small, so they bend), windowed layers 0 and 2
                 (window 16), query_pre_attn_scalar 24, tied
  tiny-gemma3    Gemma 3 (gemma3_text): q/k norms, layers 0-2 windowed (16) with RoPE base
                 10000, layer 3 global with base 1e6 and linear scaling 4, no soft-caps
  qwen2.5-0.5b   Qwen2.5-0.5B shapes (hidden 896, 24 layers, 14/2 heads, inter 4864,
                 vocab 151936, tied), bf16 on disk: for benchmarks, not CI.
  qwen2.5-7b     Qwen2.5-7B shapes (hidden 3584, 28 layers, 28/4 heads, inter 18944,
                 vocab 152064, untied), bf16, 15 GB: the GPU check (--device cuda).
  gemma3-270m    Gemma 3 270M shapes (hidden 640, 18 layers, 4/1 heads of 256, inter 2048,
                 vocab 262144, 15 of 18 layers windowed (512)), bf16: kev-bench window.
  smollm2-135m   SmolLM2-135M shapes (Llama, hidden 576, 30 layers, 9/3 heads, inter
                 1536, vocab 49152, tied), bf16: the built-in model's shapes.

The same preset and seed always give the same bytes (weights drawn in name order
from one seeded generator; no wall-clock metadata is written).
"""
import argparse
import json
import os

import torch
from safetensors.torch import save_file

TINY = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            intermediate_size=128, vocab_size=512, max_position_embeddings=2048, rms_norm_eps=1e-5,
            bos_token_id=1, eos_token_id=2)

PRESETS = {
    "tiny-llama": dict(TINY, model_type="llama", architectures=["LlamaForCausalLM"], tie_word_embeddings=False,
                       head_dim=16, attention_bias=False, mlp_bias=False, hidden_act="silu",
                       rope_parameters=dict(rope_type="llama3", rope_theta=10000.0, factor=8.0,
                                            low_freq_factor=1.0, high_freq_factor=4.0,
                                            original_max_position_embeddings=256)),
    "tiny-qwen2": dict(TINY, model_type="qwen2", architectures=["Qwen2ForCausalLM"], tie_word_embeddings=True,
                       hidden_act="silu", use_sliding_window=False,
                       rope_parameters=dict(rope_type="linear", rope_theta=10000.0, factor=2.0)),
    "tiny-qwen3": dict(TINY, model_type="qwen3", architectures=["Qwen3ForCausalLM"], tie_word_embeddings=True,
                       head_dim=32, attention_bias=False, hidden_act="silu", use_sliding_window=False,
                       rope_parameters=dict(rope_type="default", rope_theta=1000000.0)),
    "tiny-mistral": dict(TINY, model_type="mistral", architectures=["MistralForCausalLM"], tie_word_embeddings=False,
                         head_dim=16, hidden_act="silu", sliding_window=24,
                         rope_parameters=dict(rope_type="default", rope_theta=1000000.0)),
    "tiny-phi3": dict(TINY, model_type="phi3", architectures=["Phi3ForCausalLM"], tie_word_embeddings=False,
                      hidden_act="silu", sliding_window=None, pad_token_id=0, original_max_position_embeddings=2048,
                      rope_parameters=dict(rope_type="default", rope_theta=10000.0)),
    # Phi-4-mini's RoPE: 12 of each head's 16 dims turn (partial_rotary_factor 0.75), LongRoPE
    # with the long factors from position 1500 (prompts at 1000 stay short, at 1990 long).
    "tiny-phi4": dict(TINY, model_type="phi3", architectures=["Phi3ForCausalLM"], tie_word_embeddings=True,
                      hidden_act="silu", sliding_window=None, pad_token_id=0, max_position_embeddings=4096,
                      original_max_position_embeddings=1500, partial_rotary_factor=0.75,
                      rope_parameters=dict(rope_type="longrope", rope_theta=10000.0, partial_rotary_factor=0.75,
                                           original_max_position_embeddings=1500,
                                           short_factor=[1.0, 1.05, 1.3, 1.7, 2.25, 3.1],
                                           long_factor=[1.5, 2.5, 4.0, 8.0, 16.5, 31.0])),
    "tiny-qwen2-window": dict(TINY, model_type="qwen2", architectures=["Qwen2ForCausalLM"], tie_word_embeddings=True,
                              hidden_act="silu", use_sliding_window=True, sliding_window=16, max_window_layers=1,
                              rope_parameters=dict(rope_type="default", rope_theta=10000.0)),
    "tiny-gemma2": dict(TINY, model_type="gemma2", architectures=["Gemma2ForCausalLM"], num_hidden_layers=3,
                        head_dim=16, tie_word_embeddings=True, hidden_activation="gelu_pytorch_tanh",
                        query_pre_attn_scalar=24, sliding_window=16, attn_logit_softcapping=3.0,
                        final_logit_softcapping=4.0, pad_token_id=0, attention_bias=False,
                        layer_types=["sliding_attention", "full_attention", "sliding_attention"],
                        rope_parameters=dict(rope_type="default", rope_theta=10000.0)),
    "tiny-gemma3": dict(TINY, model_type="gemma3_text", architectures=["Gemma3ForCausalLM"], num_hidden_layers=4,
                        head_dim=16, tie_word_embeddings=True, hidden_activation="gelu_pytorch_tanh",
                        query_pre_attn_scalar=16, sliding_window=16, attn_logit_softcapping=None,
                        final_logit_softcapping=None, pad_token_id=0, attention_bias=False,
                        use_bidirectional_attention=False,
                        layer_types=["sliding_attention"] * 3 + ["full_attention"],
                        rope_parameters={"sliding_attention": dict(rope_type="default", rope_theta=10000.0),
                                         "full_attention": dict(rope_type="linear", rope_theta=1000000.0,
                                                                factor=4.0)}),
    "qwen2.5-0.5b": dict(model_type="qwen2", architectures=["Qwen2ForCausalLM"], hidden_size=896,
                         num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
                         intermediate_size=4864, vocab_size=151936, max_position_embeddings=32768,
                         rms_norm_eps=1e-6, tie_word_embeddings=True, hidden_act="silu",
                         use_sliding_window=False, bos_token_id=151643, eos_token_id=151645,
                         rope_parameters=dict(rope_type="default", rope_theta=1000000.0)),
    "qwen2.5-7b": dict(model_type="qwen2", architectures=["Qwen2ForCausalLM"], hidden_size=3584,
                       num_hidden_layers=28, num_attention_heads=28, num_key_value_heads=4,
                       intermediate_size=18944, vocab_size=152064, max_position_embeddings=32768,
                       rms_norm_eps=1e-6, tie_word_embeddings=False, hidden_act="silu",
                       use_sliding_window=False, bos_token_id=151643, eos_token_id=151645,
                       rope_parameters=dict(rope_type="default", rope_theta=1000000.0)),
    "gemma3-270m": dict(model_type="gemma3_text", architectures=["Gemma3ForCausalLM"], hidden_size=640,
                        num_hidden_layers=18, num_attention_heads=4, num_key_value_heads=1, head_dim=256,
                        intermediate_size=2048, vocab_size=262144, max_position_embeddings=32768,
                        rms_norm_eps=1e-6, tie_word_embeddings=True, hidden_activation="gelu_pytorch_tanh",
                        query_pre_attn_scalar=256, sliding_window=512, attn_logit_softcapping=None,
                        final_logit_softcapping=None, pad_token_id=0, attention_bias=False,
                        use_bidirectional_attention=False, bos_token_id=2, eos_token_id=1,
                        layer_types=(["sliding_attention"] * 5 + ["full_attention"]) * 3,
                        rope_parameters={"sliding_attention": dict(rope_type="default", rope_theta=10000.0),
                                         "full_attention": dict(rope_type="default", rope_theta=1000000.0)}),
    "smollm2-135m": dict(model_type="llama", architectures=["LlamaForCausalLM"], hidden_size=576,
                         num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3,
                         intermediate_size=1536, vocab_size=49152, max_position_embeddings=8192,
                         rms_norm_eps=1e-5, tie_word_embeddings=True, hidden_act="silu", head_dim=64,
                         attention_bias=False, mlp_bias=False, bos_token_id=1, eos_token_id=2,
                         rope_parameters=dict(rope_type="default", rope_theta=100000.0)),
}


def tensor_shapes(cfg):
    h, inter, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    nh, nkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    d = cfg.get("head_dim") or h // nh
    qkv_bias = cfg["model_type"] == "qwen2" or cfg.get("attention_bias", False)
    shapes = {"model.embed_tokens.weight": (v, h), "model.norm.weight": (h,)}
    if not cfg["tie_word_embeddings"]:
        shapes["lm_head.weight"] = (v, h)
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        if cfg["model_type"] == "phi3":  # fused, as Phi-3 checkpoints store them
            shapes.update({
                p + "input_layernorm.weight": (h,), p + "post_attention_layernorm.weight": (h,),
                p + "self_attn.qkv_proj.weight": ((nh + 2 * nkv) * d, h), p + "self_attn.o_proj.weight": (h, nh * d),
                p + "mlp.gate_up_proj.weight": (2 * inter, h), p + "mlp.down_proj.weight": (h, inter),
            })
            continue
        shapes.update({
            p + "input_layernorm.weight": (h,), p + "post_attention_layernorm.weight": (h,),
            p + "self_attn.q_proj.weight": (nh * d, h), p + "self_attn.k_proj.weight": (nkv * d, h),
            p + "self_attn.v_proj.weight": (nkv * d, h), p + "self_attn.o_proj.weight": (h, nh * d),
            p + "mlp.gate_proj.weight": (inter, h), p + "mlp.up_proj.weight": (inter, h),
            p + "mlp.down_proj.weight": (h, inter),
        })
        if qkv_bias:
            shapes.update({p + "self_attn.q_proj.bias": (nh * d,), p + "self_attn.k_proj.bias": (nkv * d,),
                           p + "self_attn.v_proj.bias": (nkv * d,)})
        if cfg["model_type"] in ("qwen3", "gemma3_text"):
            shapes.update({p + "self_attn.q_norm.weight": (d,), p + "self_attn.k_norm.weight": (d,)})
        if cfg["model_type"].startswith("gemma"):  # its post_attention_layernorm is the attention output's
            shapes.update({p + "pre_feedforward_layernorm.weight": (h,), p + "post_feedforward_layernorm.weight": (h,)})
    return shapes


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", required=True, choices=sorted(PRESETS))
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--shards", type=int, default=1, help="write model-0000i-of-0000n.safetensors + index")
    ap.add_argument("--device", default="cpu", help="draw the weights there (cuda: the 7B preset in seconds; "
                                                    "other bytes than a CPU draw)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=JSON",
                    help="override a config.json key of the preset (e.g. query_pre_attn_scalar=16)")
    args = ap.parse_args()
    cfg = dict(PRESETS[args.preset])
    for kv in args.set:
        key, _, value = kv.partition("=")
        cfg[key] = json.loads(value)
    big = not args.preset.startswith("tiny")
    std = 0.02 if big else 0.08
    dtype = torch.bfloat16 if big else torch.float32
    cfg["dtype"] = "bfloat16" if big else "float32"

    gen = torch.Generator(device=args.device).manual_seed(args.seed)
    tensors = {}
    for name, shape in sorted(tensor_shapes(cfg).items()):
        if name.endswith("norm.weight") and cfg["model_type"].startswith("gemma"):
            t = 0.1 * torch.randn(shape, generator=gen, device=args.device)  # used as 1 + w
        elif name.endswith("norm.weight"):
            t = 1.0 + 0.1 * torch.randn(shape, generator=gen, device=args.device)  # not all-ones: norms must matter
        elif name.endswith(".bias"):
            t = 0.1 * torch.randn(shape, generator=gen, device=args.device)
        else:
            t = std * torch.randn(shape, generator=gen, device=args.device)
        tensors[name] = t.to(dtype).cpu().contiguous()

    os.makedirs(args.out, exist_ok=True)
    if args.shards <= 1:
        save_file(tensors, os.path.join(args.out, "model.safetensors"), metadata={"format": "pt"})
    else:
        names = sorted(tensors)
        weight_map = {}
        for s in range(args.shards):
            shard = f"model-{s + 1:05d}-of-{args.shards:05d}.safetensors"
            part = {n: tensors[n] for n in names[s::args.shards]}
            save_file(part, os.path.join(args.out, shard), metadata={"format": "pt"})
            weight_map.update({n: shard for n in part})
        with open(os.path.join(args.out, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": sum(t.nbytes for t in tensors.values())},
                       "weight_map": weight_map}, f, indent=2, sort_keys=True)
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
    with open(os.path.join(args.out, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": cfg["bos_token_id"], "eos_token_id": cfg["eos_token_id"]}, f, indent=2)
    print(json.dumps({"preset": args.preset, "out": args.out, "tensors": len(tensors),
                      "parameters": sum(t.numel() for t in tensors.values())}))


if __name__ == "__main__":
    main()
