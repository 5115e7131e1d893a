#!/usr/bin/python3
"""
Golden vectors for quantd's "compressed-tensors" layout, computed by the reference code itself:
compressed-tensors' own functions (vllm-project/compressed-tensors, the package vLLM and
transformers load `quant_method: compressed-tensors` checkpoints with) and llm-compressor's
min-max weight observer, run on Debian's torch 1.13. Nothing of their numerics is written here:
this script copies no code of theirs; it reads the definitions it names out of a checkout kept
OUTSIDE this repository, executes them, and records what they compute.

  # /tmp/ct: a checkout of vllm-project/compressed-tensors at its tag 0.18.0 (commit ac8e2ba8),
  # /tmp/ct-0.12.2: the same repository at its tag 0.12.2, /tmp/llmc: vllm-project/llm-compressor
  # (commit ab1ba3ef) — all outside this repository
  PYTHONPATH=DIR_WITH_PYDANTIC_2 /usr/bin/python3 test/interop/golden/compressed_tensors_reference.py \
      --compressed-tensors /tmp/ct --llm-compressor /tmp/llmc --version 0.18.0 \
      --older-compressed-tensors /tmp/ct-0.12.2 --older-version 0.12.2

(`--version`: the checkout's release tag, which compressed-tensors writes into config.json.
Pydantic 2 is needed for compressed-tensors' config models; point PYTHONPATH at a directory
holding pydantic, pydantic_core, typing_extensions, annotated_types and typing_inspection — the
only packages used besides torch.) It writes compressed_tensors_vectors.json beside itself.

What runs, per case, is what llm-compressor's QuantizationModifier and compressed-tensors'
ModelCompressor do to one Linear weight (W, in its checkpoint dtype) when a model is saved:
  1. the weight observer (llmcompressor/observers): `_flatten_weight(W, args)`, `_get_min_max`,
     then compressed-tensors' `calculate_qparams(min, max, args)` — scale and zero point;
  2. the compressor of the scheme's format: `PackedQuantizationCompressor.compress` (pack-quantized:
     `quantize` then `pack_to_int32`), `IntQuantizationCompressor` / `FloatQuantizationCompressor`
     `.compress` (int-quantized / float-quantized), on the state dict {weight, weight_scale,
     weight_zero_point} — the zero point is present while compressing, as initialize_qparams
     creates it for every scheme before the model is compressed, and the compressor drops it
     for symmetric schemes;
  3. the same compressor's `.decompress` on its output: the weight a loader reads back;
  4. for each scheme, `ModelCompressor.update_config` on a QuantizationConfig whose one group is
     the preset (`preset_name_to_scheme`) with targets ["Linear"], the format set as
     `infer_model_format` sets it, ignore ["lm_head"] and status "compressed": the
     `quantization_config` it writes into config.json; and that config without the fields 0.13+
     added (scale_dtype, zp_dtype) is read back the same by this release and accepted by the
     config models of an older one (0.12.2, which vLLM pinned in late 2025, and which refuses them).
Read-only cases (files quantd reads but does not write): 2-bit packing, an activation-ordered
g_idx, FP8 per-tensor and 128x128 block scales.

torch 1.13 has no float8 dtype. `torch.float8_e4m3fn` is supplied as a stand-in for the run:
converting to it rounds each value to the nearest e4m3fn value (ties to even) with the exact
rational oracle of test/golden/generate.py, and the result is held in float32 (every e4m3fn
value is a float32); `torch.finfo` reports its range (±448) and eps (0.125). Everything else is
real torch 1.13 on the weight's own dtype, as compressed-tensors computes it — but for clamp and
round of float16 tensors, which 1.13's CPU kernels lack: they run in float32 and convert back,
which is exact for both.

Tensors are recorded as strings of fixed-width hex words (the element's value, most significant
digit first), in element order: 8 digits for F32 / I32, 4 for F16 / BF16, 16 for I64, 2 for I8 /
F8_E4M3.
"""
import argparse
import ast
import json
import os
import sys
import tempfile
import types

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, '..', '..', 'golden'))
from generate import fp8_encode, fp8_float_table  # noqa: E402  (quantd's exact fp8 oracle)

OUT = os.path.join(HERE, 'compressed_tensors_vectors.json')
DTYPES = {'float32': torch.float32, 'float16': torch.float16, 'bfloat16': torch.bfloat16}


# ------------------------------------------------------------------ float8 stand-in for torch 1.13
# The stand-in must be a torch.dtype (compressed-tensors' config models check the type):
# complex32, which nothing on these paths uses, with every entry point that meets it patched.
FP8 = torch.complex32
FP8_VALUE = fp8_float_table('float8_e4m3fn')
_real_to = torch.Tensor.to
_real_finfo = torch.finfo
_real_tensor = torch.tensor
_real_zeros = torch.zeros


def _to_fp8(t):
    flat = [FP8_VALUE[fp8_encode(v, 'float8_e4m3fn')] for v in _real_to(t, torch.float32).reshape(-1).tolist()]
    return _real_tensor(flat, dtype=torch.float32).reshape(t.shape)


def _patched_to(self, *args, **kwargs):
    if (args and args[0] is FP8) or kwargs.get('dtype') is FP8:
        return _to_fp8(self)
    return _real_to(self, *args, **kwargs)


def _patched_finfo(dtype=None):
    if dtype is FP8:
        return types.SimpleNamespace(max=448.0, min=-448.0, eps=0.125, bits=8)
    return _real_finfo() if dtype is None else _real_finfo(dtype)


def _patched_tensor(*args, **kwargs):
    if kwargs.get('dtype') is FP8:
        return _to_fp8(_real_tensor(*args, **{**kwargs, 'dtype': torch.float32}))
    return _real_tensor(*args, **kwargs)


def _patched_zeros(*args, **kwargs):
    if kwargs.get('dtype') is FP8:
        return _real_zeros(*args, **{**kwargs, 'dtype': torch.float32})
    return _real_zeros(*args, **kwargs)


torch.Tensor.to = _patched_to
torch.finfo = _patched_finfo
torch.tensor = _patched_tensor
torch.zeros = _patched_zeros
torch.float8_e4m3fn = FP8

# torch 1.13's CPU kernels lack clamp and round for float16 (torch 2 has them). Both are exact —
# the result is one of the inputs, a bound, or an integer, each a float16 value — so computing
# them in float32 and converting back gives torch 2's float16 result bit for bit.
_real_clamp = torch.clamp
_real_round = torch.round


def _patched_clamp(t, *args, **kwargs):
    if t.dtype == torch.float16:
        return _real_clamp(t.float(), *args, **kwargs).half()
    return _real_clamp(t, *args, **kwargs)


def _patched_round(t, *args, **kwargs):
    if t.dtype == torch.float16:
        return _real_round(t.float(), *args, **kwargs).half()
    return _real_round(t, *args, **kwargs)


torch.clamp = _patched_clamp
torch.round = _patched_round


# ------------------------------------------------------------- loading the reference definitions
class _Logger:
    def bind(self, **_):
        return self

    def __getattr__(self, _):
        return lambda *a, **k: None


class _RegistryMixin:  # compressed-tensors' registry: registration only, not used here
    pass


def run_imports(ns, tree, path):
    """The file's imports of anything but compressed_tensors / llmcompressor / transformers, whose
    names `ns` already holds (or stubs); imports of absent packages (loguru, triton, tqdm) are
    skipped: the definitions loaded from the file do not need them."""
    for node in tree.body:
        if not isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        module = node.module if isinstance(node, ast.ImportFrom) else node.names[0].name
        if module and module.split('.')[0] in ('compressed_tensors', 'llmcompressor', 'transformers'):
            continue
        try:
            exec(compile(ast.Module([node], []), path, 'exec'), ns)
        except ImportError:
            pass


def load(ns, path, names, strip=('BaseCompressor.register', 'ImplBackend.', 'Observer.register')):
    """Executes the top-level definitions `names` of the file at `path` in `ns` (in file order),
    after its imports. Registration decorators are left off."""
    tree = ast.parse(open(path, encoding='utf-8').read(), path)
    run_imports(ns, tree, path)
    wanted = set(names)
    body = []
    for node in tree.body:
        name = None
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            name = node.name
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            target = node.targets[0] if isinstance(node, ast.Assign) else node.target
            name = getattr(target, 'id', None)
        if name in wanted:
            if hasattr(node, 'decorator_list'):
                node.decorator_list = [d for d in node.decorator_list
                                       if not ast.unparse(d).startswith(strip)]
            body.append(node)
            wanted.discard(name)
    if wanted:
        raise SystemExit(f'{path}: no top-level {sorted(wanted)}')
    exec(compile(ast.Module(body, []), path, 'exec'), ns)
    ns['logger'] = ns['_LOGGER'] = _Logger()


def load_method(ns, path, cls, method):
    """A method of class `cls` in `path`, as a plain function executed in `ns` (after the file's
    imports)."""
    tree = ast.parse(open(path, encoding='utf-8').read(), path)
    run_imports(ns, tree, path)
    ns['logger'] = _Logger()
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == cls:
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == method:
                    item.decorator_list = []
                    exec(compile(ast.Module([item], []), path, 'exec'), ns)
                    return ns.pop(method)
    raise SystemExit(f'{path}: no {cls}.{method}')


def reference(ct_root, llmc_root, version):
    ct = os.path.join(ct_root, 'src', 'compressed_tensors')
    llmc = os.path.join(llmc_root, 'src', 'llmcompressor')
    ns = {'__name__': 'compressed_tensors_reference', 'logger': _Logger(), '_LOGGER': _Logger(),
          'RegistryMixin': _RegistryMixin,
          'compressed_tensors': types.SimpleNamespace(__version__=version), 'CONFIG_NAME': 'config.json'}
    p = lambda *parts: os.path.join(ct, *parts)  # noqa: E731
    load(ns, p('base.py'), ['QUANTIZATION_CONFIG_NAME', 'SPARSITY_CONFIG_NAME', 'TRANSFORM_CONFIG_NAME',
                            'COMPRESSION_VERSION_NAME', 'QUANTIZATION_METHOD_NAME', 'QUANTIZATION_METHOD'])
    load(ns, p('utils', 'helpers.py'), ['Aliasable', 'getattr_chain'])
    load(ns, p('utils', 'type.py'), ['_TorchDtypeAnnotation', 'TorchDtype', 'TensorStateDict'])
    load(ns, p('config', 'base.py'), ['CompressionFormat'])
    load(ns, p('quantization', 'quant_args.py'), [
        'FloatArgs', 'FP4_E2M1_DATA', 'FP8_E4M3_DATA', 'QuantizationType', 'QuantizationStrategy',
        'DynamicType', 'ActivationOrdering', 'QuantizationArgs', 'round_to_quantized_type_dtype',
        'round_to_quantized_type_args'])
    load(ns, p('quantization', 'quant_scheme.py'), [
        'QuantizationScheme', 'preset_name_to_scheme', '_int_wnam', 'UNQUANTIZED', 'W4A16', 'W8A16',
        'W4A16_ASYM', 'INT8_W8A8', 'FP8', 'FP8_DYNAMIC', 'FP8_BLOCK', 'W2A16', 'PRESET_SCHEMES'] +
        ['NVFP4A16', 'NVFP4', 'MXFP4A16', 'MXFP4', 'MXFP8A16', 'MXFP8', 'W4AFP8', 'W2A4', 'W2A8',
         'W3A4', 'W3A8', 'W3A16', 'W4A4', 'W4A8', 'W5A8', 'W5A16', 'W6A8', 'W6A16', 'W7A8', 'W7A16'])
    load(ns, p('quantization', 'utils', 'mxfp_utils.py'),
         ['should_generate_mx_scales', 'generate_mx_scales', 'maybe_convert_from_mx_exp', 'round_to_power_2'])
    load(ns, p('quantization', 'utils', 'helpers.py'), [
        'calculate_qparams', 'calculate_range', '_get_dtype_eps', 'strategy_cdiv',
        'calculate_block_padding', 'maybe_pad_tensor_for_block_quant'])
    load(ns, p('quantization', 'quant_config.py'), [
        'QuantizationStatus', 'LIFECYCLE_ORDER', 'DEFAULT_QUANTIZATION_METHOD',
        'DEFAULT_QUANTIZATION_FORMAT', 'QuantizationConfig'])
    load(ns, p('quantization', 'lifecycle', 'forward_helpers.py'), [
        '_apply_quantize_op', '_process_block', '_process_group', '_quantize_dequantize', '_quantize',
        '_dequantize'])
    load(ns, p('quantization', 'lifecycle', 'forward.py'), [
        'quantize', 'dequantize', 'fake_quantize', '_process_quantization'])
    load(ns, p('compressors', 'pack_quantized', 'helpers.py'), ['pack_to_int32', 'unpack_from_int32'])
    load(ns, p('compressors', 'base.py'), ['COMPRESSIBLE_MODULE_TYPES', 'BaseCompressor'])
    load(ns, p('compressors', 'pack_quantized', 'base.py'), ['PACK_ZP_STRATS', 'PackedQuantizationCompressor'])
    load(ns, p('compressors', 'naive_quantized', 'base.py'), [
        'NaiveQuantizationCompressor', 'IntQuantizationCompressor', 'FloatQuantizationCompressor'])
    ns['update_config'] = load_method(ns, p('compressors', 'model_compressors', 'model_compressor.py'),
                                      'ModelCompressor', 'update_config')
    load(ns, os.path.join(llmc, 'observers', 'helpers.py'), ['_flatten_weight'])
    load(ns, os.path.join(llmc, 'observers', 'base.py'), ['MinMaxTuple'])
    load(ns, os.path.join(llmc, 'observers', 'min_max.py'), ['_get_min_max'])
    return types.SimpleNamespace(**{k: v for k, v in ns.items() if not k.startswith('__')})


# --------------------------------------------------------------------------------------- encoding
def words(t: torch.Tensor, st: str) -> str:
    """A tensor's elements as hex words of its safetensors dtype, concatenated."""
    return ''.join(_words(t, st))


def _words(t: torch.Tensor, st: str) -> list:
    flat = t.reshape(-1)
    if st == 'F8_E4M3':  # the stand-in holds values: their codes
        return [f'{fp8_encode(v, "float8_e4m3fn"):02x}' for v in flat.tolist()]
    if st in ('F16', 'BF16'):
        return [f'{v & 0xFFFF:04x}' for v in flat.view(torch.int16).tolist()]
    if st in ('F32', 'I32'):
        return [f'{v & 0xFFFFFFFF:08x}' for v in flat.view(torch.int32).tolist()]
    if st == 'I64':
        return [f'{v & 0xFFFFFFFFFFFFFFFF:016x}' for v in flat.tolist()]
    if st == 'I8':
        return [f'{v & 0xFF:02x}' for v in flat.tolist()]
    raise ValueError(st)


def st_dtype(t: torch.Tensor, fp8: bool = False) -> str:
    if fp8:
        return 'F8_E4M3'
    return {torch.float32: 'F32', torch.float16: 'F16', torch.bfloat16: 'BF16', torch.int32: 'I32',
            torch.int64: 'I64', torch.int8: 'I8'}[t.dtype]


def record(t: torch.Tensor, fp8: bool = False) -> dict:
    st = st_dtype(t, fp8)
    return {'dtype': st, 'shape': list(t.shape), 'hex': words(t, st)}


# ----------------------------------------------------------------------------------------- weights
def weight(shape, dtype, seed, specials=True):
    """N(0, 0.02) plus rows that reach the edges: exact .5 ties of x / scale, a sweep of consecutive
    values (quotients whose rounding to the weight's dtype lands on or off a tie), an all-zero
    group, all-positive and all-negative groups, -0.0, tiny and large magnitudes."""
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(shape, generator=g) * 0.02
    rows, cols = shape
    if specials and rows >= 8:
        w[0, :] = 0.0
        w[0, 0:8] = torch.tensor([7.5, 2.5, -3.5, 0.5, -0.5, 1.5, 6.5, -7.5])  # scale 1 (int4 sym)
        w[1, :] = torch.linspace(-0.5, 0.49, cols)  # a sweep over many quotients
        w[2, :] = 0.0  # all-zero row: scale 0 -> eps; asym zero point 0/0
        w[2, 0] = -0.0
        w[3, :] = torch.rand(cols, generator=g) * 0.1 + 0.01  # all positive
        w[4, :] = -(torch.rand(cols, generator=g) * 0.1 + 0.01)  # all negative
        w[5, :] = torch.randn(cols, generator=g) * 1e-6  # tiny: scales near dtype limits
        w[5, 1] = -0.0
        w[6, :] = torch.randn(cols, generator=g) * 30.0  # large
        w[7, 3] = -0.0
    return w.to(DTYPES[dtype])


def qparams(ref, w, args):
    """llm-compressor's weight observer: flatten by strategy, min / max, calculate_qparams."""
    observed = ref._flatten_weight(w, args)
    mn, mx = ref._get_min_max(observed)
    return ref.calculate_qparams(mn, mx, args)


COMPRESSOR = {'pack-quantized': 'PackedQuantizationCompressor', 'int-quantized': 'IntQuantizationCompressor',
              'float-quantized': 'FloatQuantizationCompressor'}
FORMAT = {'W4A16': 'pack-quantized', 'W4A16_ASYM': 'pack-quantized', 'W8A16': 'pack-quantized',
          'W2A16': 'pack-quantized', 'W8A8': 'int-quantized', 'FP8_DYNAMIC': 'float-quantized',
          'FP8': 'float-quantized', 'FP8_BLOCK': 'float-quantized'}


def scheme_of(ref, preset, fmt, group_size=None):
    scheme = ref.preset_name_to_scheme(preset, ['Linear'])
    if group_size is not None:  # a preset with another group size (-1: per output channel)
        w = scheme.weights.model_dump()
        w.update(group_size=None if group_size == -1 else group_size,
                 strategy='channel' if group_size == -1 else 'group')
        scheme.weights = ref.QuantizationArgs.model_validate(w)
    scheme.format = fmt
    return scheme


def run_case(ref, name, preset, shape, dtype, seed, group_size=None, g_idx=False, specials=True):
    fmt = FORMAT[preset]
    scheme = scheme_of(ref, preset, fmt, group_size)
    args = scheme.weights
    w = weight(shape, dtype, seed, specials)
    state = {'weight': w}
    if g_idx:  # activation order: groups of permuted columns (as GPTQ's actorder=group writes)
        gen = torch.Generator().manual_seed(seed + 1)
        perm = torch.randperm(shape[1], generator=gen)
        idx = torch.empty(shape[1], dtype=torch.int32)
        idx[perm] = torch.arange(shape[1], dtype=torch.int32) // args.group_size
        scale, zp = qparams(ref, w[:, perm], args)
        state['weight_g_idx'] = idx
    else:
        scale, zp = qparams(ref, w, args)
    state['weight_scale'] = scale
    state['weight_zero_point'] = zp
    compressor = getattr(ref, COMPRESSOR[fmt])
    compressed = compressor.compress(dict(state), scheme)
    back = compressor.decompress(dict(compressed), scheme)
    fp8 = args.type == 'float'
    tensors = {k: record(v, fp8=(fp8 and k == 'weight')) for k, v in compressed.items()}
    # how many codes a float32 computation of x / scale would round differently
    if args.type == 'int' and not g_idx:
        exact = ref.quantize(x=w.to(torch.float32), scale=scale.to(torch.float32),
                             zero_point=zp, args=args, dtype=torch.int8)
        in_dtype = ref.quantize(x=w, scale=scale, zero_point=zp, args=args, dtype=torch.int8)
        float32_differs = int((exact != in_dtype).sum())
    else:
        float32_differs = 0
    return {
        'name': name, 'scheme': preset, 'format': fmt, 'dtype': dtype, 'shape': list(shape),
        'num_bits': args.num_bits, 'type': args.type, 'symmetric': args.symmetric,
        'strategy': args.strategy, 'group_size': args.group_size,
        'block_structure': args.block_structure,
        'weight': words(w, st_dtype(w)), 'tensors': tensors,
        'decompressed': record(back['weight']),
        'float32_differs': float32_differs,
    }


CASES = [
    # name, preset, shape, dtype, seed, group_size override, g_idx
    ('w4a16_bf16_g128', 'W4A16', (8, 256), 'bfloat16', 1, None, False),
    ('w4a16_f16_g32', 'W4A16', (8, 128), 'float16', 2, 32, False),
    ('w4a16_f32_g64', 'W4A16', (8, 192), 'float32', 3, 64, False),
    ('w4a16_bf16_channel_pad', 'W4A16', (9, 100), 'bfloat16', 4, -1, False),
    ('w4a16_asym_bf16_g128', 'W4A16_ASYM', (8, 256), 'bfloat16', 5, None, False),
    ('w4a16_asym_f16_g32', 'W4A16_ASYM', (12, 64), 'float16', 6, 32, False),
    ('w4a16_asym_f32_channel', 'W4A16_ASYM', (10, 40), 'float32', 7, -1, False),
    ('w8a16_bf16_g128', 'W8A16', (8, 256), 'bfloat16', 8, None, False),
    ('w8a16_f16_channel', 'W8A16', (8, 72), 'float16', 9, -1, False),
    ('w8a8_bf16', 'W8A8', (8, 96), 'bfloat16', 10, None, False),
    ('w8a8_f32', 'W8A8', (8, 48), 'float32', 11, None, False),
    ('fp8_dynamic_bf16', 'FP8_DYNAMIC', (8, 64), 'bfloat16', 12, None, False),
    ('fp8_dynamic_f16', 'FP8_DYNAMIC', (8, 64), 'float16', 13, None, False),
    ('fp8_dynamic_f32', 'FP8_DYNAMIC', (8, 40), 'float32', 14, None, False),
    # files quantd reads but does not write
    ('read_w2a16_bf16_g32', 'W2A16', (8, 64), 'bfloat16', 15, 32, False),
    ('read_w4a16_actorder_f16', 'W4A16', (8, 64), 'float16', 16, 16, True),
    ('read_fp8_tensor_bf16', 'FP8', (8, 64), 'bfloat16', 17, None, False),
    ('read_fp8_block_bf16', 'FP8_BLOCK', (256, 256), 'bfloat16', 18, None, False),
]

CONFIG_SCHEMES = ['W4A16', 'W4A16_ASYM', 'W8A16', 'W8A8', 'FP8_DYNAMIC']
# Fields compressed-tensors 0.13+ writes that 0.12 and older refuse (their models forbid extra
# keys); quantd leaves them out, and the check below shows the newer models read the same config.
NEWER_FIELDS = ('scale_dtype', 'zp_dtype')


def config_case(ref, preset, group_size=None):
    scheme = scheme_of(ref, preset, FORMAT[preset], group_size)
    qc = ref.QuantizationConfig(config_groups={'group_0': scheme}, format=FORMAT[preset],
                                quantization_status='compressed', ignore=['lm_head'])
    owner = types.SimpleNamespace(quantization_config=qc, transform_config=None)
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, 'config.json'), 'w') as f:
            json.dump({'model_type': 'llama'}, f)
        ref.update_config(owner, d)
        with open(os.path.join(d, 'config.json')) as f:
            written = json.load(f)['quantization_config']

    def strip(value):
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k not in NEWER_FIELDS}
        return value

    stripped = strip(written)
    reread = ref.QuantizationConfig.model_validate(
        {k: v for k, v in stripped.items() if k not in ('version', 'sparsity_config', 'transform_config')})
    same = reread.model_dump(exclude=['quant_method']) == qc.model_dump(exclude=['quant_method'])
    assert same, f'{preset}: the config without {NEWER_FIELDS} does not read back the same'
    return {'scheme': preset, 'group_size': group_size, 'quantization_config': written,
            'without_newer_fields': stripped, 'reads_back_same': same}


def older_accepts(root, configs):
    """Whether the config models of an older compressed-tensors release (`root`: a checkout of
    it, e.g. 0.12.2, which vLLM pinned in late 2025) accept each config without NEWER_FIELDS, and refuse it
    with them."""
    ct = os.path.join(root, 'src', 'compressed_tensors')
    p = lambda *parts: os.path.join(ct, *parts)  # noqa: E731
    torch.compile = getattr(torch, 'compile', lambda f: f)  # decorates an FP4 helper there; unused
    ns = {'__name__': 'older', 'logger': _Logger(), '_LOGGER': _Logger(), 'RegistryMixin': _RegistryMixin}
    load(ns, p('utils', 'helpers.py'), ['T', 'Aliasable', 'deprecated'])
    load(ns, p('config', 'base.py'), ['CompressionFormat'])
    load(ns, p('quantization', 'quant_args.py'), [
        'FloatArgs', 'FP4_E2M1_DATA', 'FP8_E4M3_DATA', 'QuantizationType', 'QuantizationStrategy',
        'DynamicType', 'ActivationOrdering', 'QuantizationArgs'])
    path = p('quantization', 'quant_scheme.py')
    presets = [n.targets[0].id for n in ast.parse(open(path, encoding='utf-8').read()).body
               if isinstance(n, ast.Assign) and hasattr(n.targets[0], 'id') and n.targets[0].id != '__all__']
    load(ns, path, ['QuantizationScheme', 'preset_name_to_scheme'] + presets)
    load(ns, p('quantization', 'quant_config.py'), [
        'QuantizationStatus', 'LIFECYCLE_ORDER', 'DEFAULT_QUANTIZATION_METHOD',
        'DEFAULT_QUANTIZATION_FORMAT', 'QuantizationConfig'])
    model = ns['QuantizationConfig']
    body = lambda c: {k: v for k, v in c.items() if k not in ('version', 'sparsity_config', 'transform_config')}  # noqa: E731
    for c in configs:
        model.model_validate(body(c['without_newer_fields']))
        try:
            model.model_validate(body(c['quantization_config']))
            refused = False
        except Exception:  # pydantic's ValidationError: extra fields are forbidden there
            refused = True
        c['older_refuses_newer_fields'] = refused


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--compressed-tensors', required=True)
    ap.add_argument('--llm-compressor', required=True)
    ap.add_argument('--version', required=True)
    ap.add_argument('--older-compressed-tensors', required=True,
                    help='a checkout of an older release (0.12.2) whose config models must accept ours')
    ap.add_argument('--older-version', required=True)
    a = ap.parse_args()
    for root in (a.compressed_tensors, a.llm_compressor, a.older_compressed_tensors):
        if os.path.commonpath([os.path.abspath(root), os.path.abspath(os.path.join(HERE, '..', '..', '..'))]) \
                == os.path.abspath(os.path.join(HERE, '..', '..', '..')):
            raise SystemExit(f'{root}: keep the reference checkout outside this repository')
    ref = reference(a.compressed_tensors, a.llm_compressor, a.version)
    cases = [run_case(ref, *c) for c in CASES]
    assert any(c['float32_differs'] > 0 for c in cases), 'no case shows the dtype arithmetic'
    configs = [config_case(ref, s) for s in CONFIG_SCHEMES] + [config_case(ref, 'W4A16', 32),
                                                                config_case(ref, 'W8A16', -1)]
    older_accepts(a.older_compressed_tensors, configs)
    assert "complex32" not in json.dumps(configs) + json.dumps(cases), "the float8 stand-in leaked"
    out = {
        'note': ('compressed-tensors ' + a.version + ' (vllm-project/compressed-tensors) and '
                 'llm-compressor observers, executed by compressed_tensors_reference.py on torch '
                 + torch.__version__ + '; float8 rounding by the exact oracle of test/golden/generate.py'),
        'version': a.version,
        'older_version': a.older_version,
        'cases': cases,
        'configs': configs,
    }
    with open(OUT, 'w') as f:
        json.dump(out, f, indent=1, sort_keys=True)
        f.write('\n')
    print(f'wrote {OUT}: {len(cases)} cases, {len(configs)} configs; float32 arithmetic differs on '
          f'{sum(c["float32_differs"] for c in cases)} codes')


if __name__ == '__main__':
    main()
