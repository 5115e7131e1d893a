#!/usr/bin/env python3
"""Loads a quantd.qtensor/1 file (what quantd quantize writes; docs/container.md) into torch.

For each quantized NAME the file holds NAME (the codes), NAME.scale and NAME.zero_point, and
its metadata says how they fit: {"qdtype", "scheme", "shape", "axis", "group_size", ...}. This
reads the file with json + struct + numpy (no safetensors package needed), unpacks int4/uint4/
int2/uint2 codes, and dequantizes exactly as quantd does (docs/numerics.md):
float32((float32(q) - float32(zp)) * scale), each step rounded to float32.

    python3 load_qtensor.py q.safetensors                         # one line per tensor
    python3 load_qtensor.py q.safetensors --original x.safetensors --out back.safetensors

--original compares with the floats that were quantized (a safetensors or .npy file) and prints
the largest absolute error per tensor as JSON lines; --out writes the dequantized float32
tensors as safetensors. As a library: `load(path)` returns {name: QTensor}, and
`QTensor.dequantize()` a torch.float32 tensor.

Needs numpy and torch (Debian: apt-get install python3-numpy python3-torch).
"""
import json
import struct
import sys

import numpy as np
import torch

# safetensors dtype -> numpy dtype (little-endian); fp8 codes are read as bytes and decoded
NUMPY_DTYPES = {
    "F32": "<f4",
    "F16": "<f2",
    "F64": "<f8",
    "I8": "i1",
    "U8": "u1",
    "I16": "<i2",
    "I32": "<i4",
    "I64": "<i8",
    "BOOL": "?",
    "F8_E4M3": "u1",
    "F8_E5M2": "u1",
    "BF16": "<u2",  # widened to float32 below (numpy has no bfloat16)
}
# bits and signedness of the packed sub-byte qdtypes (codes stored as U8)
SUB_BYTE = {"int4": (4, True), "uint4": (4, False), "int2": (2, True), "uint2": (2, False)}


def read_safetensors(path):
    """(metadata, {name: numpy array}) of a safetensors file: u64 header size, JSON, data."""
    with open(path, "rb") as f:
        (size,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(size))
        data = f.read()
    metadata = header.pop("__metadata__", None) or {}
    tensors = {}
    for name, entry in header.items():
        begin, end = entry["data_offsets"]
        array = np.frombuffer(data[begin:end], dtype=NUMPY_DTYPES[entry["dtype"]])
        if entry["dtype"] == "BF16":
            array = (array.astype(np.uint32) << 16).view(np.float32)
        tensors[name] = array.reshape(entry["shape"])
    return metadata, tensors


def write_safetensors(path, tensors, metadata=None):
    """Writes {name: float32 numpy array} as a safetensors file."""
    header, offset, blobs = {}, 0, []
    if metadata:
        header["__metadata__"] = metadata
    for name, array in tensors.items():
        blob = np.ascontiguousarray(array, dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(array.shape), "data_offsets": [offset, offset + len(blob)]}
        offset += len(blob)
        blobs.append(blob)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def unpack_sub_byte(packed, numel, bits, signed):
    """quantd's packing (torch quint4x2 / quint2x4): element i at bit (i % (8/bits))*bits of
    byte i // (8/bits), least significant first; signed codes are two's complement."""
    per_byte = 8 // bits
    shifts = np.arange(per_byte, dtype=np.uint8) * bits
    fields = (packed.reshape(-1, 1) >> shifts) & ((1 << bits) - 1)
    codes = fields.reshape(-1)[:numel].astype(np.int8)
    if signed:
        codes = np.where(codes >= 1 << (bits - 1), codes - (1 << bits), codes).astype(np.int8)
    return codes


def decode_fp8(codes, qdtype):
    """float8_e5m2 is the high byte of a float16; float8_e4m3fn: 4 exponent bits (bias 7), no inf."""
    if qdtype == "float8_e5m2":
        return (codes.astype(np.uint16) << 8).view(np.float16).astype(np.float32)
    sign = np.where(codes & 0x80, -1.0, 1.0)
    exponent = (codes >> 3) & 0xF
    mantissa = (codes & 0x7).astype(np.float64)
    value = np.where(exponent == 0, mantissa / 8 * 2.0**-6, (1 + mantissa / 8) * 2.0 ** (exponent.astype(np.float64) - 7))
    value = np.where((exponent == 0xF) & ((codes & 0x7) == 0x7), np.nan, value)
    return (sign * value).astype(np.float32)


class QTensor:
    """One quantized tensor: integer codes in its logical shape, scale, zero point and spec."""

    def __init__(self, name, spec, codes, scale, zero_point):
        self.name, self.spec = name, spec
        self.codes, self.scale, self.zero_point = codes, scale, zero_point

    def units(self):
        """(inner, channels): element i uses qparam (i // inner) % channels (docs/numerics.md)."""
        shape, scheme = self.spec["shape"], self.spec["scheme"]
        numel = int(np.prod(shape))
        if scheme == "per_tensor":
            return numel, 1
        if scheme == "per_channel":
            axis = self.spec["axis"]
            return int(np.prod(shape[axis + 1 :])), shape[axis]
        if scheme == "per_token":
            return shape[-1], numel // shape[-1]
        return self.spec["group_size"], numel // self.spec["group_size"]  # per_group

    def dequantize(self):
        """float32 values, bit for bit what quantd dequantize writes."""
        inner, channels = self.units()
        index = (torch.arange(self.codes.numel()) // inner) % channels
        q = self.codes.reshape(-1).to(torch.float32)
        zp = self.zero_point.reshape(-1).to(torch.float32)[index]
        scale = self.scale.reshape(-1)[index]
        return ((q - zp) * scale).reshape(self.spec["shape"])  # two float32 ops, as in quantd


def load(path):
    """{name: QTensor} of every quantized tensor in a quantd.qtensor/1 file."""
    metadata, tensors = read_safetensors(path)
    if metadata.get("format") != "quantd.qtensor/1":
        raise ValueError(f"{path} is not a quantd.qtensor/1 file (format {metadata.get('format')!r})")
    out = {}
    for name, text in metadata.items():
        if name == "format" or name not in tensors:  # quantd.* keys describe the file
            continue
        spec = json.loads(text)
        numel = int(np.prod(spec["shape"]))
        stored = tensors[name].reshape(-1)
        if spec["qdtype"] in SUB_BYTE:
            codes = unpack_sub_byte(stored, numel, *SUB_BYTE[spec["qdtype"]])
        elif spec["qdtype"].startswith("float8"):
            codes = decode_fp8(stored, spec["qdtype"])
        else:
            codes = stored
        out[name] = QTensor(
            name,
            spec,
            torch.from_numpy(codes.copy()).reshape(spec["shape"]),
            torch.from_numpy(tensors[name + ".scale"].astype(np.float32)),
            torch.from_numpy(tensors[name + ".zero_point"].copy()),
        )
    return out


def main(argv):
    if not argv:
        print("usage: load_qtensor.py Q.safetensors [--original X] [--out OUT.safetensors]", file=sys.stderr)
        return 2
    path, args = argv[0], dict(zip(argv[1::2], argv[2::2]))
    qtensors = load(path)
    original = None
    if "--original" in args:
        source = args["--original"]
        original = {"tensor": np.load(source)} if source.endswith(".npy") else read_safetensors(source)[1]
    values = {}
    for name, qt in qtensors.items():
        values[name] = qt.dequantize()
        line = {"name": name, "qdtype": qt.spec["qdtype"], "scheme": qt.spec["scheme"], "shape": qt.spec["shape"]}
        if original is not None:
            reference = torch.from_numpy(original[name].astype(np.float32))
            line["max_abs_error"] = float((values[name] - reference).abs().max())
            line["max_scale"] = float(qt.scale.max())
        print(json.dumps(line))
    if "--out" in args:
        write_safetensors(args["--out"], {n: v.numpy() for n, v in values.items()}, {"format": "pt"})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
