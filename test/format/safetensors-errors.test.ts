/**
 * Every way the reader rejects a file, each reached by a file crafted byte by byte. The
 * header JSON is written out literally so that each case shows exactly what is wrong.
 */
import { describe, expect, it } from 'vitest';

import type { ErrorCode } from '../../src/errors/index.js';
import { parseSafetensors, readHeaderLength } from '../../src/format/index.js';
import { expectQuantdError, rawFile } from './helpers.js';

interface Case {
  readonly what: string;
  readonly file: Uint8Array;
  readonly code: ErrorCode;
  /** Substrings the message must contain: the tensor and the offending value. */
  readonly says?: readonly string[];
  readonly params?: Readonly<Record<string, unknown>>;
  readonly limit?: number;
}

const utf8 = (s: string): Uint8Array => new TextEncoder().encode(s);
const concat = (...parts: Uint8Array[]): Uint8Array => {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
};
/** One U8 entry; most malformed cases vary one field of it. */
const u8 = (shape: string, offsets: string, dtype = '"U8"'): string =>
  `{"dtype": ${dtype}, "shape": ${shape}, "data_offsets": ${offsets}}`;

const cases: Case[] = [
  // --- the 8-byte length prefix ---------------------------------------------------------------
  { what: 'an empty file', file: new Uint8Array(0), code: 'SAFETENSORS_TRUNCATED' },
  { what: 'a 5-byte file', file: new Uint8Array([2, 0, 0, 0, 0]), code: 'SAFETENSORS_TRUNCATED' },
  {
    what: 'a header length past the end of the file',
    file: rawFile('{}', 0, 100n),
    code: 'SAFETENSORS_TRUNCATED',
    params: { expected: 108, actual: 10 },
  },
  {
    what: 'a header over the limit',
    file: rawFile(`{"w": ${u8('[4]', '[0, 4]')}}`, 4),
    code: 'SAFETENSORS_HEADER_TOO_LARGE',
    limit: 16,
    params: { limit: 16 },
  },
  {
    what: 'a u64 header length that does not fit a double',
    file: rawFile('{}', 0, 0xffff_ffff_ffff_ffffn),
    code: 'SAFETENSORS_HEADER_TOO_LARGE',
    params: { size: '18446744073709551615' },
    says: ['18446744073709551615'],
  },
  { what: 'a header length of 0', file: rawFile('', 0), code: 'SAFETENSORS_INVALID' },
  { what: 'a header length of 1', file: rawFile('{', 0), code: 'SAFETENSORS_INVALID' },

  // --- the JSON as a whole ------------------------------------------------------------------------
  {
    what: 'text that is not JSON',
    file: rawFile('{"w": '),
    code: 'SAFETENSORS_INVALID',
    says: ['not valid JSON'],
  },
  { what: 'a JSON array', file: rawFile('[{"w": 1}]'), code: 'SAFETENSORS_INVALID', says: ['[{"w":1}]'] },
  { what: 'JSON null', file: rawFile('null'), code: 'SAFETENSORS_INVALID' },
  { what: 'a JSON string', file: rawFile('"{}"'), code: 'SAFETENSORS_INVALID' },
  {
    what: 'invalid UTF-8 inside a key',
    file: rawFile(concat(utf8('{"w'), new Uint8Array([0xff, 0xfe]), utf8('": {}}'))),
    code: 'SAFETENSORS_INVALID',
    says: ['UTF-8'],
  },
  {
    what: 'a byte order mark',
    file: rawFile(concat(new Uint8Array([0xef, 0xbb, 0xbf]), utf8('{}'))),
    code: 'SAFETENSORS_INVALID',
  },
  {
    what: 'a tensor named twice',
    file: rawFile(`{"w": ${u8('[2]', '[0, 2]')}, "w": ${u8('[2]', '[0, 2]')}}`, 2),
    code: 'SAFETENSORS_DUPLICATE_KEY',
    params: { tensor: 'w' },
  },
  {
    what: 'a tensor named twice, once with an escape',
    file: rawFile(`{"w": ${u8('[2]', '[0, 2]')}, "\\u0077": ${u8('[2]', '[0, 2]')}}`, 2),
    code: 'SAFETENSORS_DUPLICATE_KEY',
    params: { tensor: 'w' },
  },
  {
    what: '__metadata__ twice',
    file: rawFile('{"__metadata__": {}, "__metadata__": {}}'),
    code: 'SAFETENSORS_DUPLICATE_KEY',
    params: { tensor: '__metadata__' },
  },

  // --- __metadata__ ----------------------------------------------------------------------------------
  {
    what: 'metadata with a number value',
    file: rawFile('{"__metadata__": {"format": "pt", "epoch": 3}}'),
    code: 'SAFETENSORS_INVALID',
    says: ['"epoch"', '3'],
  },
  {
    what: 'metadata that is an array',
    file: rawFile('{"__metadata__": ["pt"]}'),
    code: 'SAFETENSORS_INVALID',
  },
  { what: 'metadata that is null', file: rawFile('{"__metadata__": null}'), code: 'SAFETENSORS_INVALID' },
  {
    // describing the value must not recurse through it (it overflowed the stack: INTERNAL)
    what: 'metadata nested 100,000 levels deep',
    file: rawFile(`{"__metadata__": {"a": ${'{"a":'.repeat(100_000)}1${'}'.repeat(100_000)}}}`),
    code: 'SAFETENSORS_INVALID',
    says: ['key "a" holds {"a":{"a":'],
  },

  // --- the number of tensors -------------------------------------------------------------------------
  {
    what: 'a header listing more tensors than the limit',
    file: rawFile(
      `{${Array.from({ length: 65_537 }, (_, i) => `"t${i}": ${u8('[0]', '[0, 0]')}`).join(', ')}}`,
    ),
    code: 'SAFETENSORS_TOO_MANY_TENSORS',
    params: { count: 65_537, limit: 65_536 },
  },

  // --- one entry -------------------------------------------------------------------------------------
  {
    what: 'a tensor name of more than 65,536 characters',
    file: rawFile(`{"${'w'.repeat(70_000)}": ${u8('[0]', '[0, 0]')}}`),
    code: 'SAFETENSORS_INVALID',
    says: ['a tensor name of 70000 characters', 'more than the 65536 a name may take'],
  },
  {
    // refused by its length before it is parsed: one such entry held the event loop seconds
    what: 'an entry of more than 65,536 characters of JSON (a shape of 40,000 zeros)',
    file: rawFile(`{"w": ${u8(`[${Array(40_000).fill(0).join(',')}]`, '[0, 0]')}}`),
    code: 'SAFETENSORS_INVALID',
    says: ['tensor "w": its entry is 80', 'more than the 65536 an entry may take'],
  },
  {
    what: 'the empty tensor name',
    file: rawFile(`{"": ${u8('[0]', '[0, 0]')}}`),
    code: 'SAFETENSORS_INVALID',
  },
  {
    what: 'an entry that is a number',
    file: rawFile('{"w": 5}'),
    code: 'SAFETENSORS_INVALID',
    says: ['"w"', '5'],
  },
  {
    what: 'an entry that is an array',
    file: rawFile('{"w": ["U8", [1], [0, 1]]}', 1),
    code: 'SAFETENSORS_INVALID',
  },
  {
    what: 'a missing dtype',
    file: rawFile('{"w": {"shape": [1], "data_offsets": [0, 1]}}', 1),
    code: 'SAFETENSORS_INVALID',
    says: ['"w"', 'dtype'],
  },
  {
    what: 'a missing shape',
    file: rawFile('{"w": {"dtype": "U8", "data_offsets": [0, 1]}}', 1),
    code: 'SAFETENSORS_INVALID',
    says: ['shape'],
  },
  {
    what: 'missing data_offsets',
    file: rawFile('{"w": {"dtype": "U8", "shape": [1]}}', 1),
    code: 'SAFETENSORS_INVALID',
    says: ['data_offsets'],
  },
  {
    what: 'an unknown dtype',
    file: rawFile(`{"w": ${u8('[1]', '[0, 4]', '"F31"')}}`, 4),
    code: 'SAFETENSORS_DTYPE_UNKNOWN',
    params: { tensor: 'w', dtype: 'F31' },
  },
  {
    what: 'a lower-case dtype',
    file: rawFile(`{"w": ${u8('[1]', '[0, 4]', '"f32"')}}`, 4),
    code: 'SAFETENSORS_DTYPE_UNKNOWN',
    params: { dtype: 'f32' },
  },
  {
    what: 'a dtype that is not a string',
    file: rawFile(`{"w": ${u8('[1]', '[0, 4]', '4')}}`, 4),
    code: 'SAFETENSORS_DTYPE_UNKNOWN',
    params: { dtype: '4' },
  },
  {
    what: 'a shape with -1',
    file: rawFile(`{"w": ${u8('[2, -1]', '[0, 2]')}}`, 2),
    code: 'SAFETENSORS_INVALID',
    says: ['"w"', '[2,-1]'],
  },
  {
    what: 'a shape with 1.5',
    file: rawFile(`{"w": ${u8('[1.5]', '[0, 2]')}}`, 2),
    code: 'SAFETENSORS_INVALID',
    says: ['1.5'],
  },
  {
    what: 'a shape of strings',
    file: rawFile(`{"w": ${u8('["2"]', '[0, 2]')}}`, 2),
    code: 'SAFETENSORS_INVALID',
  },
  {
    what: 'a shape that is a number',
    file: rawFile(`{"w": ${u8('2', '[0, 2]')}}`, 2),
    code: 'SAFETENSORS_INVALID',
  },
  {
    what: 'a shape past 2^53',
    file: rawFile(`{"w": ${u8('[9007199254740993]', '[0, 2]')}}`, 2),
    code: 'SAFETENSORS_INVALID',
  },
  {
    what: 'one offset',
    file: rawFile(`{"w": ${u8('[2]', '[2]')}}`, 2),
    code: 'SAFETENSORS_OFFSETS_INVALID',
    params: { tensor: 'w' },
  },
  {
    what: 'three offsets',
    file: rawFile(`{"w": ${u8('[2]', '[0, 2, 2]')}}`, 2),
    code: 'SAFETENSORS_OFFSETS_INVALID',
  },
  {
    what: 'a negative offset',
    file: rawFile(`{"w": ${u8('[2]', '[-2, 0]')}}`, 2),
    code: 'SAFETENSORS_OFFSETS_INVALID',
    says: ['[-2,0]'],
  },
  {
    what: 'a fractional offset',
    file: rawFile(`{"w": ${u8('[2]', '[0.5, 2.5]')}}`, 2),
    code: 'SAFETENSORS_OFFSETS_INVALID',
  },
  {
    what: 'offsets as strings',
    file: rawFile(`{"w": ${u8('[2]', '["0", "2"]')}}`, 2),
    code: 'SAFETENSORS_OFFSETS_INVALID',
  },
  {
    what: 'an end before the begin',
    file: rawFile(`{"w": ${u8('[2]', '[4, 2]')}}`, 4),
    code: 'SAFETENSORS_OFFSETS_INVALID',
    params: { tensor: 'w' },
    says: ['[4, 2]'],
  },
  {
    what: 'a size mismatch',
    file: rawFile(`{"w": ${u8('[2, 3]', '[0, 20]', '"F32"')}}`, 20),
    code: 'SAFETENSORS_SIZE_MISMATCH',
    params: { tensor: 'w', dtype: 'F32', shape: '[2, 3]', expected: 24, actual: 20 },
  },
  {
    what: 'a size mismatch from a shape whose size overflows a double',
    file: rawFile(`{"w": ${u8('[1099511627776, 1099511627776]', '[0, 8]', '"F64"')}}`, 8),
    code: 'SAFETENSORS_SIZE_MISMATCH',
    params: { expected: '9671406556917033397649408', actual: 8 },
  },

  // --- the tiling of the data section ---------------------------------------------------------------
  {
    what: 'overlapping tensors',
    file: rawFile(`{"a": ${u8('[8]', '[0, 8]')}, "b": ${u8('[8]', '[4, 12]')}}`, 12),
    code: 'SAFETENSORS_OFFSETS_INVALID',
    params: { tensor: 'b' },
    says: ['overlap', '"a"', '[4, 12]'],
  },
  {
    what: 'a zero-length tensor inside another',
    file: rawFile(`{"a": ${u8('[8]', '[0, 8]')}, "z": ${u8('[0]', '[4, 4]')}}`, 8),
    code: 'SAFETENSORS_OFFSETS_INVALID',
    params: { tensor: 'z' },
    says: ['overlap'],
  },
  {
    what: 'a gap between tensors',
    file: rawFile(`{"a": ${u8('[4]', '[0, 4]')}, "b": ${u8('[4]', '[8, 12]')}}`, 12),
    code: 'SAFETENSORS_OFFSETS_INVALID',
    params: { tensor: 'b' },
    says: ['gap of 4 bytes', '"a"'],
  },
  {
    what: 'data not starting at 0',
    file: rawFile(`{"a": ${u8('[4]', '[4, 8]')}}`, 8),
    code: 'SAFETENSORS_OFFSETS_INVALID',
    params: { tensor: 'a' },
    says: ['offset 0'],
  },
  {
    what: 'data past the end of the file',
    file: rawFile(`{"a": ${u8('[16]', '[0, 16]')}}`, 8),
    code: 'SAFETENSORS_TRUNCATED',
    params: { expected: 16, actual: 8 },
    says: ['"a"'],
  },
  {
    what: 'bytes after the last tensor',
    file: rawFile(`{"a": ${u8('[4]', '[0, 4]')}}`, 8),
    code: 'SAFETENSORS_OFFSETS_INVALID',
    params: { tensor: 'a' },
    says: ['4 bytes'],
  },
  { what: 'data but no tensors', file: rawFile('{"__metadata__": {}}', 4), code: 'SAFETENSORS_INVALID' },
];

describe('parseSafetensors rejects malformed files', () => {
  it.each(cases)('$what → $code', ({ file, code, says, params, limit }) => {
    const err = expectQuantdError(() => parseSafetensors(file, 'bad.safetensors', limit), code);
    expect(err.params['source']).toBe('bad.safetensors');
    expect(err.message).toContain('bad.safetensors');
    for (const s of says ?? []) expect(err.message).toContain(s);
    if (params !== undefined) expect(err.params).toMatchObject(params);
  });
});

describe('readHeaderLength', () => {
  it('returns N for a valid prefix and accepts a header of exactly the limit', () => {
    const file = rawFile('{"__metadata__":{}}     ');
    expect(readHeaderLength(file.subarray(0, 8), file.length, 'f', 24)).toBe(24);
    expectQuantdError(
      () => readHeaderLength(file.subarray(0, 8), file.length, 'f', 23),
      'SAFETENSORS_HEADER_TOO_LARGE',
    );
  });

  it('reads the prefix of a subarray at its own offset', () => {
    const file = rawFile('{}');
    const shifted = new Uint8Array(file.length + 3);
    shifted.set(file, 3);
    expect(readHeaderLength(shifted.subarray(3, 11), file.length, 'f')).toBe(2);
  });
});
