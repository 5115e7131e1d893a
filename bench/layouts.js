// The interop layouts' block quantizers (issue: each GGUF type must beat ggml's own single-thread
// quantize_row_*_ref on this machine: Q8_0 ≈ 0.77×, Q4_0 ≈ 0.25–0.35×, Q4_1 0.45×, Q5_0 0.23×,
// Q6_K 0.011×, Q4_K 0.004× memcpy). The GGUF types, ONNX MatMulNBits, AWQ, GPTQ and
// bitsandbytes' NF4 / FP4 run in the C kernels (native, wasm) and in TypeScript;
// compressed-tensors in TypeScript only.
// TypeScript runs on a smaller matrix (its rate does not depend on the size).
import { awqQuantize } from '../dist/src/core/interop/awq.js';
import { bnbQuantize } from '../dist/src/core/interop/bnb.js';
import { ctQuantize } from '../dist/src/core/interop/compressed-tensors.js';
import { packToInt32 } from '../dist/src/core/interop/ct-pack.js';
import { QUANT_TYPES, ggmlEncode } from '../dist/src/core/interop/ggml.js';
import { ggmlEncodeWeighted } from '../dist/src/core/interop/ggml-imatrix.js';
import { gptqQuantize } from '../dist/src/core/interop/gptq.js';
import { matMulNBitsQuantize } from '../dist/src/core/interop/onnx.js';
import { BNB_KERNEL_TYPES, GGML_KERNEL_TYPES, loadNative, loadWasm } from '../dist/src/kernels/index.js';
import { randomFloats } from './ops.js';
import { timeBestAsync } from './timing.js';

const COLS = 4096;

/** Rows of { layout, backend, gbs } for a float32 matrix of `mib` MiB (`smallMib` for TypeScript). */
export async function benchLayouts(mib, smallMib, reps) {
  const rows = [];
  const time = async (layout, backend, bytes, fn, n = reps) => {
    const seconds = await timeBestAsync(async () => fn(), n);
    rows.push({ layout, backend, gbs: bytes / seconds / 1e9 });
  };
  const x = randomFloats((mib * 1024 * 1024) / 4);
  const modules = [];
  for (const [name, load] of [
    ['native', loadNative],
    ['wasm', loadWasm],
  ]) {
    try {
      modules.push([name, load()]);
    } catch (err) {
      console.error(`(${name} unavailable: ${err.message})`);
    }
  }
  for (const type of Object.keys(GGML_KERNEL_TYPES)) {
    const t = GGML_KERNEL_TYPES[type];
    const out = new Uint8Array((x.length / t.blockSize) * t.blockBytes);
    for (const [name, m] of modules)
      await time(`gguf ${type}`, `${name} ${m.isa}`, x.byteLength, () => m.ggmlQuantize(t.id, x, out));
  }
  // with an importance matrix (llama-quantize --imatrix): one weight per column
  const qw = Float32Array.from({ length: COLS }, (_, i) => 0.1 + ((i * 7919) % 1000) / 1000);
  for (const type of Object.keys(GGML_KERNEL_TYPES).filter((t) => t !== 'Q8_0')) {
    const t = GGML_KERNEL_TYPES[type];
    const out = new Uint8Array((x.length / t.blockSize) * t.blockBytes);
    for (const [name, m] of modules)
      await time(`gguf ${type} imatrix`, `${name} ${m.isa}`, x.byteLength, () =>
        m.ggmlQuantizeWeighted(t.id, x, COLS, qw, out),
      );
  }
  // The layouts for vLLM / transformers / ORT also on AVX2 where the best ISA is AVX-512: the
  // machines their targets were set on have AVX2 only.
  const packers = [...modules];
  if (modules[0]?.[1].isa === 'avx512') {
    try {
      packers.splice(1, 0, ['native', loadNative('avx2')]);
    } catch {
      // no AVX2 twin in this build
    }
  }
  {
    const rows = x.length / COLS;
    const b = new Uint8Array(x.length / 2);
    const scales = new Float32Array(x.length / 32);
    const zeroPoints = new Uint8Array(rows * Math.ceil(COLS / 32 / 2));
    for (const [name, m] of packers)
      await time('onnx MatMulNBits b32 asym', `${name} ${m.isa}`, x.byteLength, () =>
        m.nbitsQuantize(x, rows, COLS, 32, false, false, b, scales, zeroPoints),
      );
  }
  {
    const qweight = new Int32Array(x.length / 8);
    const qzeros = new Int32Array(x.length / 8 / 128);
    const scales = new Uint16Array(x.length / 128);
    for (const [name, m] of packers)
      await time('awq 4-bit g128', `${name} ${m.isa}`, x.byteLength, () =>
        m.awqQuantize(x, x.length / COLS, COLS, 128, qweight, qzeros, scales),
      );
  }
  for (const [store, layer] of [
    [0, 'float32'],
    [1, 'float16'],
  ]) {
    const rows = x.length / COLS;
    const qweight = new Int32Array(x.length / 8);
    const qzeros = new Int32Array((COLS / 128) * (rows / 8));
    const scales = new Uint16Array(x.length / 128);
    const counts = new Float64Array(2);
    for (const [name, m] of packers)
      await time(`gptq 4-bit g128 asym, ${layer} layer`, `${name} ${m.isa}`, x.byteLength, () =>
        m.gptqQuantize(x, rows, COLS, 4, 128, false, store, qweight, qzeros, scales, counts),
      );
  }
  for (const [type, id] of Object.entries(BNB_KERNEL_TYPES)) {
    const packed = new Uint8Array(x.length / 2);
    const absmax = new Float32Array(x.length / 64);
    for (const [name, m] of packers)
      await time(`bitsandbytes ${type} b64`, `${name} ${m.isa}`, x.byteLength, () =>
        m.bnbQuantize(id, x, 64, packed, absmax),
      );
  }

  const small = randomFloats((smallMib * 1024 * 1024) / 4, 7);
  const shape = [small.length / COLS, COLS];
  const ts = (layout, fn) => time(layout, 'js', small.byteLength, fn, Math.min(reps, 2));
  for (const type of QUANT_TYPES) {
    await ts(`gguf ${type}`, () => ggmlEncode(type, small, COLS));
  }
  for (const type of ['Q4_K', 'IQ4_XS']) {
    await ts(`gguf ${type} imatrix`, () => ggmlEncodeWeighted(type, small, COLS, qw));
  }
  await ts('gptq 4-bit g128 asym, float32 layer', () =>
    gptqQuantize('w', small, shape, 'float32', { bits: 4, groupSize: 128, sym: false }),
  );
  await ts('awq 4-bit g128', () => awqQuantize('w', small, shape, { groupSize: 128 }));
  await ts('onnx MatMulNBits b32 asym', () =>
    matMulNBitsQuantize('w', small, shape, { blockSize: 32, sym: false, scaleType: 'float32' }),
  );
  await ts('bitsandbytes nf4 b64', () => bnbQuantize('w', small, 'nf4', 64));
  // arithmetic in bfloat16 as compressed-tensors does it, packing included
  await ts('compressed-tensors W4A16 g128, bfloat16 layer', () => {
    const q = ctQuantize('w', small, shape, 'bfloat16', {
      numBits: 4,
      type: 'int',
      symmetric: true,
      groupSize: 128,
    });
    packToInt32(q.codes, shape[0], COLS, 4);
  });
  await ts('compressed-tensors FP8_DYNAMIC, bfloat16 layer', () =>
    ctQuantize('w', small, shape, 'bfloat16', {
      numBits: 8,
      type: 'float',
      symmetric: true,
      groupSize: null,
    }),
  );
  return rows;
}
