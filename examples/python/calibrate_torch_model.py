#!/usr/bin/env python3
"""Calibrates a torch model's activations with a quantd session, and checks the result against
torch's own observers (README: "Calibration sessions").

Forward hooks capture the input of every nn.Linear for a few batches; each batch goes to
POST /v1/calibrations/ID/batches as one safetensors file (written here by hand: the format is a
length, a JSON header and the raw bytes). The session's qparams come back from
GET /v1/calibrations/ID/qparams; the same activations through torch.ao.quantization's
HistogramObserver / MovingAverageMinMaxObserver must give the same scales and zero points, to the
bit. The session also gathers each layer's input statistics for GPTQ and AWQ (GET …/statistics:
Σ xᵀx, Σ |x| and the token count, in float64), checked against torch's own float64 sums (to rounding:
torch's matrix product adds in another order). Prints one JSON line per layer: {"name", "kind",
"scale", "zero_point", "torch_equal", "tokens", "hessian_rel_error", "abs_sum_rel_error"}.

    python3 calibrate_torch_model.py [--batches 4]

The server is QUANTD_URL (default http://localhost:8080); QUANTD_API_KEY, if set, is sent as the
bearer token. Needs torch and requests (Debian: apt-get install python3-torch python3-requests).
"""
import argparse
import json
import os
import struct
import sys

import requests
import torch
from torch.ao.quantization.observer import HistogramObserver, MovingAverageMinMaxObserver

RECIPE = {
    "observers": [
        {"match": "fc1.input", "observer": {"kind": "histogram", "bins": 512}, "statistics": "linear"},
        {"regex": r"\.input$", "observer": {"kind": "moving_average_min_max", "averaging_constant": 0.1},
         "statistics": "linear"},
    ]
}
TORCH_OBSERVERS = {
    "histogram": lambda: HistogramObserver(bins=512),
    "moving_average_min_max": lambda: MovingAverageMinMaxObserver(averaging_constant=0.1),
}


def safetensors_bytes(tensors):
    """{name: float32 tensor} as a safetensors file."""
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        raw = t.detach().contiguous().to(torch.float32).numpy().tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(blobs)


def read_safetensors(data):
    """A safetensors file as {name: (dtype, shape, raw bytes)}."""
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    header.pop("__metadata__", None)
    return {k: (v["dtype"], v["shape"], data[8 + n + v["data_offsets"][0] : 8 + n + v["data_offsets"][1]])
            for k, v in header.items()}


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(32, 64)
        self.fc2 = torch.nn.Linear(64, 16)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def main(argv):
    parser = argparse.ArgumentParser()
    parser.add_argument("--batches", type=int, default=4)
    args = parser.parse_args(argv)
    url = os.environ.get("QUANTD_URL", "http://localhost:8080").rstrip("/")
    key = os.environ.get("QUANTD_API_KEY")
    auth = {"Authorization": f"Bearer {key}"} if key else {}

    torch.manual_seed(0)
    model = Model().eval()
    captured = {}
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Linear):
            module.register_forward_hook(lambda m, inp, out, name=name: captured.__setitem__(f"{name}.input", inp[0]))

    created = requests.post(f"{url}/v1/calibrations", json={"recipe": RECIPE}, headers=auth, timeout=60)
    created.raise_for_status()
    session = created.json()["id"]
    kinds = {}
    observers = {}
    hessians = {}
    abs_sums = {}
    for b in range(args.batches):
        x = torch.randn(8, 32) * (1 + b)
        x[:, 3] *= 25  # an outlier input channel
        with torch.no_grad():
            model(x)
        reply = requests.post(
            f"{url}/v1/calibrations/{session}/batches",
            data=safetensors_bytes(captured),
            headers={**auth, "Content-Type": "application/x-safetensors"},
            timeout=60,
        )
        reply.raise_for_status()
        for name, t in captured.items():
            kind = "histogram" if name.endswith("fc1.input") else "moving_average_min_max"
            kinds[name] = kind
            observers.setdefault(name, TORCH_OBSERVERS[kind]())(t)
            x64 = t.detach().reshape(-1, t.shape[-1]).double()
            hessians[name] = hessians.get(name, 0) + x64.T @ x64
            abs_sums[name] = abs_sums.get(name, 0) + x64.abs().sum(0)

    answer = requests.get(f"{url}/v1/calibrations/{session}/qparams", headers=auth, timeout=60)
    answer.raise_for_status()
    tensors = read_safetensors(answer.content)
    stats = requests.get(f"{url}/v1/calibrations/{session}/statistics", headers=auth, timeout=60)
    stats.raise_for_status()
    stats = read_safetensors(stats.content)
    requests.delete(f"{url}/v1/calibrations/{session}", headers=auth, timeout=60)
    for name in sorted(kinds):
        scale = struct.unpack("<f", tensors[f"{name}.scale"][2])[0]
        zero_point = struct.unpack("<i", tensors[f"{name}.zero_point"][2])[0]
        torch_scale, torch_zp = observers[name].calculate_qparams()
        equal = struct.pack("<f", scale) == struct.pack("<f", float(torch_scale[0])) and zero_point == int(torch_zp[0])
        def f64(key):
            dtype, shape, raw = stats[key]
            assert dtype == "F64", dtype
            return torch.tensor(struct.unpack(f"<{len(raw) // 8}d", raw), dtype=torch.float64).reshape(shape)

        def rel_error(got, want):
            return float((got - want).abs().max() / want.abs().max())

        print(json.dumps({"name": name, "kind": kinds[name], "scale": scale, "zero_point": zero_point,
                          "torch_equal": equal, "tokens": float(f64(f"{name}.tokens")[0]),
                          "hessian_rel_error": rel_error(f64(f"{name}.hessian"), hessians[name]),
                          "abs_sum_rel_error": rel_error(f64(f"{name}.abs_sum"), abs_sums[name])}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
