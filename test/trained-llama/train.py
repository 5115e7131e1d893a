#!/usr/bin/env python3
"""Trains the small Llama the quality tests run: test/trained-llama/model/ (a Hugging Face folder).

Random weights make every quality claim a coin toss; this model has learned English from the
machine's own manual pages, so quantization errors show up as they do on real models (outliers,
sensitive layers, a perplexity that moves). Run from the repository root with Debian's packages
(apt-get install python3-torch python3-sentencepiece groff libopenblas0-pthread; without OpenBLAS,
Debian's torch multiplies matrices with the reference BLAS, about 12 times slower):

    /usr/bin/python3 test/trained-llama/train.py [--steps N] [--threads N]

It writes, under test/trained-llama/:
  model/      config.json, tokenizer.model, tokenizer_config.json, model.safetensors (F16)
  calib.txt   calibration text (manual pages the model never trained on)
  heldout.txt evaluation text (other pages it never trained on)
  train.json  what was trained: corpus size, steps, losses, held-out perplexity, unigram baseline

The corpus is whatever manual pages the machine has, so a retrained model differs from the
committed one; the tests use the committed files and never run Python.
"""
import argparse
import gzip
import hashlib
import io
import json
import math
import os
import random
import re
import struct
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import sentencepiece as spm
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "model")

CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 256,
    # a multiple of 256, so that every weight fits the K-quant block (ggml's QK_K)
    "intermediate_size": 768,
    "num_hidden_layers": 4,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "vocab_size": 2048,
    "max_position_embeddings": 512,
    "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "tie_word_embeddings": False,
    "torch_dtype": "float16",
    "hidden_act": "silu",
    "initializer_range": 0.02,
}
SEQ = 256


def render(path):
    """One manual page as plain paragraphs: groff's text output, lines of a paragraph joined."""
    try:
        with gzip.open(path, "rb") as f:
            src = f.read()
    except OSError:
        return ""
    if src.startswith(b".so "):  # a link to another page
        return ""
    try:
        out = subprocess.run(
            ["groff", "-k", "-man", "-Tutf8", "-P", "-cbou", "-rHY=0", "-dAD=l", "-rLL=200n"],
            input=src, capture_output=True, timeout=20,
        ).stdout.decode("utf-8", "replace")
    except subprocess.TimeoutExpired:
        return ""
    paras, cur = [], []
    for line in out.splitlines():
        s = line.strip()
        if not s:
            if cur:
                paras.append(" ".join(cur))
                cur = []
            continue
        cur.append(s)
    if cur:
        paras.append(" ".join(cur))
    # the first and last paragraphs are the running header and footer (title, section, date)
    return "\n\n".join(paras[1:-1]) if len(paras) > 2 else ""


def corpus(cache):
    if cache and os.path.exists(cache):
        with open(cache) as f:
            return [tuple(d) for d in json.load(f)]
    pages = []
    for sec in ("1", "5", "7", "8"):
        d = f"/usr/share/man/man{sec}"
        if os.path.isdir(d):
            pages += sorted(os.path.join(d, n) for n in os.listdir(d) if n.endswith(".gz"))
    with ThreadPoolExecutor(4) as pool:
        texts = list(pool.map(render, pages))
    seen, docs = set(), []
    for path, text in zip(pages, texts):
        if len(text) < 400 or "\ufffd" in text:
            continue
        digest = hashlib.sha1(text.encode()).hexdigest()
        if digest in seen:
            continue
        seen.add(digest)
        docs.append((os.path.basename(path), text))
    if cache:
        with open(cache, "w") as f:
            json.dump(docs, f)
    return docs


def split(docs):
    """By page name's hash: about 2 % of pages to calibration, 2 % to evaluation, the rest to training."""
    train, calib, held = [], [], []
    for name, text in docs:
        h = int(hashlib.sha1(name.encode()).hexdigest()[:8], 16) % 100
        (calib if h < 2 else held if h < 4 else train).append(text)
    return train, calib, held


def train_tokenizer(texts):
    model = io.BytesIO()
    rng = random.Random(7)
    sample = rng.sample(texts, min(len(texts), 4000))
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(line for t in sample for line in t.split("\n") if line),
        model_writer=model,
        model_type="bpe",
        vocab_size=CONFIG["vocab_size"],
        character_coverage=0.9995,
        byte_fallback=True,
        split_digits=True,
        normalization_rule_name="identity",
        remove_extra_whitespaces=False,
        add_dummy_prefix=True,
        allow_whitespace_only_pieces=True,
        max_sentence_length=16384,
        unk_id=0,
        bos_id=1,
        eos_id=2,
        pad_id=-1,
        num_threads=2,
        minloglevel=2,
    )
    return model.getvalue()


# --- the model: Llama (RMSNorm, rotary attention with grouped kv heads, SwiGLU) ------------------


class Llama(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        h, f = c["hidden_size"], c["intermediate_size"]
        self.heads, self.kv = c["num_attention_heads"], c["num_key_value_heads"]
        self.hd = h // self.heads
        self.eps = c["rms_norm_eps"]
        self.embed = torch.nn.Embedding(c["vocab_size"], h)
        L = torch.nn.Linear
        self.layers = torch.nn.ModuleList()
        for _ in range(c["num_hidden_layers"]):
            m = torch.nn.Module()
            m.ln1 = torch.nn.Parameter(torch.ones(h))
            m.q, m.k = L(h, self.heads * self.hd, bias=False), L(h, self.kv * self.hd, bias=False)
            m.v, m.o = L(h, self.kv * self.hd, bias=False), L(self.heads * self.hd, h, bias=False)
            m.ln2 = torch.nn.Parameter(torch.ones(h))
            m.gate, m.up, m.down = L(h, f, bias=False), L(h, f, bias=False), L(f, h, bias=False)
            self.layers.append(m)
        self.norm = torch.nn.Parameter(torch.ones(h))
        self.head = L(h, c["vocab_size"], bias=False)
        std = c["initializer_range"]
        for p in self.parameters():
            if p.dim() == 2:
                torch.nn.init.normal_(p, 0.0, std)
        inv = 1.0 / (c["rope_theta"] ** (torch.arange(0, self.hd, 2, dtype=torch.float32) / self.hd))
        t = torch.arange(c["max_position_embeddings"], dtype=torch.float32)
        ang = torch.outer(t, inv)
        ang = torch.cat((ang, ang), dim=-1)
        self.register_buffer("cos", ang.cos(), persistent=False)
        self.register_buffer("sin", ang.sin(), persistent=False)

    def rms(self, x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * w

    def rope(self, x, n):
        half = x.shape[-1] // 2
        rot = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
        return x * self.cos[:n] + rot * self.sin[:n]

    def forward(self, ids):
        b, n = ids.shape
        x = self.embed(ids)
        mask = torch.full((n, n), float("-inf")).triu(1)
        g = self.heads // self.kv
        for m in self.layers:
            h = self.rms(x, m.ln1)
            q = m.q(h).view(b, n, self.heads, self.hd).transpose(1, 2)
            k = m.k(h).view(b, n, self.kv, self.hd).transpose(1, 2)
            v = m.v(h).view(b, n, self.kv, self.hd).transpose(1, 2)
            q, k = self.rope(q, n), self.rope(k, n)
            k, v = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
            att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(self.hd) + mask, dim=-1)
            x = x + m.o((att @ v).transpose(1, 2).reshape(b, n, -1))
            h = self.rms(x, m.ln2)
            x = x + m.down(F.silu(m.gate(h)) * m.up(h))
        return self.head(self.rms(x, self.norm))

    def hf_state(self):
        """The weights under transformers' LlamaForCausalLM names."""
        w = {"model.embed_tokens.weight": self.embed.weight}
        for i, m in enumerate(self.layers):
            p = f"model.layers.{i}."
            w[p + "input_layernorm.weight"] = m.ln1
            for a in "qkvo":
                w[p + f"self_attn.{a}_proj.weight"] = getattr(m, a).weight
            w[p + "post_attention_layernorm.weight"] = m.ln2
            for a in ("gate", "up", "down"):
                w[p + f"mlp.{a}_proj.weight"] = getattr(m, a).weight
        w["model.norm.weight"] = self.norm
        w["lm_head.weight"] = self.head.weight
        return {k: v.detach() for k, v in w.items()}


def write_safetensors(path, tensors):
    header, blobs, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name, t in tensors.items():
        data = t.contiguous().numpy().tobytes()
        header[name] = {"dtype": "F16", "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def windows(ids, bos):
    """llama-perplexity's windows: SEQ tokens each, the first replaced by BOS."""
    out = []
    for s in range(0, len(ids) - SEQ + 1, SEQ):
        w = list(ids[s : s + SEQ])
        w[0] = bos
        out.append(w)
    return torch.tensor(out)


@torch.no_grad()
def perplexity(model, wins):
    """Mean NLL of the second half of each window (llama-perplexity's scoring), exponentiated."""
    nll, n = 0.0, 0
    for i in range(0, len(wins), 16):
        x = wins[i : i + 16]
        logits = model(x).float()
        lp = torch.log_softmax(logits[:, SEQ // 2 - 1 : -1], dim=-1)
        tgt = x[:, SEQ // 2 :]
        nll -= lp.gather(-1, tgt[..., None]).sum().item()
        n += tgt.numel()
    return math.exp(nll / n)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=1200)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--checkpoint", default="/tmp/quantd-trained-llama.pt")
    ap.add_argument("--corpus-cache", default="/tmp/quantd-manpages.json",
                    help="rendered pages are kept here between runs ('' to render every time)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(1234)
    t0 = time.time()
    docs = corpus(args.corpus_cache)
    train_docs, calib_docs, held_docs = split(docs)
    print(f"{len(docs)} pages: {len(train_docs)} train, {len(calib_docs)} calib, {len(held_docs)} held out "
          f"({time.time() - t0:.0f} s)", flush=True)
    os.makedirs(OUT, exist_ok=True)
    # committed texts: bounded, whole pages
    for name, pool, limit in (("calib.txt", calib_docs, 160_000), ("heldout.txt", held_docs, 240_000)):
        text, size = [], 0
        for d in pool:
            if size + len(d) > limit:
                continue
            text.append(d)
            size += len(d) + 2
        with open(os.path.join(HERE, name), "w") as f:
            f.write("\n\n".join(text) + "\n")
    sp_bytes = train_tokenizer(train_docs)
    with open(os.path.join(OUT, "tokenizer.model"), "wb") as f:
        f.write(sp_bytes)
    sp = spm.SentencePieceProcessor(model_proto=sp_bytes)
    bos = sp.bos_id()
    stream = []
    for d in train_docs:
        stream.append(bos)
        stream += sp.encode(d)
    stream = torch.tensor(stream)
    with open(os.path.join(HERE, "heldout.txt")) as f:
        held_ids = [bos] + sp.encode(f.read())
    held = windows(held_ids, bos)
    print(f"train tokens {len(stream)}, held-out tokens {len(held_ids)} ({len(held)} windows)", flush=True)
    # unigram baseline on the held-out scored tokens, from training counts (add-one smoothing)
    counts = torch.bincount(stream, minlength=CONFIG["vocab_size"]).double() + 1
    logp = (counts / counts.sum()).log()
    unigram = math.exp(-logp[held[:, SEQ // 2 :].reshape(-1)].mean().item())

    model = Llama(CONFIG)
    decay = [p for p in model.parameters() if p.dim() == 2]
    other = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": other, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95))
    start, losses = 0, []
    if os.path.exists(args.checkpoint):
        ck = torch.load(args.checkpoint)
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])
        start, losses = ck["step"], ck["losses"]
        print(f"resumed at step {start}", flush=True)
    gen = torch.Generator().manual_seed(99)
    for _ in range(start):  # the same batches as an uninterrupted run
        torch.randint(0, len(stream) - SEQ, (args.batch,), generator=gen)
    warm = 100
    t1 = time.time()
    for step in range(start, args.steps):
        lr = args.lr * min(1.0, (step + 1) / warm) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * step / args.steps)))
        for gparam in opt.param_groups:
            gparam["lr"] = lr
        starts = torch.randint(0, len(stream) - SEQ, (args.batch,), generator=gen)
        x = torch.stack([stream[s : s + SEQ + 1] for s in starts.tolist()])
        x[:, 0] = bos
        logits = model(x[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(round(loss.item(), 4))
        if (step + 1) % 50 == 0:
            rate = (step + 1 - start) / (time.time() - t1)
            print(f"step {step + 1} loss {sum(losses[-50:]) / 50:.3f} lr {lr:.2e} "
                  f"({rate:.2f} steps/s)", flush=True)
        if (step + 1) % 200 == 0:
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step + 1,
                        "losses": losses}, args.checkpoint)
    model.eval()
    w16 = {k: v.half() for k, v in model.hf_state().items()}
    write_safetensors(os.path.join(OUT, "model.safetensors"), w16)
    # perplexity of the F16 weights as stored, computed in float32
    with torch.no_grad():
        ref = Llama(CONFIG)
        sd = model.state_dict()
        ref.load_state_dict({k: v.half().float() for k, v in sd.items()})
        ref.eval()
    ppl = perplexity(ref, held)
    with open(os.path.join(OUT, "config.json"), "w") as f:
        json.dump(CONFIG, f, indent=2)
    with open(os.path.join(OUT, "tokenizer_config.json"), "w") as f:
        json.dump({"add_bos_token": True, "add_eos_token": False, "bos_token": "<s>", "eos_token": "</s>",
                   "unk_token": "<unk>", "tokenizer_class": "LlamaTokenizer"}, f, indent=2)
    report = {
        "pages": len(docs), "train_pages": len(train_docs), "train_tokens": len(stream),
        "parameters": sum(p.numel() for p in model.parameters()),
        "steps": args.steps, "batch": args.batch, "seq": SEQ, "lr": args.lr,
        "final_loss": sum(losses[-100:]) / 100,
        "heldout_windows": len(held), "heldout_perplexity": round(ppl, 3), "unigram_perplexity": round(unigram, 1),
        "seconds": round(time.time() - t0),
    }
    with open(os.path.join(HERE, "train.json"), "w") as f:
        json.dump(report, f, indent=2)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
