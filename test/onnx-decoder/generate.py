#!/usr/bin/env python3
"""Reference logits for the ONNX decoder tests (test/onnx-decoder/), from a forward pass written here.

Run from the repository root with Debian's python3-torch:   /usr/bin/python3 test/onnx-decoder/generate.py

For every tiny model folder of test/gguf-hf/fixtures/ (and variants of them with a short sliding
window, so that windowed attention is exercised), it evaluates a token sequence and writes the
float32 logits at every position to test/onnx-decoder/expected/NAME.json. The forward pass
follows each architecture's definition in transformers (RMSNorm, rotary attention with grouped kv
heads, SwiGLU / GELU-tanh MLP, Qwen 2's biases, Qwen 3's q/k norms, Phi-3's fused projections,
Gemma 2's scaled embeddings, (1 + w) norms around attention and MLP, soft-capping and sliding
window on even layers, Mistral's sliding window). The tests never run Python.
"""
import json
import os
import struct
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
import importlib.util  # noqa: E402

_spec = importlib.util.spec_from_file_location("gguf_hf_generate", os.path.join(HERE, "..", "gguf-hf", "generate.py"))
_ref = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_ref)
inv_freq_of, rms_norm, rotate_half = _ref.inv_freq_of, _ref.rms_norm, _ref.rotate_half

FIXTURES = os.path.join(HERE, "..", "gguf-hf", "fixtures")
OUT = os.path.join(HERE, "expected")

DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8 : 8 + n])
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        a, b = e["data_offsets"]
        t = torch.frombuffer(bytearray(data[8 + n + a : 8 + n + b]), dtype=DTYPES[e["dtype"]])
        out[name] = t.reshape(e["shape"]).float()
    return out


def rope(x, inv_freq):
    seq = x.shape[-2]
    angles = torch.arange(seq, dtype=torch.float64)[:, None] * inv_freq[None, :]
    angles = torch.cat((angles, angles), dim=-1)
    return (x.double() * angles.cos() + rotate_half(x.double()) * angles.sin()).float()


def logits_all(w, cfg, ids):
    """Logits [seq, vocab] of every position, for the six architectures."""
    mt = cfg["model_type"]
    gemma = mt == "gemma2"
    heads, kv_heads = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = cfg.get("head_dim") or cfg["hidden_size"] // heads
    eps, inv_freq = cfg["rms_norm_eps"], inv_freq_of(cfg, hd)
    seq = len(ids)
    norm = (lambda x, v: rms_norm(x, 1 + v, eps)) if gemma else (lambda x, v: rms_norm(x, v, eps))
    x = w["model.embed_tokens.weight"][ids]
    if gemma:
        x = x * torch.tensor(cfg["hidden_size"] ** 0.5, dtype=torch.float32)
    i_idx = torch.arange(seq)[:, None]
    j_idx = torch.arange(seq)[None, :]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        window = cfg.get("sliding_window")
        if gemma:
            window = window if i % 2 == 0 else None
        elif mt == "llama" or mt == "qwen2" or mt == "qwen3":
            window = None  # these ignore the key (Qwen 2 unless use_sliding_window)
        allowed = j_idx <= i_idx
        if window is not None:
            allowed = allowed & (j_idx > i_idx - window)
        mask = torch.where(allowed, 0.0, float("-inf"))
        h = norm(x, w[p + "input_layernorm.weight"])
        if mt == "phi3":
            qkv = h @ w[p + "self_attn.qkv_proj.weight"].T
            q, k, v = qkv.split([heads * hd, kv_heads * hd, kv_heads * hd], dim=-1)
        else:
            q, k, v = (h @ w[p + f"self_attn.{n}_proj.weight"].T for n in "qkv")
            if p + "self_attn.q_proj.bias" in w:
                q = q + w[p + "self_attn.q_proj.bias"]
                k = k + w[p + "self_attn.k_proj.bias"]
                v = v + w[p + "self_attn.v_proj.bias"]
        q = q.view(seq, heads, hd)
        k = k.view(seq, kv_heads, hd)
        v = v.view(seq, kv_heads, hd)
        if p + "self_attn.q_norm.weight" in w:
            q = rms_norm(q, w[p + "self_attn.q_norm.weight"], eps)
            k = rms_norm(k, w[p + "self_attn.k_norm.weight"], eps)
        q, k, v = q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1)
        q, k = rope(q, inv_freq), rope(k, inv_freq)
        k = k.repeat_interleave(heads // kv_heads, dim=0)
        v = v.repeat_interleave(heads // kv_heads, dim=0)
        if gemma:
            scores = q @ k.transpose(1, 2) * cfg["query_pre_attn_scalar"] ** -0.5
            cap = cfg["attn_logit_softcapping"]
            scores = torch.tanh(scores / cap) * cap
        else:
            scores = q @ k.transpose(1, 2) / hd**0.5
        o = (torch.softmax(scores + mask, dim=-1) @ v).transpose(0, 1).reshape(seq, heads * hd)
        o = o @ w[p + "self_attn.o_proj.weight"].T
        if gemma:
            x = x + norm(o, w[p + "post_attention_layernorm.weight"])
            h = norm(x, w[p + "pre_feedforward_layernorm.weight"])
        else:
            x = x + o
            h = norm(x, w[p + "post_attention_layernorm.weight"])
        if mt == "phi3":
            gate, up = (h @ w[p + "mlp.gate_up_proj.weight"].T).chunk(2, dim=-1)
        else:
            gate, up = h @ w[p + "mlp.gate_proj.weight"].T, h @ w[p + "mlp.up_proj.weight"].T
        act = torch.nn.functional.gelu(gate, approximate="tanh") if gemma else torch.nn.functional.silu(gate)
        mlp = (act * up) @ w[p + "mlp.down_proj.weight"].T
        x = x + (norm(mlp, w[p + "post_feedforward_layernorm.weight"]) if gemma else mlp)
    x = norm(x, w["model.norm.weight"])
    head = w.get("lm_head.weight", w["model.embed_tokens.weight"])
    logits = x @ head.T
    if gemma:
        cap = cfg["final_logit_softcapping"]
        logits = torch.tanh(logits / cap) * cap
    return logits


# (output name, fixture folder, config.json overrides)
CASES = [
    ("llama-spm", "llama-spm", {}),
    ("llama3-bpe", "llama3-bpe", {}),
    ("mistral-spm", "llama-spm", {"architectures": ["MistralForCausalLM"], "model_type": "mistral", "sliding_window": 7}),
    ("qwen2-bpe", "qwen2-bpe", {}),
    ("qwen3-bpe", "qwen3-bpe", {}),
    ("phi3-spm", "phi3-spm", {}),
    ("phi3-window", "phi3-spm", {"sliding_window": 9}),
    ("gemma2-spm", "gemma2-spm", {}),
    ("gemma2-window", "gemma2-spm", {"sliding_window": 6}),
]


def main():
    os.makedirs(OUT, exist_ok=True)
    for name, fixture, overrides in CASES:
        folder = os.path.join(FIXTURES, fixture)
        with open(os.path.join(folder, "config.json")) as f:
            cfg = json.load(f)
        cfg.update(overrides)
        with open(os.path.join(FIXTURES, fixture + ".expected.json")) as f:
            fixture_expected = json.load(f)
        bos = cfg["bos_token_id"]
        # the fixture's multilingual text, after its BOS: a few dozen tokens, past every window
        ids = [bos] + fixture_expected["ids"][:40]
        w = read_safetensors(os.path.join(folder, "model.safetensors"))
        logits = logits_all(w, cfg, ids)
        with open(os.path.join(OUT, name + ".json"), "w") as f:
            json.dump({"fixture": fixture, "config": overrides, "ids": ids,
                       "logits": [[round(float(v), 6) for v in row] for row in logits]}, f)
        print(name, len(ids), "tokens, max |logit|", float(logits.abs().max()))


if __name__ == "__main__":
    main()
