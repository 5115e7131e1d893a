#!/usr/bin/env python3
"""Reference vectors of the trained model (test/trained-llama/model), from torch, for the tests that
check quantd's runs of it. Run from the repository root after train.py:

    /usr/bin/python3 test/trained-llama/reference.py

Writes test/trained-llama/reference.json:
  perplexity: the float32 forward pass (the F16 weights as stored, upcast) on heldout.txt cut as
    quantd eval and llama-perplexity cut it (SEQ tokens a window, BOS first, the second half scored):
    each window's NLL sum, the windows' tokens, and the perplexity;
  imatrix: llama-imatrix's sums from forward hooks on every linear layer of the blocks, over
    calib.txt cut the same way (every token of every window): per llama.cpp tensor name the sum of
    each input column's squared activation (float64, base64) and the tokens counted.
The forward pass is train.py's model class, an independent implementation from quantd's ONNX graph.
"""
import base64
import importlib.util
import json
import math
import os
import struct

import sentencepiece as spm
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location("trained_llama_train", os.path.join(HERE, "train.py"))
train = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(train)

SEQ = 256


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
        t = torch.frombuffer(bytearray(data[8 + n + a : 8 + n + b]), dtype=torch.float16)
        out[name] = t.reshape(e["shape"]).float()
    return out


def load_model():
    with open(os.path.join(HERE, "model", "config.json")) as f:
        cfg = json.load(f)
    model = train.Llama(cfg)
    w = read_safetensors(os.path.join(HERE, "model", "model.safetensors"))
    sd = {"embed.weight": w["model.embed_tokens.weight"], "norm": w["model.norm.weight"], "head.weight": w["lm_head.weight"]}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        sd[f"layers.{i}.ln1"] = w[p + "input_layernorm.weight"]
        sd[f"layers.{i}.ln2"] = w[p + "post_attention_layernorm.weight"]
        for a in "qkvo":
            sd[f"layers.{i}.{a}.weight"] = w[p + f"self_attn.{a}_proj.weight"]
        for a in ("gate", "up", "down"):
            sd[f"layers.{i}.{a}.weight"] = w[p + f"mlp.{a}_proj.weight"]
    model.load_state_dict(sd)
    model.eval()
    return model, cfg


def windows(path, sp):
    with open(path) as f:
        ids = [sp.bos_id()] + sp.encode(f.read())
    out = []
    for s in range(0, len(ids) - SEQ + 1, SEQ):
        w = ids[s : s + SEQ]
        w[0] = sp.bos_id()
        out.append(w)
    return torch.tensor(out)


def b64(t):
    return base64.b64encode(t.contiguous().numpy().tobytes()).decode()


GGUF = {"q": "attn_q", "k": "attn_k", "v": "attn_v", "o": "attn_output", "gate": "ffn_gate", "up": "ffn_up", "down": "ffn_down"}


@torch.no_grad()
def main():
    torch.set_num_threads(2)
    model, cfg = load_model()
    sp = spm.SentencePieceProcessor(model_file=os.path.join(HERE, "model", "tokenizer.model"))
    held = windows(os.path.join(HERE, "heldout.txt"), sp)
    nll = []
    for i in range(len(held)):
        x = held[i : i + 1]
        logits = model(x)[0].float()
        lp = torch.log_softmax(logits.double(), dim=-1)
        first = SEQ // 2
        rows = torch.arange(first, SEQ - 1)
        nll.append(float(-lp[rows, x[0, rows + 1]].sum()))
    scored = len(held) * (SEQ - 1 - SEQ // 2)
    ppl = math.exp(sum(nll) / scored)

    calib = windows(os.path.join(HERE, "calib.txt"), sp)
    sums, counts, hooks = {}, {}, []
    for i, m in enumerate(model.layers):
        for a in GGUF:
            name = f"blk.{i}.{GGUF[a]}.weight"

            def hook(_mod, inp, _out, name=name):
                x = inp[0].reshape(-1, inp[0].shape[-1]).double()
                sums[name] = sums.get(name, 0) + (x * x).sum(0)
                counts[name] = counts.get(name, 0) + x.shape[0]

            hooks.append(getattr(m, a).register_forward_hook(hook))
    for i in range(len(calib)):
        model(calib[i : i + 1])
    for h in hooks:
        h.remove()
    out = {
        "seq": SEQ,
        "perplexity": {"text": "heldout.txt", "windows": len(held), "scored_tokens": scored, "nll": nll, "perplexity": ppl},
        "imatrix": {
            "text": "calib.txt",
            "windows": len(calib),
            "tensors": {n: {"in_sum2": b64(sums[n]), "count": counts[n]} for n in sorted(sums)},
        },
    }
    with open(os.path.join(HERE, "reference.json"), "w") as f:
        json.dump(out, f)
    print(f"held-out perplexity {ppl:.4f} over {len(held)} windows; imatrix over {len(calib)} windows")


if __name__ == "__main__":
    main()
