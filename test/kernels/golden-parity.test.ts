/**
 * Every golden vector through every kernel backend and ISA: native (AVX-512, AVX2, scalar) and
 * WebAssembly (SIMD128, scalar) must reproduce the PyTorch results byte for byte, as the
 * TypeScript reference does (test/golden/golden.test.ts).
 */
import { describe, expect, it } from 'vitest';
import { parseSpec, planLayout, typedView, type FloatDType, type QParams } from '../../src/core/index.js';
import {
  InlineExecutor,
  KernelCompute,
  loadNative,
  loadWasm,
  type KernelModule,
} from '../../src/kernels/index.js';
import { bytes, hex, loadGolden, type GoldenCase } from '../golden/vectors.js';

const FLOAT_OF: Record<string, FloatDType> = { F32: 'float32', F16: 'float16', BF16: 'bfloat16' };

export function kernelVariants(): Array<[string, KernelModule]> {
  const variants: Array<[string, KernelModule]> = [];
  for (const isa of ['avx512', 'avx2', 'scalar']) {
    try {
      variants.push([`native ${isa}`, loadNative(isa)]);
    } catch {
      // an ISA this CPU lacks
    }
  }
  variants.push(['wasm simd128', loadWasm('simd128')], ['wasm scalar', loadWasm('scalar')]);
  return variants;
}

function qparamsOf(c: GoldenCase): QParams | undefined {
  if (!c.qparams) return undefined;
  const zp = c.qparams.zero_point;
  return {
    scale: typedView(Float32Array, bytes(c.qparams.scale)),
    zeroPoint: zp.dtype === 'F32' ? typedView(Float32Array, bytes(zp)) : typedView(Int32Array, bytes(zp)),
  };
}

async function runCase(compute: KernelCompute, c: GoldenCase): Promise<void> {
  const spec = parseSpec(c.spec!);
  if (c.op === 'dequantize') {
    const layout = planLayout('x', c.shape!, spec);
    const out = await compute.dequantize(
      { name: 'x', data: bytes(c.q!), spec, layout, qparams: qparamsOf(c)! },
      c.out_dtype as FloatDType,
    );
    expect(hex(out)).toBe(hex(bytes(c.expect.out!)));
    return;
  }
  const layout = planLayout('x', c.input!.shape, spec);
  const input = { name: 'x', dtype: FLOAT_OF[c.input!.dtype]!, data: bytes(c.input!), layout };
  if (c.op === 'fake_quantize') {
    const r = await compute.fakeQuantize(input, spec, 'float32', qparamsOf(c));
    expect(hex(r.data), 'out').toBe(hex(bytes(c.expect.out!)));
    expect(hex(r.mask), 'mask').toBe(hex(bytes(c.expect.mask!)));
    return;
  }
  const r = await compute.quantize(input, spec, qparamsOf(c));
  expect(
    hex(new Uint8Array(r.qparams.scale.buffer, r.qparams.scale.byteOffset, r.qparams.scale.byteLength)),
  ).toBe(hex(bytes(c.expect.scale!)));
  expect(
    hex(
      new Uint8Array(
        r.qparams.zeroPoint.buffer,
        r.qparams.zeroPoint.byteOffset,
        r.qparams.zeroPoint.byteLength,
      ),
    ),
  ).toBe(hex(bytes(c.expect.zero_point!)));
  expect(hex(r.data), 'codes').toBe(hex(bytes(c.expect.q!)));
}

const cases = ['per_tensor', 'per_channel', 'per_token', 'per_group', 'dequantize', 'fake_quantize'].flatMap(
  (f) => loadGolden(f).cases,
);

describe.each(kernelVariants())('golden vectors on %s', (_name, module) => {
  const compute = new KernelCompute(new InlineExecutor(module), module.backend);
  it(`all ${cases.length} cases`, async () => {
    for (const c of cases) {
      try {
        await runCase(compute, c);
      } catch (err) {
        throw new Error(`${c.id}: ${(err as Error).message}`);
      }
    }
  });
});
