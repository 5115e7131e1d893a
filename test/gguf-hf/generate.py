#!/usr/bin/env python3
"""Generates the tiny Hugging Face model folders and reference vectors of test/gguf-hf/.

Run from the repository root with Debian's packages (apt-get install python3-torch
python3-sentencepiece):   /usr/bin/python3 test/gguf-hf/generate.py

For each fixture it writes test/gguf-hf/fixtures/NAME/ (config.json, tokenizer files,
model.safetensors with random weights) and test/gguf-hf/fixtures/NAME.expected.json: the
reference tokenizer's ids for a fixed multilingual text and the float32 logits of a forward pass
written here from the architecture's definition (no transformers), which the tests compare with
what llama.cpp (node-llama-cpp) computes from quantd's GGUF. The tests never run Python.
"""
import io
import json
import os
import re
import struct
import subprocess
from collections import Counter

import sentencepiece as spm
import torch

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")

# Tokenized by both tokenizers; characters missing from the training corpus take byte fallback.
TEXT = "Hello world! Grüße aus Köln, 東京は晴れ。 Привет, мир: 12345 + 678 = 13023 🙂"
PROMPT = "The quick brown fox"

CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "Hello world, hello again, the world says hello.",
    "Grüße aus Köln und München; schöne Grüße an alle.",
    "Привет, мир! Как дела? Мир тесен.",
    "東京は晴れ。大阪は雨。今日は良い天気です。",
    "Numbers like 12345 and 678 add up: 12345 + 678 = 13023.",
    "A tokenizer splits text into pieces, and pieces into ids.",
] * 20


def write_safetensors(path, tensors):
    """The safetensors format: u64 header length, JSON header, raw little-endian data."""
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        data = t.contiguous().numpy().tobytes()
        dtype = {torch.float32: "F32", torch.float16: "F16"}[t.dtype]
        header[name] = {"dtype": dtype, "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def train_sentencepiece(vocab_size, add_dummy_prefix=True):
    """A Llama-2-style SentencePiece BPE model: identity normalization, byte fallback, split digits."""
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(CORPUS),
        model_writer=model,
        model_type="bpe",
        vocab_size=vocab_size,
        character_coverage=1.0,
        byte_fallback=True,
        split_digits=True,
        normalization_rule_name="identity",
        remove_extra_whitespaces=False,
        add_dummy_prefix=add_dummy_prefix,
        allow_whitespace_only_pieces=True,
        unk_id=0,
        bos_id=1,
        eos_id=2,
        pad_id=-1,
        num_threads=1,
        minloglevel=2,
    )
    return model.getvalue()


# --- the llama forward pass (RMSNorm, rotary attention with grouped kv heads, SwiGLU) ----------


def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def inv_freq_of(cfg, dim):
    """Rotary frequencies, with Llama 3.1's rope scaling when config.json asks for it."""
    inv_freq = 1.0 / (cfg["rope_theta"] ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
    s = cfg.get("rope_scaling")
    if not s or s.get("rope_type") != "llama3":
        return inv_freq
    old = s["original_max_position_embeddings"]
    low_wavelen, high_wavelen = old / s["low_freq_factor"], old / s["high_freq_factor"]
    out = []
    for f in inv_freq.tolist():
        wavelen = 2 * torch.pi / f
        if wavelen < high_wavelen:
            out.append(f)
        elif wavelen > low_wavelen:
            out.append(f / s["factor"])
        else:
            smooth = (old / wavelen - s["low_freq_factor"]) / (s["high_freq_factor"] - s["low_freq_factor"])
            out.append((1 - smooth) * f / s["factor"] + smooth * f)
    return torch.tensor(out, dtype=torch.float64)


def rope(x, inv_freq):
    """HF's rotary layout: the two halves of each head are the pair (llama.cpp permutes rows)."""
    seq = x.shape[-2]
    angles = torch.arange(seq, dtype=torch.float64)[:, None] * inv_freq[None, :]
    angles = torch.cat((angles, angles), dim=-1)
    return (x.double() * angles.cos() + rotate_half(x.double()) * angles.sin()).float()


def llama_logits(w, cfg, ids):
    """Llama, and its relatives: Qwen 2 adds q/k/v biases, Qwen 3 RMS-normalizes q and k per head."""
    heads, kv_heads = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = cfg.get("head_dim", cfg["hidden_size"] // heads)
    eps, inv_freq = cfg["rms_norm_eps"], inv_freq_of(cfg, hd)

    def proj(h, p, name, n):
        y = h @ w[p + f"self_attn.{name}_proj.weight"].T
        if p + f"self_attn.{name}_proj.bias" in w:
            y = y + w[p + f"self_attn.{name}_proj.bias"]
        y = y.view(seq, n, hd)
        if p + f"self_attn.{name}_norm.weight" in w:
            y = rms_norm(y, w[p + f"self_attn.{name}_norm.weight"], eps)
        return y.transpose(0, 1)

    x = w["model.embed_tokens.weight"][ids]
    seq = len(ids)
    mask = torch.full((seq, seq), float("-inf")).triu(1)
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        h = rms_norm(x, w[p + "input_layernorm.weight"], eps)
        q, k, v = proj(h, p, "q", heads), proj(h, p, "k", kv_heads), proj(h, p, "v", kv_heads)
        q, k = rope(q, inv_freq), rope(k, inv_freq)
        k = k.repeat_interleave(heads // kv_heads, dim=0)
        v = v.repeat_interleave(heads // kv_heads, dim=0)
        att = torch.softmax(q @ k.transpose(1, 2) / hd**0.5 + mask, dim=-1)
        o = (att @ v).transpose(0, 1).reshape(seq, heads * hd)
        x = x + o @ w[p + "self_attn.o_proj.weight"].T
        h = rms_norm(x, w[p + "post_attention_layernorm.weight"], eps)
        gate = torch.nn.functional.silu(h @ w[p + "mlp.gate_proj.weight"].T)
        x = x + (gate * (h @ w[p + "mlp.up_proj.weight"].T)) @ w[p + "mlp.down_proj.weight"].T
    x = rms_norm(x, w["model.norm.weight"], eps)
    head = w.get("lm_head.weight", w["model.embed_tokens.weight"])
    return x[-1] @ head.T


def llama_weights(cfg, generator):
    hidden, ffn = cfg["hidden_size"], cfg["intermediate_size"]
    hd = cfg.get("head_dim", hidden // cfg["num_attention_heads"])
    q, kv = cfg["num_attention_heads"] * hd, cfg["num_key_value_heads"] * hd

    def rand(*shape, scale=0.08):
        # stored as F16, so the reference uses exactly the values the GGUF gets
        return (torch.randn(*shape, generator=generator) * scale).half()

    w = {"model.embed_tokens.weight": rand(cfg["vocab_size"], hidden, scale=1.0)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = (1 + rand(hidden, scale=0.1).float()).half()
        w[p + "self_attn.q_proj.weight"] = rand(q, hidden, scale=0.3)
        w[p + "self_attn.k_proj.weight"] = rand(kv, hidden, scale=0.3)
        w[p + "self_attn.v_proj.weight"] = rand(kv, hidden)
        if cfg.get("model_type") == "qwen2":
            w[p + "self_attn.q_proj.bias"] = rand(q, scale=0.3)
            w[p + "self_attn.k_proj.bias"] = rand(kv, scale=0.3)
            w[p + "self_attn.v_proj.bias"] = rand(kv)
        if cfg.get("model_type") == "qwen3":
            w[p + "self_attn.q_norm.weight"] = (1 + rand(hd, scale=0.1).float()).half()
            w[p + "self_attn.k_norm.weight"] = (1 + rand(hd, scale=0.1).float()).half()
        w[p + "self_attn.o_proj.weight"] = rand(hidden, q)
        w[p + "post_attention_layernorm.weight"] = (1 + rand(hidden, scale=0.1).float()).half()
        w[p + "mlp.gate_proj.weight"] = rand(ffn, hidden)
        w[p + "mlp.up_proj.weight"] = rand(ffn, hidden)
        w[p + "mlp.down_proj.weight"] = rand(hidden, ffn)
    w["model.norm.weight"] = (1 + rand(hidden, scale=0.1).float()).half()
    if not cfg["tie_word_embeddings"]:
        w["lm_head.weight"] = rand(cfg["vocab_size"], hidden, scale=0.3)
    return w


def llama_spm():
    name = "llama-spm"
    folder = os.path.join(ROOT, name)
    os.makedirs(folder, exist_ok=True)
    sp_bytes = train_sentencepiece(400)
    with open(os.path.join(folder, "tokenizer.model"), "wb") as f:
        f.write(sp_bytes)
    sp = spm.SentencePieceProcessor(model_proto=sp_bytes)
    cfg = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "vocab_size": 416,  # more rows than pieces: the converter pads the vocabulary
        "max_position_embeddings": 256,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "tie_word_embeddings": False,
        "torch_dtype": "float16",
    }
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    tok_cfg = {
        "add_bos_token": True,
        "add_eos_token": False,
        "bos_token": "<s>",
        "eos_token": "</s>",
        "unk_token": "<unk>",
        "tokenizer_class": "LlamaTokenizer",
        "chat_template": "{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}",
    }
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
        json.dump(tok_cfg, f, indent=2)
    generator = torch.Generator().manual_seed(1234)
    w = llama_weights(cfg, generator)
    write_safetensors(os.path.join(folder, "model.safetensors"), w)
    prompt = [sp.bos_id()] + sp.encode(PROMPT)
    logits = llama_logits({k: v.float() for k, v in w.items()}, cfg, prompt)
    expected = {
        "text": TEXT,
        "ids": sp.encode(TEXT),
        "pieces": sp.get_piece_size(),
        "prompt": PROMPT,
        "promptIds": prompt,
        "logits": [round(float(v), 6) for v in logits],
    }
    with open(os.path.join(ROOT, name + ".expected.json"), "w") as f:
        json.dump(expected, f)


# --- a byte-level BPE tokenizer.json (Llama 3 style), trained here on the corpus ---------------

LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
QWEN2_SPLIT = LLAMA3_SPLIT.replace(r"\p{N}{1,3}", r"\p{N}")


def byte_chars():
    """GPT-2's byte → printable character table: printable Latin-1 bytes map to themselves."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def train_byte_bpe(merges_wanted):
    chars = byte_chars()
    # an approximation of the split regex (Python's re has no \p{L}): merges only need to be valid
    words = Counter()
    for line in CORPUS:
        for piece in re.findall(r"'s|'t|'re|'ve|'m|'ll|'d| ?[^\W\d_]+|\d{1,3}| ?[^\s\w]+|\s+", line):
            words[tuple(chars[b] for b in piece.encode())] += 1
    vocab = [chars[b] for b in range(256)]
    merges = []
    for _ in range(merges_wanted):
        pairs = Counter()
        for word, n in words.items():
            for a, b in zip(word, word[1:]):
                pairs[(a, b)] += n
        if not pairs:
            break
        (a, b), _ = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))
        merges.append(f"{a} {b}")
        vocab.append(a + b)
        merged = Counter()
        for word, n in words.items():
            out, i = [], 0
            while i < len(word):
                if i + 1 < len(word) and word[i] == a and word[i + 1] == b:
                    out.append(a + b)
                    i += 2
                else:
                    out.append(word[i])
                    i += 1
            merged[tuple(out)] += n
        words = merged
    return vocab, merges


def bpe_tokenizer_json(vocab, merges, specials, bos, split):
    """A byte-level BPE tokenizer.json: Llama 3's (bos prepended) or, with bos None, Qwen 2's."""
    template = {
        "type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                 {"SpecialToken": {"id": bos, "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {bos: {"id": bos, "ids": [specials.get(bos)], "tokens": [bos]}},
    }
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [
            {"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
             "normalized": False, "special": True}
            for t, i in specials.items()
        ],
        "normalizer": None,
        "pre_tokenizer": {
            "type": "Sequence",
            "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": split}, "behavior": "Isolated", "invert": False},
                {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False},
            ],
        },
        "post_processor": template if bos is not None else byte_level,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {
            "type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
            "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": True,
            "vocab": {t: i for i, t in enumerate(vocab)},
            "merges": merges,
        },
    }


def reference_ids(folder, texts):
    """tokenizers.js's ids (see reference-tokenize.mjs for where it comes from)."""
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "reference-tokenize.mjs")
    out = subprocess.run(["node", script, folder, *texts], check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


def llama3_bpe():
    name = "llama3-bpe"
    folder = os.path.join(ROOT, name)
    os.makedirs(folder, exist_ok=True)
    vocab, merges = train_byte_bpe(200)
    names = ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"]
    specials = {t: len(vocab) + i for i, t in enumerate(names)}
    tok = bpe_tokenizer_json(vocab, merges, specials, names[0], LLAMA3_SPLIT)
    with open(os.path.join(folder, "tokenizer.json"), "w") as f:
        json.dump(tok, f, ensure_ascii=False)
    cfg = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "vocab_size": len(vocab) + len(names) + 5,  # ids no token uses: the converter pads
        "max_position_embeddings": 1024,
        "rms_norm_eps": 1e-5,
        "rope_theta": 500000.0,
        "rope_scaling": {
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 64,
        },
        "bos_token_id": specials[names[0]],
        "eos_token_id": [specials[names[1]], specials[names[2]]],
        "tie_word_embeddings": True,
        "torch_dtype": "float16",
    }
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    tok_cfg = {
        "bos_token": names[0],
        "eos_token": names[2],
        "tokenizer_class": "PreTrainedTokenizerFast",
        "chat_template": "{{ bos_token }}{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}{{ eos_token }}{% endfor %}",
    }
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
        json.dump(tok_cfg, f, indent=2)
    generator = torch.Generator().manual_seed(4321)
    w = llama_weights(cfg, generator)
    write_safetensors(os.path.join(folder, "model.safetensors"), w)
    ids, prompt_ids = reference_ids(folder, [TEXT, PROMPT])
    prompt = [specials[names[0]]] + prompt_ids
    logits = llama_logits({k: v.float() for k, v in w.items()}, cfg, prompt)
    expected = {
        "text": TEXT,
        "ids": ids,
        "prompt": PROMPT,
        "promptIds": prompt,
        "logits": [round(float(v), 6) for v in logits],
    }
    with open(os.path.join(ROOT, name + ".expected.json"), "w") as f:
        json.dump(expected, f)


def qwen(name, model_type, architecture, extra):
    """Qwen 2 / Qwen 3: Qwen's byte-level BPE (single digits, no bos), tied embeddings."""
    folder = os.path.join(ROOT, name)
    os.makedirs(folder, exist_ok=True)
    vocab, merges = train_byte_bpe(180)
    names = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    specials = {t: len(vocab) + i for i, t in enumerate(names)}
    tok = bpe_tokenizer_json(vocab, merges, specials, None, QWEN2_SPLIT)
    with open(os.path.join(folder, "tokenizer.json"), "w") as f:
        json.dump(tok, f, ensure_ascii=False)
    cfg = {
        "architectures": [architecture],
        "model_type": model_type,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "vocab_size": len(vocab) + len(names) + 3,
        "max_position_embeddings": 512,
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0,
        "bos_token_id": specials["<|endoftext|>"],
        "eos_token_id": specials["<|im_end|>"],
        "tie_word_embeddings": True,
        "torch_dtype": "float16",
        **extra,
    }
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    tok_cfg = {
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "tokenizer_class": "Qwen2Tokenizer",
        "chat_template": "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}",
    }
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
        json.dump(tok_cfg, f, indent=2)
    generator = torch.Generator().manual_seed(len(name))
    w = llama_weights(cfg, generator)
    write_safetensors(os.path.join(folder, "model.safetensors"), w)
    ids, prompt_ids = reference_ids(folder, [TEXT, PROMPT])
    logits = llama_logits({k: v.float() for k, v in w.items()}, cfg, prompt_ids)
    expected = {
        "text": TEXT,
        "ids": ids,
        "prompt": PROMPT,
        "promptIds": prompt_ids,
        "logits": [round(float(v), 6) for v in logits],
    }
    with open(os.path.join(ROOT, name + ".expected.json"), "w") as f:
        json.dump(expected, f)


def phi3_spm():
    """Phi-3: llama's network with fused qkv_proj and gate_up_proj, a SentencePiece tokenizer."""
    name = "phi3-spm"
    folder = os.path.join(ROOT, name)
    os.makedirs(folder, exist_ok=True)
    sp_bytes = train_sentencepiece(400)
    with open(os.path.join(folder, "tokenizer.model"), "wb") as f:
        f.write(sp_bytes)
    sp = spm.SentencePieceProcessor(model_proto=sp_bytes)
    cfg = {
        "architectures": ["Phi3ForCausalLM"],
        "model_type": "phi3",
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "vocab_size": 408,
        "max_position_embeddings": 512,
        "original_max_position_embeddings": 512,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "rope_scaling": None,
        "sliding_window": 511,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "tie_word_embeddings": False,
        "torch_dtype": "float16",
    }
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    added = ["<|endoftext|>", "<|assistant|>", "<|end|>", "<|user|>"]  # beyond tokenizer.model, as Phi-3's
    tok_cfg = {
        "add_bos_token": True,
        "add_eos_token": False,
        "bos_token": "<s>",
        "eos_token": "</s>",
        "chat_template": "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}<|end|>\n{% endfor %}",
        "added_tokens_decoder": {
            str(400 + i): {"content": t, "special": True, "lstrip": False, "rstrip": False, "normalized": False}
            for i, t in enumerate(added)
        },
    }
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
        json.dump(tok_cfg, f, indent=2)
    w = llama_weights(cfg, torch.Generator().manual_seed(99))
    fused = dict(w)
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        fused[p + "self_attn.qkv_proj.weight"] = torch.cat(
            [fused.pop(p + f"self_attn.{x}_proj.weight") for x in "qkv"]
        )
        fused[p + "mlp.gate_up_proj.weight"] = torch.cat([fused.pop(p + f"mlp.{x}_proj.weight") for x in ("gate", "up")])
    write_safetensors(os.path.join(folder, "model.safetensors"), fused)
    prompt = [sp.bos_id()] + sp.encode(PROMPT)
    logits = llama_logits({k: v.float() for k, v in w.items()}, cfg, prompt)
    expected = {
        "text": TEXT,
        "ids": sp.encode(TEXT),
        "prompt": PROMPT,
        "promptIds": prompt,
        "logits": [round(float(v), 6) for v in logits],
    }
    with open(os.path.join(ROOT, name + ".expected.json"), "w") as f:
        json.dump(expected, f)


def gemma_norm(x, w, eps):
    return rms_norm(x, 1 + w, eps)


def gemma2_logits(w, cfg, ids):
    """Gemma 2: scaled embeddings, (1 + w) norms around attention and MLP, soft-capping, GELU (tanh)."""
    heads, kv_heads, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    eps, inv_freq = cfg["rms_norm_eps"], inv_freq_of(cfg, hd)
    x = w["model.embed_tokens.weight"][ids] * cfg["hidden_size"] ** 0.5
    seq = len(ids)
    mask = torch.full((seq, seq), float("-inf")).triu(1)
    cap = cfg["attn_logit_softcapping"]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        h = gemma_norm(x, w[p + "input_layernorm.weight"], eps)
        q = (h @ w[p + "self_attn.q_proj.weight"].T).view(seq, heads, hd).transpose(0, 1)
        k = (h @ w[p + "self_attn.k_proj.weight"].T).view(seq, kv_heads, hd).transpose(0, 1)
        v = (h @ w[p + "self_attn.v_proj.weight"].T).view(seq, kv_heads, hd).transpose(0, 1)
        q, k = rope(q, inv_freq), rope(k, inv_freq)
        k = k.repeat_interleave(heads // kv_heads, dim=0)
        v = v.repeat_interleave(heads // kv_heads, dim=0)
        scores = q @ k.transpose(1, 2) * cfg["query_pre_attn_scalar"] ** -0.5
        scores = torch.tanh(scores / cap) * cap
        o = (torch.softmax(scores + mask, dim=-1) @ v).transpose(0, 1).reshape(seq, heads * hd)
        x = x + gemma_norm(o @ w[p + "self_attn.o_proj.weight"].T, w[p + "post_attention_layernorm.weight"], eps)
        h = gemma_norm(x, w[p + "pre_feedforward_layernorm.weight"], eps)
        gate = torch.nn.functional.gelu(h @ w[p + "mlp.gate_proj.weight"].T, approximate="tanh")
        mlp = (gate * (h @ w[p + "mlp.up_proj.weight"].T)) @ w[p + "mlp.down_proj.weight"].T
        x = x + gemma_norm(mlp, w[p + "post_feedforward_layernorm.weight"], eps)
    x = gemma_norm(x, w["model.norm.weight"], eps)
    logits = x[-1] @ w["model.embed_tokens.weight"].T
    return torch.tanh(logits / cfg["final_logit_softcapping"]) * cfg["final_logit_softcapping"]


def gemma2_spm():
    """Gemma 2 with a SentencePiece tokenizer that adds no dummy prefix (as Gemma's)."""
    name = "gemma2-spm"
    folder = os.path.join(ROOT, name)
    os.makedirs(folder, exist_ok=True)
    sp_bytes = train_sentencepiece(400, add_dummy_prefix=False)
    with open(os.path.join(folder, "tokenizer.model"), "wb") as f:
        f.write(sp_bytes)
    sp = spm.SentencePieceProcessor(model_proto=sp_bytes)
    cfg = {
        "architectures": ["Gemma2ForCausalLM"],
        "model_type": "gemma2",
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "query_pre_attn_scalar": 16,
        "vocab_size": 400,
        "max_position_embeddings": 512,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "attn_logit_softcapping": 50.0,
        "final_logit_softcapping": 30.0,
        "sliding_window": 256,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "tie_word_embeddings": True,
        "torch_dtype": "float16",
    }
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    tok_cfg = {
        "add_bos_token": True,
        "add_eos_token": False,
        "bos_token": "<s>",
        "eos_token": "</s>",
        "chat_template": "{% for m in messages %}<start_of_turn>{{ m['role'] }}\n{{ m['content'] }}<end_of_turn>\n{% endfor %}",
    }
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
        json.dump(tok_cfg, f, indent=2)
    w = llama_weights(cfg, torch.Generator().manual_seed(77))
    hidden = cfg["hidden_size"]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        w[p + "pre_feedforward_layernorm.weight"] = w.pop(p + "post_attention_layernorm.weight")
        for n in ("post_attention_layernorm", "post_feedforward_layernorm"):
            w[p + n + ".weight"] = (torch.randn(hidden, generator=torch.Generator().manual_seed(i)) * 0.1).half()
    for k in list(w):
        if k.endswith("norm.weight"):  # Gemma's norms are stored minus one
            w[k] = (w[k].float() - 1).half()
    write_safetensors(os.path.join(folder, "model.safetensors"), w)
    prompt = [sp.bos_id()] + sp.encode(PROMPT)
    logits = gemma2_logits({k: v.float() for k, v in w.items()}, cfg, prompt)
    expected = {
        "text": TEXT,
        "ids": sp.encode(TEXT),
        "prompt": PROMPT,
        "promptIds": prompt,
        "logits": [round(float(v), 6) for v in logits],
    }
    with open(os.path.join(ROOT, name + ".expected.json"), "w") as f:
        json.dump(expected, f)


if __name__ == "__main__":
    torch.manual_seed(0)
    llama_spm()
    llama3_bpe()
    qwen("qwen2-bpe", "qwen2", "Qwen2ForCausalLM", {})
    qwen("qwen3-bpe", "qwen3", "Qwen3ForCausalLM", {"head_dim": 32})
    phi3_spm()
    gemma2_spm()
