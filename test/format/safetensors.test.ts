import { describe, expect, it } from 'vitest';

import { ST_DTYPE_SIZE, numelOf, type StDType } from '../../src/core/dtypes.js';
import {
  encodeHeader,
  entryByName,
  parseSafetensors,
  serializeSafetensors,
  type TensorPlan,
} from '../../src/format/index.js';
import { expectQuantdError, patternBytes, rawFile } from './helpers.js';

function tensor(name: string, dtype: StDType, shape: number[], seed = 1): TensorPlan & { data: Uint8Array } {
  return { name, dtype, shape, data: patternBytes(numelOf(shape) * ST_DTYPE_SIZE[dtype], seed) };
}

/** Several dtypes, a 0-D tensor, zero-length tensors, integer-like and non-ASCII names. */
const TENSORS = [
  tensor('model.layers.0.weight', 'F32', [2, 3], 1),
  tensor('bias', 'BF16', [5], 2),
  tensor('step', 'I64', [], 3),
  tensor('empty', 'U8', [0], 4),
  tensor('10', 'F8_E4M3', [3, 0, 2], 5),
  tensor('0', 'F16', [7], 6),
  tensor('mask', 'BOOL', [3], 7),
  tensor('poids_é_权重', 'F64', [1, 2], 8),
  tensor('last_empty', 'I32', [4, 0], 9),
];
const METADATA = { format: 'pt', 'quantd.note': 'ünïcödé', ['__proto__']: 'kept as data' };

describe('serializeSafetensors / parseSafetensors round trip', () => {
  const bytes = serializeSafetensors(TENSORS, METADATA);
  const { header, tensorBytes } = parseSafetensors(bytes, 'mem');

  it('gives back every tensor with its dtype, shape and bytes, in plan (= data) order', () => {
    expect(header.entries.map((e) => e.name)).toEqual(TENSORS.map((t) => t.name));
    for (const t of TENSORS) {
      const e = entryByName(header, t.name);
      expect(e, t.name).toBeDefined();
      expect(e!.dtype).toBe(t.dtype);
      expect(e!.shape).toEqual(t.shape);
      expect(e!.end - e!.begin).toBe(t.data.length);
      expect(tensorBytes(e!)).toEqual(t.data);
    }
    expect(entryByName(header, 'absent')).toBeUndefined();
  });

  it('lays tensors out contiguously and ends exactly at the end of the file', () => {
    let cursor = 0;
    for (const e of header.entries) {
      expect(e.begin).toBe(cursor);
      cursor = e.end;
    }
    expect(header.dataLength).toBe(cursor);
    expect(header.dataOffset + header.dataLength).toBe(bytes.length);
  });

  it('keeps metadata, including a "__proto__" key, as plain string data', () => {
    expect({ ...header.metadata }).toEqual({ ...METADATA });
    expect(Object.hasOwn(header.metadata!, '__proto__')).toBe(true);
    expect(header.metadata!['__proto__']).toBe('kept as data');
  });

  it('reads __metadata__ as JSON.parse would: the last of duplicate keys, integer-like keys first', () => {
    // parsed member by member (src/format/json-members.ts), into the object JSON.parse gives
    const text = '{"__metadata__": {"b": "1", "10": "x", "b": "2", "__proto__": "p"}}';
    const expected = (JSON.parse(text) as { __metadata__: object }).__metadata__;
    const { header: parsed } = parseSafetensors(rawFile(text), 'mem');
    expect(Object.entries(parsed.metadata!)).toEqual(Object.entries(expected));
    expect(Object.entries(parsed.metadata!)).toEqual([
      ['10', 'x'],
      ['b', '2'],
      ['__proto__', 'p'],
    ]);
  });

  it('returns views into the input, not copies', () => {
    const view = tensorBytes(header.entries[0]!);
    expect(view.buffer).toBe(bytes.buffer);
    expect(view.byteOffset).toBe(header.dataOffset);
  });

  it('reads a file without metadata as metadata null, and an empty file of no tensors', () => {
    const parsed = parseSafetensors(serializeSafetensors([], null), 'mem');
    expect(parsed.header.entries).toEqual([]);
    expect(parsed.header.metadata).toBeNull();
    expect(parsed.header.dataLength).toBe(0);
  });
});

describe('header padding', () => {
  it('pads the JSON with spaces so that N is a multiple of 8, for every residue', () => {
    const residues = new Set<number>();
    for (let extra = 0; extra < 16; extra++) {
      const { bytes } = encodeHeader([{ name: 'w', dtype: 'F32', shape: [1] }], { k: 'x'.repeat(extra) });
      const n = Number(new DataView(bytes.buffer).getBigUint64(0, true));
      expect(n % 8).toBe(0);
      expect(bytes.length).toBe(8 + n);
      const text = new TextDecoder().decode(bytes.subarray(8));
      const json = text.trimEnd();
      residues.add(json.length % 8);
      expect(text.slice(json.length)).toMatch(/^ *$/);
      expect(json.endsWith('}')).toBe(true);
      expect(JSON.parse(text)).toEqual(JSON.parse(json));
    }
    expect(residues.size).toBe(8); // every amount of padding, 0 to 7, was exercised
  });

  it('writes __metadata__ first and tensors in plan order, with integer-like names kept in place', () => {
    const { bytes } = encodeHeader(
      [
        { name: 'b', dtype: 'U8', shape: [1] },
        { name: '1', dtype: 'U8', shape: [2] },
        { name: 'a', dtype: 'U8', shape: [] },
      ],
      { m: 'v' },
    );
    const text = new TextDecoder().decode(bytes.subarray(8)).trimEnd();
    expect(text).toBe(
      '{"__metadata__":{"m":"v"},' +
        '"b":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},' +
        '"1":{"dtype":"U8","shape":[2],"data_offsets":[1,3]},' +
        '"a":{"dtype":"U8","shape":[],"data_offsets":[3,4]}}',
    );
  });
});

describe('encodeHeader / serializeSafetensors reject bad plans as INTERNAL', () => {
  it('rejects duplicate, empty and reserved names', () => {
    const w: TensorPlan = { name: 'w', dtype: 'F32', shape: [2] };
    expectQuantdError(() => encodeHeader([w, { ...w, shape: [3] }], null), 'INTERNAL');
    expectQuantdError(() => encodeHeader([{ ...w, name: '' }], null), 'INTERNAL');
    expectQuantdError(() => encodeHeader([{ ...w, name: '__metadata__' }], null), 'INTERNAL');
  });

  it('rejects bad shapes and dtypes that slipped past the type checker', () => {
    expectQuantdError(() => encodeHeader([{ name: 'w', dtype: 'F32', shape: [-1] }], null), 'INTERNAL');
    expectQuantdError(() => encodeHeader([{ name: 'w', dtype: 'F32', shape: [1.5] }], null), 'INTERNAL');
    expectQuantdError(
      () => encodeHeader([{ name: 'w', dtype: 'F31' as StDType, shape: [1] }], null),
      'INTERNAL',
    );
    expectQuantdError(() => encodeHeader([], { k: 1 as unknown as string }), 'INTERNAL');
  });

  it('rejects data whose length disagrees with the plan', () => {
    const err = expectQuantdError(
      () => serializeSafetensors([{ name: 'w', dtype: 'F32', shape: [2], data: new Uint8Array(7) }], null),
      'INTERNAL',
    );
    expect(err.message).toContain('"w"');
    expect(err.message).toContain('7');
  });
});

describe('parseHeader accepts what the format allows', () => {
  it('orders entries by offset, zero-length entries stably in document order before their neighbour', () => {
    const json = JSON.stringify({
      c: { dtype: 'U8', shape: [4], data_offsets: [4, 8] },
      z2: { dtype: 'U8', shape: [0], data_offsets: [4, 4] },
      a: { dtype: 'U8', shape: [4], data_offsets: [0, 4] },
      z1: { dtype: 'U8', shape: [0, 3], data_offsets: [4, 4] },
      z0: { dtype: 'F32', shape: [0], data_offsets: [0, 0] },
      zEnd: { dtype: 'F32', shape: [0], data_offsets: [8, 8] },
    });
    const { header } = parseSafetensors(rawFile(json, 8), 'mem');
    expect(header.entries.map((e) => e.name)).toEqual(['z0', 'a', 'z2', 'z1', 'c', 'zEnd']);
  });

  it('ignores unknown fields inside an entry, and leading/trailing whitespace', () => {
    const json = ' {"w": {"dtype": "I16", "shape": [2], "data_offsets": [0, 4], "extra": {"x": [1]}}}  \n';
    const { header } = parseSafetensors(rawFile(json, 4), 'mem');
    expect(header.entries).toEqual([{ name: 'w', dtype: 'I16', shape: [2], begin: 0, end: 4 }]);
  });

  it('accepts an empty header object with an empty data section', () => {
    expect(parseSafetensors(rawFile('{}'), 'mem').header.entries).toEqual([]);
  });

  it('normalises a JSON -0 in shapes and offsets to 0', () => {
    const json = '{"w": {"dtype": "U8", "shape": [-0], "data_offsets": [-0, 0]}}';
    const e = parseSafetensors(rawFile(json), 'mem').header.entries[0]!;
    expect(Object.is(e.shape[0], 0)).toBe(true);
    expect(Object.is(e.begin, 0)).toBe(true);
  });
});
