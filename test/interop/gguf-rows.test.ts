/**
 * The GGUF encoder's kernel path (src/kernels/ggml-rows.ts: a chunk of rows at a time, half
 * precision widened by the kernels, q/k rows gathered per head) against the TypeScript reference
 * (the whole tensor in float32, permuted, encoded, checked): the same bytes, the same quality
 * statistics and histogram, the same error for a non-finite value or an overflowed block — for
 * every type with a kernel, every input dtype, on every backend and ISA. The tensors span several
 * chunks (64 Ki elements each), and one has rows longer than a chunk.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';

import type { FloatDType } from '../../src/core/dtypes.js';
import { QUANT_TYPES, ggmlTypeByName, type GgmlWriteType } from '../../src/core/interop/ggml.js';
import { histogramOf } from '../../src/core/error-histogram.js';
import { fromFloat32 } from '../../src/core/tensor.js';
import { serializeSafetensors } from '../../src/format/safetensors.js';
import {
  referenceEncoding,
  runEncodeTask,
  type EncodeReply,
  type EncoderCall,
  type Encoding,
} from '../../src/kernels/encoders.js';
import type { KernelModule } from '../../src/kernels/module.js';
import { createCompute } from '../../src/pool/index.js';
import { LAYOUTS } from '../../src/service/layouts/index.js';
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
    const reply = runEncodeTask(module, {
      op: 'encode',
      call,
      inputs: [fromFloat32(x, dtype)],
      outputs: [out],
    });
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

describe('a tensor split into parts by rows (one per pool thread)', () => {
  const [, module] = variants[0]!;
  const dir = mkdtempSync(join(tmpdir(), 'quantd-gguf-rows-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('parts write the bytes of the whole; their sample errors make its histogram; their sums its quality', () => {
    const rows = 97;
    const ne0 = 1024;
    const x = weights(rows, ne0, 13);
    const t = ggmlTypeByName('Q4_K')!;
    const whole = encodeWith(module, 'Q4_K', 'bfloat16', x, ne0, { quality: true }) as {
      bytes: string;
      reply: EncodeReply;
    };
    const out = new Uint8Array((x.length / t.blockSize) * t.typeSize);
    const input = fromFloat32(x, 'bfloat16');
    const replies = [0, 30, 31, 97].slice(0, -1).map((first, k, starts) => {
      const count = ([...starts.slice(1), rows][k] ?? rows) - first;
      const call: EncoderCall = {
        kind: 'ggml',
        tensor: 'w.weight',
        dtype: 'bfloat16',
        type: 'Q4_K',
        ne0,
        quality: true,
        part: { first, count },
      };
      return runEncodeTask(module, { op: 'encode', call, inputs: [input], outputs: [out] });
    });
    expect(hex(out)).toBe(whole.bytes);
    const errors = Float64Array.from(replies.flatMap((r) => [...r.sampleErrors!]));
    expect(histogramOf(errors)).toEqual(whole.reply.histogram);
    const sum = (k: 'sumSqError' | 'count' | 'clipped') => replies.reduce((n, r) => n + r.quality![k], 0);
    expect(sum('count')).toBe(whole.reply.quality!.count);
    expect(sum('sumSqError')).toBeCloseTo(whole.reply.quality!.sumSqError, 12);
    expect(Math.max(...replies.map((r) => r.quality!.maxAbsError))).toBe(whole.reply.quality!.maxAbsError);
  });

  it('a layout run on a 3-thread encoding splits an 8 MiB weight and writes the reference file', async () => {
    const x = weights(1024, 2048, 17); // 8 MiB of float32
    const input = join(dir, 'big.safetensors');
    writeFileSync(
      input,
      serializeSafetensors(
        [{ name: 'w.weight', dtype: 'F32', shape: [1024, 2048], data: fromFloat32(x, 'float32') }],
        {
          format: 'pt',
        },
      ),
    );
    const parts: Array<{ first: number; count: number }> = [];
    const threeThreads: Encoding = {
      parallelism: 3,
      shared: false,
      kernels: true,
      encode: async (task) => {
        if (task.call.kind === 'ggml' && task.call.part) parts.push(task.call.part);
        return runEncodeTask(module, task);
      },
    };
    const gguf = LAYOUTS.get('gguf')!;
    for (const type of ['q4_k', 'q8_0']) {
      const split = join(dir, `split-${type}.gguf`);
      const reference = join(dir, `reference-${type}.gguf`);
      await gguf.write(input, split, { type, arch: 'x' }, { encoding: threeThreads });
      await gguf.write(input, reference, { type, arch: 'x' }, { encoding: referenceEncoding });
      expect(readFileSync(split).equals(readFileSync(reference)), type).toBe(true);
    }
    // and on the real worker pool (shared buffers, two threads)
    const handle = createCompute({ threads: 2 });
    try {
      const pooled = join(dir, 'pooled-q4_k.gguf');
      await gguf.write(input, pooled, { type: 'q4_k', arch: 'x' }, { encoding: handle.encoding() });
      expect(readFileSync(pooled).equals(readFileSync(join(dir, 'reference-q4_k.gguf')))).toBe(true);
    } finally {
      await handle.close();
    }
    expect(parts.slice(0, 3)).toEqual([
      { first: 0, count: 341 },
      { first: 341, count: 341 },
      { first: 682, count: 342 },
    ]);
  });
});
