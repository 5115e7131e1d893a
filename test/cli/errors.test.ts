/**
 * The CLI's unhappy paths, options and tensors (docs/numerics.md "Bad input never passes
 * silently"; README, The CLI: bad input exits 2 with one line `error CODE: message` on stderr):
 * the real binary, on real files in a scratch directory. Every case checks the catalogue's exit
 * code, an empty stdout, exactly one stderr line naming the tensor and the offending value, and
 * that the run left no output file and no temporary file behind. Files and containers:
 * errors-files.test.ts.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';

import { parseSpec, planLayout, quantizeTensor } from '../../src/core/index.js';
import {
  expectCliError,
  f32,
  f64,
  failsWith,
  i32,
  i8,
  listing,
  quantdAsync,
  readStored,
  scratch,
  succeeds,
  writeTensors,
  type InputTensor,
} from './cli-helpers.js';
import { MODEL, tempDir } from './run-cli.js';

const tmp = tempDir();
afterAll(() => tmp.cleanup());

const OUT = 'out.safetensors';
const IN = 'in.safetensors';

/** `quantd quantize MODEL -o OUT ...extra` must fail with `code` in a fresh directory. */
async function quantizeModelFails(
  extra: readonly string[],
  code: Parameters<typeof failsWith>[2],
  fragments: string[],
) {
  return await failsWith(scratch(tmp.dir), ['quantize', MODEL, '-o', OUT, ...extra], code, fragments);
}

/** A fresh directory holding IN with `tensors`; returns the directory. */
function withInput(tensors: readonly InputTensor[]): string {
  const dir = scratch(tmp.dir);
  writeTensors(join(dir, IN), tensors);
  return dir;
}

// A 2×4 float32 weight used by the given-qparams cases.
const W: InputTensor = {
  name: 'w',
  dtype: 'F32',
  shape: [2, 4],
  data: f32([0, 1, -1, 2, 0.5, -0.25, 3, -3]),
};
const scaleOf = (values: number[], shape = [values.length]): InputTensor => ({
  name: 'w.scale',
  dtype: 'F32',
  shape,
  data: f32(values),
});
const zpOf = (values: number[], shape = [values.length]): InputTensor => ({
  name: 'w.zero_point',
  dtype: 'I32',
  shape,
  data: i32(values),
});

describe.concurrent('USAGE', () => {
  it.each<[string, string[], string[]]>([
    ['no input file', ['quantize', '-o', OUT], ['quantd quantize takes one input file, got none']],
    [
      'two input files',
      ['quantize', 'a.safetensors', 'b.safetensors', '-o', OUT],
      ['got a.safetensors b.safetensors'],
    ],
    ['no -o', ['quantize', MODEL], ['quantd quantize needs -o OUT.safetensors']],
    [
      '-o without its value',
      ['quantize', MODEL, '-o'],
      ['quantd quantize:', "'-o, --output <value>' argument missing"],
    ],
    [
      'an option without its value',
      ['quantize', MODEL, '-o', OUT, '--qdtype'],
      ["'--qdtype <value>' argument missing"],
    ],
    [
      'an unknown option',
      ['quantize', MODEL, '-o', OUT, '--bogus'],
      ['quantd quantize: unknown option --bogus; quantd quantize --help lists its options'],
    ],
    [
      'an unknown command',
      ['frobnicate', MODEL, '-o', OUT],
      ['unknown command frobnicate; run quantd --help'],
    ],
    ['inspect --json given to quantize', ['quantize', MODEL, '-o', OUT, '--json'], ['unknown option --json']],
    [
      'dequantize --dtype given to quantize',
      ['quantize', MODEL, '-o', OUT, '--dtype', 'float16'],
      ['unknown option --dtype'],
    ],
    [
      'a spec option given to dequantize',
      ['dequantize', MODEL, '-o', OUT, '--qdtype', 'int4'],
      ['unknown option --qdtype; did you mean --dtype?'],
    ],
    ['-o given to inspect', ['inspect', MODEL, '-o', OUT], ['quantd inspect: unknown option -o']],
    ['inspect without a file', ['inspect'], ['quantd inspect takes one file, got none']],
    ['inspect with two files', ['inspect', MODEL, MODEL], [`got ${MODEL} ${MODEL}`]],
    ['qparams without input', ['qparams', '-o', OUT], ['quantd qparams takes one input file, got none']],
  ])('%s', async (_label, args, fragments) => {
    await failsWith(scratch(tmp.dir), args, 'USAGE', fragments);
  });
});

describe.concurrent('OPTION_INVALID', () => {
  it.each<[string, string[], string]>([
    [
      '--axis 1.5',
      ['--scheme', 'per_channel', '--axis', '1.5'],
      'option --axis must be an integer (got 1.5)',
    ],
    [
      '--group-size 1',
      ['--scheme', 'per_group', '--group-size', '1'],
      'option --group-size must be at least 2 (as torch requires) (got 1)',
    ],
    [
      '--axis with per_tensor',
      ['--axis', '1'],
      'option --axis applies to per_channel only, not per_tensor (got 1)',
    ],
    [
      '--group-size with per_channel',
      ['--scheme', 'per_channel', '--group-size', '32'],
      'option --group-size applies to per_group only, not per_channel (got 32)',
    ],
    ['--quant-min abc', ['--quant-min', 'abc'], 'option --quant-min must be an integer (got abc)'],
    ['--quant-max 7.5', ['--quant-max', '7.5'], 'option --quant-max must be an integer (got 7.5)'],
    ['--eps abc', ['--eps', 'abc'], 'option --eps must be a finite number (got abc)'],
    [
      '--range-search',
      ['--range-search', 'exhaustive'],
      'option --range-search must be minmax or greedy (got exhaustive)',
    ],
  ])('%s', async (_label, extra, message) => {
    expect(await quantizeModelFails(extra, 'OPTION_INVALID', [])).toBe(message);
  });
});

describe.concurrent('UNKNOWN_QDTYPE, UNKNOWN_SCHEME, UNKNOWN_MODE, UNKNOWN_DTYPE', () => {
  it('names the unknown qdtype', async () => {
    await quantizeModelFails(['--qdtype', 'int9'], 'UNKNOWN_QDTYPE', [
      'unknown qdtype int9; expected one of int8',
    ]);
  });
  it('names the unknown scheme', async () => {
    await quantizeModelFails(['--scheme', 'per_row'], 'UNKNOWN_SCHEME', ['unknown scheme per_row;']);
  });
  it('names the unknown mode', async () => {
    await quantizeModelFails(['--mode', 'asymmetric'], 'UNKNOWN_MODE', ['unknown mode asymmetric;']);
  });
  it('dequantize --dtype float64', async () => {
    await failsWith(
      scratch(tmp.dir),
      ['dequantize', MODEL, '-o', OUT, '--dtype', 'float64'],
      'UNKNOWN_DTYPE',
      ['unknown output dtype float64; expected one of float32, float16, bfloat16'],
    );
  });
  it('fake-quantize --dtype int8', async () => {
    await failsWith(
      scratch(tmp.dir),
      ['fake-quantize', MODEL, '-o', OUT, '--dtype', 'int8'],
      'UNKNOWN_DTYPE',
      ['unknown output dtype int8'],
    );
  });
});

describe.concurrent('MODE_UNSUPPORTED', () => {
  it.each<[string, string[], string]>([
    [
      'float_qparams per_tensor',
      ['--mode', 'float_qparams'],
      'float_qparams is defined for per_channel only, not per_tensor',
    ],
    [
      'fp8 affine',
      ['--qdtype', 'float8_e4m3fn', '--mode', 'affine'],
      'float8_e4m3fn is quantized symmetrically',
    ],
    [
      'symmetric per_token uint8',
      ['--scheme', 'per_token', '--mode', 'symmetric', '--qdtype', 'uint8'],
      'uint8 is unsigned',
    ],
    ['greedy search on int8', ['--range-search', 'greedy'], 'int8 is 8-bit'],
  ])('%s', async (_label, extra, fragment) => {
    await quantizeModelFails(extra, 'MODE_UNSUPPORTED', [fragment]);
  });
});

describe.concurrent('QUANT_RANGE_INVALID', () => {
  it('refuses to widen the qdtype range (negative value given as a separate argument)', async () => {
    await quantizeModelFails(['--quant-min', '-200'], 'QUANT_RANGE_INVALID', [
      "[-200, 127] is outside int8's range [-128, 127]",
      'never widen',
    ]);
  });
  it('refuses to widen the top of an unsigned sub-byte range', async () => {
    await quantizeModelFails(['--qdtype', 'uint4', '--quant-max', '16'], 'QUANT_RANGE_INVALID', [
      "[0, 16] is outside uint4's range [0, 15]",
    ]);
  });
  it('refuses quant_min == quant_max', async () => {
    await quantizeModelFails(['--quant-min', '5', '--quant-max', '5'], 'QUANT_RANGE_INVALID', [
      'quant_min (5) must be smaller than quant_max (5)',
    ]);
  });
  it('refuses to choose qparams for a range without 0 (torch validate_qmin_qmax); nothing written', async () => {
    await quantizeModelFails(
      ['--qdtype', 'uint2', '--quant-min', '1', '--quant-max', '3'],
      'QUANT_RANGE_INVALID',
      ['[1, 3]', 'includes 0'],
    );
  });
  it('...but quantizes into such a range with given qparams', async () => {
    const dir = withInput([W, scaleOf([0.5]), zpOf([2])]);
    await succeeds(dir, [
      'quantize',
      IN,
      '-o',
      OUT,
      '--qdtype',
      'uint2',
      '--quant-min',
      '1',
      '--quant-max',
      '3',
    ]);
    const spec = parseSpec({ qdtype: 'uint2', quant_min: 1, quant_max: 3 });
    const want = quantizeTensor(
      { name: 'w', dtype: 'float32', data: W.data, layout: planLayout('w', W.shape, spec) },
      spec,
      { scale: Float32Array.of(0.5), zeroPoint: Int32Array.of(2) },
    );
    // x / 0.5 + 2 clamped to [1, 3]: [2, 3, 1, 3, 3, 2, 3, 1], packed four to a byte, LSB first.
    expect(Array.from(want.data)).toEqual([
      2 | (3 << 2) | (1 << 4) | (3 << 6),
      3 | (2 << 2) | (3 << 4) | (1 << 6),
    ]);
    expect(readStored(join(dir, OUT)).tensor('w').data).toEqual(want.data);
  });
  it('refuses quant_min > quant_max', async () => {
    await quantizeModelFails(['--quant-min', '10', '--quant-max', '-10'], 'QUANT_RANGE_INVALID', [
      'quant_min (10) must be smaller than quant_max (-10)',
    ]);
  });
});

describe.concurrent('negative option values are values, not options', () => {
  it('--quant-min -8 --quant-max 7 narrows int8 to the int4 grid', async () => {
    const dir = scratch(tmp.dir);
    await succeeds(dir, [
      'quantize',
      MODEL,
      '-o',
      OUT,
      '--include',
      'layers.0.weight',
      '--quant-min',
      '-8',
      '--quant-max',
      '7',
    ]);
    const out = readStored(join(dir, OUT));
    const meta = JSON.parse(out.metadata!['layers.0.weight']!) as Record<string, unknown>;
    expect(meta).toMatchObject({ qdtype: 'int8', quant_min: -8, quant_max: 7 });
    const codes = Array.from(new Int8Array(out.tensor('layers.0.weight').data.buffer));
    expect(Math.min(...codes)).toBe(-8);
    expect(Math.max(...codes)).toBe(7);
    // The same request spelled --quant-min=-8 gives the same file.
    await succeeds(dir, [
      'quantize',
      MODEL,
      '-o',
      'eq.safetensors',
      '--include',
      'layers.0.weight',
      '--quant-min=-8',
      '--quant-max=7',
    ]);
    expect(readStored(join(dir, 'eq.safetensors')).tensor('layers.0.weight').data).toEqual(
      out.tensor('layers.0.weight').data,
    );
  });

  it('--axis -1 counts from the last dimension (same codes as --axis 1 on a 2-D tensor)', async () => {
    const dir = scratch(tmp.dir);
    const base = ['--include', 'layers.0.weight', '--scheme', 'per_channel'];
    await succeeds(dir, ['quantize', MODEL, '-o', 'neg.safetensors', ...base, '--axis', '-1']);
    await succeeds(dir, ['quantize', MODEL, '-o', 'pos.safetensors', ...base, '--axis', '1']);
    const neg = readStored(join(dir, 'neg.safetensors'));
    const pos = readStored(join(dir, 'pos.safetensors'));
    expect(neg.tensor('layers.0.weight.scale').shape).toEqual([64]);
    for (const name of ['layers.0.weight', 'layers.0.weight.scale', 'layers.0.weight.zero_point']) {
      expect(neg.tensor(name).data, name).toEqual(pos.tensor(name).data);
    }
    expect(JSON.parse(neg.metadata!['layers.0.weight']!)).toMatchObject({ axis: 1 });
  });

  it('--eps -1 reaches the eps check (EPS_INVALID), not the option parser (USAGE)', async () => {
    await quantizeModelFails(['--eps', '-1'], 'EPS_INVALID', ['got -1']);
  });
});

describe.concurrent('EPS_INVALID', () => {
  it.each(['0', '1e-40', '1e39', '-0.5'])('--eps %s', async (eps) => {
    await quantizeModelFails(['--eps', eps], 'EPS_INVALID', [`>= 2^-126`, `got ${eps}`]);
  });
});

describe.concurrent('FEATURE_UNSUPPORTED', () => {
  it('--remote with an empty directory, and with a folder to a server that is not there', async () => {
    const dir = scratch(tmp.dir);
    mkdirSync(join(dir, 'sharded'));
    await failsWith(
      dir,
      ['quantize', 'sharded', '-o', OUT, '--remote', 'http://127.0.0.1:9'],
      'FEATURE_UNSUPPORTED',
      ['--remote found no file to upload in sharded'],
    );
    writeFileSync(join(dir, 'sharded', 'config.json'), '{}');
    await failsWith(
      dir,
      ['quantize', 'sharded', '-o', OUT, '--remote', 'http://127.0.0.1:9'],
      'SERVER_UNREACHABLE',
      ['127.0.0.1:9'],
    );
  });
  it.each([
    ['per_group', ['--scheme', 'per_group'], 'not per_group'],
    ['per_token', ['--scheme', 'per_token'], 'not per_token'],
    ['fp8', ['--qdtype', 'float8_e5m2'], 'float8_e5m2 is not one'],
  ])('fake-quantize %s', async (_label, extra, fragment) => {
    await failsWith(scratch(tmp.dir), ['fake-quantize', MODEL, '-o', OUT, ...extra], 'FEATURE_UNSUPPORTED', [
      fragment,
    ]);
  });
});

describe.concurrent('remote', () => {
  it('SERVER_UNREACHABLE: nothing listens at --remote (exit 1, nothing written)', async () => {
    await quantizeModelFails(['--remote', 'http://127.0.0.1:9'], 'SERVER_UNREACHABLE', [
      'cannot reach the quantd server at http://127.0.0.1:9: connect ECONNREFUSED',
    ]);
  });
  it('OPTION_INVALID: --remote that is not a URL', async () => {
    await quantizeModelFails(['--remote', 'not a url'], 'OPTION_INVALID', ['--remote must be a URL']);
  });
});

describe.concurrent('tensor errors', () => {
  it('INPUT_DTYPE_UNSUPPORTED: --include of an integer tensor', async () => {
    await quantizeModelFails(['--include', 'position_ids'], 'INPUT_DTYPE_UNSUPPORTED', [
      'tensor position_ids has dtype I64',
    ]);
  });

  it('INPUT_DTYPE_UNSUPPORTED: an --include glob that also matches an integer tensor', async () => {
    await quantizeModelFails(['--include', '*'], 'INPUT_DTYPE_UNSUPPORTED', [
      'tensor position_ids has dtype I64',
    ]);
  });

  const ok: InputTensor = { name: 'a', dtype: 'F32', shape: [4], data: f32([1, 2, 3, 4]) };
  it.each(['qparams', 'quantize', 'fake-quantize'])(
    'INPUT_NOT_FINITE: NaN in the second tensor, %s (nothing written)',
    async (op) => {
      const dir = withInput([
        ok,
        { name: 'b', dtype: 'F32', shape: [2, 3], data: f32([1, 2, 3, 4, NaN, 5]) },
      ]);
      const message = await failsWith(dir, [op, IN, '-o', OUT], 'INPUT_NOT_FINITE');
      expect(message).toBe('tensor b holds NaN at flat index 4; choose_qparams needs finite input');
    },
  );

  it.each([
    [Infinity, 'Infinity'],
    [-Infinity, '-Infinity'],
  ])('INPUT_NOT_FINITE: %s', async (value, text) => {
    const dir = withInput([{ name: 'b', dtype: 'F32', shape: [5], data: f32([1, 2, value, 4, 5]) }]);
    const message = await failsWith(dir, ['qparams', IN, '-o', OUT], 'INPUT_NOT_FINITE');
    expect(message).toBe(`tensor b holds ${text} at flat index 2; choose_qparams needs finite input`);
  });

  it('INPUT_NOT_FINITE: the index is the flat row-major index for per_channel along axis 1', async () => {
    const dir = withInput([{ name: 'b', dtype: 'F32', shape: [2, 3], data: f32([1, 2, 3, 4, NaN, 5]) }]);
    await failsWith(
      dir,
      ['quantize', IN, '-o', OUT, '--scheme', 'per_channel', '--axis', '1'],
      'INPUT_NOT_FINITE',
      ['tensor b holds NaN at flat index 4'],
    );
  });

  it('INPUT_NOT_FINITE: NaN in a bfloat16 tensor', async () => {
    // bfloat16 0x7fc0 is a quiet NaN; 0x3f80 is 1.
    const data = new Uint8Array(new Uint16Array([0x3f80, 0x3f80, 0x7fc0]).buffer);
    const dir = withInput([{ name: 'h', dtype: 'BF16', shape: [3], data }]);
    await failsWith(dir, ['quantize', IN, '-o', OUT], 'INPUT_NOT_FINITE', [
      'tensor h holds NaN at flat index 2',
    ]);
  });

  it('EMPTY_TENSOR', async () => {
    const dir = withInput([{ name: 'e', dtype: 'F32', shape: [0, 3], data: new Uint8Array(0) }]);
    const message = await failsWith(dir, ['quantize', IN, '-o', OUT], 'EMPTY_TENSOR');
    expect(message).toBe('tensor e has no elements (shape [0, 3]); cannot choose qparams');
  });

  it.each(['3', '-3'])('AXIS_OUT_OF_RANGE: --axis %s', async (axis) => {
    const message = await quantizeModelFails(
      ['--include', 'layers.0.weight', '--scheme', 'per_channel', '--axis', axis],
      'AXIS_OUT_OF_RANGE',
      [],
    );
    expect(message).toBe(
      `axis ${axis} is out of range for tensor layers.0.weight of shape [48, 64] (rank 2)`,
    );
  });

  it('SHAPE_UNSUPPORTED: per_group on the 1-D bias', async () => {
    await quantizeModelFails(['--include', 'layers.0.bias', '--scheme', 'per_group'], 'SHAPE_UNSUPPORTED', [
      'tensor layers.0.bias has shape [48]; per_group needs a 2-D tensor',
    ]);
  });

  it('SHAPE_UNSUPPORTED: per_group on a 3-D tensor', async () => {
    await quantizeModelFails(['--include', 'activations', '--scheme', 'per_group'], 'SHAPE_UNSUPPORTED', [
      'tensor activations has shape [2, 5, 64]',
    ]);
  });

  it('GROUP_SIZE_INVALID', async () => {
    const message = await quantizeModelFails(
      ['--include', 'layers.0.weight', '--scheme', 'per_group', '--group-size', '48'],
      'GROUP_SIZE_INVALID',
      [],
    );
    expect(message).toBe(
      'tensor layers.0.weight: K = 64 is not divisible by group_size (group_size 48, shape [48, 64])',
    );
  });

  const huge: InputTensor = { name: 'big', dtype: 'F32', shape: [2], data: f32([-3e38, 3e38]) };
  it('RANGE_OVERFLOW: values ±3e38, affine', async () => {
    const r = Math.fround(3e38);
    const message = await failsWith(withInput([huge]), ['quantize', IN, '-o', OUT], 'RANGE_OVERFLOW');
    expect(message).toBe(
      `tensor big: the value range [${-r}, ${r}] gives scale Infinity, which is not a finite positive float32`,
    );
  });

  it('RANGE_OVERFLOW: values ±3e38, per_channel float_qparams', async () => {
    await failsWith(
      withInput([{ ...huge, shape: [1, 2] }]),
      ['quantize', IN, '-o', OUT, '--qdtype', 'uint8', '--scheme', 'per_channel', '--mode', 'float_qparams'],
      'RANGE_OVERFLOW',
      ['tensor big:', 'gives scale Infinity'],
    );
  });

  it('the same values quantize symmetrically (max/127.5 is finite)', async () => {
    const dir = withInput([huge]);
    await succeeds(dir, ['quantize', IN, '-o', OUT, '--mode', 'symmetric']);
    expect(Array.from(new Int8Array(readStored(join(dir, OUT)).tensor('big').data.buffer))).toEqual([
      -128, 127,
    ]);
  });

  it('NO_TENSOR_SELECTED: an --include glob that matches nothing', async () => {
    const message = await quantizeModelFails(['--include', 'nomatch*'], 'NO_TENSOR_SELECTED', []);
    expect(message).toBe('no tensor of the input matched the selection (include nomatch*)');
  });

  it('NO_TENSOR_SELECTED: --exclude of everything', async () => {
    await quantizeModelFails(['--exclude', '*', '--exclude', 'x'], 'NO_TENSOR_SELECTED', [
      'all float tensors; exclude *, x',
    ]);
  });

  it('NO_TENSOR_SELECTED: a file with no float tensor', async () => {
    const dir = withInput([{ name: 'ids', dtype: 'I32', shape: [2], data: i32([1, 2]) }]);
    await failsWith(dir, ['qparams', IN, '-o', OUT], 'NO_TENSOR_SELECTED', ['(all float tensors)']);
  });

  it('NAME_COLLISION: fake-quantize beside an existing x.mask', async () => {
    const dir = withInput([
      { name: 'x', dtype: 'F32', shape: [4], data: f32([1, 2, 3, 4]) },
      { name: 'x.mask', dtype: 'BOOL', shape: [4], data: new Uint8Array(4) },
    ]);
    const message = await failsWith(dir, ['fake-quantize', IN, '-o', OUT], 'NAME_COLLISION');
    expect(message).toBe(
      `${IN}: the output would hold two tensors named x.mask; rename that input tensor, or exclude the tensor whose output takes its name`,
    );
  });
});

describe.concurrent('given qparams (NAME.scale / NAME.zero_point in the input)', () => {
  it.each<[string, number, string]>([
    ['0', 0, 'scale[0] = 0;'],
    ['-0 (shown as -0)', -0, 'scale[0] = -0;'],
    ['negative', -0.5, 'scale[0] = -0.5;'],
    ['NaN', NaN, 'scale[0] = NaN;'],
    ['Infinity', Infinity, 'scale[0] = Infinity;'],
    ['subnormal (reciprocal overflows float32)', 1e-40, `scale[0] = ${Math.fround(1e-40)};`],
  ])('SCALE_INVALID: scale %s', async (_label, value, fragment) => {
    const dir = withInput([W, scaleOf([value]), zpOf([0])]);
    await failsWith(dir, ['quantize', IN, '-o', OUT], 'SCALE_INVALID', [`tensor w: ${fragment}`]);
  });

  it.each(['qparams', 'fake-quantize'])('SCALE_INVALID through %s', async (op) => {
    const dir = withInput([W, scaleOf([0]), zpOf([0])]);
    await failsWith(dir, [op, IN, '-o', OUT], 'SCALE_INVALID', ['tensor w: scale[0] = 0;']);
  });

  it('SCALE_INVALID names the offending channel', async () => {
    const dir = withInput([W, scaleOf([0.1, -1]), zpOf([0, 0])]);
    await failsWith(dir, ['quantize', IN, '-o', OUT, '--scheme', 'per_channel'], 'SCALE_INVALID', [
      'tensor w: scale[1] = -1;',
    ]);
  });

  it('ZERO_POINT_OUT_OF_RANGE: 200 for int8', async () => {
    const message = await failsWith(
      withInput([W, scaleOf([0.1]), zpOf([200])]),
      ['quantize', IN, '-o', OUT],
      'ZERO_POINT_OUT_OF_RANGE',
    );
    expect(message).toBe('tensor w: zero_point[0] = 200 is outside [-128, 127]');
  });

  it('ZERO_POINT_OUT_OF_RANGE: against a narrowed range', async () => {
    const dir = withInput([W, scaleOf([0.1, 0.1]), zpOf([0, 10])]);
    await failsWith(
      dir,
      ['quantize', IN, '-o', OUT, '--scheme', 'per_channel', '--quant-min', '-8', '--quant-max', '7'],
      'ZERO_POINT_OUT_OF_RANGE',
      ['tensor w: zero_point[1] = 10 is outside [-8, 7]'],
    );
  });

  it('ZERO_POINT_INVALID: 1.5 for affine int8', async () => {
    const zp: InputTensor = { name: 'w.zero_point', dtype: 'F32', shape: [1], data: f32([1.5]) };
    const message = await failsWith(
      withInput([W, scaleOf([0.1]), zp]),
      ['quantize', IN, '-o', OUT],
      'ZERO_POINT_INVALID',
    );
    expect(message).toBe('tensor w: zero_point[0] = 1.5; mode affine needs integer zero points');
  });

  it('ZERO_POINT_INVALID: non-zero for fp8', async () => {
    const dir = withInput([W, scaleOf([0.1]), zpOf([5])]);
    await failsWith(dir, ['quantize', IN, '-o', OUT, '--qdtype', 'float8_e4m3fn'], 'ZERO_POINT_INVALID', [
      'tensor w: zero_point[0] = 5; mode symmetric fixes the zero point at 0 for float8_e4m3fn',
    ]);
  });

  it('ZERO_POINT_INVALID: a zero point other than the symmetric one in mode symmetric', async () => {
    const dir = withInput([W, scaleOf([0.1]), zpOf([5])]);
    await failsWith(dir, ['quantize', IN, '-o', OUT, '--mode', 'symmetric'], 'ZERO_POINT_INVALID', [
      'tensor w: zero_point[0] = 5; mode symmetric fixes the zero point at 0 for int8',
    ]);
  });

  it('ZERO_POINT_INVALID: a NaN float zero point (float_qparams)', async () => {
    const zp: InputTensor = { name: 'w.zero_point', dtype: 'F32', shape: [2], data: f32([0, NaN]) };
    const dir = withInput([W, scaleOf([0.1, 0.1]), zp]);
    await failsWith(
      dir,
      ['quantize', IN, '-o', OUT, '--qdtype', 'uint8', '--scheme', 'per_channel', '--mode', 'float_qparams'],
      'ZERO_POINT_INVALID',
      ['tensor w: zero_point[1] = NaN; must be finite'],
    );
  });

  it('QPARAMS_SHAPE_MISMATCH: scale [3] for per_tensor', async () => {
    const message = await failsWith(
      withInput([W, scaleOf([0.1, 0.1, 0.1]), zpOf([0])]),
      ['quantize', IN, '-o', OUT],
      'QPARAMS_SHAPE_MISMATCH',
    );
    expect(message).toBe('tensor w: scale has shape [3], expected [1] for per_tensor');
  });

  it('QPARAMS_SHAPE_MISMATCH: zero_point [1] for per_channel over 2 channels', async () => {
    const dir = withInput([W, scaleOf([0.1, 0.1]), zpOf([0])]);
    await failsWith(dir, ['quantize', IN, '-o', OUT, '--scheme', 'per_channel'], 'QPARAMS_SHAPE_MISMATCH', [
      'tensor w: zero_point has shape [1], expected [2] for per_channel',
    ]);
  });

  it('QPARAMS_DTYPE_INVALID: scale stored as I32', async () => {
    const scale: InputTensor = { name: 'w.scale', dtype: 'I32', shape: [1], data: i32([1]) };
    const message = await failsWith(
      withInput([W, scale, zpOf([0])]),
      ['quantize', IN, '-o', OUT],
      'QPARAMS_DTYPE_INVALID',
    );
    expect(message).toBe('tensor w: scale has dtype I32; expected F32, F64, F16, BF16');
  });

  it('QPARAMS_DTYPE_INVALID: zero_point stored as BOOL', async () => {
    const zp: InputTensor = { name: 'w.zero_point', dtype: 'BOOL', shape: [1], data: new Uint8Array(1) };
    await failsWith(
      withInput([W, scaleOf([0.1]), zp]),
      ['quantize', IN, '-o', OUT],
      'QPARAMS_DTYPE_INVALID',
      ['tensor w: zero_point has dtype BOOL'],
    );
  });

  it('QPARAMS_MISSING: zero_point without scale', async () => {
    const message = await failsWith(
      withInput([W, zpOf([0])]),
      ['quantize', IN, '-o', OUT],
      'QPARAMS_MISSING',
    );
    expect(message).toBe('tensor w: w.zero_point is given without w.scale');
  });

  it('QPARAMS_MISSING: scale without zero_point in affine mode', async () => {
    await failsWith(withInput([W, scaleOf([0.1])]), ['quantize', IN, '-o', OUT], 'QPARAMS_MISSING', [
      'tensor w: w.scale is given without w.zero_point',
    ]);
  });

  it('symmetric mode accepts a scale alone (zero point implied: 0 for int8)', async () => {
    const dir = withInput([W, scaleOf([0.25])]);
    await succeeds(dir, ['quantize', IN, '-o', OUT, '--mode', 'symmetric']);
    const out = readStored(join(dir, OUT));
    const spec = parseSpec({ mode: 'symmetric' });
    const expected = quantizeTensor(
      { name: 'w', dtype: 'float32', data: W.data, layout: planLayout('w', W.shape, spec) },
      spec,
      { scale: Float32Array.of(0.25), zeroPoint: Int32Array.of(0) },
    );
    expect(out.tensor('w').data).toEqual(expected.data);
    expect(Array.from(new Int8Array(out.tensor('w').data.buffer))).toEqual([0, 4, -4, 8, 2, -1, 12, -12]);
    expect(out.tensor('w.scale').data).toEqual(f32([0.25]));
    expect(out.tensor('w.zero_point')).toEqual({ dtype: 'I32', shape: [1], data: i32([0]) });
  });

  it('given qparams may be F64 / I8 and are stored as F32 / I32', async () => {
    const dir = withInput([
      W,
      { name: 'w.scale', dtype: 'F64', shape: [1], data: f64([0.5]) },
      { name: 'w.zero_point', dtype: 'I8', shape: [1], data: i8([-3]) },
    ]);
    await succeeds(dir, ['quantize', IN, '-o', OUT]);
    const out = readStored(join(dir, OUT));
    expect(out.tensor('w.scale')).toEqual({ dtype: 'F32', shape: [1], data: f32([0.5]) });
    expect(out.tensor('w.zero_point')).toEqual({ dtype: 'I32', shape: [1], data: i32([-3]) });
    // x / 0.5 rounded half to even, plus -3: -0.25 / 0.5 = -0.5 rounds to -0, giving -3.
    expect(Array.from(new Int8Array(out.tensor('w').data.buffer))).toEqual([-3, -1, -5, 1, -2, -3, 3, -9]);
  });
});

describe.concurrent('a failed run leaves an existing output untouched', () => {
  it('keeps the previous file byte for byte and leaves no temp file', async () => {
    const dir = withInput([
      { name: 'a', dtype: 'F32', shape: [2, 2], data: f32([1, 2, 3, 4]) },
      { name: 'b', dtype: 'F32', shape: [1, 2], data: f32([1, NaN]) },
    ]);
    writeTensors(join(dir, OUT), [{ name: 'old', dtype: 'F32', shape: [1], data: f32([42]) }]);
    const before = listing(dir);
    const r = await quantdAsync(['quantize', IN, '-o', OUT, '--force'], dir);
    expectCliError(r, 'INPUT_NOT_FINITE', ['tensor b holds NaN at flat index 1']);
    expect(listing(dir)).toEqual(before);
    const old = readStored(join(dir, OUT));
    expect(old.names).toEqual(['old']);
    expect(old.tensor('old').data).toEqual(f32([42]));
  });
});

describe.concurrent('an over-long --include glob', () => {
  // a list of globs over 8192 characters is refused before any is compiled
  // (src/service/name-patterns.ts): OPTION_INVALID, a caller error on one line.
  const longGlob = 'a'.repeat(70_000);

  it('is a caller error (exit 2), not INTERNAL (exit 1)', async () => {
    const r = await quantdAsync(['quantize', MODEL, '-o', OUT, '--include', longGlob], scratch(tmp.dir));
    expectCliError(r, 'OPTION_INVALID', ['holds 70000 characters of patterns; a list takes at most 8192']);
  });

  it('is reported on one stderr line', async () => {
    const r = await quantdAsync(['quantize', MODEL, '-o', OUT, '--include', longGlob], scratch(tmp.dir));
    expect(r.stderr).toMatch(/^error [A-Z_]+: [^\n]+\n$/);
  });
});
