/**
 * The GGUF v3 container: the writer's exact bytes for a small file (worked out from the spec),
 * write → read round trips over every metadata type, an independent reader
 * (@huggingface/gguf) on files we wrote, and malformed files → GGUF_INVALID.
 */
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gguf as hfGguf } from '@huggingface/gguf';
import { afterAll, describe, expect, it } from 'vitest';

import { ggmlEncode } from '../../src/core/interop/ggml.js';
import { QuantdError } from '../../src/errors/index.js';
import { GgufFileReader, GgufFileWriter } from '../../src/format/gguf-file.js';
import { parseGgufHeader, planGguf, type GgufKv, type GgufValue } from '../../src/format/gguf.js';

/** @huggingface/gguf's metadata, by key (its typings only know standard keys). */
const meta = (parsed: { metadata: unknown }): Record<string, unknown> =>
  parsed.metadata as Record<string, unknown>;

const DIR = mkdtempSync(join(tmpdir(), 'quantd-gguf-format-'));
afterAll(() => rmSync(DIR, { recursive: true, force: true }));
let seq = 0;
const tmp = (name = 'f.gguf'): string => join(DIR, `${seq++}-${name}`);

// --- a tiny independent GGUF builder (raw little-endian pieces, from the spec) ------------------
const u8 = (v: number): Buffer => Buffer.of(v);
const u32 = (v: number): Buffer => {
  const b = Buffer.alloc(4);
  b.writeUInt32LE(v);
  return b;
};
const u64 = (v: number | bigint): Buffer => {
  const b = Buffer.alloc(8);
  b.writeBigUInt64LE(BigInt(v));
  return b;
};
const str = (s: string | Buffer): Buffer => {
  const b = typeof s === 'string' ? Buffer.from(s, 'utf8') : s;
  return Buffer.concat([u64(b.length), b]);
};
const kvU32 = (key: string, v: number): Buffer => Buffer.concat([str(key), u32(4), u32(v)]);
const kvStr = (key: string, v: string): Buffer => Buffer.concat([str(key), u32(8), str(v)]);
const info = (name: string, dims: number[], type: number, offset: number): Buffer =>
  Buffer.concat([str(name), u32(dims.length), ...dims.map((d) => u64(d)), u32(type), u64(offset)]);
const header = (version: number, tensors: number, kvs: number): Buffer =>
  Buffer.concat([Buffer.from('GGUF'), u32(version), u64(tensors), u64(kvs)]);
const pad = (b: Buffer, a = 32): Buffer => Buffer.concat([b, Buffer.alloc((a - (b.length % a)) % a)]);

/** A well-formed file: one metadata pair, one F32 tensor of 8 values. */
function goodFile(): Buffer {
  const head = pad(
    Buffer.concat([header(3, 1, 1), kvStr('general.architecture', 'llama'), info('w', [8], 0, 0)]),
  );
  return Buffer.concat([head, Buffer.alloc(32, 1)]);
}

function expectInvalid(bytes: Buffer, pattern: RegExp): void {
  let caught: unknown;
  try {
    parseGgufHeader(bytes, bytes.length, 'bad.gguf');
  } catch (err) {
    caught = err;
  }
  expect(caught, `expected GGUF_INVALID matching ${pattern}`).toBeInstanceOf(QuantdError);
  expect((caught as QuantdError).code).toBe('GGUF_INVALID');
  expect((caught as QuantdError).message).toMatch(/^bad\.gguf: /);
  expect((caught as QuantdError).message).toMatch(pattern);
}

const ALL_TYPES: GgufKv[] = [
  { key: 'general.architecture', value: { type: 'string', value: 'llama' } },
  { key: 't.u8', value: { type: 'uint8', value: 255 } },
  { key: 't.i8', value: { type: 'int8', value: -128 } },
  { key: 't.u16', value: { type: 'uint16', value: 65535 } },
  { key: 't.i16', value: { type: 'int16', value: -32768 } },
  { key: 't.u32', value: { type: 'uint32', value: 4294967295 } },
  { key: 't.i32', value: { type: 'int32', value: -2147483648 } },
  { key: 't.f32', value: { type: 'float32', value: 0.5 } },
  { key: 't.bool', value: { type: 'bool', value: true } },
  { key: 't.str', value: { type: 'string', value: 'ünïcode ✓' } },
  { key: 't.u64', value: { type: 'uint64', value: 2n ** 64n - 1n } },
  { key: 't.i64', value: { type: 'int64', value: -(2n ** 63n) } },
  { key: 't.f64', value: { type: 'float64', value: Math.PI } },
  {
    key: 't.arr',
    value: {
      type: 'array',
      itemType: 'string',
      value: ['a', '', 'ccc'].map((s): GgufValue => ({ type: 'string', value: s })),
    },
  },
  {
    key: 't.nested',
    value: {
      type: 'array',
      itemType: 'array',
      value: [
        { type: 'array', itemType: 'int32', value: [{ type: 'int32', value: 1 }] },
        { type: 'array', itemType: 'int32', value: [] },
      ],
    },
  },
  { key: 'general.alignment', value: { type: 'uint32', value: 32 } },
];

describe('GGUF writer', () => {
  it('writes the exact bytes the spec gives for a small file', async () => {
    const path = tmp();
    const w = await GgufFileWriter.create(
      path,
      [{ key: 'general.alignment', value: { type: 'uint32', value: 32 } }],
      [{ name: 'w', dims: [2, 1], type: 'F32' }],
    );
    await w.write('w', ggmlEncode('F32', Float32Array.of(1, -2), 2));
    await w.commit();
    const expected = Buffer.concat([
      pad(Buffer.concat([header(3, 1, 1), kvU32('general.alignment', 32), info('w', [2, 1], 0, 0)])),
      Buffer.from('0000803f000000c0', 'hex'), // 1.0f, -2.0f
      Buffer.alloc(24), // padding of the last tensor to the alignment
    ]);
    expect(readFileSync(path).toString('hex')).toBe(expected.toString('hex'));
    expect(w.fileBytes).toBe(expected.length);
  });

  it('round-trips every metadata type, tensor dims, types and aligned offsets', async () => {
    const path = tmp();
    const q = Float32Array.from({ length: 64 * 3 }, (_, i) => Math.sin(i) * 0.1);
    const k = Float32Array.from({ length: 256 * 2 }, (_, i) => Math.cos(i) * 0.05);
    const tensors = [
      { name: 'norm', dims: [5], type: 'F32', data: ggmlEncode('F32', Float32Array.of(1, 2, 3, 4, 5), 5) },
      { name: 'q', dims: [64, 3], type: 'Q8_0', data: ggmlEncode('Q8_0', q, 64) },
      { name: 'k', dims: [256, 2, 1], type: 'Q4_K', data: ggmlEncode('Q4_K', k, 256) },
    ];
    const w = await GgufFileWriter.create(path, ALL_TYPES, tensors);
    for (const t of tensors) await w.write(t.name, t.data);
    await w.commit();

    const r = await GgufFileReader.open(path);
    try {
      const h = r.header;
      expect(h.version).toBe(3);
      expect([...h.kvs.entries()]).toEqual(ALL_TYPES.map((kv) => [kv.key, kv.value]));
      expect(h.alignment).toBe(32);
      expect(h.dataOffset % 32).toBe(0);
      expect(h.tensors.map((t) => [t.name, t.dims, t.type.name, t.offset])).toEqual([
        ['norm', [5], 'F32', 0],
        ['q', [64, 3], 'Q8_0', 32],
        ['k', [256, 2, 1], 'Q4_K', 32 + 224],
      ]);
      for (const [i, t] of h.tensors.entries()) expect(await r.read(t)).toEqual(tensors[i]!.data);
      expect(r.size).toBe(h.dataOffset + 32 + 224 + 288);
    } finally {
      await r.close();
    }
  });

  it('@huggingface/gguf reads what it writes: names, ggml-order shapes, types, offsets, metadata', async () => {
    const path = tmp();
    const tensors = [
      { name: 'blk.0.attn_q.weight', dims: [256, 4], type: 'Q6_K' },
      { name: 'blk.0.attn_norm.weight', dims: [256], type: 'F32' },
      { name: 'x', dims: [32, 2, 3], type: 'Q5_1' },
    ];
    const w = await GgufFileWriter.create(path, ALL_TYPES, tensors);
    for (const t of w.tensors) await w.write(t.name, new Uint8Array(t.bytes));
    await w.commit();
    const parsed = await hfGguf(path, { allowLocalFile: true });
    expect(meta(parsed)['version']).toBe(3);
    expect(meta(parsed)['tensor_count']).toBe(3n);
    expect(meta(parsed)['general.architecture']).toBe('llama');
    expect(meta(parsed)['general.alignment']).toBe(32);
    expect(meta(parsed)['t.str']).toBe('ünïcode ✓');
    expect(meta(parsed)['t.u64']).toBe(2n ** 64n - 1n);
    expect(meta(parsed)['t.arr']).toEqual(['a', '', 'ccc']);
    expect(parsed.tensorInfos.map((t) => [t.name, t.shape, t.dtype, t.offset])).toEqual([
      ['blk.0.attn_q.weight', [256n, 4n], 14, 0n],
      ['blk.0.attn_norm.weight', [256n], 0, 864n], // 4 × 210 bytes, padded to 27 × 32
      ['x', [32n, 2n, 3n], 7, 864n + 1024n],
    ]);
    const ours = await GgufFileReader.open(path);
    expect(BigInt(ours.header.dataOffset)).toBe(parsed.tensorDataOffset);
    await ours.close();
  });

  it('is atomic: an aborted or misused writer leaves nothing behind', async () => {
    const sub = mkdtempSync(join(DIR, 'atomic-'));
    const path = join(sub, 'out.gguf');
    const w = await GgufFileWriter.create(path, [], [{ name: 'a', dims: [2], type: 'F32' }]);
    await expect(w.write('b', new Uint8Array(8))).rejects.toMatchObject({ code: 'INTERNAL' });
    expect(readdirSync(sub)).toEqual([]);
    const w2 = await GgufFileWriter.create(path, [], [{ name: 'a', dims: [2], type: 'F32' }]);
    await expect(w2.commit()).rejects.toMatchObject({ code: 'INTERNAL' });
    expect(existsSync(path)).toBe(false);
    expect(readdirSync(sub)).toEqual([]);
  });

  it('refuses what ggml could not load: long names, 5 dims, partial blocks', () => {
    expect(() => planGguf([], [{ name: 'n'.repeat(64), dims: [4], type: 'F32' }])).toThrow(/longer than 63/);
    expect(() => planGguf([], [{ name: 'a', dims: [1, 1, 1, 1, 1], type: 'F32' }])).toThrow(/5 dims/);
    expect(() => planGguf([], [{ name: 'a', dims: [33], type: 'Q8_0' }])).toThrow(/whole Q8_0 blocks/);
    expect(() =>
      planGguf(
        [{ key: 'general.alignment', value: { type: 'uint32', value: 24 } }],
        [{ name: 'a', dims: [1], type: 'F32' }],
      ),
    ).toThrow(/power of two/);
  });
});

describe('GGUF reader rejects malformed files with GGUF_INVALID', () => {
  it('accepts the well-formed base file', () => {
    const h = parseGgufHeader(goodFile(), goodFile().length, 'ok.gguf');
    expect(h.tensors[0]!.name).toBe('w');
  });

  it('not GGUF: wrong magic, too short', () => {
    expectInvalid(Buffer.from('GGML....'), /not a GGUF file: it starts with "GGML"/);
    expectInvalid(Buffer.from('GG'), /only 2 bytes/);
  });

  it('unsupported versions, big-endian files', () => {
    const g = goodFile();
    expectInvalid(Buffer.concat([g.subarray(0, 4), u32(1), g.subarray(8)]), /version 1 is not supported/);
    expectInvalid(Buffer.concat([g.subarray(0, 4), u32(4), g.subarray(8)]), /version 4 is not supported/);
    expectInvalid(
      Buffer.concat([g.subarray(0, 4), Buffer.from('00000003', 'hex'), g.subarray(8)]),
      /big-endian/,
    );
  });

  it('truncated anywhere in the header', () => {
    const g = goodFile();
    const headerEnd = g.length - 32;
    for (let cut = 4; cut < headerEnd - 20; cut++) {
      expect(() => parseGgufHeader(g.subarray(0, cut), cut, 'cut.gguf'), `cut at ${cut}`).toThrow(
        QuantdError,
      );
    }
    expectInvalid(
      g.subarray(0, 100),
      /truncated: it ends at byte 100 while reading the offset of tensor "w"/,
    );
  });

  it('counts the file cannot hold', () => {
    expectInvalid(
      Buffer.concat([header(3, 2 ** 40, 0), Buffer.alloc(64)]),
      /more than the file's .* bytes can hold/,
    );
    const arr = Buffer.concat([header(3, 0, 1), str('a'), u32(9), u32(4), u64(1e12)]);
    expectInvalid(arr, /claims 1000000000000 uint32 items/);
    expectInvalid(Buffer.concat([header(3, 0, 1), u64(1e9), Buffer.alloc(16)]), /claims 1000000000 bytes/);
  });

  it('bad metadata: value type, bool byte, UTF-8, duplicate keys, alignment', () => {
    expectInvalid(Buffer.concat([header(3, 0, 1), str('a'), u32(13), u32(0)]), /value type of "a" is 13/);
    expectInvalid(
      Buffer.concat([header(3, 0, 1), str('a'), u32(7), u8(2), Buffer.alloc(8)]),
      /bool stored as 2/,
    );
    expectInvalid(
      Buffer.concat([header(3, 0, 1), str(Buffer.of(0xff, 0xfe)), u32(4), u32(0)]),
      /not valid UTF-8/,
    );
    expectInvalid(Buffer.concat([header(3, 0, 2), kvU32('a', 1), kvU32('a', 2)]), /"a" appears twice/);
    expectInvalid(Buffer.concat([header(3, 0, 1), kvU32('general.alignment', 24)]), /24, not a power of two/);
    expectInvalid(
      Buffer.concat([header(3, 0, 1), kvStr('general.alignment', '32')]),
      /general.alignment is a string, not a uint32/,
    );
  });

  it('bad tensor infos: dims, type, partial blocks, duplicates, offsets, overlap', () => {
    const file = (...infos: Buffer[]): Buffer =>
      Buffer.concat([pad(Buffer.concat([header(3, infos.length, 0), ...infos])), Buffer.alloc(4096)]);
    expectInvalid(file(info('a', [1, 1, 1, 1, 1], 0, 0)), /"a" has 5 dimensions/);
    expectInvalid(file(info('a', [4], 99, 0)), /ggml type 99, which is not a known ggml type/);
    expectInvalid(file(info('a', [31, 2], 8, 0)), /rows of 31 elements are not whole Q8_0 blocks of 32/);
    expectInvalid(file(info('a', [4], 0, 0), info('a', [4], 0, 32)), /tensor "a" appears twice/);
    expectInvalid(file(info('a', [4], 0, 16)), /offset 16, not a multiple of the alignment 32/);
    expectInvalid(file(info('a', [4096], 0, 0)), /extends past the end of the file/);
    expectInvalid(file(info('a', [16], 0, 0), info('b', [4], 0, 32)), /"a" and "b" overlap/);
    expectInvalid(file(info('a', [2 ** 30, 2 ** 30, 2 ** 30], 0, 0)), /more than 2\^53 elements/);
  });

  it('files on disk: missing, and a malformed one', async () => {
    await expect(GgufFileReader.open(join(DIR, 'missing.gguf'))).rejects.toMatchObject({
      code: 'FILE_NOT_FOUND',
    });
    const path = tmp('bad.gguf');
    writeFileSync(path, Buffer.from('GGUF\x03\x00\x00\x00'));
    await expect(GgufFileReader.open(path)).rejects.toMatchObject({ code: 'GGUF_INVALID' });
  });

  it('reads headers larger than the first read (a big vocabulary array)', async () => {
    const path = tmp('vocab.gguf');
    const tokens = Array.from({ length: 100_000 }, (_, i): GgufValue => ({
      type: 'string',
      value: `tok${i}`,
    }));
    const w = await GgufFileWriter.create(
      path,
      [{ key: 'tokenizer.ggml.tokens', value: { type: 'array', itemType: 'string', value: tokens } }],
      [{ name: 'a', dims: [4], type: 'F32' }],
    );
    await w.write('a', new Uint8Array(16));
    await w.commit();
    const r = await GgufFileReader.open(path);
    const v = r.header.kvs.get('tokenizer.ggml.tokens');
    expect(v?.type === 'array' && v.value.length).toBe(100_000);
    expect(r.header.dataOffset).toBeGreaterThan(1024 * 1024);
    await r.close();
    await expect(GgufFileReader.open(path, { headerLimit: 65536 })).rejects.toThrow(/exceed 65536 bytes/);
  });
});
