#!/usr/bin/env python3
"""Reference token ids for Kev's tokenizer tests and timings for its benchmark.

    tokenizer_reference.py ids --corpus corpus.json --qwen-dir DIR --gguf FILE --out OUT.json
        Tokenizes the corpus (plus a ~100 KB document built from it) with transformers'
        fast tokenizers: Qwen from tokenizer.json, SmolLM2 from the GGUF's metadata (with
        its published pre-tokenizer; see load_smollm). Writes
        the texts, the ids with special tokens parsed and with them split
        (split_special_tokens=True), the decoded text of the former (special tokens
        skipped), ids for 3000 random strings over all assigned code points (random_soup),
        and apply_chat_template(add_generation_prompt=True)
        results for a few conversations, single-turn ("chat") and with earlier turns
        ("conversations", CHAT_HISTORY_CASES plus Qwen3 reasoning cases).

    tokenizer_reference.py sentencepiece --corpus corpus.json --out-dir DIR
        Trains a small Llama-style SentencePiece BPE model (byte fallback, split digits,
        dummy prefix, no normalization) on the corpus into DIR/sp.model and writes
        DIR/sp_reference.json with the texts and the ids and decoded text the
        sentencepiece library gives for each, and DIR/sp.gguf: the same vocabulary as
        llama.cpp writes a SentencePiece tokenizer into a GGUF (pieces, scores, types).

    tokenizer_reference.py gguf-variants --corpus corpus.json --qwen-dir DIR --gguf FILE --out-dir DIR
        Writes small GGUF files holding only tokenizer metadata, to test Kev's mapping of
        tokenizer.ggml.pre names: the Qwen vocabulary as "qwen2", "llama-bpe" and "gpt-4o", and
        SmolLM2's as "gpt-2" (and as "no-such-pre", which Kev must refuse).
        DIR/gguf_variants.json gives, per file, the ids that the tokenizers library
        produces with the matching pre-tokenizer.

    tokenizer_reference.py toys --corpus corpus.json --out-dir DIR
        Trains small tokenizers with the tokenizers library, one per combination of
        components Kev reads from tokenizer.json (NFKC, Digits, ByteLevel with
        add_prefix_space, merges written as "a b" strings, added tokens with lstrip /
        rstrip / single_word / normalized; character-level BPE with byte fallback and unk),
        saves each as DIR/<name>.json and writes DIR/toys.json with each one's texts and ids.

    tokenizer_reference.py sp-style --corpus corpus.json --out-dir DIR
        Trains small SentencePiece-style BPE tokenizers (byte fallback, "▁" for spaces)
        with the tokenizers library, written the way transformers' converters write them:
        Gemma's (normalizer Replace " " -> "▁", Split " " merged_with_previous, decoder
        Replace + ByteFallback + Fuse), Llama/Mistral's legacy form (Prepend "▁" + Replace,
        decoder ... + Strip), their Metaspace form (prepend_scheme "first", no split), and
        the older Metaspace default (prepend "always", split) with a Metaspace decoder. Saves each as DIR/<name>.json,
        with DIR/sp_style.json giving each one's texts, ids (special tokens parsed) and the
        decoded text of those ids.

    tokenizer_reference.py bench --qwen-dir DIR --text FILE [FILE...] [--reps N]
        Prints a JSON list, one {"file", "seconds": best of N, "tokens", "bytes"} per FILE,
        for encoding it with the Qwen fast tokenizer on one thread.
"""
import argparse
import json
import os
import sys
import time


def load_qwen(qwen_dir):
    from transformers import AutoTokenizer
    return AutoTokenizer.from_pretrained(qwen_dir)


def load_smollm(gguf, published_pre_tokenizer=True):
    """SmolLM2's tokenizer as transformers builds it from the GGUF.

    transformers' GGUF loader has no entry for tokenizer.ggml.pre = "smollm" and falls back
    to plain GPT-2 splitting. SmolLM2's published tokenizer.json (and llama.cpp, which wrote
    the GGUF) first isolates every numeric character: Digits(individual_digits=True). The two
    differ only where a numeric character that is not an ASCII digit follows a space
    (" ½"). With published_pre_tokenizer the published split is restored.
    """
    from tokenizers import pre_tokenizers
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(os.path.dirname(os.path.abspath(gguf)),
                                        gguf_file=os.path.basename(gguf))
    if published_pre_tokenizer:
        tok.backend_tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ])
    return tok


def big_document(corpus, target=100 * 1024):
    parts, size, i = [], 0, 0
    while size < target:
        s = corpus[i % len(corpus)]
        parts.append(s)
        size += len(s.encode("utf-8")) + 1
        i += 1
    return "\n".join(parts)


CONVERSATIONS = [
    (None, "What is the capital of France?"),
    ("You are a terse assistant.", "Explain BPE in one sentence."),
    (None, "  leading and trailing spaces  "),
    ("Système: réponds en français.", "Écris un haïku sur la mer. 你好 😀"),
    (None, "Line one\nLine two\n\n\tTabbed"),
    ("", "Empty system prompt."),
]


def chat_messages(system, user, history=()):
    """[system?, user, assistant, ..., user] as apply_chat_template takes them."""
    messages = [{"role": "system", "content": system}] if system is not None else []
    for u, a in history:
        messages += [{"role": "user", "content": u}, {"role": "assistant", "content": a}]
    return messages + [{"role": "user", "content": user}]


# Conversations with earlier turns (system or None, [(user, assistant), ...], user): two
# and three user turns, with and without a system message; answers holding special-token
# text, white space (ASCII and Unicode) at the ends, an empty answer.
CHAT_HISTORY_CASES = [
    (None, [("Hi!", "Hello! How can I help?")], "Name a color."),
    ("You are terse.", [("  First question?  ", "\nFirst answer, then a space and a newline \n"),
                        ("Second <|im_end|> question\n", " <end_of_turn>answer <|end|> [/INST] </s><|eot_id|>\n\n")],
     "Third?  "),
    (None, [("Q1", "A1 <|im_start|>user\nfake<|im_end|>\t"), ("Q2\u3000", "\u00a0A2\u2003\n")], " Q3\n"),
    ("  System with spaces \n", [("Q1", "")], "Q2"),
    ("Syst\u00e8me : r\u00e9ponds en fran\u00e7ais.", [("\u00c7a va ?", "Oui \u65e5\u672c\u8a9e \U0001F600"),
                                               ("Et toi ?", "  Bien.  ")], "Encore ?"),
]

# Qwen3 writes earlier answers without their <think> reasoning, except those after the last
# user query (a final user message wrapped in <tool_response> tags is not one).
QWEN_REASONING_CASES = [
    (None, [("What is 2+2?", "<think>\nAdd them.\n</think>\n\n4"), ("And 3+3?", "<think>\n\n</think>\n\n6")],
     "And 4+4?"),
    ("Be exact.", [("Look it up.", "<think>\nI should call a tool.\n</think>\n\nCalling."),
                   ("<tool_response>\n{\"x\": 1}\n</tool_response>", "\n\n<think>\n<think>Got x.\n\n</think>\n\nx is 1.</think>\nok")],
     "<tool_response>\nok\n</tool_response>"),
    (None, [("<tool_response>a</tool_response>", "only reasoning</think>answer")], "<tool_response>b</tool_response>"),
]


def chat_ids(tok, system, user, history=(), **kwargs):
    messages = chat_messages(system, user, history)
    text = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False, **kwargs)
    ids = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, **kwargs)
    if isinstance(ids, dict) or hasattr(ids, "keys"):
        ids = ids["input_ids"]
    return text, list(ids)


def encode_all(tok, texts, split_special):
    backend = tok.backend_tokenizer
    saved = backend.encode_special_tokens
    backend.encode_special_tokens = split_special
    try:
        return [e.ids for e in backend.encode_batch(texts, add_special_tokens=False)]
    finally:
        backend.encode_special_tokens = saved


def random_soup(count, seed=20261129):
    """Random strings over every code point assigned in Python's Unicode version, mixed
    with spaces, contractions and special-token text. Strings whose NFC differs between
    Python's unicodedata and the tokenizers library are left out: that library's
    normalization tables predate some combining marks (U+07FD, U+0D3C, U+1ACD, ...) and do
    not reorder them, which is a difference of Unicode versions, not of algorithm."""
    import random
    import unicodedata
    from tokenizers import normalizers
    nfc = normalizers.NFC()
    rng = random.Random(seed)
    assigned = [c for c in range(0x110000)
                if not 0xD800 <= c < 0xE000 and unicodedata.category(chr(c)) not in ("Cn", "Cs")]
    common = [c for c in assigned if c < 0x3100]
    glue = [" ", "  ", "\n", "\t", "'s", "'T", " the", "x", "1", "23", "\r\n", "<|im_end|>", "<think>",
            "\u0301", "\u0308"]
    out = []
    while len(out) < count:
        parts = []
        for _ in range(rng.randint(1, 14)):
            r = rng.random()
            parts.append(rng.choice(glue) if r < 0.25 else chr(rng.choice(common if r < 0.7 else assigned)))
        s = "".join(parts)
        if nfc.normalize_str(s) == unicodedata.normalize("NFC", s):
            out.append(s)
    return out


def cmd_ids(args):
    with open(args.corpus, encoding="utf-8") as f:
        corpus = json.load(f)
    texts = corpus + [big_document([s for s in corpus if s])]
    out = {"texts": texts, "chat": []}
    qwen = load_qwen(args.qwen_dir)
    smol = load_smollm(args.gguf)
    for name, tok in (("qwen", qwen), ("smollm", smol)):
        out[name] = {"ids": encode_all(tok, texts, False), "plain_ids": encode_all(tok, texts, True)}
        out[name]["decoded"] = [tok.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)
                                for ids in out[name]["ids"]]
    out["smollm_gguf_fallback"] = {"ids": encode_all(load_smollm(args.gguf, False), texts, False)}
    out["long_words"] = {"texts": LONG_WORDS, "qwen": encode_all(qwen, LONG_WORDS, False),
                         "smollm": encode_all(smol, LONG_WORDS, False)}
    soup = random_soup(3000)
    out["soup"] = {"texts": soup, "qwen": encode_all(qwen, soup, False), "smollm": encode_all(smol, soup, False)}
    for system, user in CONVERSATIONS:
        entry = {"system": system, "user": user}
        entry["qwen_text"], entry["qwen"] = chat_ids(qwen, system, user, enable_thinking=False)
        entry["qwen_thinking_text"], entry["qwen_thinking"] = chat_ids(qwen, system, user)
        entry["smollm_text"], entry["smollm"] = chat_ids(smol, system, user)
        out["chat"].append(entry)
    out["conversations"] = []
    for system, history, user in CHAT_HISTORY_CASES + QWEN_REASONING_CASES:
        entry = {"system": system, "history": [list(t) for t in history], "user": user}
        entry["qwen_text"], entry["qwen"] = chat_ids(qwen, system, user, history, enable_thinking=False)
        entry["qwen_thinking_text"], entry["qwen_thinking"] = chat_ids(qwen, system, user, history)
        entry["smollm_text"], entry["smollm"] = chat_ids(smol, system, user, history)
        out["conversations"].append(entry)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False)


def cmd_sentencepiece(args):
    import sentencepiece as spm
    with open(args.corpus, encoding="utf-8") as f:
        corpus = json.load(f)
    texts = corpus + [big_document([s for s in corpus if s])]
    os.makedirs(args.out_dir, exist_ok=True)
    training = [line for s in texts for line in s.split("\n") if line.strip()]
    prefix = os.path.join(args.out_dir, "sp")
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(training), model_prefix=prefix, model_type="bpe", vocab_size=600,
        byte_fallback=True, split_digits=True, add_dummy_prefix=True,
        normalization_rule_name="identity", remove_extra_whitespaces=False,
        character_coverage=0.98, hard_vocab_limit=False, num_threads=1,
        bos_id=1, eos_id=2, unk_id=0, pad_id=-1, minloglevel=2)
    sp = spm.SentencePieceProcessor(model_file=prefix + ".model")
    ids = [sp.encode(t) for t in texts]
    out = {"texts": texts, "ids": ids, "decoded": [sp.decode(i) for i in ids],
           "bos": sp.bos_id(), "eos": sp.eos_id(), "vocab_size": sp.get_piece_size(),
           "inst_ids": sp.encode("[INST] hi [/INST]")}
    with open(os.path.join(args.out_dir, "sp_reference.json"), "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False)
    write_sentencepiece_gguf(sp, os.path.join(args.out_dir, "sp.gguf"))


def write_sentencepiece_gguf(sp, path):
    """The model's vocabulary as llama.cpp's converter writes a SentencePiece tokenizer
    into a GGUF: tokenizer.ggml.model "llama", pieces, scores, token types, special ids."""
    import gguf
    types = []
    for i in range(sp.get_piece_size()):
        if sp.is_unknown(i):
            types.append(gguf.TokenType.UNKNOWN)
        elif sp.is_control(i):
            types.append(gguf.TokenType.CONTROL)
        elif sp.is_byte(i):
            types.append(gguf.TokenType.BYTE)
        elif sp.is_unused(i):
            types.append(gguf.TokenType.UNUSED)
        else:
            types.append(gguf.TokenType.NORMAL)
    w = gguf.GGUFWriter(path, "llama")
    w.add_tokenizer_model("llama")
    w.add_token_list([sp.id_to_piece(i) for i in range(sp.get_piece_size())])
    w.add_token_scores([sp.get_score(i) for i in range(sp.get_piece_size())])
    w.add_token_types(types)
    w.add_bos_token_id(sp.bos_id())
    w.add_eos_token_id(sp.eos_id())
    w.add_unk_token_id(sp.unk_id())
    w.add_add_bos_token(True)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_tokenizer_gguf(path, tokens, types, merges, pre, eos, template):
    import gguf
    w = gguf.GGUFWriter(path, "llama")
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_eos_token_id(eos)
    w.add_add_bos_token(False)
    if template:
        w.add_chat_template(template)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def cmd_gguf_variants(args):
    from tokenizers import Regex, pre_tokenizers
    from transformers.integrations.gguf.gguf_tokenizer_mapping import _GPT4O_SPLIT, _LLAMA3_SPLIT
    with open(args.corpus, encoding="utf-8") as f:
        texts = json.load(f)
    os.makedirs(args.out_dir, exist_ok=True)
    out = {"texts": texts, "variants": []}

    qwen = load_qwen(args.qwen_dir)
    backend = qwen.backend_tokenizer
    model = json.loads(backend.to_str())
    vocab = model["model"]["vocab"]
    added = {a["id"]: a for a in model["added_tokens"]}
    size = max(list(vocab.values()) + list(added)) + 1
    tokens, types = [""] * size, [1] * size
    for t, i in vocab.items():
        tokens[i] = t
    for i, a in added.items():
        tokens[i] = a["content"]
        types[i] = 3 if a["special"] else 4
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["model"]["merges"]]
    eos = next(i for i, a in added.items() if a["content"] == "<|im_end|>")
    template = qwen.chat_template or ""

    path = os.path.join(args.out_dir, "qwen2.gguf")
    write_tokenizer_gguf(path, tokens, types, merges, "qwen2", eos, template)
    out["variants"].append({"file": path, "ids": encode_all(qwen, texts, False)})

    def split_variant(pre, split, ignore_merges):
        """The same vocabulary under tokenizer.ggml.pre = `pre`: the tokenizers library's ids
        with that split regex, no normalizer, and merges applied or ignored."""
        path = os.path.join(args.out_dir, pre + ".gguf")
        write_tokenizer_gguf(path, tokens, types, merges, pre, eos, "")
        backend.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(split), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        backend.model.ignore_merges = ignore_merges
        backend.normalizer = None
        out["variants"].append({"file": path, "ids": encode_all(qwen, texts, False)})

    # Llama 3 splitting (digits in threes), Llama 3's ignore_merges and no normalizer (Llama
    # 3 has none; Qwen's NFC is kept for "qwen2" above).
    split_variant("llama-bpe", _LLAMA3_SPLIT, True)
    # GPT-4o's o200k splitting (Phi-4-mini's GGUF files name it), merges applied: what
    # transformers' GGUF loader builds for "gpt-4o".
    split_variant("gpt-4o", _GPT4O_SPLIT, False)

    # SmolLM2's vocabulary with plain GPT-2 splitting: what transformers' GGUF loader uses
    # when it does not know the pre-tokenizer name.
    smol = load_smollm(args.gguf, published_pre_tokenizer=False)
    from gguf import GGUFReader
    r = GGUFReader(args.gguf)
    def strings(key):
        f = r.fields[key]
        return [bytes(f.parts[i]).decode("utf-8") for i in f.data]
    tt = r.fields["tokenizer.ggml.token_type"]
    path = os.path.join(args.out_dir, "gpt-2.gguf")
    write_tokenizer_gguf(path, strings("tokenizer.ggml.tokens"), [int(tt.parts[i][0]) for i in tt.data],
                         strings("tokenizer.ggml.merges"), "gpt-2", 2, "")
    out["variants"].append({"file": path, "ids": encode_all(smol, texts, False)})
    write_tokenizer_gguf(os.path.join(args.out_dir, "unknown-pre.gguf"), strings("tokenizer.ggml.tokens"),
                         [int(tt.parts[i][0]) for i in tt.data], strings("tokenizer.ggml.merges"),
                         "no-such-pre", 2, "")

    with open(os.path.join(args.out_dir, "gguf_variants.json"), "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False)


TOY_EXTRA_TEXTS = [
    "a <mask> b", "x   <mask>", "<mask>", "[SEP]   y", "[SEP]\n\nz", "a[SEP]b",
    "words word sword word_ x word.", "word", "(word)", "hello HELLO \uff48\uff45\uff4c\uff4c\uff4f hello!",
    "\u00bd \u00b2 123 4567 12a34", "caf\u00e9 cafe\u0301 \u212b", "unseen: \u4e2d\u6587 \U0001F600 \u0416",
]


# Single words long enough for Kev's long-word BPE path.
# Where SentencePiece-style files differ: spaces at the ends and in runs, the marker typed
# by the user, text right after a special token (Metaspace's "first" prepends only at
# the start of the input), a special token first.
SP_EXTRA_TEXTS = [" leading", "trailing ", "  two leading", "a  b   c", "\u2581typed marker", "x\u2581y",
                  "<start_of_turn>user\nHi there<end_of_turn>\n<start_of_turn>model\n",
                  "before<start_of_turn> after", "<end_of_turn>", " ", "", "\t tab", "line\n next"]

LONG_WORDS = ["a" * 20000, "ab" * 5000, "\U0001F600" * 3000, "\U0001F468\u200d\U0001F469\u200d\U0001F467" * 500,
              "x" * 3 + "y" * 5000, "\u4e2d\u6587" * 3000, "=" * 10000, "\n" * 5000, "  " * 3000,
              "".join(chr(ord("a") + (i * 7919) % 26) for i in range(30000))]


def cmd_toys(args):
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    with open(args.corpus, encoding="utf-8") as f:
        corpus = json.load(f)
    texts = corpus + TOY_EXTRA_TEXTS + LONG_WORDS
    training = corpus + [big_document([s for s in corpus if s])]
    os.makedirs(args.out_dir, exist_ok=True)
    out = {"toys": []}

    def save(name, tok, string_merges):
        j = json.loads(tok.to_str())
        if string_merges:
            j["model"]["merges"] = [m if isinstance(m, str) else " ".join(m) for m in j["model"]["merges"]]
        path = os.path.join(args.out_dir, name + ".json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(j, f, ensure_ascii=False)
        reloaded = Tokenizer.from_file(path)  # the ids come from the file as saved
        ids = [e.ids for e in reloaded.encode_batch(texts, add_special_tokens=False)]
        out["toys"].append({"name": name, "file": path, "texts": list(texts), "ids": ids})

    # Byte-level BPE: NFKC, grouped digits, a prefix space, string-form merges, added tokens.
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFKC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=False),
        pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=True)])
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(training, trainers.BpeTrainer(
        vocab_size=1500, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    tok.add_special_tokens([AddedToken("<mask>", lstrip=True, special=True),
                            AddedToken("[SEP]", rstrip=True, special=True)])
    tok.add_tokens([AddedToken("word", single_word=True, normalized=False),
                    AddedToken("hello", normalized=True)])
    save("bytelevel_nfkc_digits_prefix", tok, string_merges=True)

    # Character-level BPE with byte fallback and unk; NFC; a Split regex; list-form merges.
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True))
    tok.normalizer = normalizers.Sequence([normalizers.NFC()])
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"\p{L}+|\p{N}+|\s+|[^\s\p{L}\p{N}]+"), behavior="isolated")
    tok.train_from_iterator(training, trainers.BpeTrainer(
        vocab_size=700, limit_alphabet=60, show_progress=False,
        special_tokens=["<unk>"] + [f"<0x{b:02X}>" for b in range(256)]))
    save("charlevel_byte_fallback", tok, string_merges=False)

    # The same, with one merge out of order: (P, P) ranked first although P (two letters,
    # "th" say) is made by a later merge. Trained vocabularies never do this; Kev's fast path for
    # long words relies on it not happening and must fall back to the general order.
    j = json.loads(tok.to_str())
    merges = [m if isinstance(m, list) else m.split(" ") for m in j["model"]["merges"]]
    vocab = j["model"]["vocab"]
    pair = next(m[0] + m[1] for m in merges
                if len(m[0]) == 1 and len(m[1]) == 1 and (m[0] + m[1]).isalpha() and (m[0] + m[1]) * 2 not in vocab)
    vocab[pair + pair] = max(vocab.values()) + 1
    j["model"]["merges"] = [[pair, pair]] + merges
    texts.extend([pair * 100, pair * 30 + "x" + pair * 31, (pair + "q") * 60])
    save("nonmonotone_merges", Tokenizer.from_str(json.dumps(j)), string_merges=False)

    with open(os.path.join(args.out_dir, "toys.json"), "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False)


def cmd_sp_style(args):
    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    with open(args.corpus, encoding="utf-8") as f:
        corpus = json.load(f)
    texts = corpus + TOY_EXTRA_TEXTS + SP_EXTRA_TEXTS + LONG_WORDS[:4]
    training = corpus + [big_document([s for s in corpus if s])]
    os.makedirs(args.out_dir, exist_ok=True)
    out = {"tokenizers": []}
    specials = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]

    def build(normalizer, pre_tokenizer, decoder):
        tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
        tok.normalizer = normalizer
        tok.pre_tokenizer = pre_tokenizer
        tok.decoder = decoder
        tok.train_from_iterator(training, trainers.BpeTrainer(
            vocab_size=900, limit_alphabet=80, show_progress=False, special_tokens=specials))
        tok.add_special_tokens([AddedToken("<start_of_turn>", special=True), AddedToken("<end_of_turn>", special=True)])
        return tok

    def save(name, tok):
        path = os.path.join(args.out_dir, name + ".json")
        tok.save(path)
        reloaded = Tokenizer.from_file(path)  # the ids come from the file as saved
        ids = [e.ids for e in reloaded.encode_batch(texts, add_special_tokens=False)]
        decoded = reloaded.decode_batch(ids, skip_special_tokens=False)
        out["tokenizers"].append({"name": name, "file": path, "texts": list(texts), "ids": ids, "decoded": decoded})

    sp_decoder = [decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()]
    save("gemma", build(normalizers.Replace(" ", "\u2581"), pre_tokenizers.Split(" ", "merged_with_previous"),
                        decoders.Sequence(sp_decoder)))
    save("llama_legacy", build(normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")]),
                               None, decoders.Sequence(sp_decoder + [decoders.Strip(content=" ", left=1)])))
    # transformers' LlamaConverter, legacy=False (Mistral): Metaspace in, the same decoder.
    save("mistral_metaspace", build(None, pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first", split=False),
                                    decoders.Sequence(sp_decoder + [decoders.Strip(content=" ", left=1)])))
    # The Metaspace decoder itself (it drops every marker of the first token).
    save("metaspace_always_split", build(None, pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always",
                                                                        split=True),
                                         decoders.Sequence([decoders.Metaspace(replacement="\u2581", prepend_scheme="always",
                                                                               split=True),
                                                            decoders.ByteFallback(), decoders.Fuse()])))
    with open(os.path.join(args.out_dir, "sp_style.json"), "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False)


def cmd_bench(args):
    os.environ.setdefault("RAYON_NUM_THREADS", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    tok = load_qwen(args.qwen_dir)
    backend = tok.backend_tokenizer
    backend.encode_special_tokens = True  # as Kev's SpecialTokens::Plain, which the bench times
    results = []
    for path in args.text:
        with open(path, encoding="utf-8", newline="") as f:
            text = f.read()
        # A file named *.lines.txt is encoded line by line ("\n" kept at each line's end),
        # as one batch on one thread: the shape of many short prompts.
        lines = None
        if path.endswith(".lines.txt"):
            parts = text.split("\n")
            lines = [p + "\n" for p in parts[:-1]] + ([parts[-1]] if parts[-1] else [])
        best, n = None, 0
        for _ in range(args.reps):
            t0 = time.perf_counter()
            if lines is None:
                n = len(backend.encode(text, add_special_tokens=False).ids)
            else:
                n = sum(len(e.ids) for e in backend.encode_batch(lines, add_special_tokens=False))
            dt = time.perf_counter() - t0
            best = dt if best is None else min(best, dt)
        results.append({"file": path, "seconds": best, "tokens": n, "bytes": len(text.encode("utf-8"))})
    print(json.dumps(results))


CHAT_CASES = [  # (system or None, user): spaces and newlines at the ends show who trims
    (None, "What is the capital of France?"),
    ("You are a terse assistant.", "Name three colors."),
    ("  Answer in French.\n", "\n  Why is the sky blue?  \n"),
    (None, "  <start_of_turn>model\nHi <|user|> [INST]  "),
    ("Système: réponds en un mot.", "Quelle heure est-il ? 日本語も"),
]


def cmd_chat_templates(args):
    """Each template in --templates-dir rendered by transformers' apply_chat_template
    (add_generation_prompt=True, bos_token "<bos>", eos_token "<eos>") for CHAT_CASES and
    CHAT_HISTORY_CASES: {name: {template, cases: [{system, history, user, text | error}]}}."""
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(args.qwen_dir)
    tok.bos_token = "<bos>"
    tok.eos_token = "<eos>"
    out = {}
    for fn in sorted(os.listdir(args.templates_dir)):
        if not fn.endswith(".jinja"):
            continue
        with open(os.path.join(args.templates_dir, fn), encoding="utf-8") as f:
            template = f.read()
        rows = []
        for system, history, user in [(s, [], u) for s, u in CHAT_CASES] + CHAT_HISTORY_CASES:
            messages = chat_messages(system, user, history)
            row = {"system": system, "history": [list(t) for t in history], "user": user}
            try:
                row["text"] = tok.apply_chat_template(messages, chat_template=template, add_generation_prompt=True,
                                                      tokenize=False)
            except Exception as e:  # Gemma 2 refuses a system message
                row["error"] = str(e)
            rows.append(row)
        out[fn[:-len(".jinja")]] = {"template": template, "cases": rows}
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("ids")
    a.add_argument("--corpus", required=True)
    a.add_argument("--qwen-dir", required=True)
    a.add_argument("--gguf", required=True)
    a.add_argument("--out", required=True)
    s = sub.add_parser("sentencepiece")
    s.add_argument("--corpus", required=True)
    s.add_argument("--out-dir", required=True)
    g = sub.add_parser("gguf-variants")
    g.add_argument("--corpus", required=True)
    g.add_argument("--qwen-dir", required=True)
    g.add_argument("--gguf", required=True)
    g.add_argument("--out-dir", required=True)
    sp = sub.add_parser("sp-style")
    sp.add_argument("--corpus", required=True)
    sp.add_argument("--out-dir", required=True)
    t = sub.add_parser("toys")
    t.add_argument("--corpus", required=True)
    t.add_argument("--out-dir", required=True)
    c = sub.add_parser("chat-templates")
    c.add_argument("--qwen-dir", required=True)
    c.add_argument("--templates-dir", required=True)
    c.add_argument("--out", required=True)
    b = sub.add_parser("bench")
    b.add_argument("--qwen-dir", required=True)
    b.add_argument("--text", required=True, nargs="+")
    b.add_argument("--reps", type=int, default=3)
    args = p.parse_args()
    {"ids": cmd_ids, "sentencepiece": cmd_sentencepiece, "gguf-variants": cmd_gguf_variants, "toys": cmd_toys, "sp-style": cmd_sp_style,
     "chat-templates": cmd_chat_templates, "bench": cmd_bench}[args.cmd](args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
