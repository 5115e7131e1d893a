#!/usr/bin/env python3
"""Generates the reference token ids of test/tokenize/ (quantd's tokenizer must give exactly these).

Run from the repository root, with Debian's python3-sentencepiece and, for the tokenizer.json
models, Hugging Face's tokenizers.js installed outside the project:

    npm install --no-save --prefix /tmp/hftok @huggingface/tokenizers@0.2.0
    HF_TOKENIZERS=/tmp/hftok/node_modules/@huggingface/tokenizers/dist/tokenizers.mjs \\
        /usr/bin/python3 test/tokenize/generate.py

It writes:
  models/NAME/       tokenizers built here for what the GGUF fixtures do not exercise: SentencePiece
                     models trained with other options (whitespace handling, user-defined and control
                     pieces, no byte fallback, whitespace as suffix, pieces spanning spaces, unigram
                     models) or edited
                     (unused pieces, user-defined pieces), and tokenizer.json variants of the
                     fixtures (an NFC normalizer, stripping added tokens, GPT-2's ByteLevel regex with
                     a prefix space and no ignore_merges, whole words no merge forms);
  vectors/onig-regex.json  split regexes' matches as Oniguruma (jq) gives them, for the
                     translation of Oniguruma patterns into JavaScript;
  vectors/texts.json the texts: one of several KB (prose, code, whitespace runs, digits,
                     punctuation, emoji, CJK, RTL, rare characters that take byte fallback), each of
                     its lines, and edge cases;
  vectors/NAME.json  {"folder", "reference", "extraTexts", "ids"}: the ids SentencePiece (sp.encode) or
                     tokenizers.js (encode without special tokens) gives for each text, then for the
                     model's extra texts (added tokens inside; the held-out text for the trained
                     llama), for the GGUF fixtures (test/gguf-hf/fixtures), the models above, and
                     test/trained-llama/model when the repository has it.

The tests (test/tokenize/*.test.ts) read the vectors and never run Python or tokenizers.js.
"""
import copy
import io
import json
import os
import subprocess

import sentencepiece as spm
from sentencepiece import sentencepiece_model_pb2 as model_pb2

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
FIXTURES = os.path.join(ROOT, "test", "gguf-hf", "fixtures")
MODELS = os.path.join(HERE, "models")
VECTORS = os.path.join(HERE, "vectors")

# A varied text: each paragraph exercises something a tokenizer can get wrong.
TEXT = "\n".join(
    [
        # English prose with contractions, some upper-case ('S 'LL: the (?i:) part of the split regex)
        "The quick brown fox jumps over the lazy dog. It's a dog's life, isn't it? We'll see; they'd "
        "say you're right, and I'M SURE IT'S TRUE. Don't panic: the world says hello again.",
        "Hello world, hello again, the world says hello. A tokenizer splits text into pieces, and "
        "pieces into ids; numbers like 12345 and 678 add up: 12345 + 678 = 13023.",
        # code: indentation with spaces and tabs, operators, brackets
        "def tokenize(text: str) -> list[int]:",
        "    if not text:  # nothing to do",
        "        return []",
        "\tfor i, ch in enumerate(text):\t\tyield ord(ch) ** 2 // 3 != 0x1F",
        '    x = {"key": [1, 2.5, -3e10], \'other\': None}  ;;  a->b && c || !d',
        "function f(a,b){return a===b?`${a}`:null}/* comment */ // trailing   ",
        # whitespace runs, alone and mixed
        "two  spaces,   three,    four,        eight.  \t tab-space \t\t double tab",
        "",
        "   leading spaces and trailing ones   ",
        " \n \n\n\n  blank lines above ",
        # digits and punctuation
        "3.14159 2.71828 1,000,000 1.000.000,00 2024-01-31T12:34:56Z +49 (0)30 1234-5678 #42 50% $9.99 €5",
        "!!! ... ??? ?! «quotes» “smart” ‘single’ — em – en -- hyphen-ated (parens) [brackets] {braces} <angle>",
        "a/b\\c|d~e^f_g`h@i",
        # emoji: single, skin tone, ZWJ sequence, flags, keycap
        "Emoji: 🙂 🎉👍🏽 👨‍👩‍👧‍👦 🇩🇪🇯🇵 1️⃣ ❤️ 🤖🦾",
        # CJK, Korean, Thai, Devanagari
        "東京は晴れ。大阪は雨。今日は良い天気です。中文测试：你好，世界！漢字とかなカナ",
        "한국어 문장입니다. ภาษาไทยไม่มีช่องว่าง हिन्दी में लिखा गया वाक्य",
        # right to left
        "العربية: مرحبا بالعالم! עברית: שלום עולם.",
        # Latin with diacritics, Cyrillic, Greek
        "Grüße aus Köln, schöne Grüße an alle. Привет, мир! Как дела? Καλημέρα κόσμε. Ça va? Ñandú, Łódź, Øre",
        # rare characters: combining marks, math alphanumerics, Gothic, private use, odd spaces and marks
        "e\u0301 vs é, n\u0303, Å vs A\u030a; 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝐛𝐨𝐥𝐝 𐌰𐌱𐌲 \ue000\U000f0000 ⅧⅫ ½ ² ꙮ",
        "no\u00a0break\u3000ideographic\u2009thin\u200bzero-width\u2028line-sep ſ K ß ẞ ﬁ",
        "Mixed: abc123def 4ever x2 H2O CO2 iPhone15Pro GPT-4o l33t",
        # contractions glued to more letters: the regex's contraction alternative stops after them
        "x'sy it'sx we'llbe 'twas y'all O'Neil's rock'n'roll they'ven't I'd've 'RE'VE'M'LL'D",
        # longer prose
        "Quantization maps a tensor's floating-point values to a small set of integers: a scale and "
        "a zero point per tensor, per channel, or per group of 32, 64 or 128 values. The error it "
        "introduces is measured on calibration text, which a tokenizer must turn into exactly the ids "
        "the model was trained on; one id off, and every activation after it shifts. That is why the "
        "ids are compared with the reference tokenizers byte for byte, never approximately.",
        "In 1843, Ada Lovelace wrote that the Analytical Engine \"might act upon other things besides "
        "number\". Today's models read text as sequences of sub-word pieces -- byte-pair merges, "
        "unigram pieces, or whole words -- chosen to keep the vocabulary between 32,000 and 256,000 "
        "entries (Llama 2: 32,000; Llama 3: 128,256; Qwen 2: 151,936; Gemma 2: 256,000).",
        # markdown, a table, a URL, an e-mail address, a path
        "## Results\n\n| model | bits | ppl |\n|-------|-----:|----:|\n| llama | 4 | 6.12 |\n| qwen | 8 | 5.98 |",
        "See https://example.com/path/to/page?query=1&lang=de#section or mail dev@example.org; "
        "C:\\Users\\me\\file.txt and /usr/local/lib/python3.11/site-packages/",
        # a longer program, JSON and a shell line
        "class Tokenizer:\n    def __init__(self, vocab: dict[str, int]) -> None:\n        self.vocab = vocab\n"
        "        self.cache: dict[str, list[int]] = {}\n\n    def encode(self, text):\n"
        "        return [self.vocab.get(w, 0) for w in text.split()]  # naive\n",
        '{"name": "quantd", "version": "0.1.0", "tags": ["int8", "gguf"], "nested": {"a": [1, {"b": null}]}}',
        "$ for f in *.safetensors; do quantd quantize \"$f\" -o \"out/${f%.safetensors}.q8\" --qdtype int8; done 2>&1 | tee log",
        # more languages
        "Le cœur a ses raisons que la raison ne connaît point. Zwölf Boxkämpfer jagen Viktor quer über "
        "den großen Sylter Deich. Pchnąć w tę łódź jeża lub ośm skrzyń fig. Příliš žluťoučký kůň úpěl "
        "ďábelské ódy. Árvíztűrő tükörfúrógép. Türkçe: Pijamalı hasta yağız şoföre çabucak güvendi.",
        "日本語の文章には空白がありません。東京タワーは一九五八年に完成しました。北京欢迎你！"
        "我们在学习自然语言处理。한국어: 다람쥐 헌 쳇바퀴에 타고파. Tiếng Việt: Tôi yêu tiếng nước tôi.",
        "Ελληνικά: Ξεσκεπάζω την ψυχοφθόρα βδελυγμία. Русский: Съешь же ещё этих мягких французских "
        "булок, да выпей чаю. Українська: Чуєш їх, доцю, га? ქართული ენა. Հայերեն. ኢትዮጵያ",
        "فارسی: به نام خداوند جان و خرد. اردو: میں اردو بولتا ہوں۔ עברית: דג סקרן שט בים מאוכזב. "
        "தமிழ் மொழி. বাংলা ভাষা. ਪੰਜਾਬੀ. ગુજરાતી. ಕನ್ನಡ. മലയാളം. සිංහල. ລາວ. བོད་ཡིག. မြန်မာ.",
        # long runs of one character
        "=" * 80,
        "-" * 40 + " " * 40 + "\t" * 10 + "." * 30,
        "0123456789" * 8,
    ]
)

# Short texts at the edges: empty, whitespace only, a space symbol typed in the text, piece syntax.
EDGES = [
    "",
    " ",
    "  ",
    "\t",
    "\n",
    "a",
    " a",
    "a ",
    "  a  b  ",
    "\u2581",
    "\u2581\u2581hello",
    "hello \u2581 world",
    "<s>",
    "</s>",
    "<unk>",
    "<0x41>",
    "<tag> and [[brackets]] 1212",
    "\U0010fffd\U0001f9ff",
    "hello\r\nworld\r\n",
    "x" * 300,
    "ab" * 200,
    " " * 50 + "end",
    "🙂" * 20,
]

# Texts with added tokens inside, for the tokenizer.json models.
SPECIALS = {
    "llama3-bpe": [
        "<|begin_of_text|>Hello<|eot_id|>\n<|end_of_text|>",
        "a<|eot_id|><|eot_id|>b <|eot_id|> c",
        "<|begin_of_tex|> not quite <|eot_id",
    ],
    "qwen": [
        "<|im_start|>user\nHi there!<|im_end|>\n<|im_start|>assistant\n",
        "<|endoftext|><|im_start|><|im_end|>x",
        " <|im_start|> spaced <|im_end|> ",
    ],
}

CORPUS = TEXT.split("\n") * 8 + [
    "The quick brown fox jumps over the lazy dog.",
    "Hello world, hello again, the world says hello.",
    "Numbers like 12345 and 678 add up: 12345 + 678 = 13023.",
] * 20


def train(name, vocab_size=1200, **options):
    """A SentencePiece BPE model trained on CORPUS, written to models/NAME/tokenizer.model."""
    args = dict(
        model_type="bpe",
        vocab_size=vocab_size,
        character_coverage=1.0,
        byte_fallback=True,
        normalization_rule_name="identity",
        remove_extra_whitespaces=False,
        add_dummy_prefix=True,
        num_threads=1,
        minloglevel=2,
        hard_vocab_limit=False,
    )
    args.update(options)
    out = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(CORPUS), model_writer=out, **args)
    return save_model(name, out.getvalue())


def save_model(name, data):
    folder = os.path.join(MODELS, name)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "tokenizer.model"), "wb") as f:
        f.write(data)
    return folder


def with_user_defined_pieces():
    """The llama-spm fixture with some frequent two- and three-character pieces made user-defined:
    SentencePiece keeps them whole wherever they occur (the longest one at each place) and never
    merges them with their neighbours."""
    m = model_pb2.ModelProto()
    with open(os.path.join(FIXTURES, "llama-spm", "tokenizer.model"), "rb") as f:
        m.ParseFromString(f.read())
    for p in m.pieces:
        if p.piece in ("he", "or", "ll", "ing", "el", "in"):
            p.type = model_pb2.ModelProto.SentencePiece.USER_DEFINED
    return save_model("spm-user-defined", m.SerializeToString())


def edited_unigram(folder):
    """The spm-unigram model with some pieces made unused (the Viterbi search skips them) and its
    user-defined pieces scored low (their bonus, not their score, makes them win)."""
    m = model_pb2.ModelProto()
    with open(os.path.join(folder, "tokenizer.model"), "rb") as f:
        m.ParseFromString(f.read())
    marked = 0
    for p in m.pieces:
        if p.type == model_pb2.ModelProto.SentencePiece.NORMAL and len(p.piece) >= 3 and marked < 40:
            p.type = model_pb2.ModelProto.SentencePiece.UNUSED
            marked += 1
        elif p.type == model_pb2.ModelProto.SentencePiece.USER_DEFINED:
            p.score = -100.0
    return save_model("spm-unigram-edited", m.SerializeToString())


def with_unused_pieces():
    """The llama-spm fixture with some multi-character pieces marked UNUSED: SentencePiece still
    merges into them, then splits them back into the pieces they were formed from."""
    m = model_pb2.ModelProto()
    with open(os.path.join(FIXTURES, "llama-spm", "tokenizer.model"), "rb") as f:
        m.ParseFromString(f.read())
    marked = 0
    for p in m.pieces:
        if p.type == model_pb2.ModelProto.SentencePiece.NORMAL and len(p.piece) >= 3 and marked < 12:
            p.type = model_pb2.ModelProto.SentencePiece.UNUSED
            marked += 1
    return save_model("spm-unused", m.SerializeToString())


# Split regexes (Oniguruma syntax) whose matches Oniguruma itself gives (through jq, which links the
# same library as the Rust tokenizers' onig crate): the translation into JavaScript must agree.
REGEXES = [
    # Llama 3, Qwen 2 and GPT-2 (ByteLevel's use_regex)
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+",
    # possessive quantifiers (tiktoken's cl100k style) and atomic groups, which never give back
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+",
    r"(?>\s+)(?!\S)|\s+|(?>\p{L}+)\p{L}|\p{L}++s|q?+q|\p{L}*+\p{N}|\p{L}+|.",
    # escapes, classes, named and lookbehind groups, lazy quantifiers, categories
    r"\x{41}+|[a-c\-x]+|(?<name>ab)|(?<=a)b|\p{^L}{2,}?|[\p{Lu}\p{Nd}]+|\P{L}|.",
]

# Where JavaScript's own \s or ASCII-only case folding would split differently from Oniguruma.
REGEX_EXTRA = (
    "\ufeff BOM \u0085 NEL x'ſ x'K x'S \u000b\u000c \u001c\u001d \u180e x'ſx y'Kelvin "
    "a\ufeff\ufeff b a \ufeff\n word\u0085\u0085next x \u0085y z\u0085 \u0085\u0085 AAAabc"
)


def regex_vectors():
    text = TEXT + "\n" + REGEX_EXTRA
    cases = []
    for pattern in REGEXES:
        out = subprocess.run(
            ["jq", "-c", "--arg", "re", pattern, '[match($re; "g") | .string]'],
            input=json.dumps(text), check=True, capture_output=True, text=True,
        )
        cases.append({"pattern": pattern, "matches": json.loads(out.stdout)})
    version = subprocess.run(["jq", "--version"], check=True, capture_output=True, text=True).stdout.strip()
    os.makedirs(VECTORS, exist_ok=True)
    with open(os.path.join(VECTORS, "onig-regex.json"), "w") as f:
        doc = {"reference": f"Oniguruma through {version}", "text": text, "cases": cases}
        json.dump(doc, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")


def common_texts():
    """The texts every model's vectors cover: the whole text, each of its lines, the edge cases."""
    return [TEXT] + [line for line in TEXT.split("\n") if line] + EDGES


def spm_vectors(name, folder, extra=()):
    with open(os.path.join(folder, "tokenizer.model"), "rb") as f:
        sp = spm.SentencePieceProcessor(model_proto=f.read())
    ids = [sp.encode(t) for t in common_texts() + list(extra)]
    # and what SentencePiece decodes those ids to, with a BOS and an EOS around them
    decoded = [sp.decode([sp.bos_id()] + i + [sp.eos_id()]) for i in ids]
    sequences = decode_sequences(sp)
    doc_extra = {"decodeIds": sequences, "decodeTexts": [sp.decode(q) for q in sequences]}
    write_vectors(name, folder, "sentencepiece " + spm.__version__, list(extra), ids, decoded, doc_extra)


def decode_sequences(sp):
    """Id sequences no encoding gives, for decoding: space pieces around control pieces (only the
    first space piece of the text loses its space), broken UTF-8 in byte pieces, the unknown id."""
    ws = sp.piece_to_id("\u2581")
    # a word piece with its space (first, or last for a suffix model)
    word = next(i for i in range(sp.get_piece_size()) if "\u2581" in sp.id_to_piece(i) and len(sp.id_to_piece(i)) > 2)
    bos, eos, unk = sp.bos_id(), sp.eos_id(), sp.unk_id()
    seqs = [[ws, bos, word], [bos, ws, ws, word], [word, ws, word], [bos, eos, word], [unk, word, unk]]
    byte = sp.piece_to_id("<0xE3>")
    if sp.id_to_piece(byte) == "<0xE3>":
        b = lambda v: sp.piece_to_id("<0x%02X>" % v)
        seqs += [
            [b(0xE3), b(0x81), word],  # a character cut short
            [b(0xFF), b(0xC3), b(0xA9), b(0x80)],  # invalid bytes around a valid character
            [ws, b(0xE3), b(0x81), b(0x82), word],
            [b(0xF0), b(0x9F), b(0x99), b(0x82), ws],
        ]
    return seqs


def trained_llama_vectors():
    """The trained llama's tokenizer (test/trained-llama), once the repository has it, on the first
    20 KB of its held-out text (cut at a character boundary)."""
    folder = os.path.join(ROOT, "test", "trained-llama", "model")
    if not os.path.exists(os.path.join(folder, "tokenizer.model")):
        return
    with open(os.path.join(ROOT, "test", "trained-llama", "heldout.txt"), "rb") as f:
        heldout = f.read(20 * 1024).decode("utf-8", "ignore")
    spm_vectors("trained-llama", folder, [heldout])


def tokenizers_js(folder, texts):
    script = os.path.join(HERE, "reference-bpe.mjs")
    out = subprocess.run(
        ["node", script, folder], input=json.dumps(texts), check=True, capture_output=True, text=True
    )
    return json.loads(out.stdout)


def bpe_vectors(name, folder, extra):
    ids = tokenizers_js(folder, common_texts() + extra)
    write_vectors(name, folder, "@huggingface/tokenizers 0.2.0 (tokenizers.js)", extra, ids)


def write_vectors(name, folder, reference, extra, ids, decoded=None, doc_extra=None):
    """NAME.json: ids[i] are the ids of texts.json's texts[i], then of extraTexts; decoded[i] (for
    SentencePiece) the text the reference decodes [BOS] + ids[i] + [EOS] to, and decodeTexts[k]
    what it decodes decodeIds[k] to."""
    os.makedirs(VECTORS, exist_ok=True)
    doc = {"folder": os.path.relpath(folder, ROOT), "reference": reference, "extraTexts": extra, "ids": ids}
    if decoded is not None:
        doc["decoded"] = decoded
    doc.update(doc_extra or {})
    with open(os.path.join(VECTORS, name + ".json"), "w") as f:
        json.dump(doc, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")


def write_texts():
    with open(os.path.join(VECTORS, "texts.json"), "w") as f:
        json.dump({"texts": common_texts()}, f, ensure_ascii=False, indent=0)
        f.write("\n")


def bpe_variant(name, edit, fixture="qwen2-bpe"):
    """A copy of a fixture's tokenizer.json (and tokenizer_config.json) changed by `edit`."""
    src = os.path.join(FIXTURES, fixture)
    with open(os.path.join(src, "tokenizer.json")) as f:
        tok = json.load(f)
    tok = edit(copy.deepcopy(tok))
    folder = os.path.join(MODELS, name)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "tokenizer.json"), "w") as f:
        json.dump(tok, f, ensure_ascii=False)
    with open(os.path.join(src, "tokenizer_config.json")) as f:
        config = f.read()
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
        f.write(config)
    return folder


def nfc_and_strip(tok):
    """An NFC normalizer, and added tokens that strip the whitespace beside them."""
    tok["normalizer"] = {"type": "NFC"}
    next_id = max(t["id"] for t in tok["added_tokens"]) + 1
    for i, (content, lstrip, rstrip) in enumerate(
        [("<tag>", True, True), ("[[", True, False), ("]]", False, True)]
    ):
        tok["added_tokens"].append(
            {"id": next_id + i, "content": content, "single_word": False, "lstrip": lstrip,
             "rstrip": rstrip, "normalized": False, "special": False}
        )
    return tok


def whole_words(tok):
    """Llama 3's tokenizer with whole words in the vocabulary that no merge forms: with
    ignore_merges, a pre-token that is in the vocabulary is that one token."""
    next_id = max(tok["model"]["vocab"].values()) + 1
    next_id = max([next_id] + [t["id"] + 1 for t in tok["added_tokens"]])
    for i, word in enumerate(["\u0120quick", "\u0120lazy", "\u0120jumps", "Hello"]):
        tok["model"]["vocab"][word] = next_id + i
    return tok


def gpt2_style(tok):
    """GPT-2's pre-tokenizer (ByteLevel alone: its own regex, a space before each text), merges
    applied to every word (no ignore_merges)."""
    tok["pre_tokenizer"] = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}
    tok["model"]["ignore_merges"] = False
    return tok


def main():
    os.makedirs(VECTORS, exist_ok=True)
    write_texts()
    regex_vectors()
    for name in ["llama-spm", "gemma2-spm", "phi3-spm"]:
        spm_vectors(name, os.path.join(FIXTURES, name))
    spm_vectors(
        "spm-options",
        train(
            "spm-options",
            remove_extra_whitespaces=True,
            user_defined_symbols=["<tag>", "[[", "]]", "12", "\u2581\u2581"],
            control_symbols=["<ctrl>"],
            split_digits=True,
        ),
    )
    spm_vectors("spm-no-fallback", train("spm-no-fallback", vocab_size=600, byte_fallback=False, character_coverage=0.98))
    spm_vectors("spm-suffix", train("spm-suffix", treat_whitespace_as_suffix=True))
    spm_vectors("spm-across-spaces", train("spm-across-spaces", split_by_whitespace=False, vocab_size=1400))
    spm_vectors("spm-unused", with_unused_pieces())
    spm_vectors("spm-user-defined", with_user_defined_pieces())
    unigram = train("spm-unigram", model_type="unigram", user_defined_symbols=["<tag>", "[[", "12"], split_digits=True)
    spm_vectors("spm-unigram", unigram)
    spm_vectors("spm-unigram-edited", edited_unigram(unigram))
    spm_vectors(
        "spm-unigram-no-fallback",
        train("spm-unigram-no-fallback", model_type="unigram", vocab_size=600, byte_fallback=False, character_coverage=0.98),
    )
    trained_llama_vectors()
    bpe_vectors("llama3-bpe", os.path.join(FIXTURES, "llama3-bpe"), SPECIALS["llama3-bpe"])
    for name in ["qwen2-bpe", "qwen3-bpe"]:
        bpe_vectors(name, os.path.join(FIXTURES, name), SPECIALS["qwen"])
    bpe_vectors(
        "bpe-nfc-strip",
        bpe_variant("bpe-nfc-strip", nfc_and_strip),
        SPECIALS["qwen"] + ["a <tag> b", "x[[ y ]] z", "<tag><tag>\n<tag>  end", "e\u0301<tag>"],
    )
    bpe_vectors("bpe-gpt2-style", bpe_variant("bpe-gpt2-style", gpt2_style), SPECIALS["qwen"])
    bpe_vectors(
        "bpe-whole-words", bpe_variant("bpe-whole-words", whole_words, "llama3-bpe"), SPECIALS["llama3-bpe"]
    )


if __name__ == "__main__":
    main()
