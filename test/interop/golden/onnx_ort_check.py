#!/usr/bin/env python3
"""
Checks a model written by quantd's "onnx" layout with the real tools (a Python with numpy, onnx
and onnxruntime; test/interop/onnx-ort.test.ts runs it when QUANTD_ORT_PYTHON names one):

  python onnx_ort_check.py INPUT.safetensors MODEL.onnx READBACK.safetensors BLOCK_SIZE SYM [TOLERANCE]

1. onnx.checker.check_model(MODEL, full_check=True) (with its external data);
2. every MatMulNBits node's B / scales / zero_points initializers equal, byte for byte, what ORT's
   own quantizer (onnxruntime.capi._pybind_state.quantize_matmul_4bits, as
   matmul_4bits_quantizer.py calls it) makes of the input weight's transpose;
3. onnxruntime.InferenceSession runs the model on random A, and every output Y equals
   A @ W^T with W the weight quantd reads back (READBACK): within float32 rounding for float32
   nodes, float16 rounding for float16 ones (relative to the largest |Y|; TOLERANCE replaces
   both, for accuracy_level 4, where ORT quantizes A to int8);
4. every other initializer equals the input tensor.
Prints one line per check; exits non-zero on the first failure.
"""
import json
import struct
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper
from onnxruntime.capi._pybind_state import quantize_matmul_4bits


def load_safetensors(path):
    b = open(path, 'rb').read()
    n = struct.unpack('<Q', b[:8])[0]
    header = json.loads(b[8:8 + n])
    data = b[8 + n:]
    out = {}
    for name, v in header.items():
        if name == '__metadata__':
            continue
        s, e = v['data_offsets']
        dt = {'F32': np.float32, 'F16': np.float16, 'I64': np.int64, 'BF16': np.uint16}[v['dtype']]
        a = np.frombuffer(data[s:e], dtype=dt).reshape(v['shape'])
        if v['dtype'] == 'BF16':
            a = (a.astype(np.uint32) << 16).view(np.float32)
        out[name] = (v['dtype'], a)
    return out


def main():
    src_path, model_path, back_path, bs, sym = sys.argv[1:6]
    tolerance = float(sys.argv[6]) if len(sys.argv) > 6 else None
    bs = int(bs)
    sym = sym == 'true'
    src = load_safetensors(src_path)
    back = load_safetensors(back_path)
    onnx.checker.check_model(model_path, full_check=True)
    print('onnx.checker: ok (full_check)')
    model = onnx.load(model_path)
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    nodes = [n for n in model.graph.node if n.op_type == 'MatMulNBits']
    for node in nodes:
        weight = node.input[1][:-len('_Q4')]
        dtype, w = src[weight]
        N, K = w.shape
        wt = np.ascontiguousarray(w.T.astype(np.float16 if dtype == 'F16' else np.float32))
        kb = (K + bs - 1) // bs
        packed = np.zeros((N, kb, bs // 2), np.uint8)
        zp = np.zeros(N * ((kb + 1) // 2), np.uint8)
        scales = np.zeros(N * kb, wt.dtype)
        quantize_matmul_4bits(packed, wt, scales, zp, bs, N, K, sym)
        assert np.array_equal(packed, inits[node.input[1]]), f'{weight}: B differs from ORT'
        assert scales.tobytes() == inits[node.input[2]].tobytes(), f'{weight}: scales differ from ORT'
        if sym:
            assert len(node.input) == 3, f'{weight}: a symmetric node has zero points'
        else:
            assert zp.tobytes() == inits[node.input[3]].tobytes(), f'{weight}: zero points differ from ORT'
    print(f'{len(nodes)} MatMulNBits nodes: B, scales, zero points byte-identical to ORT {ort.__version__}')
    options = ort.SessionOptions()
    options.log_severity_level = 3
    sess = ort.InferenceSession(model_path, options, providers=['CPUExecutionProvider'])
    rng = np.random.default_rng(1)
    feeds = {}
    for i in sess.get_inputs():
        dtype = np.float16 if i.type == 'tensor(float16)' else np.float32
        feeds[i.name] = rng.normal(0, 1, (3, i.shape[1])).astype(dtype)
    outs = sess.run(None, feeds)
    worst = {np.float32: 0.0, np.float16: 0.0}
    for o, y in zip(sess.get_outputs(), outs):
        mod = o.name[len('Y_'):]
        a = feeds['A_' + mod]
        ref = a.astype(np.float32) @ back[mod + '.weight'][1].T
        err = float(np.abs(y.astype(np.float32) - ref).max() / (np.abs(ref).max() + 1e-12))
        worst[a.dtype.type] = max(worst[a.dtype.type], err)
    assert worst[np.float32] < (tolerance or 1e-5), f'float32 nodes: relative error {worst[np.float32]}'
    assert worst[np.float16] < (tolerance or 2e-3), f'float16 nodes: relative error {worst[np.float16]}'
    print(f'onnxruntime ran {len(outs)} nodes: Y = A @ W^T of the read-back weights '
          f'(worst relative error float32 {worst[np.float32]:.2e}, float16 {worst[np.float16]:.2e})')
    for name, (dtype, a) in src.items():
        if name + '_Q4' in inits:
            continue
        got = inits[name]
        if dtype == 'BF16':
            got = (got.view(np.uint16).astype(np.uint32) << 16).view(np.float32) if got.dtype == np.uint16 else got.astype(np.float32)
        assert np.array_equal(got.reshape(a.shape), a), f'{name}: initializer differs from the input'
    print('plain initializers: equal to the input')


if __name__ == '__main__':
    main()
