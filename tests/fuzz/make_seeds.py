#!/usr/bin/env python3
"""Write the seed corpus of every fuzz target into OUT/<target>/, at test time, from
small valid files (nothing binary is stored in the repository):

    make_seeds.py OUT [--corpus DIR]

  gguf, safetensors, config   tiny random models (tests/reference/make_random_model.py,
                              make_random_gguf.py) in F32/F16/Q4_1, plus the header of the
                              built-in model's GGUF (its tensor data cut away)
  tokenizer_json              a tiny byte-level BPE tokenizer.json and variants
  bpe_encode, detokenizer     the tokenizer test corpus (tests/data/tokenizer_corpus)
  chat_template               the Qwen2.5 and built-in model's templates, and
                              tokenizer_config.json files
  lora_config                 the demo adapter's adapter_config.json and variants
  questions                   JSON / JSONL question files (first byte: 0 = .json, 1 = .jsonl)
  workspace                   resources/examples/*.json

--corpus DIR adds the small files (at most 1 MiB) of the malformed-input corpus that
tests/corpus/make_corpus.py wrote to DIR, each to the target that parses its kind.
Needs the project's Python (.venv: torch, safetensors, gguf) for the random models.
"""
import argparse
import hashlib
import json
import os
import stat
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.dirname(os.path.dirname(HERE))
REFERENCE = os.path.join(SOURCE, "tests", "reference")
MAX_SEED = 1 << 20

TINY_TOKENIZER = {
    "version": "1.0",
    "added_tokens": [
        {"id": 7, "content": "<|im_start|>", "special": True, "single_word": False, "lstrip": False,
         "rstrip": False, "normalized": False},
        {"id": 8, "content": "<|im_end|>", "special": True, "single_word": False, "lstrip": False,
         "rstrip": False, "normalized": False},
    ],
    "normalizer": {"type": "NFC"},
    "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": "\\p{N}"}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}]},
    "post_processor": None,
    "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
    "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
              "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
              "vocab": {"a": 0, "b": 1, "ab": 2, "\u0120": 3, "c": 4, "\u0120a": 5, "abc": 6,
                        "<|im_start|>": 7, "<|im_end|>": 8},
              "merges": ["a b", "\u0120 a", "ab c"]},
}

CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content']"
          " + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
          "{{ '<|im_start|>assistant\\n' }}{% endif %}")
LLAMA3 = ("{{- bos_token }}{% for message in messages %}{{ '<|start_header_id|>' + message['role'] + "
          "'<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}{% endfor %}"
          "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}")
MISTRAL = ("{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}"
           "{{ '[INST] ' + message['content'] + ' [/INST]' }}{% endif %}{% endfor %}")


class Seeds:
    def __init__(self, out):
        self.out = out
        self.counts = {}

    def add(self, target, data):
        if isinstance(data, str):
            data = data.encode("utf-8", "surrogatepass")
        if len(data) > MAX_SEED:
            return
        d = os.path.join(self.out, target)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, hashlib.sha1(data).hexdigest()), "wb") as f:
            f.write(data)
        self.counts[target] = self.counts.get(target, 0) + 1

    def add_file(self, target, path, prefix=b""):
        with open(path, "rb") as f:
            self.add(target, prefix + f.read(MAX_SEED + 1))


def run(*args):
    subprocess.run([sys.executable, *args], check=True, stdout=subprocess.DEVNULL)


def random_models(s, work):
    for preset in ("tiny-llama", "tiny-qwen2", "tiny-qwen3", "tiny-phi4"):  # tiny-phi4: LongRoPE tensors
        d = os.path.join(work, preset)
        run(os.path.join(REFERENCE, "make_random_model.py"), "--preset", preset, "--out", d)
        s.add_file("config", os.path.join(d, "config.json"))
        s.add_file("safetensors", os.path.join(d, "model.safetensors"))
        for t in ("F16", "Q4_1") if preset == "tiny-qwen2" else ("Q4_1",):
            g = os.path.join(work, f"{preset}-{t}.gguf")
            run(os.path.join(REFERENCE, "make_random_gguf.py"), "--model", d, "--out", g, "--type", t)
            s.add_file("gguf", g)


def gguf_header(path):
    """The built-in model's GGUF up to the end of its tensor infos (metadata with the
    49k-token vocabulary and the chat template), via the gguf package."""
    import gguf
    r = gguf.GGUFReader(path)
    end = min(t.data_offset for t in r.tensors)
    with open(path, "rb") as f:
        head = f.read(end)
    template = r.fields.get("tokenizer.chat_template")
    text = bytes(template.parts[template.data[0]]).decode() if template else None
    return head, text


def small_safetensors():
    import struct
    out = []
    for header in ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}},
                   {"__metadata__": {"format": "pt"},
                    "w": {"dtype": "BF16", "shape": [2, 2], "data_offsets": [0, 8]},
                    "b": {"dtype": "F16", "shape": [1], "data_offsets": [8, 10]}}):
        h = json.dumps(header).encode()
        h += b" " * (-len(h) % 8)
        out.append(struct.pack("<Q", len(h)) + h + bytes(range(16)))
    return out


def from_corpus(s, corpus):
    """Small files of the malformed-input corpus, by what they are."""
    for root, _, files in os.walk(corpus):
        for name in files:
            p = os.path.join(root, name)
            # Regular files only: the corpus holds FIFOs (and links to devices) that would
            # block or never end a read.
            if os.path.islink(p) or not stat.S_ISREG(os.lstat(p).st_mode) or name == "manifest.jsonl":
                continue
            if os.path.getsize(p) > MAX_SEED:
                continue
            if name.endswith(".gguf"):
                s.add_file("gguf", p)
            elif name.endswith(".safetensors"):
                s.add_file("safetensors", p)
            elif name == "config.json":
                s.add_file("config", p)
            elif name == "tokenizer.json":
                s.add_file("tokenizer_json", p)
            elif name == "tokenizer_config.json":
                s.add_file("chat_template", p)
            elif name == "adapter_config.json":
                s.add_file("lora_config", p)
            elif name.endswith(".jsonl"):
                s.add_file("questions", p, b"\x01")
            elif name.endswith(".json") and ("question" in root or "question" in name):
                s.add_file("questions", p, b"\x00")
            elif name.endswith(".json") and ("workspace" in root or "workspace" in name):
                s.add_file("workspace", p)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--corpus", help="output folder of tests/corpus/make_corpus.py")
    ap.add_argument("--builtin", default=os.environ.get("KEV_BUILTIN_MODEL"))
    a = ap.parse_args()
    s = Seeds(a.out)

    with tempfile.TemporaryDirectory() as work:
        random_models(s, work)
    for blob in small_safetensors():
        s.add("safetensors", blob)
    s.add("config", json.dumps({"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 1,
                                "num_attention_heads": 4, "num_key_value_heads": 4,
                                "intermediate_size": 128, "vocab_size": 32, "rms_norm_eps": 1e-5,
                                "rope_scaling": {"rope_type": "linear", "factor": 2.0}}))

    templates = [CHATML, LLAMA3, MISTRAL]
    if a.builtin and os.path.exists(a.builtin):
        head, text = gguf_header(a.builtin)
        if len(head) <= MAX_SEED * 4:   # the metadata of a small model: allowed larger
            d = os.path.join(a.out, "gguf")
            os.makedirs(d, exist_ok=True)
            with open(os.path.join(d, "builtin-header"), "wb") as f:
                f.write(head)
        if text:
            templates.append(text)
    qwen_config = os.path.join(SOURCE, "tests", "data", "qwen-tokenizer", "tokenizer_config.json")
    with open(qwen_config) as f:
        templates.append(json.load(f).get("chat_template") or "")
    s.add_file("chat_template", qwen_config)
    for t in templates:
        s.add("chat_template", t)
        s.add("chat_template", json.dumps({"chat_template": t, "bos_token": "<|im_start|>",
                                           "eos_token": "<|im_end|>", "add_bos_token": False}))

    s.add("tokenizer_json", json.dumps(TINY_TOKENIZER))
    plain = json.loads(json.dumps(TINY_TOKENIZER))
    plain["normalizer"] = None
    plain["pre_tokenizer"] = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}
    s.add("tokenizer_json", json.dumps(plain))
    plain["model"]["merges"] = [m.split(" ") for m in plain["model"]["merges"]]   # the newer format
    s.add("tokenizer_json", json.dumps(plain))

    with open(os.path.join(SOURCE, "tests", "data", "tokenizer_corpus", "corpus.json")) as f:
        texts = json.load(f)
    for t in texts[:200]:
        s.add("bpe_encode", t)
    for t in texts[:60]:
        s.add("detokenizer", t)   # read as ids and stop strings: any bytes do
    s.add("bpe_encode", "<|im_start|>user\nHi<|im_end|>\n<|endoftext|>")

    adapter = os.path.join(SOURCE, "resources", "adapters", "smollm2-135m-capitals", "adapter_config.json")
    s.add_file("lora_config", adapter)
    with open(adapter) as f:
        cfg = json.load(f)
    for variant in ({"target_modules": "model\\.layers\\.\\d+\\.self_attn\\.(q|v)_proj"},
                    {"target_modules": ["q_proj", "v_proj"], "use_rslora": True},
                    {"r": 4, "lora_alpha": 8}):
        s.add("lora_config", json.dumps(dict(cfg, **variant)))

    qs = [["What is 2+2?", {"question": "Capital of France?", "temperature": 0.5, "top_k": 40,
                            "top_p": 0.9, "max_new_tokens": 16, "seed": 3, "stop": ["\n"]}],
          [{"question": "x", "lora": True, "lora_scale": 0.5}]]
    for q in qs:
        s.add("questions", b"\x00" + json.dumps(q).encode())
        s.add("questions", b"\x01" + "\n".join(json.dumps(x) for x in q).encode() + b"\n")

    examples = os.path.join(SOURCE, "resources", "examples")
    for name in sorted(os.listdir(examples)):
        if name.endswith(".json"):
            s.add_file("workspace", os.path.join(examples, name))
    # An answer with token details (the comparison view's data), so the fuzzer starts
    # inside their parser.
    detail = {"piece": " Paris", "logprob": -0.1, "entropy": 0.8,
              "top": [[12, " Paris", -0.1], [40, " Lyon", -2.5]]}
    s.add("workspace", json.dumps({"kev_workspace": 1, "cards": [
        {"question": "Capital of France?", "number": 1,
         "answer": {"text": " Paris Paris", "tokens": [12, 12], "details": [detail, detail]}}]}))

    if a.corpus:
        from_corpus(s, a.corpus)
    for target in sorted(s.counts):
        print(f"{target}: {s.counts[target]} seeds")


if __name__ == "__main__":
    main()
