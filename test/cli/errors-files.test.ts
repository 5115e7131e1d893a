/**
 * The CLI's unhappy paths, files and containers: malformed safetensors crafted byte by byte
 * (test/format/helpers.ts rawFile), broken quantd.qtensor/1 containers, missing and unreadable
 * inputs, unwritable outputs. As in errors.test.ts, every case checks the catalogue's exit code,
 * an empty stdout, one stderr line naming the file and tensor, and that the run left no output
 * and no temporary file behind.
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';

import { QTENSOR_FORMAT } from '../../src/format/index.js';
import { rawFile } from '../format/helpers.js';
import {
  f32,
  failsWith,
  i32,
  i8,
  listing,
  scratch,
  succeeds,
  writeTensors,
  type InputTensor,
} from './cli-helpers.js';
import { MODEL, tempDir } from './run-cli.js';

const tmp = tempDir();
afterAll(() => tmp.cleanup());

const BAD = 'bad.safetensors';
const OUT = 'out.safetensors';

/** A fresh directory holding BAD with exactly these bytes. */
function withBytes(bytes: Uint8Array): string {
  const dir = scratch(tmp.dir);
  writeFileSync(join(dir, BAD), bytes);
  return dir;
}

/** The command line of `op` on BAD (inspect writes nothing). */
const argsFor = (op: string): string[] => (op === 'inspect' ? [op, BAD] : [op, BAD, '-o', OUT]);

const entry = (dtype: string, shape: number[], offsets: [number, number]): string =>
  JSON.stringify({ dtype, shape, data_offsets: offsets });

describe.concurrent('malformed safetensors', () => {
  const cases: [string, Uint8Array, Parameters<typeof failsWith>[2], string][] = [
    [
      'a file shorter than the length prefix',
      Uint8Array.of(1, 2, 3),
      'SAFETENSORS_TRUNCATED',
      `${BAD}: file is shorter than the 8-byte header length (expected 8 bytes, have 3)`,
    ],
    [
      'a header running past the end of the file',
      rawFile('{}', 0, 100n),
      'SAFETENSORS_TRUNCATED',
      `${BAD}: the 100-byte header runs past the end of the file (expected 108 bytes, have 10)`,
    ],
    [
      'tensor data cut short',
      rawFile(`{"w":${entry('F32', [2], [0, 8])}}`, 4),
      'SAFETENSORS_TRUNCATED',
      `${BAD}: tensor "w" ends at data offset 8, past the end of the data section (expected 8 bytes, have 4)`,
    ],
    [
      'a header length over the limit',
      rawFile('{}', 0, 200_000_000n),
      'SAFETENSORS_HEADER_TOO_LARGE',
      `${BAD}: header of 200000000 bytes exceeds the limit of 100000000 bytes`,
    ],
    [
      'a header length of 2^64 - 1',
      rawFile('{}', 0, 2n ** 64n - 1n),
      'SAFETENSORS_HEADER_TOO_LARGE',
      `${BAD}: header of 18446744073709551615 bytes exceeds the limit of 100000000 bytes`,
    ],
    ['invalid JSON', rawFile('{"w": ', 0), 'SAFETENSORS_INVALID', `${BAD}: the header is not valid JSON (`],
    [
      'a JSON array header',
      rawFile('[1, 2]', 0),
      'SAFETENSORS_INVALID',
      `${BAD}: the header must be a JSON object, got [1,2]`,
    ],
    [
      'a duplicate tensor name',
      rawFile(`{"w":${entry('F32', [1], [0, 4])},"w":${entry('F32', [1], [0, 4])}}`, 4),
      'SAFETENSORS_DUPLICATE_KEY',
      `${BAD}: the header names w more than once`,
    ],
    [
      'an unknown dtype',
      rawFile(`{"w":${entry('F31', [2], [0, 8])}}`, 8),
      'SAFETENSORS_DTYPE_UNKNOWN',
      `${BAD}: tensor w has unknown dtype F31`,
    ],
    [
      'a byte length that does not match the shape',
      rawFile(`{"w":${entry('F32', [3], [0, 8])}}`, 8),
      'SAFETENSORS_SIZE_MISMATCH',
      `${BAD}: tensor w of dtype F32 and shape [3] needs 12 bytes, but its offsets span 8`,
    ],
    [
      'offsets that end before they begin',
      rawFile(`{"w":${entry('F32', [0], [8, 0])}}`, 8),
      'SAFETENSORS_OFFSETS_INVALID',
      `${BAD}: tensor w: data_offsets [8, 0] end before they begin`,
    ],
    [
      'a gap between tensors',
      rawFile(`{"a":${entry('F32', [1], [0, 4])},"b":${entry('F32', [1], [8, 12])}}`, 12),
      'SAFETENSORS_OFFSETS_INVALID',
      `${BAD}: tensor b: data_offsets [8, 12] leave a gap of 4 bytes after tensor "a", which ends at 4`,
    ],
    [
      'overlapping tensors',
      rawFile(`{"a":${entry('F32', [2], [0, 8])},"b":${entry('F32', [1], [4, 8])}}`, 8),
      'SAFETENSORS_OFFSETS_INVALID',
      `${BAD}: tensor b: data_offsets [4, 8] overlap tensor "a", which ends at 8`,
    ],
  ];

  // Each case through one command, the commands taking turns: they share one reader.
  const OPS = ['quantize', 'inspect', 'dequantize'] as const;
  it.each(
    cases.map(([label, bytes, code, message], i) => [label, OPS[i % 3]!, bytes, code, message] as const),
  )('%s (%s)', async (_label, op, bytes, code, message) => {
    const got = await failsWith(withBytes(bytes), argsFor(op), code);
    expect(got.startsWith(message), `${got}\nshould start with\n${message}`).toBe(true);
  });
});

describe.concurrent('quantd.qtensor/1 containers', () => {
  const META = JSON.stringify({
    qdtype: 'int8',
    scheme: 'per_tensor',
    mode: 'affine',
    shape: [2, 4],
    axis: null,
    group_size: null,
    quant_min: -128,
    quant_max: 127,
    source_dtype: 'float32',
  });
  const codes: InputTensor = { name: 'w', dtype: 'I8', shape: [2, 4], data: i8([1, 2, 3, 4, 5, 6, 7, 8]) };
  const scale: InputTensor = { name: 'w.scale', dtype: 'F32', shape: [1], data: f32([0.5]) };
  const zp: InputTensor = { name: 'w.zero_point', dtype: 'I32', shape: [1], data: i32([0]) };
  // A float tensor beside the quantized one, so that quantize has something to select.
  const bias: InputTensor = { name: 'b', dtype: 'F32', shape: [2], data: f32([0.5, -1]) };

  const containers: [string, InputTensor[], Record<string, string>, string][] = [
    [
      'metadata naming a missing .scale',
      [codes, zp],
      { w: META },
      `${BAD}: tensor w: the container lacks w.scale`,
    ],
    [
      'malformed metadata JSON',
      [codes, scale, zp],
      { w: '{"qdtype": int8' },
      `${BAD}: tensor w: its metadata is not JSON: {"qdtype": int8`,
    ],
    [
      'metadata for a tensor the file lacks',
      [codes, scale, zp],
      { w: META, v: META },
      `${BAD}: tensor v: the metadata describes it but the container has no such tensor`,
    ],
    [
      'a scale of the wrong dtype',
      [codes, { ...scale, dtype: 'F16', data: new Uint8Array(2) }, zp],
      { w: META },
      `${BAD}: tensor w: w.scale is F16 [1], expected F32 [1]`,
    ],
    [
      'an unknown qdtype in the metadata',
      [codes, scale, zp],
      { w: META.replace('"int8"', '"int9"') },
      `${BAD}: tensor w: unknown qdtype int9`,
    ],
  ];

  it.each(containers)('QTENSOR_INVALID: %s (dequantize)', async (_label, tensors, meta, message) => {
    const dir = scratch(tmp.dir);
    writeTensors(join(dir, BAD), [...tensors, bias], { format: QTENSOR_FORMAT, ...meta });
    const got = await failsWith(dir, argsFor('dequantize'), 'QTENSOR_INVALID');
    expect(got.startsWith(message), `${got}\nshould start with\n${message}`).toBe(true);
  });

  it.each(['inspect', 'quantize'])('QTENSOR_INVALID through %s', async (op) => {
    const dir = scratch(tmp.dir);
    writeTensors(join(dir, BAD), [codes, zp, bias], { format: QTENSOR_FORMAT, w: META });
    await failsWith(dir, argsFor(op), 'QTENSOR_INVALID', [`${BAD}: tensor w: the container lacks w.scale`]);
  });

  it('the same container with its .scale dequantizes (the cases above fail for the stated reason)', async () => {
    const dir = scratch(tmp.dir);
    writeTensors(join(dir, BAD), [codes, scale, zp, bias], { format: QTENSOR_FORMAT, w: META });
    await succeeds(dir, argsFor('dequantize'));
  });

  it('NOT_A_QTENSOR: dequantize of a plain safetensors file', async () => {
    const message = await failsWith(scratch(tmp.dir), ['dequantize', MODEL, '-o', OUT], 'NOT_A_QTENSOR');
    expect(message).toBe(`${MODEL}: no tensor carries quantd.qtensor/1 metadata; nothing to dequantize`);
  });

  it('NOT_A_QTENSOR: dequantize of a qparams file', async () => {
    const dir = scratch(tmp.dir);
    await succeeds(dir, ['qparams', MODEL, '-o', 'qp.safetensors', '--include', 'layers.0.weight']);
    await failsWith(dir, ['dequantize', 'qp.safetensors', '-o', OUT], 'NOT_A_QTENSOR', [
      'qp.safetensors: no tensor',
    ]);
  });
});

describe.concurrent('files', () => {
  it.each([
    ['quantize', ['quantize', 'missing.safetensors', '-o', OUT]],
    ['dequantize', ['dequantize', 'missing.safetensors', '-o', OUT]],
    ['inspect', ['inspect', 'missing.safetensors']],
  ])('FILE_NOT_FOUND (%s)', async (_op, args) => {
    const message = await failsWith(scratch(tmp.dir), args, 'FILE_NOT_FOUND');
    expect(message).toBe('cannot open missing.safetensors: no such file');
  });

  it('FILE_NOT_FOUND: a path through a regular file', async () => {
    await failsWith(scratch(tmp.dir), ['quantize', join(MODEL, 'child'), '-o', OUT], 'FILE_NOT_FOUND', [
      `cannot open ${join(MODEL, 'child')}: no such file`,
    ]);
  });

  it.each([
    ['quantize', ['quantize', 'sub', '-o', OUT]],
    ['inspect', ['inspect', 'sub']],
  ])('FILE_UNREADABLE: the input is a directory (%s)', async (_op, args) => {
    const dir = scratch(tmp.dir);
    mkdirSync(join(dir, 'sub'));
    const message = await failsWith(dir, args, 'FILE_UNREADABLE');
    // both take a model folder (a shard index or one .safetensors file), and this one holds none
    expect(message).toBe('cannot read sub: holds no .safetensors file and no *.safetensors.index.json');
  });

  it('FILE_UNREADABLE: the input is a device', async () => {
    await failsWith(scratch(tmp.dir), ['quantize', '/dev/null', '-o', OUT], 'FILE_UNREADABLE', [
      'cannot read /dev/null: not a regular file',
    ]);
  });

  it('FILE_UNREADABLE: the input is a FIFO (refused at once, not waited on)', async () => {
    const dir = scratch(tmp.dir);
    execFileSync('mkfifo', [join(dir, 'pipe')]);
    await failsWith(dir, ['quantize', 'pipe', '-o', OUT], 'FILE_UNREADABLE', [
      'cannot read pipe: not a regular file',
    ]);
  });

  it('OUTPUT_UNWRITABLE: the output is a device, which is never replaced', async () => {
    await failsWith(scratch(tmp.dir), ['quantize', MODEL, '-o', '/dev/null'], 'OUTPUT_UNWRITABLE', [
      'cannot write /dev/null: it exists and is not a regular file',
    ]);
  });

  it('OUTPUT_UNWRITABLE: the output directory does not exist (and is not created)', async () => {
    const dir = scratch(tmp.dir);
    await failsWith(dir, ['quantize', MODEL, '-o', join('missing', OUT)], 'OUTPUT_UNWRITABLE', [
      `cannot write ${join('missing', OUT)}: `,
    ]);
  });

  it('OUTPUT_UNWRITABLE: the output is an existing directory (left as it was, no temp file beside it)', async () => {
    const dir = scratch(tmp.dir);
    mkdirSync(join(dir, 'od'));
    await failsWith(dir, ['quantize', MODEL, '-o', 'od'], 'OUTPUT_UNWRITABLE', ['cannot write od: ']);
    expect(listing(join(dir, 'od'))).toEqual([]);
  });
});
