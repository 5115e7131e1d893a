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
import struct

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


def train_sentencepiece(vocab_size):
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
        add_dummy_prefix=True,
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


def rope(x, theta, inv_freq=None):
    """HF's rotary layout: the two halves of each head are the pair (llama.cpp permutes rows)."""
    seq, dim = x.shape[-2], x.shape[-1]
    if inv_freq is None:
        inv_freq = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
    angles = torch.arange(seq, dtype=torch.float64)[:, None] * inv_freq[None, :]
    angles = torch.cat((angles, angles), dim=-1)
    return (x.double() * angles.cos() + rotate_half(x.double()) * angles.sin()).float()


def llama_logits(w, cfg, ids):
    heads, kv_heads = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = cfg["hidden_size"] // heads
    eps, theta = cfg["rms_norm_eps"], cfg["rope_theta"]
    x = w["model.embed_tokens.weight"][ids]
    seq = len(ids)
    mask = torch.full((seq, seq), float("-inf")).triu(1)
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        h = rms_norm(x, w[p + "input_layernorm.weight"], eps)
        q = (h @ w[p + "self_attn.q_proj.weight"].T).view(seq, heads, hd).transpose(0, 1)
        k = (h @ w[p + "self_attn.k_proj.weight"].T).view(seq, kv_heads, hd).transpose(0, 1)
        v = (h @ w[p + "self_attn.v_proj.weight"].T).view(seq, kv_heads, hd).transpose(0, 1)
        q, k = rope(q, theta), rope(k, theta)
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
    hd = hidden // cfg["num_attention_heads"]
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


if __name__ == "__main__":
    torch.manual_seed(0)
    llama_spm()
