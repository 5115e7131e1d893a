#!/usr/bin/python3
"""What llama.cpp's own llama-quantize makes of the synthetic models of synthetic.mjs, for
test/gguf-mix/mixtures.test.ts: each file type's per-tensor type table and the SHA-256 of each
tensor's bytes.

llama.cpp here is the one node-llama-cpp ships (an npm dependency of this repository): its
prebuilt libllama, whose public llama_model_quantize() is what the llama-quantize tool runs,
called through ctypes. Its input is the float32 GGUF quantd converts the folder to
(gguf:type=F32, which holds the float16 weights exactly), so both sides quantize the same floats.

Run from the repository root after `npm ci` (which builds dist/), with Debian's python3:
    /usr/bin/python3 test/gguf-mix/generate.py
It writes test/gguf-mix/expected/MODEL.json. The tests never run Python or libllama directly.
"""
import ctypes
import glob
import hashlib
import json
import os
import struct
import subprocess
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HERE = os.path.join(ROOT, "test", "gguf-mix")
BINS = os.path.join(ROOT, "node_modules", "@node-llama-cpp", "linux-x64", "bins", "linux-x64")
PACKAGE = os.path.join(ROOT, "node_modules", "node-llama-cpp", "package.json")

MODELS = ["llama", "qwen2", "mistral"]

# llama-quantize's file types (name, llama_ftype) the tests check
FILE_TYPES = [
    ("Q4_0", 2), ("Q4_1", 3), ("Q8_0", 7), ("Q5_0", 8), ("Q5_1", 9), ("Q2_K", 10),
    ("Q3_K_S", 11), ("Q3_K_M", 12), ("Q3_K_L", 13), ("Q4_K_S", 14), ("Q4_K_M", 15),
    ("Q5_K_S", 16), ("Q5_K_M", 17), ("Q6_K", 18), ("IQ4_NL", 25), ("IQ4_XS", 30),
]

# ggml types that can appear: id -> (name, elements per block, bytes per block)
GGML_TYPES = {
    0: ("F32", 1, 4), 1: ("F16", 1, 2), 2: ("Q4_0", 32, 18), 3: ("Q4_1", 32, 20),
    6: ("Q5_0", 32, 22), 7: ("Q5_1", 32, 24), 8: ("Q8_0", 32, 34), 10: ("Q2_K", 256, 84),
    11: ("Q3_K", 256, 110), 12: ("Q4_K", 256, 144), 13: ("Q5_K", 256, 176),
    14: ("Q6_K", 256, 210), 20: ("IQ4_NL", 32, 18), 23: ("IQ4_XS", 256, 136),
}
GGML_TYPE_IDS = {name: i for i, (name, _, _) in GGML_TYPES.items()}

# extra runs: (label, ftype name, overrides of llama_model_quantize_params)
VARIANTS = [
    ("Q4_K_M+pure", "Q4_K_M", {"pure": True}),
    ("Q4_K_M+output=Q8_0,embd=Q4_0", "Q4_K_M", {"output_tensor_type": "Q8_0", "token_embedding_type": "Q4_0"}),
    ("Q5_K_M+tensor_type", "Q5_K_M", {"tensor_types": [("attn_q", "Q8_0"), ("blk\\.1\\.", "Q4_0")]}),
    ("IQ4_NL+pure", "IQ4_NL", {"pure": True}),
    ("IQ4_XS+pure", "IQ4_XS", {"pure": True}),
]
# runs with the importance matrix of IMATRIX_MODEL (written as IMATRIX_MODEL.imatrix.gguf / .dat)
IMATRIX_MODEL = "llama"
IMATRIX_RUNS = ["Q4_K_M", "Q5_K_M", "Q6_K", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q4_K_S", "IQ4_XS",
                "Q2_K", "Q3_K_S", "Q3_K_M", "Q3_K_L", "IQ4_NL"]
# what llama-imatrix would have counted: a power of two, so that sums / count is exact
IMATRIX_COUNT = 8


class ImatrixData(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("data", ctypes.POINTER(ctypes.c_float)), ("size", ctypes.c_size_t)]


class TensorOverride(ctypes.Structure):
    _fields_ = [("pattern", ctypes.c_char_p), ("type", ctypes.c_int)]


class QuantizeParams(ctypes.Structure):
    """llama_model_quantize_params of llama.h, field by field."""
    _fields_ = [
        ("nthread", ctypes.c_int32),
        ("ftype", ctypes.c_int),
        ("output_tensor_type", ctypes.c_int),
        ("token_embedding_type", ctypes.c_int),
        ("allow_requantize", ctypes.c_bool),
        ("quantize_output_tensor", ctypes.c_bool),
        ("only_copy", ctypes.c_bool),
        ("pure", ctypes.c_bool),
        ("keep_split", ctypes.c_bool),
        ("dry_run", ctypes.c_bool),
        ("imatrix", ctypes.c_void_p),
        ("kv_overrides", ctypes.c_void_p),
        ("tt_overrides", ctypes.c_void_p),
        ("prune_layers", ctypes.c_void_p),
        ("max_buf_size", ctypes.c_size_t),
    ]


def load_llama():
    for lib in ["libggml-base.so", "libggml.so"]:
        matches = sorted(glob.glob(os.path.join(BINS, lib.replace(".so", "*.so"))))
        ctypes.CDLL(matches[0], mode=ctypes.RTLD_GLOBAL)
    llama = ctypes.CDLL(sorted(glob.glob(os.path.join(BINS, "libllama.*so")))[0], mode=ctypes.RTLD_GLOBAL)
    llama.llama_model_quantize_default_params.restype = QuantizeParams
    llama.llama_model_quantize.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(QuantizeParams)]
    llama.llama_model_quantize.restype = ctypes.c_uint32
    llama.llama_backend_init()
    return llama


def read_gguf_tensors(path, infos_only=False):
    """GGUF v3: the tensor infos, then each tensor's type name and SHA-256 of its bytes."""
    with open(path, "rb") as f:
        data = f.read()
    pos = 0

    def take(fmt):
        nonlocal pos
        values = struct.unpack_from("<" + fmt, data, pos)
        pos += struct.calcsize("<" + fmt)
        return values

    def string():
        nonlocal pos
        (n,) = take("Q")
        s = data[pos:pos + n].decode()
        pos += n
        return s

    scalar = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}

    def skip_value(t):
        if t == 8:
            string()
        elif t == 9:
            (inner, n) = take("IQ")
            for _ in range(n):
                skip_value(inner)
        else:
            take(scalar[t])

    magic, version, n_tensors, n_kv = take("4sIQQ")
    assert magic == b"GGUF" and version == 3
    alignment = 32
    for _ in range(n_kv):
        key = string()
        (t,) = take("I")
        if key == "general.alignment":
            (alignment,) = take("I")
        else:
            skip_value(t)
    infos = []
    for _ in range(n_tensors):
        name = string()
        (n_dims,) = take("I")
        dims = take("Q" * n_dims)
        (type_id, offset) = take("IQ")
        infos.append((name, dims, type_id, offset))
    start = (pos + alignment - 1) // alignment * alignment
    if infos_only:
        return [(name, dims, GGML_TYPES[type_id][0]) for name, dims, type_id, _ in infos]
    tensors = {}
    for name, dims, type_id, offset in infos:
        type_name, block, size = GGML_TYPES[type_id]
        numel = 1
        for d in dims:
            numel *= d
        nbytes = numel // block * size
        blob = data[start + offset:start + offset + nbytes]
        # 64 bits of the digest tell bytes apart well enough here, and keep the files small
        tensors[name] = f"{type_name} {hashlib.sha256(blob).hexdigest()[:16]}"
    return tensors


def imatrix_entries(f32):
    """Deterministic column weights for the matmul weights llama-imatrix sees (not token_embd,
    whose rows are looked up, not multiplied; and not blk.0.attn_k, so that a tensor without an
    entry is covered): positive float32 values from a 32-bit LCG, some tiny."""
    entries = {}
    for k, (name, dims, _) in enumerate(read_gguf_tensors(f32, infos_only=True)):
        if len(dims) < 2 or not name.endswith("weight") or "norm" in name:
            continue
        if name in ("token_embd.weight", "blk.0.attn_k.weight"):
            continue
        s = (k * 2654435761 + 12345) & 0xFFFFFFFF
        values = []
        for _ in range(dims[0]):
            s = (s * 1664525 + 1013904223) & 0xFFFFFFFF
            exponent = -12 + ((s >> 8) & 15)  # 2^-12 ... 2^3
            values.append(struct.unpack("<f", struct.pack("<f", (1 + (s >> 16) / 65536) * 2.0 ** exponent))[0])
        entries[name] = values
    return entries


def write_imatrix_gguf(path, entries):
    """llama-imatrix's GGUF format: NAME.in_sum2 [ne0, 1] and NAME.counts [1, 1], F32."""
    def gstr(text):
        b = text.encode()
        return struct.pack("<Q", len(b)) + b
    kvs = (gstr("general.type") + struct.pack("<I", 8) + gstr("imatrix")
           + gstr("imatrix.datasets") + struct.pack("<IIQ", 9, 8, 1) + gstr("synthetic.txt")
           + gstr("imatrix.chunk_count") + struct.pack("<II", 4, 3)
           + gstr("imatrix.chunk_size") + struct.pack("<II", 4, 512))
    infos, blobs, offset = b"", b"", 0
    for name, values in entries.items():
        for suffix, dims, data in [(".in_sum2", (len(values), 1), [v * IMATRIX_COUNT for v in values]),
                                   (".counts", (1, 1), [float(IMATRIX_COUNT)])]:
            infos += gstr(name + suffix) + struct.pack("<I", 2) + struct.pack("<QQ", *dims) + struct.pack("<IQ", 0, offset)
            blob = struct.pack(f"<{len(data)}f", *data)
            blob += b"\0" * ((32 - len(blob) % 32) % 32)
            blobs += blob
            offset += len(blob)
    head = b"GGUF" + struct.pack("<IQQ", 3, 2 * len(entries), 4) + kvs + infos
    head += b"\0" * ((32 - len(head) % 32) % 32)
    with open(path, "wb") as f:
        f.write(head + blobs)


def write_imatrix_dat(path, entries):
    """The legacy format: per entry the values times ncall, then the chunk count and dataset."""
    out = struct.pack("<i", len(entries))
    for name, values in entries.items():
        b = name.encode()
        out += struct.pack("<i", len(b)) + b + struct.pack("<ii", IMATRIX_COUNT, len(values))
        out += struct.pack(f"<{len(values)}f", *[v * IMATRIX_COUNT for v in values])
    out += struct.pack("<i", 3) + struct.pack("<i", len(b"synthetic.txt")) + b"synthetic.txt"
    with open(path, "wb") as f:
        f.write(out)


def quantize(llama, source, target, ftype, overrides):
    p = llama.llama_model_quantize_default_params()
    p.ftype = ftype
    p.nthread = 1
    keep = []
    if "imatrix" in overrides:
        rows = list(overrides["imatrix"].items())
        array = (ImatrixData * (len(rows) + 1))()
        for i, (name, values) in enumerate(rows):
            data = (ctypes.c_float * len(values))(*values)
            keep += [name.encode(), data]
            array[i].name = keep[-2]
            array[i].data = data
            array[i].size = len(values)
        array[len(rows)].name = None
        keep.append(array)
        p.imatrix = ctypes.cast(array, ctypes.c_void_p)
    if overrides.get("pure"):
        p.pure = True
    for key in ["output_tensor_type", "token_embedding_type"]:
        if key in overrides:
            setattr(p, key, GGML_TYPE_IDS[overrides[key]])
    if "tensor_types" in overrides:
        rows = overrides["tensor_types"]
        array = (TensorOverride * (len(rows) + 1))()
        for i, (pattern, type_name) in enumerate(rows):
            keep.append(pattern.encode())
            array[i].pattern = keep[-1]
            array[i].type = GGML_TYPE_IDS[type_name]
        array[len(rows)].pattern = None
        keep.append(array)
        p.tt_overrides = ctypes.cast(array, ctypes.c_void_p)
    rc = llama.llama_model_quantize(source.encode(), target.encode(), ctypes.byref(p))
    assert rc == 0, f"llama_model_quantize failed for {target}"
    return read_gguf_tensors(target)


def dump(value, indent=""):
    """JSON with one tensor per line (readable diffs when llama.cpp's rules change)."""
    if not isinstance(value, dict) or not value:
        return json.dumps(value)
    inner = indent + " "
    rows = [f"{inner}{json.dumps(k)}: {dump(v, inner)}" for k, v in value.items()]
    return "{\n" + ",\n".join(rows) + "\n" + indent + "}" + ("\n" if indent == "" else "")


def main():
    version = json.load(open(PACKAGE))["version"]
    llama = load_llama()
    os.makedirs(os.path.join(HERE, "expected"), exist_ok=True)
    ftypes = dict(FILE_TYPES)
    with tempfile.TemporaryDirectory() as tmp:
        for model in MODELS:
            folder = os.path.join(tmp, model)
            subprocess.run(["node", os.path.join(HERE, "synthetic.mjs"), model, folder], check=True)
            f32 = os.path.join(tmp, model + "-f32.gguf")
            subprocess.run(
                ["node", os.path.join(ROOT, "bin", "quantd.js"), "quantize", folder,
                 "--layout", "gguf:type=F32", "-o", f32], check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
            runs = {}
            for name, ftype in FILE_TYPES:
                runs[name] = {"file_type": name, "options": {},
                              "tensors": quantize(llama, f32, os.path.join(tmp, "out.gguf"), ftype, {})}
            for label, name, overrides in VARIANTS:
                runs[label] = {"file_type": name, "options": overrides,
                               "tensors": quantize(llama, f32, os.path.join(tmp, "out.gguf"), ftypes[name], overrides)}
            if model == IMATRIX_MODEL:
                entries = imatrix_entries(f32)
                write_imatrix_gguf(os.path.join(HERE, model + ".imatrix.gguf"), entries)
                write_imatrix_dat(os.path.join(HERE, model + ".imatrix.dat"), entries)
                for name in IMATRIX_RUNS:
                    runs[name + "+imatrix"] = {
                        "file_type": name, "options": {"imatrix": model + ".imatrix"},
                        "tensors": quantize(llama, f32, os.path.join(tmp, "out.gguf"), ftypes[name], {"imatrix": entries})}
            expected = {
                "generator": "test/gguf-mix/generate.py",
                "llama_cpp": f"libllama of node-llama-cpp {version}",
                "model": model,
                "input": read_gguf_tensors(f32),
                "runs": runs,
            }
            with open(os.path.join(HERE, "expected", model + ".json"), "w") as f:
                f.write(dump(expected))
            print(model, "ok")


if __name__ == "__main__":
    main()
