/**
 * The layouts' streaming executor (src/service/layouts/run-jobs.ts) with a source that reads
 * byte ranges and a sink that takes parts: a large tensor copied through goes in parts of about
 * `sliceBytes`, in order, the last one flagged; a GGUF weight goes in slices of rows; small
 * tensors, and every tensor of a source or sink without ranges or parts, go whole. The bytes
 * written are the same either way.
 */
import { afterAll, describe, expect, it } from 'vitest';

import { createCompute } from '../../src/pool/index.js';
import {
  runEncodeJobs,
  type EncodeJob,
  type JobSink,
  type JobSource,
} from '../../src/service/layouts/run-jobs.js';

const pool = createCompute({ threads: 2 });
afterAll(() => pool.close());

/** Tensors of this test: named byte arrays. */
interface Tensor {
  readonly name: string;
  readonly data: Uint8Array;
}

function floats(n: number, seed: number): Uint8Array {
  const x = Float32Array.from({ length: n }, (_, i) => Math.sin(i * 0.013 + seed) * (1 + (i % 5)));
  return new Uint8Array(x.buffer);
}

function source(ranges: boolean, reads: string[]): JobSource<Tensor> {
  const copy = (data: Uint8Array, shared: boolean, allocate: (n: number, s: boolean) => Uint8Array) => {
    const out = allocate(data.byteLength, shared);
    out.set(data);
    return out;
  };
  return {
    read: async (t, shared, allocate) => {
      reads.push(`${t.name} whole`);
      return copy(t.data, shared, allocate);
    },
    ...(ranges && {
      readRange: async (
        t: Tensor,
        begin: number,
        end: number,
        shared: boolean,
        allocate: (n: number, s: boolean) => Uint8Array,
      ) => {
        reads.push(`${t.name} ${begin}..${end}`);
        return copy(t.data.subarray(begin, end), shared, allocate);
      },
    }),
    size: (t) => t.data.byteLength,
  };
}

/** A sink that keeps what it is given, and how (whole, or parts with their `last` flags). */
function sink(parts: boolean, log: string[]): JobSink & { readonly files: Map<string, Uint8Array[]> } {
  const files = new Map<string, Uint8Array[]>();
  const keep = (name: string, data: Uint8Array) =>
    files.set(name, [...(files.get(name) ?? []), data.slice()]);
  return {
    files,
    write: async (name, data) => {
      log.push(`${name} whole`);
      keep(name, data);
    },
    ...(parts && {
      writePart: async (name: string, data: Uint8Array, last: boolean) => {
        log.push(`${name} part${last ? ' last' : ''}`);
        keep(name, data);
      },
    }),
    commit: async () => undefined,
    abort: async () => undefined,
  };
}

const SLICE = 4096;
const big = { name: 'embed', data: floats(2500, 1) }; // 10 000 bytes: 3 parts of 4 KiB
const small = { name: 'norm', data: floats(64, 2) };
const weight = { name: 'w', data: floats(64 * 96, 3) }; // 96 rows of 64: 24 KiB, 6 slices

function jobs(): EncodeJob<Tensor>[] {
  return [
    { inputs: [big], outputs: [{ name: 'embed', bytes: big.data.byteLength }], label: 'embed' },
    { inputs: [small], outputs: [{ name: 'norm', bytes: small.data.byteLength }], label: 'norm' },
    {
      inputs: [weight],
      outputs: [{ name: 'w', bytes: 96 * 2 * 34 }], // Q8_0: 2 blocks of 34 bytes per row
      call: { kind: 'ggml', tensor: 'w', dtype: 'float32', type: 'Q8_0', ne0: 64 },
      label: 'w',
    },
  ];
}

async function run(ranges: boolean, parts: boolean) {
  const reads: string[] = [];
  const writes: string[] = [];
  const out = sink(parts, writes);
  await runEncodeJobs(source(ranges, reads), jobs(), out, { encoding: pool.encoding(), sliceBytes: SLICE });
  const bytes = new Map([...out.files].map(([name, chunks]) => [name, Buffer.concat(chunks)]));
  return { reads, writes, bytes };
}

describe('the layouts executor in parts', () => {
  it('copies a large tensor in parts and encodes a large GGUF weight in slices; the rest whole', async () => {
    const { reads, writes, bytes } = await run(true, true);
    expect(reads).toEqual([
      'embed 0..4096',
      'embed 4096..8192',
      'embed 8192..10000',
      'norm whole',
      ...[0, 1, 2, 3, 4, 5].map((k) => `w ${k * 4096}..${(k + 1) * 4096}`),
    ]);
    expect(writes).toEqual([
      'embed part',
      'embed part',
      'embed part last',
      'norm whole',
      ...Array.from({ length: 5 }, () => 'w part'),
      'w part last',
    ]);
    expect(bytes.get('embed')!.equals(Buffer.from(big.data))).toBe(true);
    const whole = await run(false, false);
    expect(whole.writes).toEqual(['embed whole', 'norm whole', 'w whole']);
    for (const name of ['embed', 'norm', 'w'])
      expect(bytes.get(name)!.equals(whole.bytes.get(name)!), name).toBe(true);
  });

  it('goes whole when the source reads no ranges, or the sink takes no parts', async () => {
    for (const [ranges, parts] of [
      [false, true],
      [true, false],
    ] as const) {
      const { writes } = await run(ranges, parts);
      expect(writes).toEqual(['embed whole', 'norm whole', 'w whole']);
    }
  });
});
