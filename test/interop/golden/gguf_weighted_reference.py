#!/usr/bin/python3
"""Golden vectors for ggml's quantizers with an importance matrix
(test/interop/gguf-weighted-kernels.test.ts): the bytes of llama.cpp's own quant_weights paths,
ggml_quantize_chunk with an imatrix in the libggml that node-llama-cpp ships (npm ci installs
it), called through ctypes. Each input is a few rows and one column weight per value of a row.

Run: /usr/bin/python3 test/interop/golden/gguf_weighted_reference.py   (writes
test/interop/golden/gguf-weighted.json), then `npx prettier --write` it. The output is
committed; the tests never run Python.
"""
import ctypes
import glob
import json
import os

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
LIB = os.path.join(HERE, '..', '..', '..', 'node_modules', '@node-llama-cpp', 'linux-x64', 'bins', 'linux-x64',
                   'libggml-base.so')
PACKAGE = os.path.join(HERE, '..', '..', '..', 'node_modules', 'node-llama-cpp', 'package.json')

# ggml type id, values and bytes per block
TYPES = {
    'Q8_0': (8, 32, 34), 'Q4_0': (2, 32, 18), 'Q4_1': (3, 32, 20), 'Q5_0': (6, 32, 22), 'Q5_1': (7, 32, 24), 'Q2_K': (10, 256, 84),
    'Q3_K': (11, 256, 110), 'Q4_K': (12, 256, 144), 'Q5_K': (13, 256, 176), 'Q6_K': (14, 256, 210),
    'IQ4_NL': (20, 32, 18), 'IQ4_XS': (23, 256, 136),
}
NE0 = 512
ROWS = 2


def inputs():
    """Deterministic rows and column weights: weight-like values; a row whose sub-blocks differ
    in scale by 10^4 (their rounded 6-bit / 4-bit scales are 0, where the search's codes are
    kept); column weights with zeros, outliers and one all-zero sub-block."""
    rng = np.random.default_rng(20261126)
    qw = (rng.random(NE0) * rng.random(NE0) + 1e-6).astype(np.float32)
    qw[::37] = 0
    qw[::53] = (1e4 * rng.random(len(qw[::53]))).astype(np.float32)
    weight_like = (rng.random((ROWS, NE0)) * 4 - 2).astype(np.float32) * np.float32(0.05)
    mixed = weight_like.copy()
    for j in range(0, NE0, 64):
        mixed[:, j:j + 32] *= np.float32(1e-4)
    mixed[:, 7] = np.float32(0.5)  # one outlier
    zero_block = qw.copy()
    zero_block[256:288] = 0
    return {
        'weight-like': (weight_like, qw),
        'mixed scales': (mixed, qw),
        'a sub-block without weight': (weight_like, zero_block),
    }


def main():
    lib = ctypes.CDLL(LIB)
    lib.ggml_quantize_chunk.restype = ctypes.c_size_t
    lib.ggml_quantize_chunk.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                                        ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p]
    cases = []
    for name, (x, qw) in inputs().items():
        x = np.ascontiguousarray(x, dtype=np.float32)
        qw = np.ascontiguousarray(qw, dtype=np.float32)
        expected = {}
        for t, (gid, n, size) in TYPES.items():
            dst = ctypes.create_string_buffer(ROWS * NE0 // n * size)
            lib.ggml_quantize_chunk(gid, x.ctypes.data, dst, 0, ROWS, NE0, qw.ctypes.data)
            expected[t] = dst.raw.hex()
        cases.append({'name': name, 'ne0': NE0, 'input': [float(v) for v in x.ravel()],
                      'weights': [float(v) for v in qw], 'expected': expected})
    version = json.load(open(PACKAGE))['version']
    doc = {'generator': 'test/interop/golden/gguf_weighted_reference.py',
           'reference': f'libggml of node-llama-cpp {version}: ggml_quantize_chunk with an importance matrix',
           'cases': cases}
    with open(os.path.join(HERE, 'gguf-weighted.json'), 'w') as f:
        json.dump(doc, f)
    print('wrote', len(cases), 'cases')


if __name__ == '__main__':
    main()
