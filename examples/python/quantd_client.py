#!/usr/bin/env python3
"""A small client for quantd's /v1 HTTP API (README: "Python").

Sends a float tensor (a numpy array, or a .npy file) or a whole safetensors file to
/v1/quantize (or dequantize, fake-quantize, qparams) and saves the safetensors answer: for
quantize, a quantd.qtensor/1 container that load_qtensor.py reads into torch.

    python3 quantd_client.py quantize x.npy -o q.safetensors qdtype=int8 scheme=per_channel
    python3 quantd_client.py quantize model.safetensors -o q.safetensors qdtype=int4 \
        scheme=per_group group_size=128 skip='*.embed_tokens.*'

The options are the query parameters of the HTTP API (the CLI's flags in snake_case). The server
is QUANTD_URL (default http://localhost:8080); QUANTD_API_KEY, if set, is sent as the bearer
token. On an error the server's catalogue code and message are printed and the exit code is 2.

As a library:

    from quantd_client import Client
    qtensor_bytes = Client("http://localhost:8080").quantize(array, qdtype="int8")

Needs numpy and requests (Debian: apt-get install python3-numpy python3-requests).
"""
import os
import sys

import numpy as np
import requests

# numpy dtype -> the X-Tensor-Dtype header of a raw tensor body
RAW_DTYPES = {np.dtype("float32"): "float32", np.dtype("float16"): "float16"}


class QuantdError(Exception):
    """An error the server answered with: its catalogue code (e.g. GROUP_SIZE_INVALID) and text."""

    def __init__(self, status, code, detail):
        super().__init__(f"{code}: {detail}")
        self.status, self.code, self.detail = status, code, detail


class Client:
    def __init__(self, url=None, api_key=None, timeout=300):
        self.url = (url or os.environ.get("QUANTD_URL", "http://localhost:8080")).rstrip("/")
        key = api_key if api_key is not None else os.environ.get("QUANTD_API_KEY")
        self.headers = {"Authorization": f"Bearer {key}"} if key else {}
        self.timeout = timeout

    def call(self, op, body, headers, **options):
        """POSTs one body to /v1/OP with OPTIONS as the query; returns the safetensors bytes."""
        response = requests.post(
            f"{self.url}/v1/{op}",
            params=options,
            data=body,
            headers={**self.headers, **headers},
            timeout=self.timeout,
        )
        if response.status_code != 200:
            try:
                problem = response.json()  # RFC 9457 problem+json with the catalogue code
                raise QuantdError(response.status_code, problem["code"], problem["detail"])
            except (ValueError, KeyError):
                raise QuantdError(response.status_code, "HTTP_" + str(response.status_code), response.text)
        return response.content

    def send_tensor(self, op, array, **options):
        """One float32/float16 array as a raw tensor body (it is named "tensor" in the answer)."""
        array = np.ascontiguousarray(array)
        if array.dtype not in RAW_DTYPES:
            array = array.astype(np.float32)
        headers = {
            "Content-Type": "application/octet-stream",
            "X-Tensor-Dtype": RAW_DTYPES[array.dtype],
            "X-Tensor-Shape": ",".join(str(d) for d in array.shape),
        }
        return self.call(op, array.astype(array.dtype.newbyteorder("<")).tobytes(), headers, **options)

    def send_safetensors(self, op, path, **options):
        """A safetensors file, streamed from disk (one or many tensors; recipe options allowed)."""
        with open(path, "rb") as f:
            return self.call(op, f, {"Content-Type": "application/x-safetensors"}, **options)

    def quantize(self, array, **options):
        return self.send_tensor("quantize", array, **options)


def main(argv):
    usage = "usage: quantd_client.py OP INPUT(.npy|.safetensors) -o OUTPUT [key=value ...]"
    if len(argv) < 4 or "-o" not in argv:
        print(usage, file=sys.stderr)
        return 2
    at = argv.index("-o")
    output = argv[at + 1]
    rest = argv[:at] + argv[at + 2 :]
    op, source, pairs = rest[0], rest[1], rest[2:]
    options = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            print(f"{pair}: options are key=value\n{usage}", file=sys.stderr)
            return 2
        options.setdefault(key, []).append(value)  # repeatable: include, exclude, skip, rule
    client = Client()
    try:
        if source.endswith(".npy"):
            answer = client.send_tensor(op, np.load(source), **options)
        else:
            answer = client.send_safetensors(op, source, **options)
    except QuantdError as err:
        print(f"error {err}", file=sys.stderr)
        return 2
    with open(output, "wb") as f:
        f.write(answer)
    print(f"{op}: wrote {output} ({len(answer)} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
