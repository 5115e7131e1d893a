/**
 * The GGUF encoder's kernel path (src/kernels/ggml-rows.ts: a chunk of rows at a time, half
 * precision widened by the kernels, q/k rows gathered per head) against the TypeScript reference
 * (the whole tensor in float32, permuted, encoded, checked): the same bytes, the same quality
 * statistics and histogram, the same error for a non-finite value or an overflowed block — for
 * every type with a kernel, every input dtype, on every backend and ISA. The tensors span several
 * chunks (64 Ki elements each), and one has rows longer than a chunk.
 */
import { describe, expect, it } from 'vitest';

import type { FloatDType } from '../../src/core/dtypes.js';
import { QUANT_TYPES, ggmlTypeByName, type GgmlWriteType } from '../../src/core/interop/ggml.js';
import { fromFloat32 } from '../../src/core/tensor.js';
import { runEncodeTask, type EncodeReply, type EncoderCall } from '../../src/kernels/encoders.js';
import type { KernelModule } from '../../src/kernels/module.js';
import { describeError, parityVariants, seededUniform } from '../kernels/helpers.js';

const DTYPES: readonly FloatDType[] = ['float32', 'float16', 'bfloat16'];
const hex = (b: Uint8Array): string => Buffer.from(b.buffer, b.byteOffset, b.byteLength).toString('hex');

function weights(rows: number, cols: number, seed: number): Float32Array {
  const next = seededUniform(seed);
  // ~N(0, 0.02)-sized values with a few outliers, as checkpoints hold
  return Float32Array.from({ length: rows * cols }, (_, i) => (next() - 0.5) * (i % 977 === 0 ? 1.5 : 0.05));
}

type Outcome = { bytes: string; reply: EncodeReply } | { error: string };

function encodeWith(
  module: KernelModule | null,
  type: GgmlWriteType,
  dtype: FloatDType,
  x: Float32Array,
  ne0: number,
  extra: Partial<Extract<EncoderCall, { kind: 'ggml' }>> = {},
): Outcome {
  const t = ggmlTypeByName(type)!;
  const out = new Uint8Array((x.length / t.blockSize) * t.typeSize);
  const call: EncoderCall = { kind: 'ggml', tensor: 'w.weight', dtype, type, ne0, ...extra };
  try {
    const reply = runEncodeTask(module, { op: 'encode', call, inputs: [fromFloat32(x, dtype)], outputs: [out] });
    return { bytes: hex(out), reply };
  } catch (err) {
    return { error: describeError(err) };
  }
}

const variants = parityVariants();

describe.each(variants)('GGUF rows through %s', (_, module) => {
  it.each(QUANT_TYPES.flatMap((type) => DTYPES.map((dtype) => [type, dtype] as const)))(
    '%s from %s: bytes, quality and histogram equal the reference, permuted or not',
    (type, dtype) => {
      const ne0 = 512;
      const rows = 160; // 80 Ki elements: a chunk and a part
      const x = weights(rows, ne0, 7);
      for (const extra of [{}, { quality: true }, { permute: { rows, heads: 8 }, quality: true }]) {
        const got = encodeWith(module, type, dtype, x, ne0, extra);
        const want = encodeWith(null, type, dtype, x, ne0, extra);
        expect(got, `${type} ${dtype} ${JSON.stringify(extra)}`).toEqual(want);
        expect('bytes' in got).toBe(true);
      }
    },
  );

  it('rows longer than a chunk (one row per chunk)', () => {
    const x = weights(3, 1 << 17, 11);
    for (const type of ['Q4_K', 'Q8_0'] as const) {
      const got = encodeWith(module, type, 'bfloat16', x, 1 << 17, { quality: true });
      expect(got).toEqual(encodeWith(null, type, 'bfloat16', x, 1 << 17, { quality: true }));
    }
  });

  it.each([
    ['NaN in the second chunk', NaN, 70_000],
    ['-Infinity in a permuted row', -Infinity, 513],
  ])('%s: INPUT_NOT_FINITE at the reference index', (_, value, index) => {
    const x = weights(160, 512, 3);
    x[index] = value;
    for (const extra of [{}, { permute: { rows: 160, heads: 8 } }]) {
      const got = encodeWith(module, 'Q4_K', 'float32', x, 512, extra);
      expect(got).toEqual(encodeWith(null, 'Q4_K', 'float32', x, 512, extra));
      expect(JSON.stringify(got)).toContain('INPUT_NOT_FINITE');
    }
  });

  it('an overflowed block before a NaN: INPUT_NOT_FINITE, as the whole-tensor check reports', () => {
    const x = weights(160, 512, 5);
    x.fill(1e9, 0, 512); // scales beyond float16 in the first chunk
    x[80_000] = NaN;
    const got = encodeWith(module, 'Q8_0', 'float32', x, 512);
    expect(got).toEqual(encodeWith(null, 'Q8_0', 'float32', x, 512));
    expect(JSON.stringify(got)).toContain('INPUT_NOT_FINITE');
    x[80_000] = 0;
    const overflow = encodeWith(module, 'Q8_0', 'float32', x, 512);
    expect(overflow).toEqual(encodeWith(null, 'Q8_0', 'float32', x, 512));
    expect(JSON.stringify(overflow)).toContain('beyond float16');
  });
});
