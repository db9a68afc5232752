#!/usr/bin/env python3
"""Writes corpus.json: the strings the tokenizer tests compare against transformers.

Run from anywhere: python make_corpus.py  (writes next to itself). The list is fixed
(no randomness) so the file is reproducible; the 100 KB document is built by the
reference script from these strings, not stored.
"""
import json
import os
import unicodedata

corpus = []


def add(*items):
    corpus.extend(items)


# Empty and tiny.
add("", " ", "  ", "a", "A", ".", "\n", "\t", "\r\n", "Hello", " Hello", "Hello ", "hello world")

# English prose.
add(
    "The quick brown fox jumps over the lazy dog.",
    "It was the best of times, it was the worst of times.",
    "Tokenizers turn text into integers; models turn integers into probabilities.",
    "Dr. Smith's lab (est. 1998) published 3 papers in Nature—two in 2021.",
    "Mr. O'Neil said: \"Don't panic!\" and left at 5 p.m.",
    "e.g., i.e., etc., vs. — all abbreviations.",
    "CamelCaseWordsAndXMLHttpRequest and snake_case_words",
    "URLs like https://example.com/path?query=1&x=y#frag are common.",
    "email: someone@example.org, phone: +1 (555) 123-4567",
    "Punctuation!!! ??? ... ;;; ::: ,,, --- ___ *** ###",
    "UPPER CASE SENTENCE WITH SHOUTING",
    "a b c d e f g h i j k l m n o p q r s t u v w x y z",
    "Supercalifragilisticexpialidocious antidisestablishmentarianism",
    "pneumonoultramicroscopicsilicovolcanoconiosis",
)

# Contractions in mixed case (the (?i:'s|'t...) branch).
for w in ["it's", "IT'S", "It'S", "don't", "DON'T", "Don'T", "we're", "WE'RE", "they've", "THEY'VE",
          "I'm", "I'M", "you'll", "YOU'LL", "he'd", "HE'D", "She'd've", "y'all", "'tis", "rock'n'roll",
          "O'Reilly's", "the dogs' bones", "'s", "'S"]:
    add(w, f"Well, {w} fine.")

# Code with tabs and indentation.
add(
    "def f(x):\n    return x * 2\n",
    "def f(x):\n\treturn x * 2\n",
    "int main() {\n\tprintf(\"hi\\n\");\n\treturn 0;\n}\n",
    "if (a && b || !c) { x += 1; } else { y -= 2; }",
    "for i in range(10):\n        if i % 2 == 0:\n            print(i)\n",
    "class Foo:\n    def __init__(self):\n        self.x = []\n\n    def bar(self) -> int:\n        return len(self.x)\n",
    "    indented four\n        indented eight\n\t\ttabbed two\n",
    "const x = {a: 1, b: [2, 3], 'c': \"d\"};",
    "#include <vector>\nstd::vector<int> v{1, 2, 3};\n",
    "SELECT * FROM users WHERE id = 42 AND name LIKE '%bob%';",
    "<div class=\"x\"><span>text</span></div>",
    "x=1;y=2;z=x+y\n\n\n\nprint(z)",
    "    \n    \n",
    "\t\t\t\n\t\n",
    "fn main() -> Result<(), Box<dyn Error>> {\n    Ok(())\n}",
    "λx. x + 1  // lambda",
    "a\u00a0b\u2003c\u3000d",  # no-break, em and ideographic spaces
)

# Runs of spaces and newlines.
for n in [1, 2, 3, 4, 5, 8, 16, 33]:
    add(" " * n + "x", "x" + " " * n, "a" + " " * n + "b")
for n in [1, 2, 3, 5, 10]:
    add("line" + "\n" * n + "next", "\n" * n, " \n" * n, "\r\n" * n + "end")
add("trailing spaces   \n   leading spaces", "mixed \t \n \r\n tabs", "x\n \n  \n   y")

# Long digit strings.
add("0", "12", "123", "1234", "12345", "1234567890", "3.14159265358979323846",
    "1,000,000", "9" * 50, "0123456789" * 10, "In 2024, 1 in 3 of 12345 people paid $1,234.56.",
    "phone 555-0100 ext. 42", "v1.2.3-rc4", "٣٤٥ Arabic-Indic digits", "Ⅻ roman numeral", "x²+y³=z⁴", "½ ¾ ⅓")

# Chinese, Japanese, Korean, Arabic, other scripts.
add(
    "你好，世界！",
    "我们今天去公园散步，天气非常好。",
    "机器学习是人工智能的一个分支。",
    "中文English混合text测试123",
    "「引用」和『书名』。",
    "こんにちは世界",
    "東京は日本の首都です。ひらがなとカタカナ、漢字が混ざっています。",
    "ｶﾀｶﾅ 半角カナ と 全角ＡＢＣ１２３",
    "안녕하세요 세계",
    "한국어 문장은 띄어쓰기를 사용합니다.",
    "مرحبا بالعالم",
    "اللغة العربية تكتب من اليمين إلى اليسار.",
    "שלום עולם",
    "Привет, мир! Как дела?",
    "Γειά σου Κόσμε",
    "नमस्ते दुनिया",
    "สวัสดีชาวโลก",
    "Tiếng Việt có dấu: Xin chào thế giới",
    "Ünïcödé àccênts çà et là, naïve café, Ångström",
)

# Emoji: ZWJ sequences, skin tones, flags, keycaps.
add(
    "😀", "😀😀😀", "I ❤️ NY", "👍🏽", "👋🏻👋🏼👋🏽👋🏾👋🏿",
    "👨‍👩‍👧‍👦", "👩🏽‍💻 coding", "🏳️‍🌈", "🇫🇷🇯🇵🇺🇸", "1️⃣2️⃣3️⃣",
    "family: 👨‍👨‍👧 and 🧑🏿‍🤝‍🧑🏻", "text😀text", "🎉🎉🎉 party 🎉🎉🎉", "emoji\u200dzwj\u200dalone",
)

# Combining marks that change under NFC (decomposed forms).
add(
    "e\u0301",                 # é decomposed
    "cafe\u0301",
    "A\u030a",                 # Å
    "n\u0303o",
    "\u1100\u1161\u11a8",      # Hangul jamo -> 각
    "o\u0308\u0301",           # ö + acute
    "\u212b",                  # Angstrom sign -> Å
    "a\u0323\u0307",           # reordering of marks
    "Cafe\u0301 cre\u0300me bru\u0302le\u0301e",
    "\u0915\u093c",            # Devanagari nukta (composition-excluded)
    "s\u0323\u0307 and \u1e69",
    "\uac00\u11a8 \u1100\u1161 \u1100\u1161\u11a8x",  # Hangul: LV+T, L+V, L+V+T
    "x\u0301\u0323y",        # marks reordered by combining class
    "\u0958 \u0f73 \u2126",    # composition exclusions and singletons
    "Vie\u0302\u0323t Nam, \u00e9\u0301, \u304b\u3099",  # stacked marks, kana + dakuten
    "\u1e9b\u0323",
)

# Special-token text and near misses.
add(
    "<|im_start|>", "<|im_end|>", "<|endoftext|>",
    "<|im_start|>user\nhi<|im_end|>",
    "<|im_start|", "|im_start|>", "<|im_start", "< |im_start|>", "<|IM_START|>",
    "<|im_start|><|im_end|>", "text<|endoftext|>more", "<<|im_end|>>", "<|im_end|>\n<|im_start|>assistant\n",
    "<think>reasoning</think>", "<think>", "</think>\n\n", "<tool_call>", "<|fim_prefix|>x<|fim_suffix|>",
    "<repo_name>", "<filename>", "<|endoftext", "endoftext|>", "<s>", "</s>", "[INST]", "<|eot_id|>",
)

# Assorted edge cases.
add(
    "a\x04b\x13c", "\U00040000x\U0009ffff", "\U0010fffd",  # bytes missing from SmolLM2's vocabulary
    "\u200b", "zero\u200bwidth", "\ufeffBOM", "tab\tinside", "\u00ad soft hyphen", "\x00null\x01ctl",
    "ꙮ rare letter", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 math", "𐍈 gothic", "\U0001F9D1\u200d\U0001F680",
    "ſ long s's", "İstanbul ıi", "ß STRASSE", "ﬁ ligature", "Ω ohm \u2126",
    "'''", "\"\"\"docstring\"\"\"", "’curly’ quotes “double”", "—–-", "…", "¿Qué? ¡Sí!",
    "a" * 200, "ab" * 150, "!@#$%^&*()_+-=[]{}|;':\",./<>?`~",
)

# Random soup from a fixed seed: characters where regex engines and Unicode versions tend
# to disagree (every White_Space character, NEL, line/paragraph separators, marks, digits of
# other scripts, apostrophe look-alikes, contraction fragments) mixed with ordinary text.
import random

rng = random.Random(20261129)
pool = (
    list(" \t\n\r\x0b\x0c\x85\xa0\u1680\u2000\u2001\u2002\u2003\u2007\u2008\u2009\u200a"
         "\u2028\u2029\u202f\u205f\u3000\u180e\u200b\u200d\ufeff")
    + list("aAzZéÉßıİſĲ") + list("0123456789٣۴߅५௬๗²³¹½⅓Ⅻ①")
    + list("'’`\"!?.,;:-_/\\()[]{}<>|@#$%^&*+=~")
    + list("\u0301\u0308\u0323\u093c\u05b4\u0670\u20dd")
    + list("中文日本語한국어العربيةשלוםΑθήναМосква")
    + ["😀", "👍🏽", "👨‍👩‍👧", "🇯🇵", "❤️", "1️⃣"]
    + ["'s", "'S", "'t", "'re", "'VE", "'m", "'ll", "'D", "'x", "<|im_start|>", "<|endoftext|>", "<think>"]
    + ["the", " the", "The", "hello", " world", "function", "return", "    ", "\n\n", "\r\n"]
)
for _ in range(120):
    n = rng.randint(1, 24)
    add("".join(rng.choice(pool) for _ in range(n)))

seen = set()
unique = []
for s in corpus:
    if s not in seen:
        seen.add(s)
        unique.append(s)

here = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(here, "corpus.json"), "w", encoding="utf-8") as f:
    json.dump(unique, f, ensure_ascii=False, indent=0)
    f.write("\n")
print(len(unique), "strings")
