/**
 * A file that is not safetensors is named for what it is (src/format/sniff.ts), by the one
 * parser every transport uses (parseSafetensors for HTTP and gRPC bodies, readHeaderLength for
 * files): FILE_NOT_SAFETENSORS instead of its first 8 bytes reported as a header length. A real
 * safetensors file whose header is over the limit, or cut short, keeps its own error.
 */
import { describe, expect, it } from 'vitest';

import { parseSafetensors } from '../../src/format/index.js';
import type { ErrorCode } from '../../src/errors/index.js';
import { expectQuantdError, rawFile } from './helpers.js';

const bytes = (...parts: Array<string | number[]>): Uint8Array =>
  Uint8Array.from(parts.flatMap((p) => (typeof p === 'string' ? Array.from(p, (c) => c.charCodeAt(0)) : p)));

/** The first bytes of each kind of file, padded to a plausible size. */
const pad = (head: Uint8Array): Uint8Array => {
  const out = new Uint8Array(4096);
  out.set(head);
  return out;
};

const OTHER_FILES: ReadonlyArray<readonly [string, Uint8Array, string]> = [
  ['a GGUF file', pad(bytes('GGUF', [3, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0])), 'it is a GGUF file (llama.cpp)'],
  [
    'a PyTorch zip checkpoint',
    pad(bytes('PK', [3, 4, 20, 0, 0, 0], 'archive/data.pkl')),
    'it is a zip archive',
  ],
  ['a PyTorch pickle', pad(bytes([0x80, 2, 0x8a, 0x0a], 'lc')), 'it is a Python pickle'],
  [
    'a shard index',
    new TextEncoder().encode(
      '{\n  "metadata": {"total_size": 8},\n  "weight_map": {"w": "a.safetensors"}\n}\n',
    ),
    'it is JSON text, such as a shard index (model.safetensors.index.json); give the model as its folder',
  ],
  [
    'an ONNX model',
    // ir_version 7, producer_name "quantd", producer_version "1.0", then a graph longer than the head
    pad(bytes([0x08, 0x07, 0x12, 0x06], 'quantd', [0x1a, 0x03], '1.0', [0x3a, 0x80, 0x01])),
    'it looks like an ONNX model (protobuf)',
  ],
  [
    'plain text',
    new TextEncoder().encode('hello, this is not a model at all\n'),
    'its first 8 bytes, read as the header length, say 8367736964726416744 bytes, more than the limit of 100000000',
  ],
];

describe('another kind of file is FILE_NOT_SAFETENSORS, saying what it is', () => {
  it.each(OTHER_FILES)('%s', (_, file, says) => {
    const err = expectQuantdError(() => parseSafetensors(file, 'request body'), 'FILE_NOT_SAFETENSORS');
    expect(err.message).toBe(`request body is not a safetensors file: ${err.params['detail']}`);
    expect(err.message).toContain(says);
    expect(err.httpStatus).toBe(400);
  });

  it('binary bytes whose length prefix runs past the end and that open no JSON header', () => {
    const file = rawFile('\x01\x02', 0, 1000n);
    const err = expectQuantdError(() => parseSafetensors(file, 'f'), 'FILE_NOT_SAFETENSORS');
    expect(err.message).toContain("say 1000 bytes, more than the file's 10, and no JSON header follows");
  });
});

describe('a safetensors file keeps its own errors', () => {
  const cases: ReadonlyArray<readonly [string, Uint8Array, ErrorCode]> = [
    ['a header over the limit', rawFile('{}', 6, 200_000_000n), 'SAFETENSORS_HEADER_TOO_LARGE'],
    ['a header past the end of the file', rawFile('{}', 0, 100n), 'SAFETENSORS_TRUNCATED'],
    ['a header length of 2^64 - 1', rawFile('{}', 0, 2n ** 64n - 1n), 'SAFETENSORS_HEADER_TOO_LARGE'],
    ['a header opening with a space', rawFile(' {}', 0, 100n), 'SAFETENSORS_TRUNCATED'],
    ['an 8-byte file', rawFile('', 0, 100n), 'SAFETENSORS_TRUNCATED'],
  ];
  it.each(cases)('%s', (_, file, code) => {
    expectQuantdError(() => parseSafetensors(file, 'f'), code);
  });
});
