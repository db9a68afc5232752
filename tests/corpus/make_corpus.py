#!/usr/bin/env python3
"""Write Kev's corpus of malformed inputs into OUT, with a manifest of what kev-cli must do.

    make_corpus.py OUT [--builtin FILE.gguf]

Every input is made here, at test time, from the built-in model (its tokenizer, a few
patched copies of it), tiny random models (tests/reference/make_random_model.py) and the
demo adapter: nothing binary is stored in the repository. OUT/manifest.jsonl holds one
case per line:

    {"id": "gguf/version_1", "group": "gguf", "args": [...], "exit": 1,
     "stderr": ["gguf_version_1.gguf", "version"], "stdout": "empty", "timeout_s": 20}

args: kev-cli's arguments; an argument that is not UTF-8 is {"hex": "..."}.
exit: the exit code a correct Kev gives (0 done, 1 model/adapter/file error, 2 usage
error). stderr: fragments that must all appear in stderr (case-sensitive). stdout:
"empty" (a broken input prints no answer), "nonempty", "json" (one valid JSON document)
or "any". Every case must also end within timeout_s and not by a signal.

The expected outcome is what a correct Kev does (issue 18), not what a given build does:
run tests/corpus/run_corpus.py to see the difference.
"""
import argparse
import copy
import json
import math
import os
import pickle
import shutil
import struct
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.dirname(os.path.dirname(HERE))
REFERENCE = os.path.join(SOURCE, "tests", "reference")
DEMO_ADAPTER = os.path.join(SOURCE, "resources", "adapters", "smollm2-135m-capitals")

ASK = ["--max-new-tokens", "4", "Hi"]  # a question, kept short: most cases fail at load

# --------------------------------------------------------------------------- GGUF

T_U8, T_I8, T_U16, T_I16, T_U32, T_I32, T_F32, T_BOOL, T_STR, T_ARR, T_U64, T_I64, T_F64 = range(13)
SCALAR = {T_U8: "<B", T_I8: "<b", T_U16: "<H", T_I16: "<h", T_U32: "<I", T_I32: "<i", T_F32: "<f",
          T_BOOL: "<B", T_U64: "<Q", T_I64: "<q", T_F64: "<d"}
GGML_F32, GGML_F16, GGML_Q4_0, GGML_Q4_1, GGML_Q8_0 = 0, 1, 2, 3, 8


def read_gguf(path, with_values=True):
    """The header of a GGUF file: (kvs [(key, type, value)], tensors [(name, dims, type, rel_offset)], data_start)."""
    with open(path, "rb") as f:
        buf = f.read(64 << 20)  # the header of the built-in model is a few MB
    pos = 0

    def rd(fmt):
        nonlocal pos
        v = struct.unpack_from(fmt, buf, pos)[0]
        pos += struct.calcsize(fmt)
        return v

    def rstr():
        nonlocal pos
        n = rd("<Q")
        s = bytes(buf[pos:pos + n])
        pos += n
        return s

    def rval(t):
        if t == T_STR:
            return rstr()
        if t == T_ARR:
            et, n = rd("<I"), rd("<Q")
            return (et, [rval(et) for _ in range(n)])
        return rd(SCALAR[t])

    assert buf[:4] == b"GGUF"
    pos = 4
    rd("<I")
    n_t, n_kv = rd("<Q"), rd("<Q")
    kvs = []
    for _ in range(n_kv):
        key = rstr().decode()
        t = rd("<I")
        kvs.append((key, t, rval(t)))
    align = next((v for k, _, v in kvs if k == "general.alignment"), 32)
    tensors = []
    for _ in range(n_t):
        name = rstr().decode()
        nd = rd("<I")
        dims = [rd("<Q") for _ in range(nd)]
        tensors.append((name, dims, rd("<I"), rd("<Q")))
    return kvs, tensors, (pos + align - 1) // align * align


def enc_str(s):
    b = s if isinstance(s, bytes) else s.encode()
    return struct.pack("<Q", len(b)) + b


class Gguf:
    """A GGUF file as lists, serialised with the byte position of every field recorded."""

    def __init__(self, kvs, tensors):
        self.kvs = [list(kv) for kv in kvs]      # [key, type, value]; arrays: (elem type, items)
        self.tensors = [dict(t) for t in tensors]  # name, dims, type, data, optional offset

    def kv(self, key):
        return next(kv for kv in self.kvs if kv[0] == key)

    def set(self, key, t, v):
        for kv in self.kvs:
            if kv[0] == key:
                kv[1], kv[2] = t, v
                return self
        self.kvs.append([key, t, v])
        return self

    def tensor(self, name):
        return next(t for t in self.tensors if t["name"] == name)

    def serialise(self):
        out, pos = bytearray(), {}
        out += b"GGUF" + struct.pack("<I", 3)
        pos["n_tensors"] = len(out)
        out += struct.pack("<Q", len(self.tensors))
        pos["n_kv"] = len(out)
        out += struct.pack("<Q", len(self.kvs))
        for key, t, v in self.kvs:
            tag = "kv:" + key
            pos[tag] = len(out)
            out += enc_str(key)
            pos[tag + ":type"] = len(out)
            out += struct.pack("<I", t)
            pos[tag + ":value"] = len(out)
            if t == T_STR:
                out += enc_str(v)
            elif t == T_ARR:
                et, items = v
                out += struct.pack("<I", et)
                pos[tag + ":count"] = len(out)
                out += struct.pack("<Q", len(items))
                pos[tag + ":item0"] = len(out)
                if et == T_STR:
                    out += b"".join(enc_str(x) for x in items)
                else:
                    out += np.asarray(items, dtype=np.dtype(SCALAR[et])).tobytes()
            else:
                out += struct.pack(SCALAR[t], v)
        pos["kv_end"] = len(out)
        offset = 0
        for t in self.tensors:
            if "offset" not in t:
                t["offset"] = offset
            offset = max(offset, (t["offset"] + len(t["data"]) + 31) // 32 * 32)
        for t in self.tensors:
            tag = "ti:" + t["name"]
            pos[tag] = len(out)
            out += enc_str(t["name"])
            pos[tag + ":ndims"] = len(out)
            out += struct.pack("<I", len(t["dims"]))
            for i, d in enumerate(t["dims"]):
                pos[f"{tag}:dim{i}"] = len(out)
                out += struct.pack("<Q", d)
            pos[tag + ":type"] = len(out)
            out += struct.pack("<I", t["type"])
            pos[tag + ":offset"] = len(out)
            out += struct.pack("<Q", t["offset"])
        pos["ti_end"] = len(out)
        data_start = (len(out) + 31) // 32 * 32
        out += b"\0" * (data_start - len(out))
        pos["data_start"] = data_start
        for t in sorted(self.tensors, key=lambda t: t["offset"]):
            at = data_start + t["offset"]
            if len(out) < at:
                out += b"\0" * (at - len(out))
            pos["data:" + t["name"]] = at
            out[at:at + len(t["data"])] = t["data"]
        return out, pos


def q4_1(rows, cols, rng):
    """Q4_1 blocks of a rows x cols matrix: per 32 values a f16 scale d, a f16 min m, 16 bytes of nibbles."""
    n = rows * cols // 32
    blocks = np.zeros(n, dtype=[("d", "<f2"), ("m", "<f2"), ("q", "u1", 16)])
    blocks["d"] = 0.01
    blocks["m"] = -0.075
    blocks["q"] = rng.integers(0, 256, size=(n, 16), dtype=np.uint8)
    return blocks.tobytes()


def tiny_gguf(builtin):
    """A one-layer llama (hidden 64) with the built-in model's tokenizer, Q4_1 linear layers."""
    kvs, _, _ = read_gguf(builtin)
    tok = [kv for kv in kvs if kv[0].startswith("tokenizer.")]
    vocab = len(next(v for k, _, v in kvs if k == "tokenizer.ggml.tokens")[1])
    h, inter, nh, nkv = 64, 128, 4, 2
    d = h // nh
    meta = [("general.architecture", T_STR, "llama"), ("general.name", T_STR, "kev corpus tiny"),
            ("llama.context_length", T_U32, 2048), ("llama.embedding_length", T_U32, h),
            ("llama.block_count", T_U32, 1), ("llama.feed_forward_length", T_U32, inter),
            ("llama.attention.head_count", T_U32, nh), ("llama.attention.head_count_kv", T_U32, nkv),
            ("llama.rope.dimension_count", T_U32, d), ("llama.attention.layer_norm_rms_epsilon", T_F32, 1e-5),
            ("llama.rope.freq_base", T_F32, 10000.0), ("llama.vocab_size", T_U32, vocab)]
    rng = np.random.default_rng(18)

    def norm():
        return (1.0 + 0.1 * rng.standard_normal(h)).astype("<f4").tobytes()

    tensors = [
        dict(name="output_norm.weight", dims=[h], type=GGML_F32, data=norm()),
        dict(name="token_embd.weight", dims=[h, vocab], type=GGML_Q4_1, data=q4_1(vocab, h, rng)),
        dict(name="blk.0.attn_norm.weight", dims=[h], type=GGML_F32, data=norm()),
        dict(name="blk.0.attn_q.weight", dims=[h, nh * d], type=GGML_Q4_1, data=q4_1(nh * d, h, rng)),
        dict(name="blk.0.attn_k.weight", dims=[h, nkv * d], type=GGML_Q4_1, data=q4_1(nkv * d, h, rng)),
        dict(name="blk.0.attn_v.weight", dims=[h, nkv * d], type=GGML_Q4_1, data=q4_1(nkv * d, h, rng)),
        dict(name="blk.0.attn_output.weight", dims=[nh * d, h], type=GGML_Q4_1, data=q4_1(h, nh * d, rng)),
        dict(name="blk.0.ffn_norm.weight", dims=[h], type=GGML_F32, data=norm()),
        dict(name="blk.0.ffn_gate.weight", dims=[h, inter], type=GGML_Q4_1, data=q4_1(inter, h, rng)),
        dict(name="blk.0.ffn_up.weight", dims=[h, inter], type=GGML_Q4_1, data=q4_1(inter, h, rng)),
        dict(name="blk.0.ffn_down.weight", dims=[inter, h], type=GGML_Q4_1, data=q4_1(h, inter, rng)),
    ]
    return Gguf(meta + tok, tensors)


# --------------------------------------------------------------------------- safetensors

def read_st(path):
    with open(path, "rb") as f:
        b = f.read()
    n = struct.unpack_from("<Q", b)[0]
    return json.loads(b[8:8 + n]), b[8 + n:]


def st_bytes(header, data, header_len=None):
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text) if header_len is None else header_len) + text + data


def st_poke(path, tensor, index, value, fmt="<f"):
    """Overwrites element `index` of `tensor` in a safetensors file."""
    header, _ = read_st(path)
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
    at = 8 + n + header[tensor]["data_offsets"][0] + index * struct.calcsize(fmt)
    with open(path, "r+b") as f:
        f.seek(at)
        f.write(struct.pack(fmt, value))


# --------------------------------------------------------------------------- the corpus

class Corpus:
    def __init__(self, out):
        self.out = out
        self.cases = []

    def path(self, *parts):
        p = os.path.join(self.out, *parts)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        return p

    def add(self, group, name, args, exit, stderr=(), stdout=None, timeout_s=20, note=""):
        cid = f"{group}/{name}"
        assert all(c["id"] != cid for c in self.cases), cid
        if stdout is None:
            stdout = "empty" if exit != 0 else "any"
        self.cases.append(dict(id=cid, group=group, args=list(args), exit=exit, stderr=list(stderr),
                               stdout=stdout, timeout_s=timeout_s, note=note))

    def write(self, name, data):
        p = self.path(name)
        with open(p, "wb" if isinstance(data, (bytes, bytearray)) else "w") as f:
            f.write(data)
        return p


def patch(buf, at, fmt, value):
    b = bytearray(buf)
    struct.pack_into(fmt, b, at, value)
    return b


def gguf_cases(c, builtin):
    base = tiny_gguf(builtin)
    good, pos = base.serialise()
    first = base.tensors[0]["name"]   # output_norm.weight
    q = "blk.0.attn_q.weight"

    def case(name, data, exit=1, stderr=(), args=None, **kw):
        f = c.write(f"gguf/gguf_{name}.gguf", data)
        c.add("gguf", name, ["--model", f] + (args if args is not None else ASK), exit,
              ([os.path.basename(f)] if exit else []) + list(stderr), **kw)

    def edited(fn):
        g = copy.deepcopy(base)
        fn(g)
        return g.serialise()[0]

    case("control", good, exit=0, stderr=(), note="the unbroken tiny model: must load and answer")
    case("control_info", good, exit=0, args=["info"], stderr=())
    # Header fields.
    case("magic_ggux", b"GGUX" + good[4:], stderr=["magic"])
    case("magic_zero", b"\0\0\0\0" + good[4:], stderr=["magic"])
    case("magic_ggml_old", b"lmgg" + good[4:], stderr=["magic"])
    for v in (1, 4, 0xFFFFFFFF):
        case(f"version_{v}", patch(good, 4, "<I", v), stderr=["version"])
    for name, v in (("max", 2**64 - 1), ("plus1", len(base.tensors) + 1)):
        case(f"tensor_count_{name}", patch(good, pos["n_tensors"], "<Q", v), stderr=["tensor"])
    case("tensor_count_zero", patch(good, pos["n_tensors"], "<Q", 0), stderr=["token_embd.weight"],
         note="no tensors: the missing tensor is named")
    for name, v in (("max", 2**64 - 1), ("plus1", len(base.kvs) + 1)):
        case(f"kv_count_{name}", patch(good, pos["n_kv"], "<Q", v))
    # Metadata keys, value types, strings and arrays.
    k0 = "kv:general.architecture"
    for name, v in (("huge", 2**63), ("zero", 0), ("plus1", len("general.architecture") + 1)):
        case(f"key_length_{name}", patch(good, pos[k0], "<Q", v))
    for name, v in (("13", 13), ("str_as_u64", T_U64)):
        case(f"value_type_{name}", patch(good, pos[k0 + ":type"], "<I", v))
    case("value_type_block_count_f32", patch(good, pos["kv:llama.block_count:type"], "<I", T_F32),
         stderr=["llama.block_count"])
    case("value_type_heads_i8_bool", edited(lambda g: g.set("llama.attention.head_count", T_BOOL, 4)),
         stderr=["llama.attention.head_count"])
    case("string_length_arch_huge", patch(good, pos[k0 + ":value"], "<Q", 2**62), stderr=["general.architecture"])
    kt = "kv:tokenizer.ggml.tokens"
    case("array_length_tokens_huge", patch(good, pos[kt + ":count"], "<Q", 2**62), stderr=["tokenizer.ggml.tokens"])
    case("array_length_tokens_zero", edited(lambda g: g.set("tokenizer.ggml.tokens", T_ARR, (T_STR, []))),
         stderr=["tokenizer.ggml.tokens"])
    case("array_elem_type_unknown", patch(good, pos[kt + ":value"], "<I", 13), stderr=["tokenizer.ggml.tokens"])
    case("array_elem_type_nested", patch(good, pos[kt + ":value"], "<I", T_ARR), stderr=["tokenizer.ggml.tokens"])
    case("array_item_string_length_huge", patch(good, pos[kt + ":item0"], "<Q", 2**62), stderr=["tokenizer.ggml.tokens"])
    kct = "kv:tokenizer.chat_template"
    if kct in pos:
        case("string_length_chat_template_huge", patch(good, pos[kct + ":value"], "<Q", 2**40),
             stderr=["tokenizer.chat_template"])
        case("chat_template_unknown", edited(lambda g: g.set("tokenizer.chat_template", T_STR, "{{ nonsense }}")),
             stderr=["--chat-format"], note="kev-cli names the option that lets a user choose the format")
        case("chat_template_unknown_chatml_chosen",
             edited(lambda g: g.set("tokenizer.chat_template", T_STR, "{{ nonsense }}")), exit=0,
             args=["--chat-format", "chatml"] + ASK, stderr=())
    case("duplicate_key", edited(lambda g: g.kvs.append(["llama.block_count", T_U32, 1])), stderr=["llama.block_count"])
    case("bool_value_2", edited(lambda g: g.set("tokenizer.ggml.add_bos_token", T_BOOL, 2)),
         stderr=["tokenizer.ggml.add_bos_token"])
    case("alignment_3", edited(lambda g: g.set("general.alignment", T_U32, 3)), stderr=["general.alignment"])
    case("alignment_0", edited(lambda g: g.set("general.alignment", T_U32, 0)), stderr=["general.alignment"])
    case("alignment_string", edited(lambda g: g.set("general.alignment", T_STR, "32")), stderr=["general.alignment"])
    case("architecture_unknown", edited(lambda g: g.set("general.architecture", T_STR, "mamba9")),
         stderr=["mamba9"])
    case("architecture_missing", edited(lambda g: g.kvs.remove(g.kv("general.architecture"))),
         stderr=["general.architecture"])
    # Model hyperparameters.
    for key, v, field in (("head_count", 0, "head_count"), ("head_count", 5, "head_count"),
                          ("head_count", 7, "head_count"), ("head_count_kv", 3, "head_count_kv"),
                          ("head_count_kv", 0, "head_count_kv"), ("head_count", 2**31, "head_count")):
        case(f"{key}_{v}", edited(lambda g, key=key, v=v: g.set(f"llama.attention.{key}", T_U32, v)),
             stderr=[f"llama.attention.{field}"])
    for name, key, t, v in (("block_count_0", "llama.block_count", T_U32, 0),
                            ("block_count_huge", "llama.block_count", T_U32, 2**31),
                            ("embedding_length_0", "llama.embedding_length", T_U32, 0),
                            ("feed_forward_length_0", "llama.feed_forward_length", T_U32, 0),
                            ("context_length_0", "llama.context_length", T_U32, 0),
                            ("rope_freq_base_nan", "llama.rope.freq_base", T_F32, float("nan")),
                            ("rope_freq_base_neg", "llama.rope.freq_base", T_F32, -1.0),
                            ("rms_eps_nan", "llama.attention.layer_norm_rms_epsilon", T_F32, float("nan")),
                            ("rms_eps_neg", "llama.attention.layer_norm_rms_epsilon", T_F32, -1.0),
                            ("rope_dimension_count_7", "llama.rope.dimension_count", T_U32, 7),
                            ("eos_minus1", "tokenizer.ggml.eos_token_id", T_I32, -1),
                            ("eos_int_max", "tokenizer.ggml.eos_token_id", T_U32, 2**31 - 1),
                            ("bos_vocab_size", "tokenizer.ggml.bos_token_id", T_U32, 49152),
                            ("tokenizer_model_unknown", "tokenizer.ggml.model", T_STR, "zzbpe")):
        case(name, edited(lambda g, key=key, t=t, v=v: g.set(key, t, v)), stderr=[key])
    case("eos_minus1_info", edited(lambda g: g.set("tokenizer.ggml.eos_token_id", T_I32, -1)), args=["info"],
         stderr=["tokenizer.ggml.eos_token_id"], note="info validates what a load validates")

    def merges(fn):
        def f(g):
            et, items = g.kv("tokenizer.ggml.merges")[2]
            g.set("tokenizer.ggml.merges", T_ARR, (et, fn(list(items))))
        return f
    case("merge_without_space", edited(merges(lambda m: [b"abc"] + m[1:])), stderr=["merge"])
    case("merge_unknown_token", edited(merges(lambda m: [b"zzqq\xc4\xa0 \xc4\xa0qqzz"] + m[1:])), stderr=["merge"])
    case("token_type_short", edited(lambda g: g.set("tokenizer.ggml.token_type", T_ARR,
                                                   (T_I32, list(g.kv("tokenizer.ggml.token_type")[2][1][:100])))),
         stderr=["tokenizer.ggml.token_type"])
    case("tokens_duplicate", edited(lambda g: g.kv("tokenizer.ggml.tokens")[2][1].__setitem__(300, g.kv("tokenizer.ggml.tokens")[2][1][301])),
         stderr=["tokenizer.ggml.tokens"])
    # Tensor infos.
    tq = "ti:" + q
    for name, v in (("0", 0), ("max", 0xFFFFFFFF)):
        case(f"n_dims_{name}", patch(good, pos[tq + ":ndims"], "<I", v), stderr=[q])
    case("dim_zero", patch(good, pos[tq + ":dim0"], "<Q", 0), stderr=[q])
    case("dim_huge", patch(good, pos[tq + ":dim1"], "<Q", 2**63), stderr=[q])
    case("dims_product_overflow", edited(lambda g: g.tensor(q).update(dims=[2**32, 2**32])), stderr=[q])
    case("dim_not_block_multiple", edited(lambda g: g.tensor(q).update(dims=[48, 64 * 64 // 48])), stderr=[q])
    case("dims_smaller_than_model", edited(lambda g: g.tensor(q).update(dims=[64, 32])), stderr=[q])
    for name, v in (("99", 99), ("q4_2_removed", 4)):
        case(f"ggml_type_{name}", patch(good, pos[tq + ":type"], "<I", v), stderr=[q])
    case("offset_misaligned", patch(good, pos[tq + ":offset"], "<Q", base.tensor(q)["offset"] + 1), stderr=[q])
    case("offset_out_of_bounds", patch(good, pos[tq + ":offset"], "<Q", len(good)), stderr=[q])
    case("offset_huge", patch(good, pos[tq + ":offset"], "<Q", 2**64 - 32), stderr=[q])
    case("offset_overlap_previous", patch(good, pos[tq + ":offset"], "<Q", base.tensor("blk.0.attn_norm.weight")["offset"]),
         stderr=[q])
    case("offset_same_as_neighbour", patch(good, pos["ti:blk.0.attn_k.weight:offset"], "<Q",
                                           base.tensor("blk.0.attn_v.weight")["offset"]), stderr=["blk.0.attn_k.weight"])
    case("retyped_q4_1_as_f32", patch(good, pos[tq + ":type"], "<I", GGML_F32), stderr=[q],
         note="the F32 tensor would read its neighbours' bytes")
    case("retyped_q4_1_as_q8_0", patch(good, pos[tq + ":type"], "<I", GGML_Q8_0), stderr=[q])
    case("retyped_embedding_as_f16", patch(good, pos["ti:token_embd.weight:type"], "<I", GGML_F16),
         stderr=["token_embd.weight"])
    case("duplicate_tensor", edited(lambda g: g.tensors.append({k: v for k, v in g.tensor(q).items() if k != "offset"})),
         stderr=[q])
    case("missing_tensor", edited(lambda g: g.tensor("blk.0.ffn_up.weight").update(name="blk.0.ffn_upx.weight")),
         stderr=["blk.0.ffn_up.weight"])
    case("tensor_name_length_huge", patch(good, pos[tq], "<Q", 2**62))
    # Non-finite weights: reported at load, not an empty answer.
    nan_f32, inf_f32 = struct.pack("<f", float("nan")), struct.pack("<f", float("inf"))
    for name, tensor, at, val in (("nan_output_norm", "output_norm.weight", 0, nan_f32),
                                  ("inf_attn_norm", "blk.0.attn_norm.weight", 17 * 4, inf_f32),
                                  ("neginf_ffn_norm", "blk.0.ffn_norm.weight", 63 * 4, struct.pack("<f", float("-inf"))),
                                  ("nan_q4_1_scale_attn_q", q, 0, struct.pack("<e", float("nan"))),
                                  ("inf_q4_1_min_ffn_down", "blk.0.ffn_down.weight", 24 * 5 + 2, struct.pack("<e", float("inf"))),
                                  ("nan_q4_1_scale_embedding", "token_embd.weight", 24 * 1000, struct.pack("<e", float("nan")))):
        b = bytearray(good)
        b[pos["data:" + tensor] + at:pos["data:" + tensor] + at + len(val)] = val
        case(name, b, stderr=[tensor])
    b = bytearray(good)
    b[pos["data:output_norm.weight"]:pos["data:output_norm.weight"] + 4] = nan_f32
    case("nan_output_norm_info", b, args=["info"], stderr=["output_norm.weight"])
    case("nan_output_norm_json", b, args=["--json"] + ASK, stderr=["output_norm.weight"])
    # Truncations at many points.
    cuts = {"0": 0, "6": 6, "24": 24,
            "key0_length": pos[k0] + 4, "key0": pos[k0] + 12, "value0": pos[k0 + ":value"] + 3,
            "kv_middle": (pos[kt] + pos["kv_end"]) // 2,
            "kv_end": pos["kv_end"], "tensor_info0": pos["ti:" + first] + 5, "tensor_info_dims": pos[tq + ":dim0"] + 2,
            "data_start": pos["data_start"],
            "data_first_tensor": pos["data_start"] + 100, "data_middle": len(good) // 2 + 7, "last_byte": len(good) - 1}
    for name, at in cuts.items():
        case(f"truncated_{name}", good[:at])
    case("zeros_1mib", bytes(1 << 20))
    case("text_file", b"this is not a model\n" * 100)
    # Patched copies of the built-in model itself.
    kvs, tensors, data_start = read_gguf(builtin)
    info = {t[0]: t for t in tensors}
    size = os.path.getsize(builtin)

    def builtin_case(name, edits, stderr=(), exit=1, cut=None):
        f = c.path(f"gguf/builtin_{name}.gguf")
        if cut is None:
            shutil.copyfile(builtin, f)
        else:
            with open(builtin, "rb") as src, open(f, "wb") as dst:
                dst.write(src.read(cut))
        with open(f, "r+b") as dst:
            for at, val in edits:
                dst.seek(at)
                dst.write(val)
        c.add("gguf", f"builtin_{name}", ["--model", f] + ASK, exit, [os.path.basename(f)] + list(stderr))

    builtin_case("nan_output_norm", [(data_start + info["output_norm.weight"][3], nan_f32)], ["output_norm.weight"])
    q41 = next(t for t in tensors if t[2] == GGML_Q4_1 and t[0].startswith("blk.0."))
    builtin_case("nan_q4_1_scale", [(data_start + q41[3] + 20 * 3, struct.pack("<e", float("nan")))], [q41[0]])
    builtin_case("truncated_half", [], cut=size // 2)


# --------------------------------------------------------------------------- Hugging Face folders

def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(cp) for b, cp in zip(bs, cs)}


SPECIALS = ["<|im_start|>", "<|im_end|>", "<|endoftext|>"]


def byte_tokenizer():
    """A byte-level BPE tokenizer.json: 256 byte tokens, 3 specials (256..258), a few merges."""
    table = bytes_to_unicode()
    vocab = {table[b]: b for b in range(256)}
    merges = []
    for a, b in (("H", "i"), ("t", "h"), ("th", "e")):
        vocab[a + b] = len(vocab)
        merges.append(f"{a} {b}")
    # Specials after the merged tokens: ids 259..261.
    added = []
    for s in SPECIALS:
        added.append({"id": len(vocab), "content": s, "single_word": False, "lstrip": False, "rstrip": False,
                      "normalized": False, "special": True})
        vocab[s] = len(vocab)
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": None,
            "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
            "post_processor": None, "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                                                "use_regex": True},
            "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                      "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                      "vocab": vocab, "merges": merges}}


def hf_base(out, chat_template):
    """tiny-llama random weights + the byte tokenizer: a folder that loads and answers."""
    d = os.path.join(out, "base", "hf")
    if not os.path.exists(os.path.join(d, "model.safetensors")):
        subprocess.run([sys.executable, os.path.join(REFERENCE, "make_random_model.py"), "--preset", "tiny-llama",
                        "--out", d], check=True, stdout=subprocess.DEVNULL)
    tok = byte_tokenizer()
    ids = {t["content"]: t["id"] for t in tok["added_tokens"]}
    with open(os.path.join(d, "tokenizer.json"), "w") as f:
        json.dump(tok, f, ensure_ascii=False)
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump({"chat_template": chat_template, "eos_token": "<|im_end|>", "bos_token": None,
                   "model_max_length": 2048}, f)
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    cfg["bos_token_id"], cfg["eos_token_id"] = ids["<|im_start|>"], ids["<|im_end|>"]
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    with open(os.path.join(d, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": cfg["bos_token_id"], "eos_token_id": cfg["eos_token_id"]}, f)
    return d


def hf_copy(c, base, group, name):
    d = c.path(group, name, "x")
    d = os.path.dirname(d)
    shutil.rmtree(d, ignore_errors=True)
    shutil.copytree(base, d)
    return d


def edit_json(path, fn, raw=None):
    if raw is not None:
        with open(path, "wb" if isinstance(raw, bytes) else "w") as f:
            f.write(raw)
        return
    with open(path) as f:
        j = json.load(f)
    j = fn(j) or j
    with open(path, "w") as f:
        json.dump(j, f, ensure_ascii=False)


def set_path(j, path, value):
    """Sets j[a][b]... = value (path "a.b"); a value of DELETE removes the key."""
    keys = path.split(".")
    for k in keys[:-1]:
        j = j[k]
    if value is DELETE:
        j.pop(keys[-1], None)
    else:
        j[keys[-1]] = value


DELETE = object()


def safetensors_cases(c, base):
    st = os.path.join(base, "model.safetensors")
    header, data = read_st(st)
    names = [k for k in header if k != "__metadata__"]
    norm = "model.norm.weight"
    qp = "model.layers.0.self_attn.q_proj.weight"

    def case(name, content=None, fn=None, stderr=("model.safetensors",), exit=1, args=None):
        d = hf_copy(c, base, "safetensors", name)
        if content is not None:
            with open(os.path.join(d, "model.safetensors"), "wb") as f:
                f.write(content)
        if fn:
            fn(d)
        c.add("safetensors", name, ["--model", d] + (args if args is not None else ASK), exit, list(stderr))

    def hdr(fn, header_len=None):
        h = copy.deepcopy(header)
        fn(h)
        return st_bytes(h, data, header_len)

    case("control", fn=lambda d: None, stderr=(), exit=0)
    case("control_info", fn=lambda d: None, stderr=(), exit=0, args=["info"])
    good = st_bytes(header, data)
    hl = struct.unpack_from("<Q", good)[0]
    for name, v in (("zero", 0), ("max", 2**64 - 1), ("one_short", hl - 1), ("100mb", 100 << 20)):
        case(f"header_length_{name}", patch(good, 0, "<Q", v))
    case("header_json_broken", good[:8] + b"{" + b"x" * (hl - 1) + good[8 + hl:])
    case("header_json_array", st_bytes([1, 2], data))
    case("header_json_nested_deep", struct.pack("<Q", 40000) + b"[" * 20000 + b"]" * 20000 + data)
    case("header_not_utf8", good[:8] + b"{\"\xff\xfe\": 1}" + b" " * (hl - 9) + good[8 + hl:])
    for name, fn, field in (
            ("dtype_unknown", lambda h: h[norm].update(dtype="F99"), norm),
            ("dtype_number", lambda h: h[norm].update(dtype=7), norm),
            ("dtype_i64", lambda h: h[norm].update(dtype="I64", shape=[32]), norm),
            ("dtype_missing", lambda h: h[norm].pop("dtype"), norm),
            ("shape_mismatch_offsets", lambda h: h[qp].update(shape=[64, 65]), qp),
            ("shape_negative", lambda h: h[qp].update(shape=[-64, -64]), qp),
            ("shape_overflow", lambda h: h[qp].update(shape=[2**62, 2**62]), qp),
            ("shape_not_list", lambda h: h[qp].update(shape="64"), qp),
            ("shape_wrong_for_model", lambda h: h[qp].update(shape=[32, 128]), None),
            ("offsets_reversed", lambda h: h[qp].update(data_offsets=h[qp]["data_offsets"][::-1]), qp),
            ("offsets_past_end", lambda h: h[qp].update(data_offsets=[len(data), len(data) + 16384]), qp),
            ("offsets_negative", lambda h: h[qp].update(data_offsets=[-16384, 0]), qp),
            ("offsets_three", lambda h: h[qp].update(data_offsets=h[qp]["data_offsets"] + [0]), qp),
            ("offsets_missing", lambda h: h[qp].pop("data_offsets"), qp),
            ("offsets_huge", lambda h: h[qp].update(data_offsets=[2**64 - 16, 2**64 + 16368]), qp),
            ("entry_not_object", lambda h: h.update({qp: [1, 2]}), qp),
            ("missing_tensor", lambda h: h.pop("model.layers.1.mlp.up_proj.weight"), None)):
        case(name, hdr(fn), stderr=["model.safetensors", field] if field else [qp if "shape" in name else
                                                                               "model.layers.1.mlp.up_proj.weight"])
    extra = dict(dtype="F32", shape=[64], data_offsets=[len(data), len(data) + 256])
    case("unexpected_tensor", st_bytes(dict(header, **{"model.layers.7.mlp.zz_proj.weight": extra}), data + bytes(256)),
         stderr=["model.layers.7.mlp.zz_proj.weight"])
    # Two norms of the same shape sharing bytes: overlap.
    other = "model.layers.0.input_layernorm.weight"
    case("offsets_overlap", hdr(lambda h: h[other].update(data_offsets=h[norm]["data_offsets"])),
         stderr=["model.safetensors", "overlap"])
    for name, at in (("4", 4), ("header_middle", 8 + hl // 2), ("header_end", 8 + hl),
                     ("data_middle", 8 + hl + len(data) // 2), ("last_byte", len(good) - 1)):
        case(f"truncated_{name}", good[:at])
    for name, tensor, index, v in (("nan_final_norm", norm, 0, float("nan")),
                                   ("inf_input_layernorm", "model.layers.0.input_layernorm.weight", 5, float("inf")),
                                   ("nan_post_attention_layernorm", "model.layers.1.post_attention_layernorm.weight", 63,
                                    float("nan"))):
        case(name, fn=lambda d, tensor=tensor, index=index, v=v: st_poke(os.path.join(d, "model.safetensors"), tensor, index, v),
             stderr=["model.safetensors", tensor])
    # Sharded checkpoints: the index names the files.
    idx = "model.safetensors.index.json"

    def sharded(shard_map):
        def fn(d):
            os.rename(os.path.join(d, "model.safetensors"), os.path.join(d, "model-00001-of-00002.safetensors"))
            with open(os.path.join(d, idx), "w") as f:
                json.dump({"metadata": {}, "weight_map": shard_map(names)}, f)
        return fn
    case("index_missing_shard", fn=sharded(lambda n: {k: "model-00002-of-00002.safetensors" for k in n}),
         stderr=["model-00002-of-00002.safetensors"])
    case("index_path_traversal", fn=sharded(lambda n: {k: "../../../../etc/passwd" for k in n}), stderr=[idx])
    case("index_broken_json", fn=lambda d: (sharded(lambda n: {})(d),
                                            edit_json(os.path.join(d, idx), None, raw="{\"weight_map\": {")), stderr=[idx])
    case("index_weight_map_list", fn=lambda d: (sharded(lambda n: {})(d),
                                                edit_json(os.path.join(d, idx), None, raw="{\"weight_map\": [1]}")),
         stderr=[idx, "weight_map"])
    case("folder_pickle_only", fn=lambda d: (os.remove(os.path.join(d, "model.safetensors")),
                                             c_write_pickle(os.path.join(d, "pytorch_model.bin"))),
         stderr=["safetensors"])


def c_write_pickle(path):
    with open(path, "wb") as f:
        pickle.dump({"model.norm.weight": [1.0] * 4}, f, protocol=2)


def config_cases(c, base):
    def case(name, key=None, value=None, stderr=None, raw=None, remove=False, fname="config.json", exit=1, args=None):
        d = hf_copy(c, base, "config", name)
        p = os.path.join(d, fname)
        if remove:
            os.remove(p)
        elif raw is not None:
            edit_json(p, None, raw=raw)
        else:
            edit_json(p, lambda j: set_path(j, key, value))
        frag = [fname] + ([key.split(".")[-1]] if key and stderr is None else []) + list(stderr or [])
        c.add("config", name, ["--model", d] + (args if args is not None else ASK), exit, frag)

    case("missing", remove=True)
    case("empty", raw="")
    case("not_json", raw="{\"hidden_size\": 64,")
    case("array", raw="[1, 2, 3]")
    case("nested_deep", raw="[" * 100000 + "]" * 100000)
    case("not_utf8", raw=b"{\"model_type\": \"ll\xffama\"}")
    case("nan_literal", raw=open(os.path.join(base, "config.json")).read().replace("1e-05", "NaN"))
    case("number_overflow", raw=open(os.path.join(base, "config.json")).read().replace("1e-05", "1e400"))
    for v in (0, 5, 7, "4", None):
        case(f"num_attention_heads_{json.dumps(v).strip(chr(34))}", "num_attention_heads", v)
    case("num_attention_heads_missing", "num_attention_heads", DELETE)
    case("num_attention_heads_0_info", "num_attention_heads", 0, args=["info"])
    for v in (0, 3, 8, -2):
        case(f"num_key_value_heads_{v}", "num_key_value_heads", v)
    for v in (0, 2**40):
        case(f"hidden_size_{json.dumps(v).strip(chr(34))}", "hidden_size", v)
    for v in (-1, 2**31):
        case(f"num_hidden_layers_{v}", "num_hidden_layers", v)
    for v in (0, -1):
        case(f"intermediate_size_{v}", "intermediate_size", v)
    for v in (0, 100):
        case(f"vocab_size_{v}", "vocab_size", v)
    for v in (-1.0, "eps"):
        case(f"rms_norm_eps_{v}", "rms_norm_eps", v)
    for v in (0.0, -1.0, "x"):
        case(f"rope_theta_{v}", "rope_parameters.rope_theta", v)
    case("rope_type_unknown", "rope_parameters.rope_type", "zzrope", stderr=["zzrope"])
    for v in (0.0, -8.0):
        case(f"rope_factor_{v}", "rope_parameters.factor", v)
    for v in (0, -1):
        case(f"max_position_embeddings_{v}", "max_position_embeddings", v)
    for v in (-1, 2**31, [259, -1]):
        case(f"eos_token_id_{json.dumps(v).replace(' ', '')}", "eos_token_id", v)
    case("bos_token_id_99999", "bos_token_id", 99999)
    case("model_type_unknown", "model_type", "zzarch", stderr=["zzarch"])
    case("model_type_number", "model_type", 42)
    case("model_type_missing", "model_type", DELETE)
    for v in (7, -16):
        case(f"head_dim_{v}", "head_dim", v)
    case("tie_word_embeddings_string", "tie_word_embeddings", "yes")
    case("hidden_act_unknown", "hidden_act", "zzact", stderr=["zzact"])
    case("generation_config_broken", raw="{\"eos_token_id\": ", fname="generation_config.json")
    case("generation_config_eos_minus1", "eos_token_id", -1, fname="generation_config.json")


def tokenizer_cases(c, base, spm_dir):
    tj = "tokenizer.json"

    def case(name, fn=None, raw=None, stderr=(), fname=tj, exit=1, args=None, remove=False):
        d = hf_copy(c, base, "tokenizer", name)
        p = os.path.join(d, fname)
        if remove:
            os.remove(p)
        elif raw is not None:
            edit_json(p, None, raw=raw)
        elif fn:
            edit_json(p, fn)
        c.add("tokenizer", name, ["--model", d] + (args if args is not None else ASK), exit, [fname] + list(stderr))

    def vocab(fn):
        return lambda j: fn(j["model"]["vocab"])

    def added(fn):
        return lambda j: fn(j["added_tokens"])

    case("missing_all", fn=None, remove=True, stderr=())
    c.cases[-1]["stderr"] = ["tokenizer"]
    case("empty", raw="")
    case("not_json", raw="{\"model\": ")
    case("array", raw="[]")
    case("vocab_id_negative", vocab(lambda v: v.update(a=-5)), stderr=["-5"])
    case("vocab_id_negative_info", vocab(lambda v: v.update(a=-5)), stderr=["-5"], args=["info"])
    case("vocab_id_negative_tokenize", vocab(lambda v: v.update(a=-5)), stderr=["-5"], args=["tokenize", "--text", "a"])
    case("vocab_id_int_max", vocab(lambda v: v.update(a=2147483647)), stderr=["2147483647"])
    case("vocab_id_2p40", vocab(lambda v: v.update(a=2**40)))
    case("vocab_id_string", vocab(lambda v: v.update(a="5")), stderr=["vocab"])
    case("vocab_id_float", vocab(lambda v: v.update(a=3.5)), stderr=["vocab"])
    case("vocab_not_object", lambda j: j["model"].update(vocab=[["a", 0]]), stderr=["vocab"])
    case("vocab_empty", lambda j: j["model"].update(vocab={}, merges=[]), stderr=["vocab"])
    case("vocab_larger_than_embedding", vocab(lambda v: v.update({f"\u0100zz{i}": 262 + i for i in range(400)})),
         stderr=["embedding"])
    case("added_id_negative", added(lambda a: a[0].update(id=-3)), stderr=["-3"])
    case("added_id_int_max", added(lambda a: a[0].update(id=2147483647)), stderr=["2147483647"])
    case("added_id_string", added(lambda a: a[0].update(id="256")), stderr=["added_tokens"])
    case("added_content_number", added(lambda a: a[0].update(content=42)), stderr=["added_tokens"])
    case("added_not_list", lambda j: j.update(added_tokens={"a": 1}), stderr=["added_tokens"])
    case("merge_without_space", lambda j: j["model"].update(merges=["Hi"]), stderr=["merge"])
    case("merge_unknown_token", lambda j: j["model"].update(merges=["zz qq"]), stderr=["merge"])
    case("merges_not_list", lambda j: j["model"].update(merges="H i"), stderr=["merges"])
    case("merge_number", lambda j: j["model"].update(merges=[42]), stderr=["merge"])
    case("merge_pair_of_one", lambda j: j["model"].update(merges=[["H"]]), stderr=["merge"])
    case("model_missing", lambda j: j.pop("model"), stderr=["model"])
    case("model_type_unknown", lambda j: j["model"].update(type="ZzPiece"), stderr=["ZzPiece"])
    case("pre_tokenizer_unknown", lambda j: j.update(pre_tokenizer={"type": "ZzSplit"}), stderr=["ZzSplit"])
    case("config_broken", raw="{\"chat_template\": ", fname="tokenizer_config.json")
    case("config_chat_template_number", lambda j: j.update(chat_template=42), fname="tokenizer_config.json")
    # tokenizer.model (SentencePiece), in a folder without tokenizer.json.
    with open(os.path.join(spm_dir, "sp.model"), "rb") as f:
        sp = f.read()

    def sp_case(name, content, exit=1, stderr=("tokenizer.model",)):
        d = hf_copy(c, base, "tokenizer", "spm_" + name)
        os.remove(os.path.join(d, tj))
        os.remove(os.path.join(d, "tokenizer_config.json"))
        with open(os.path.join(d, "config.json")) as f:
            cfg = json.load(f)
        cfg["bos_token_id"], cfg["eos_token_id"] = 1, 2
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(cfg, f)
        with open(os.path.join(d, "generation_config.json"), "w") as f:
            json.dump({"bos_token_id": 1, "eos_token_id": 2}, f)
        with open(os.path.join(d, "tokenizer.model"), "wb") as f:
            f.write(content)
        c.add("tokenizer", "spm_" + name, ["--model", d, "--chat-format", "llama2"] + ASK, exit, list(stderr))

    sp_case("control", sp, exit=0, stderr=())
    sp_case("empty", b"")
    sp_case("garbage", bytes(range(256)) * 16)
    sp_case("text", b"this is not a sentencepiece model\n")
    for frac in (7, len(sp) // 2, len(sp) - 1):
        sp_case(f"truncated_{frac}", sp[:frac])
    # Field 1 (pieces), wire type 2: a length far past the end.
    sp_case("piece_length_huge", b"\x0a" + b"\xff\xff\xff\xff\xff\xff\xff\xff\x7f" + sp[1:])
    sp_case("varint_overlong", b"\x0a" + b"\xff" * 11 + sp[1:])
    sp_case("wire_type_7", b"\x0f" + sp[1:])
    sp_case("no_pieces", b"\x12\x02\x18\x02")  # only a trainer_spec {model_type: BPE}
    # The first piece's type (field 3) made 99: rewritten inside its own message.
    first_len = sp[1]
    if first_len < 0x80:
        piece = bytearray(sp[2:2 + first_len])
        if b"\x18" in piece:
            i = piece.rindex(b"\x18")
            if i + 1 < len(piece) and piece[i + 1] < 0x80:
                piece[i + 1] = 99
                sp_case("piece_type_99", sp[:2] + bytes(piece) + sp[2 + first_len:])


def train_spm(out):
    d = os.path.join(out, "base", "spm")
    os.makedirs(d, exist_ok=True)
    if not os.path.exists(os.path.join(d, "sp.model")):
        import sentencepiece as spm
        text = [f"The {w} of number {i} is on the table and it sings." for i in range(400)
                for w in ("cat", "dog", "bird")]
        spm.SentencePieceTrainer.train(sentence_iterator=iter(text), model_prefix=os.path.join(d, "sp"),
                                       model_type="bpe", vocab_size=300, byte_fallback=True,
                                       minloglevel=2)
    return d


def adapter_cases(c, tiny_gguf_path):
    cfg_name, w_name = "adapter_config.json", "adapter_model.safetensors"
    header, data = read_st(os.path.join(DEMO_ADAPTER, w_name))
    a0 = next(k for k in header if k.endswith("lora_A.weight"))
    b0 = next(k for k in header if k.endswith("lora_B.weight"))

    def case(name, cfg=None, raw=None, weights=None, fn=None, stderr=(), exit=1, args=None, model=None):
        d = c.path("adapter", name, "x")
        d = os.path.dirname(d)
        shutil.rmtree(d, ignore_errors=True)
        shutil.copytree(DEMO_ADAPTER, d)
        if cfg:
            edit_json(os.path.join(d, cfg_name), cfg)
        if raw is not None:
            edit_json(os.path.join(d, cfg_name), None, raw=raw)
        if weights is not None:
            with open(os.path.join(d, w_name), "wb") as f:
                f.write(weights)
        if fn:
            fn(d)
        m = ["--model", model] if model else []
        # The message names the adapter (its folder, or a file in it) and the field.
        frags = ([name] if exit == 1 else []) + [f for f in stderr if f not in (cfg_name, w_name)]
        c.add("adapter", name, m + ["--lora", d] + (args if args is not None else ASK), exit, frags, timeout_s=30)

    case("control", stderr=(), exit=0)
    case("config_missing", fn=lambda d: os.remove(os.path.join(d, cfg_name)), stderr=[cfg_name])
    case("config_broken", raw="{\"r\": 8,", stderr=[cfg_name])
    case("config_array", raw="[]", stderr=[cfg_name])
    for v in (0, "8", 10**9, 4):
        case(f"r_{json.dumps(v).strip(chr(34))}", cfg=lambda j, v=v: j.update(r=v), stderr=[cfg_name])
    case("r_missing", cfg=lambda j: j.pop("r"), stderr=[cfg_name])
    case("alpha_1e38", cfg=lambda j: j.update(lora_alpha=1e38), stderr=[cfg_name, "lora_alpha"])
    case("alpha_string", cfg=lambda j: j.update(lora_alpha="16"), stderr=[cfg_name, "lora_alpha"])
    case("alpha_nan_literal", raw=json.dumps(json.load(open(os.path.join(DEMO_ADAPTER, cfg_name)))).replace(
        "\"lora_alpha\": 16", "\"lora_alpha\": NaN"), stderr=[cfg_name])
    case("alpha_zero", cfg=lambda j: j.update(lora_alpha=0), stderr=[cfg_name, "lora_alpha"])
    case("target_regex_backtracking", cfg=lambda j: j.update(target_modules="(.*.*)*X"),
         stderr=[cfg_name, "target_modules"])
    case("target_regex_nested_20000", cfg=lambda j: j.update(target_modules="(" * 20000 + "q" + ")" * 20000),
         stderr=[cfg_name, "target_modules"])
    case("target_regex_invalid", cfg=lambda j: j.update(target_modules="q_proj["), stderr=[cfg_name, "target_modules"])
    case("target_modules_number", cfg=lambda j: j.update(target_modules=42), stderr=[cfg_name, "target_modules"])
    case("target_modules_list_of_numbers", cfg=lambda j: j.update(target_modules=[1, 2]),
         stderr=[cfg_name, "target_modules"])
    case("peft_type_prefix", cfg=lambda j: j.update(peft_type="PREFIX_TUNING"), stderr=[cfg_name, "PREFIX_TUNING"])
    case("use_dora", cfg=lambda j: j.update(use_dora=True), stderr=[cfg_name, "use_dora"])
    case("base_model_mismatch", model=tiny_gguf_path, stderr=["base_model_mismatch"],
         args=ASK)
    case("weights_missing", fn=lambda d: os.remove(os.path.join(d, w_name)), stderr=[w_name])
    case("weights_truncated", weights=st_bytes(header, data)[:len(data) // 2], stderr=[w_name])
    case("weights_header_broken", weights=b"\x10\0\0\0\0\0\0\0{{{{{{{{{{{{{{{{", stderr=[w_name])
    h = copy.deepcopy(header)
    h[a0]["shape"] = h[a0]["shape"][::-1]
    case("weights_wrong_shape", weights=st_bytes(h, data), stderr=[a0.split("lora_A")[0].replace("base_model.model.", "")])
    h = copy.deepcopy(header)
    h[a0]["dtype"] = "I16"
    case("weights_dtype_int", weights=st_bytes(h, data), stderr=[w_name])
    h = copy.deepcopy(header)
    h.pop(b0)
    case("weights_missing_b", weights=st_bytes(h, data), stderr=[w_name])
    nan16 = struct.pack("<e", float("nan"))
    inf16 = struct.pack("<e", float("inf"))
    for name, t, v in (("weights_nan_lora_b", b0, nan16), ("weights_inf_lora_a", a0, inf16)):
        d = bytearray(data)
        at = header[t]["data_offsets"][0] + 2 * 3
        d[at:at + 2] = v
        case(name, weights=st_bytes(header, bytes(d)), stderr=[w_name])
    case("lora_scale_nan_flag", args=["--lora-scale", "nan"] + ASK, exit=2, stderr=["--lora-scale"])
    case("lora_path_missing", fn=lambda d: shutil.rmtree(d), stderr=["lora_path_missing"])


def question_cases(c):
    def qfile(name, content):
        return c.write(f"questions/{name}", content)

    def case(name, content, stderr=None, exit=1, args=(), fname=None, **kw):
        f = qfile(fname or f"{name}.json", content) if content is not None else fname
        c.add("questions", name, list(args) + ["--max-new-tokens", "4", "--file", f], exit,
              [os.path.basename(f)] + list(stderr or []), **kw)

    case("control", json.dumps(["Hi", {"question": "Hello", "temperature": 0.5, "seed": 3}]), exit=0, stderr=[])
    c.cases[-1]["stderr"] = []
    case("control_jsonl", "\"Hi\"\n{\"question\": \"Hello\"}\n", exit=0, fname="control_jsonl.jsonl")
    c.cases[-1]["stderr"] = []
    case("jsonl_bad_line_3", "\"Hi\"\n{\"question\": \"a\"}\n{\"question\": \n\"x\"\n", stderr=["line 3"],
         fname="jsonl_bad_line_3.jsonl")
    case("jsonl_wrong_type_line_2", "\"Hi\"\n[1, 2]\n", stderr=["line 2"], fname="jsonl_wrong_type_line_2.jsonl")
    case("json_broken", "[\"Hi\", ")
    case("json_object_top", "{\"question\": \"Hi\"}")
    case("json_empty_array", "[]")
    case("json_empty_file", "")
    case("json_nested_deep", "[" * 100000 + "]" * 100000)
    case("not_utf8", b"[\"caf\xe9\"]")
    for field, v in (("temperature", "1e400"), ("temperature", "-1"), ("temperature", "\"hot\""),
                     ("temperature", "NaN"), ("top_k", "4294967297"), ("top_k", "-1"),
                     ("top_p", "0"), ("top_p", "2"), ("repetition_penalty", "0"),
                     ("max_new_tokens", "0"), ("max_new_tokens", "-1"), ("max_new_tokens", "1e30"),
                     ("seed", "-1"), ("seed", "18446744073709551616"), ("stop", "42"),
                     ("lora", "\"yes\""), ("lora_scale", "1e400"), ("lora_scale", "-1")):
        name = f"{field}_{v.strip(chr(34)).replace('-', 'minus').replace('.', 'p')}"
        case(name, "[{\"question\": \"Hi\", \"" + field + "\": " + v + "}]", stderr=[field])
    case("question_empty", "[\"\"]", stderr=["question"])
    case("question_empty_object", "[{\"question\": \"\"}]", stderr=["question"])
    case("question_number", "[42]")
    case("question_missing", "[{\"temperature\": 0.5}]", stderr=["question"])
    case("question_not_string", "[{\"question\": [\"Hi\"]}]", stderr=["question"])
    case("unknown_key", "[{\"question\": \"Hi\", \"temprature\": 0.5}]", stderr=["temprature"])
    big = qfile("huge.json", "[\"" + "a" * (17 << 20) + "\"]")
    c.add("questions", "huge_file", ["--file", big], 1, ["huge.json"])
    d = c.path("questions", "a_directory.json", "x")
    os.makedirs(os.path.dirname(d), exist_ok=True)
    c.add("questions", "directory", ["--file", os.path.dirname(d)], 1, ["a_directory.json"])
    fifo = c.path("questions", "fifo.jsonl")
    if not os.path.exists(fifo):
        os.mkfifo(fifo)
    c.add("questions", "fifo", ["--file", fifo], 1, ["fifo.jsonl"])
    c.add("questions", "dev_zero", ["--file", "/dev/zero"], 1, ["/dev/zero"])
    c.add("questions", "missing", ["--file", c.path("questions", "no_such_file.json")], 1, ["no_such_file.json"])


def cli_cases(c, builtin):
    def case(name, args, exit=2, stderr=(), **kw):
        c.add("cli", name, args, exit, list(stderr), **kw)

    for flag, v in (("--top-k", "4294967297"), ("--top-k", "-1"), ("--top-k", ""),
                    ("--logprobs", "4294967296"), ("--logprobs", "101"), ("--logprobs", "-1"),
                    ("--temperature", "-1"), ("--temperature", "nan"), ("--temperature", "inf"),
                    ("--temperature", "1e400"), ("--temperature", "11"),
                    ("--top-p", "0"), ("--top-p", "1.5"), 
                    ("--min-p", "1"), ("--repetition-penalty", "0"),
                    ("--max-new-tokens", "0"), ("--max-new-tokens", "-1"),
                    ("--max-new-tokens", "9223372036854775808"), ("--max-new-tokens", "abc"),
                    ("--seed", "-1"), ("--seed", "18446744073709551616"), ("--lora-scale", "nan"),
                    ("--lora-scale", "-1"), ("--precision", "fp64"), ("--device", "tpu"),
                    ("--chat-format", "zz")):
        name = f"{flag.strip('-').replace('-', '_')}_{v.replace('-', 'minus').replace('.', 'p') or 'empty'}"
        # The option's name, as a message about its value would spell it ("top-p 0 is outside (0, 1]").
        field = {"--repetition-penalty": "repetition", "--lora-scale": "scale"}.get(flag, flag.lstrip("-"))
        case(name, [flag, v, "Hi"], stderr=[field])
    case("max_new_tokens_int64_max", ["--max-new-tokens", "9223372036854775807", "Hi"], exit=0, stdout="nonempty",
         timeout_s=60)
    case("unknown_flag", ["--frobnicate", "Hi"], stderr=["--frobnicate"])
    case("flag_without_value", ["Hi", "--model"], stderr=["--model"])
    case("json_and_jsonl", ["--json", "--jsonl", "Hi"], stderr=["--json"])
    case("no_question", [], stderr=["question"])
    d = c.path("cli", "a_directory", "x")
    os.makedirs(os.path.dirname(d), exist_ok=True)
    d = os.path.dirname(d)
    fifo = c.path("cli", "fifo_model.gguf")
    if not os.path.exists(fifo):
        os.mkfifo(fifo)
    fifo_ctx = c.path("cli", "fifo_context.txt")
    if not os.path.exists(fifo_ctx):
        os.mkfifo(fifo_ctx)
    big = c.write("cli/big_context.txt", "word " * ((17 << 20) // 5))
    case("shared_context_dev_zero", ["--shared-context", "@/dev/zero", "Hi"], exit=1, stderr=["/dev/zero"])
    case("shared_context_directory", ["--shared-context", "@" + d, "Hi"], exit=1, stderr=["a_directory"])
    case("shared_context_fifo", ["--shared-context", "@" + fifo_ctx, "Hi"], exit=1, stderr=["fifo_context.txt"])
    case("shared_context_missing", ["--shared-context", "@" + d + "/nope.txt", "Hi"], exit=1, stderr=["nope.txt"])
    case("shared_context_too_big", ["--shared-context", "@" + big, "Hi"], exit=1, stderr=["big_context.txt"])
    case("model_fifo", ["--model", fifo, "Hi"], exit=1, stderr=["fifo_model.gguf"])
    case("model_fifo_info", ["info", "--model", fifo], exit=1, stderr=["fifo_model.gguf"])
    case("model_dev_zero", ["--model", "/dev/zero", "Hi"], exit=1, stderr=["/dev/zero"])
    case("model_missing", ["--model", d + "/nope.gguf", "Hi"], exit=1, stderr=["nope.gguf"])
    case("model_empty_directory", ["--model", d, "Hi"], exit=1, stderr=["a_directory"])
    pk = c.path("cli", "checkpoint.pt")
    c_write_pickle(pk)
    case("model_pickle", ["--model", pk, "Hi"], exit=1, stderr=["checkpoint.pt", "pickle"])
    pkb = c.path("cli", "pytorch_model.bin")
    c_write_pickle(pkb)
    case("model_pickle_bin", ["--model", pkb, "Hi"], exit=1, stderr=["pytorch_model.bin", "pickle"])
    zp = c.path("cli", "checkpoint_zip.pth")
    import zipfile
    with zipfile.ZipFile(zp, "w") as z:
        z.writestr("archive/data.pkl", pickle.dumps({"a": 1}, protocol=2))
    case("model_torch_zip", ["--model", zp, "Hi"], exit=1, stderr=["checkpoint_zip.pth"])
    st = c.path("cli", "weights_named.gguf")
    shutil.copyfile(os.path.join(c.out, "base", "hf", "model.safetensors"), st)
    case("model_safetensors_named_gguf", ["--model", st, "Hi"], exit=1, stderr=["weights_named.gguf"])
    # A model path that is not UTF-8, printed in JSON: the run succeeds and the JSON is valid.
    raw_name = os.path.join(os.fsencode(c.out), b"cli", b"mod\xff\xfeel.gguf")
    if not os.path.lexists(raw_name):
        os.symlink(os.fsencode(builtin), raw_name)
    c.add("cli", "model_path_not_utf8_json", ["--model", {"hex": raw_name.hex()}, "--json", "--max-new-tokens", "2",
                                              "Hi"], 0, [], stdout="json")
    c.add("cli", "question_not_utf8", ["--json", "--max-new-tokens", "2", {"hex": b"caf\xe9?".hex()}], 2, ["UTF-8"])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--builtin", default=os.environ.get("KEV_BUILTIN_MODEL"),
                    help="the built-in model (default: $KEV_BUILTIN_MODEL, else from build/CMakeCache.txt)")
    args = ap.parse_args()
    builtin = args.builtin
    if not builtin:
        cache = os.path.join(SOURCE, "build", "CMakeCache.txt")
        with open(cache) as f:
            builtin = next(l.split("=", 1)[1].strip() for l in f if l.startswith("KEV_BUILTIN_MODEL:"))
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    c = Corpus(out)
    kvs, _, _ = read_gguf(builtin)
    template = next(v for k, _, v in kvs if k == "tokenizer.chat_template").decode()

    gguf_cases(c, builtin)
    base = hf_base(out, template)
    safetensors_cases(c, base)
    config_cases(c, base)
    tokenizer_cases(c, base, train_spm(out))
    adapter_cases(c, os.path.join(out, "gguf", "gguf_control.gguf"))
    question_cases(c)
    cli_cases(c, builtin)
    with open(os.path.join(out, "manifest.jsonl"), "w") as f:
        for case in c.cases:
            f.write(json.dumps(case) + "\n")
    groups = {}
    for case in c.cases:
        groups[case["group"]] = groups.get(case["group"], 0) + 1
    print(json.dumps({"cases": len(c.cases), "groups": groups}))


if __name__ == "__main__":
    main()
