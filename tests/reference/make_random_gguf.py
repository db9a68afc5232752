#!/usr/bin/env python3
"""Convert a (random-weight) Hugging Face model folder to GGUF the way llama.cpp's
convert_hf_to_gguf.py does, for Kev's loader tests.

    make_random_gguf.py --model DIR --out FILE.gguf [--type F32|F16|BF16|Q8_0|Q5_0|Q4_0|Q4_1|Q4_K|Q5_K|Q6_K|Q4_K_M|Q5_K_M]

Q4_K_M and Q5_K_M mix types the way llama.cpp's files of those names do (simplified): the
embedding and, in even layers, attn_v and ffn_down are Q6_K, every other matrix Q4_K (Q5_K);
a fused q | k | v then holds parts of two formats.

As in llama.cpp: q_proj/k_proj rows of llama-architecture models are permuted for
ggml's RoPE layout (qwen2/qwen3 are not); 1-D tensors (norms, biases) stay F32;
llama3 RoPE scaling becomes a rope_freqs.weight tensor of per-frequency divisors;
linear scaling becomes rope.scaling.type/factor. A tied head writes no output.weight.
Gemma 2 / Gemma 3 (gemma3_text -> "gemma3"): norms written as 1 + w, the post norms under
llama.cpp's names, soft-caps and the window in the metadata; llama.cpp reads no
query_pre_attn_scalar or layer pattern from the file (it takes the head size and its fixed
patterns), so a model that differs from those is refused rather than written wrongly.
"""
import argparse
import json
import math
import os

import gguf
import numpy as np
from safetensors.torch import load_file

NAMES = {
    "input_layernorm.weight": "attn_norm.weight", "post_attention_layernorm.weight": "ffn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight", "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight", "self_attn.o_proj.weight": "attn_output.weight",
    "self_attn.q_proj.bias": "attn_q.bias", "self_attn.k_proj.bias": "attn_k.bias",
    "self_attn.v_proj.bias": "attn_v.bias", "self_attn.q_norm.weight": "attn_q_norm.weight",
    "self_attn.k_norm.weight": "attn_k_norm.weight", "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight", "mlp.down_proj.weight": "ffn_down.weight",
    # Phi-3's fused tensors, as llama.cpp names them (ffn_up holds gate | up).
    "self_attn.qkv_proj.weight": "attn_qkv.weight", "mlp.gate_up_proj.weight": "ffn_up.weight",
}


GEMMA_NAMES = {  # Gemma's post_attention_layernorm is the attention output's norm
    "post_attention_layernorm.weight": "post_attention_norm.weight",
    "pre_feedforward_layernorm.weight": "ffn_norm.weight",
    "post_feedforward_layernorm.weight": "post_ffw_norm.weight",
}


def quantize_k4(t, bits):
    """ggml's Q4_K (bits 4) or Q5_K (bits 5) blocks of a float32 [rows, cols] array (cols a
    multiple of 256), the plain way: per 32 values scale (max - min) / (2^bits - 1) and
    offset min, their 6-bit factors relative to the super-block's largest (d, dmin in
    fp16). The gguf package decodes K-quants but cannot make them; llama.cpp's quantizer
    searches harder, the format is the same."""
    rows, cols = t.shape
    top = (1 << bits) - 1
    x = t.reshape(-1, 8, 32).astype(np.float32)                    # [super-blocks, 8, 32]
    lo = np.minimum(x.min(axis=2), 0.0)                            # offsets <= 0, as ggml
    scale = (x.max(axis=2) - lo) / top
    d = (scale.max(axis=1) / 63.0).astype(np.float16)
    dmin = (-lo.min(axis=1) / 63.0).astype(np.float16)
    df, dminf = d.astype(np.float32)[:, None], dmin.astype(np.float32)[:, None]
    sc = np.where(df > 0, np.rint(scale / np.where(df > 0, df, 1)), 0).clip(0, 63).astype(np.uint8)
    m = np.where(dminf > 0, np.rint(-lo / np.where(dminf > 0, dminf, 1)), 0).clip(0, 63).astype(np.uint8)
    d1, m1 = df * sc, dminf * m                                    # what the decoder will use
    q = np.where(d1[..., None] > 0, np.rint((x + m1[..., None]) / np.where(d1 > 0, d1, 1)[..., None]), 0)
    q = q.clip(0, top).astype(np.uint8)                            # [n, 8, 32]
    packed = np.zeros((x.shape[0], 12), dtype=np.uint8)            # ggml's 6-bit packing
    packed[:, 0:4] = (sc[:, 0:4] & 63) | ((sc[:, 4:8] >> 4) << 6)
    packed[:, 4:8] = (m[:, 0:4] & 63) | ((m[:, 4:8] >> 4) << 6)
    packed[:, 8:12] = (sc[:, 4:8] & 0x0F) | ((m[:, 4:8] & 0x0F) << 4)
    low = q & 15
    qs = (low[:, 0::2, :] | (low[:, 1::2, :] << 4)).reshape(-1, 128)  # chunk c: blocks 2c (low), 2c+1 (high)
    head = [d.view(np.uint8).reshape(-1, 2), dmin.view(np.uint8).reshape(-1, 2), packed]
    if bits == 4:
        blocks = np.concatenate(head + [qs], axis=1)
    else:  # qh[l]: bit j holds the fifth bit of block j's column l
        qh = np.zeros((x.shape[0], 32), dtype=np.uint8)
        for j in range(8):
            qh |= ((q[:, j, :] >> 4) & 1) << j
        blocks = np.concatenate(head + [qh, qs], axis=1)
    return blocks.reshape(rows, cols // 256 * (144 if bits == 4 else 176))


def quantize_q4_k(t):
    return quantize_k4(t, 4)


def quantize_q5_k(t):
    return quantize_k4(t, 5)


def quantize_q6_k(t):
    """ggml's Q6_K blocks of a float32 [rows, cols] array (cols a multiple of 256), the
    plain way: per 16 values scale absmax / 32, its signed 8-bit factor relative to the
    super-block's largest (d = max / 127 in fp16), codes round(x / (d * sc)) + 32 in 0..63.
    The format is ggml's; llama.cpp's quantizer searches harder for the scales."""
    rows, cols = t.shape
    x = t.reshape(-1, 16, 16).astype(np.float32)                   # [super-blocks, 16, 16]
    scale = np.abs(x).max(axis=2) / 32.0
    d = (scale.max(axis=1) / 127.0).astype(np.float16)
    df = d.astype(np.float32)[:, None]
    sc = np.where(df > 0, np.rint(scale / np.where(df > 0, df, 1)), 0).clip(-128, 127).astype(np.int8)
    d1 = df * sc.astype(np.float32)
    q = np.where(d1[..., None] != 0, np.rint(x / np.where(d1 != 0, d1, 1)[..., None]), 0)
    q = (q.clip(-32, 31) + 32).astype(np.uint8).reshape(-1, 2, 4, 32)  # [n, half h, k, l]: column 128h + 32k + l
    # ql[64h + l] holds k = 0 (low nibble) and k = 2 (high), ql[64h + 32 + l] k = 1 and 3;
    # qh[32h + l] the high bit pairs of k = 0..3 at bits 2k.
    low = np.concatenate([(q[:, :, 0] & 15) | (q[:, :, 2] & 15) << 4, (q[:, :, 1] & 15) | (q[:, :, 3] & 15) << 4], axis=2)
    qh = (q[:, :, 0] >> 4) | (q[:, :, 1] >> 4) << 2 | (q[:, :, 2] >> 4) << 4 | (q[:, :, 3] >> 4) << 6
    blocks = np.concatenate([low.reshape(-1, 128).astype(np.uint8), qh.reshape(-1, 64).astype(np.uint8),
                             sc.view(np.uint8).reshape(-1, 16), d.view(np.uint8).reshape(-1, 2)], axis=1)
    return blocks.reshape(rows, cols // 256 * 210)


def permute(w, n_head, n_head_kv):  # llama.cpp's LlamaModel.permute
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def add_tokenizer(w, folder, arch, vocab_size=0):
    """A tokenizer.json's byte-level BPE as llama.cpp's convert script writes it: tokens
    by id (ids the file does not name become unused [PAD<id>] entries), merges, token
    types (added tokens are control tokens), the pre-tokenizer's name, the chat template."""
    with open(os.path.join(folder, "tokenizer.json"), encoding="utf-8") as f:
        tj = json.load(f)
    vocab = tj["model"]["vocab"]
    added = {t["content"]: t["id"] for t in tj.get("added_tokens", [])}
    # Padded to the embedding's rows, as convert_hf_to_gguf.py does (llama.cpp takes the
    # vocabulary size from this list and checks the embedding against it).
    n = max(max(list(vocab.values()) + list(added.values())) + 1, vocab_size)
    tokens = [f"[PAD{i}]" for i in range(n)]
    types = [gguf.TokenType.UNUSED] * n
    for t, i in vocab.items():
        tokens[i], types[i] = t, gguf.TokenType.NORMAL
    for t, i in added.items():
        tokens[i], types[i] = t, gguf.TokenType.CONTROL
    merges = [m if isinstance(m, str) else " ".join(m) for m in tj["model"]["merges"]]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2" if arch.startswith("qwen") else "llama-bpe")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    config = os.path.join(folder, "tokenizer_config.json")
    if os.path.exists(config):
        with open(config, encoding="utf-8") as f:
            template = json.load(f).get("chat_template")
        if isinstance(template, str):
            w.add_chat_template(template)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--type", default="F32", choices=["F32", "F16", "BF16", "Q8_0", "Q5_0", "Q4_0", "Q4_1", "Q4_K", "Q5_K", "Q6_K",
                                                "Q4_K_M", "Q5_K_M"])
    ap.add_argument("--tokenizer", help="folder with a byte-level BPE tokenizer.json (and tokenizer_config.json): "
                                        "written into the file as llama.cpp's 'gpt2' tokenizer, so text goes in")
    args = ap.parse_args()
    with open(os.path.join(args.model, "config.json")) as f:
        cfg = json.load(f)
    arch = {"gemma3_text": "gemma3"}.get(cfg["model_type"], cfg["model_type"])
    gemma = arch.startswith("gemma")
    nh, nkv, h = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["hidden_size"]
    d = cfg.get("head_dim") or h // nh
    rope = cfg.get("rope_parameters") or {}
    if gemma:
        layers = cfg["num_hidden_layers"]
        pattern = 2 if arch == "gemma2" else 6
        implied = ["sliding_attention" if i % pattern < pattern - 1 else "full_attention" for i in range(layers)]
        big = layers == (46 if arch == "gemma2" else 62)
        if cfg.get("layer_types", implied) != implied or cfg.get("query_pre_attn_scalar", d) != (h // nh if big else d):
            raise SystemExit("make_random_gguf: llama.cpp would read this Gemma with other windowed layers or "
                             "another query scale (it takes both from the architecture, not the file)")
        if "full_attention" in rope:  # Gemma 3: the windowed layers' base is fixed at 10000 in llama.cpp
            if rope["sliding_attention"].get("rope_theta", 10000.0) != 10000.0:
                raise SystemExit("make_random_gguf: llama.cpp fixes Gemma 3's local RoPE base at 10000")
            rope = rope["full_attention"]
    # Through torch: numpy has no bfloat16 (the benchmark presets are bf16 on disk).
    tensors = {k: v.float().numpy() for k, v in load_file(os.path.join(args.model, "model.safetensors")).items()}

    w = gguf.GGUFWriter(args.out, arch)
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(h)
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(nh)
    w.add_head_count_kv(nkv)
    w.add_key_length(d)
    w.add_value_length(d)
    partial = rope.get("partial_rotary_factor", cfg.get("partial_rotary_factor", 1.0))
    rot = int(d * partial)  # convert_hf_to_gguf.py's phi3: int(rot_pct * n_embd) // n_head
    w.add_rope_dimension_count(rot)
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_rope_freq_base(rope.get("rope_theta", 10000.0))
    w.add_vocab_size(cfg["vocab_size"])
    w.add_bos_token_id(cfg["bos_token_id"])
    w.add_eos_token_id(cfg["eos_token_id"])
    if rope.get("rope_type") == "linear":
        w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        w.add_rope_scaling_factor(rope["factor"])
    elif rope.get("rope_type") == "llama3":  # as convert_hf_to_gguf.py's LlamaModel.generate_extra_tensors
        base, factor = rope["rope_theta"], rope["factor"]
        low, high, old = rope["low_freq_factor"], rope["high_freq_factor"], rope["original_max_position_embeddings"]
        freqs = 1.0 / (base ** (np.arange(0, d, 2, dtype=np.float32) / d))
        factors = []
        for fr in freqs:
            wavelen = 2 * math.pi / fr
            if wavelen < old / high:
                factors.append(1)
            elif wavelen > old / low:
                factors.append(factor)
            else:
                smooth = (old / wavelen - low) / (high - low)
                factors.append(1 / ((1 - smooth) / factor + smooth))
        w.add_tensor("rope_freqs.weight", np.array(factors, dtype=np.float32))

    elif rope.get("rope_type") == "longrope":  # as convert_hf_to_gguf.py's Phi3MiniModel
        orig = rope.get("original_max_position_embeddings", cfg.get("original_max_position_embeddings"))
        scale = cfg["max_position_embeddings"] / orig
        w.add_rope_scaling_orig_ctx_len(orig)
        w.add_rope_scaling_attn_factors(math.sqrt(1 + math.log(scale) / math.log(orig)) if scale > 1.0 else 1.0)
        w.add_tensor("rope_factors_long.weight", np.array(rope["long_factor"], dtype=np.float32))
        w.add_tensor("rope_factors_short.weight", np.array(rope["short_factor"], dtype=np.float32))

    if gemma:
        w.add_sliding_window(cfg["sliding_window"])
        if cfg.get("attn_logit_softcapping"):
            w.add_attn_logit_softcapping(cfg["attn_logit_softcapping"])
        if cfg.get("final_logit_softcapping"):
            w.add_final_logit_softcapping(cfg["final_logit_softcapping"])

    if args.tokenizer:
        add_tokenizer(w, args.tokenizer, arch, cfg["vocab_size"])

    mix = args.type.endswith("_M")
    for name, t in sorted(tensors.items()):
        qtype = getattr(gguf.GGMLQuantizationType, args.type[:4] if mix else args.type)
        if mix and (name == "model.embed_tokens.weight" or
                    ((name.endswith("v_proj.weight") or name.endswith("down_proj.weight")) and
                     int(name.split(".")[2]) % 2 == 0)):
            qtype = gguf.GGMLQuantizationType.Q6_K
        if name == "model.embed_tokens.weight":
            out = "token_embd.weight"
        elif name == "model.norm.weight":
            out = "output_norm.weight"
        elif name == "lm_head.weight":
            out = "output.weight"
        else:
            parts = name.split(".")
            rest = ".".join(parts[3:])
            out = f"blk.{parts[2]}." + (GEMMA_NAMES.get(rest) if gemma and rest in GEMMA_NAMES else NAMES[rest])
        if gemma and name.endswith("norm.weight"):
            t = t + 1.0  # as convert_hf_to_gguf.py: llama.cpp's Gemma norms multiply by the weight alone
        if arch == "llama" and name.endswith("q_proj.weight"):
            t = permute(t, nh, nh)
        elif arch == "llama" and name.endswith("k_proj.weight"):
            t = permute(t, nh, nkv)
        if t.ndim == 1 or qtype == gguf.GGMLQuantizationType.F32:
            w.add_tensor(out, np.ascontiguousarray(t, dtype=np.float32))
        elif qtype == gguf.GGMLQuantizationType.F16:
            w.add_tensor(out, t.astype(np.float16))
        elif qtype in (gguf.GGMLQuantizationType.Q4_K, gguf.GGMLQuantizationType.Q5_K, gguf.GGMLQuantizationType.Q6_K):
            if t.shape[-1] % 256:  # as llama.cpp: a row that is not whole super-blocks falls back
                w.add_tensor(out, gguf.quants.quantize(t, gguf.GGMLQuantizationType.Q8_0),
                             raw_dtype=gguf.GGMLQuantizationType.Q8_0)
            else:
                quantize = {gguf.GGMLQuantizationType.Q4_K: quantize_q4_k, gguf.GGMLQuantizationType.Q5_K: quantize_q5_k,
                            gguf.GGMLQuantizationType.Q6_K: quantize_q6_k}[qtype]
                w.add_tensor(out, quantize(t), raw_dtype=qtype)
        else:
            w.add_tensor(out, gguf.quants.quantize(t, qtype), raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(json.dumps({"out": args.out, "type": args.type, "arch": arch}))


if __name__ == "__main__":
    main()
