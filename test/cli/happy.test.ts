/**
 * The CLI's happy paths, checked against src/core: quantize → dequantize gives, byte for byte,
 * what core's dequantizeTensor gives for the same codes; fake-quantize and qparams write what
 * core computes, under the documented names; qparams given in the input are used and written
 * through; --include / --exclude choose the tensors; a container quantized again keeps its
 * quantized tensors. (golden-cli.test.ts pins quantize itself against torch.)
 */
import { lstatSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import {
  chooseTensorQParams,
  dequantizeTensor,
  fakeQuantizeTensor,
  floatDTypeOfSt,
  hasFloatZeroPoint,
  parseSpec,
  planLayout,
  quantizeTensor,
  typedView,
  type FloatDType,
  type FloatInput,
  type QParams,
  type QuantSpec,
  type SpecOptions,
  type StDType,
} from '../../src/core/index.js';
import {
  f32,
  i32,
  readStored,
  scratch,
  succeeds,
  writeTensors,
  type InputTensor,
  type StoredFile,
  type StoredTensor,
} from './cli-helpers.js';
import { MODEL, tempDir } from './run-cli.js';

const tmp = tempDir();
afterAll(() => tmp.cleanup());

const model = readStored(MODEL);
const MODEL_NAMES = [
  'layers.0.weight',
  'layers.0.bias',
  'layers.1.weight',
  'embed.weight',
  'activations',
  'position_ids',
];
const FLOAT_NAMES = MODEL_NAMES.filter((n) => n !== 'position_ids');
/** What a run without --include quantizes: the float tensors of rank >= 2 (README, 1-D tensors). */
const DEFAULT_NAMES = FLOAT_NAMES.filter((n) => n !== 'layers.0.bias');

/** Core's input for tensor `name` of `file` under `spec`. */
function floatInput(file: StoredFile, name: string, spec: QuantSpec): FloatInput {
  const t = file.tensor(name);
  const dtype = floatDTypeOfSt(t.dtype as StDType);
  if (!dtype) throw new Error(`${name} is not a float tensor`);
  return { name, dtype, data: t.data, layout: planLayout(name, t.shape, spec) };
}

/** The qparams stored beside `name`, read with the dtypes `spec` implies (checked). */
function storedQParams(file: StoredFile, name: string, spec: QuantSpec): QParams {
  const scale = file.tensor(`${name}.scale`);
  const zp = file.tensor(`${name}.zero_point`);
  expect(scale.dtype).toBe('F32');
  expect(zp.dtype).toBe(hasFloatZeroPoint(spec) ? 'F32' : 'I32');
  return {
    scale: typedView(Float32Array, scale.data),
    zeroPoint: zp.dtype === 'F32' ? typedView(Float32Array, zp.data) : typedView(Int32Array, zp.data),
  };
}

const bytesOfQParams = (qp: QParams): Uint8Array[] => [
  new Uint8Array(qp.scale.buffer, qp.scale.byteOffset, qp.scale.byteLength),
  new Uint8Array(qp.zeroPoint.buffer, qp.zeroPoint.byteOffset, qp.zeroPoint.byteLength),
];

/** An input tensor as readStored gives it back. */
const stored = ({ dtype, shape, data }: InputTensor): StoredTensor => ({ dtype, shape, data });

/** Output names when `quantized` tensors of the model are stored as codes + scale + zero point. */
const containerNames = (quantized: readonly string[]): string[] =>
  MODEL_NAMES.flatMap((n) => (quantized.includes(n) ? [n, `${n}.scale`, `${n}.zero_point`] : [n]));

describe.concurrent('quantize → dequantize matches core byte for byte', () => {
  const cases: [string, string[], SpecOptions, string[]][] = [
    ['int8 per_tensor (the defaults)', [], {}, DEFAULT_NAMES],
    [
      'uint8 per_channel axis 1 on *.weight',
      ['--qdtype', 'uint8', '--scheme', 'per_channel', '--axis', '1', '--include', '*.weight'],
      { qdtype: 'uint8', scheme: 'per_channel', axis: 1 },
      ['layers.0.weight', 'layers.1.weight', 'embed.weight'],
    ],
    [
      'int4 per_group g32 symmetric (embed.weight K=16 < 32)',
      ['--qdtype', 'int4', '--scheme', 'per_group', '--group-size', '32', '--mode', 'symmetric'].concat([
        '--exclude',
        'layers.0.bias',
        '--exclude',
        'activations',
      ]),
      { qdtype: 'int4', scheme: 'per_group', group_size: 32, mode: 'symmetric' },
      ['layers.0.weight', 'layers.1.weight', 'embed.weight'],
    ],
    [
      'int8 per_token affine (float zero points)',
      ['--scheme', 'per_token'],
      { scheme: 'per_token' },
      DEFAULT_NAMES,
    ],
    [
      'float8_e4m3fn per_channel',
      ['--qdtype', 'float8_e4m3fn', '--scheme', 'per_channel'],
      { qdtype: 'float8_e4m3fn', scheme: 'per_channel' },
      DEFAULT_NAMES,
    ],
    [
      'uint8 per_channel float_qparams on layers.*',
      ['--qdtype', 'uint8', '--scheme', 'per_channel', '--mode', 'float_qparams', '--include', 'layers.*'],
      { qdtype: 'uint8', scheme: 'per_channel', mode: 'float_qparams' },
      ['layers.0.weight', 'layers.0.bias', 'layers.1.weight'],
    ],
    [
      'int4 per_tensor narrowed to [-4, 5]',
      ['--qdtype', 'int4', '--quant-min', '-4', '--quant-max', '5'],
      { qdtype: 'int4', quant_min: -4, quant_max: 5 },
      DEFAULT_NAMES,
    ],
  ];

  it.each(cases)('%s', async (_label, args, options, quantized) => {
    const dir = scratch(tmp.dir);
    const spec = parseSpec(options);
    await succeeds(dir, ['quantize', MODEL, '-o', 'q.safetensors', ...args]);
    const q = readStored(join(dir, 'q.safetensors'));
    expect(q.names).toEqual(containerNames(quantized));
    expect(Object.keys(q.metadata ?? {}).sort()).toEqual(['format', ...quantized].sort());
    expect(q.metadata?.['format']).toBe('quantd.qtensor/1');
    for (const name of quantized) {
      const want = quantizeTensor(floatInput(model, name, spec), spec);
      expect(q.tensor(name).data, `${name} codes`).toEqual(want.data);
      const [scale, zp] = bytesOfQParams(want.qparams);
      expect(q.tensor(`${name}.scale`).data, `${name}.scale`).toEqual(scale);
      expect(q.tensor(`${name}.zero_point`).data, `${name}.zero_point`).toEqual(zp);
    }

    await succeeds(dir, ['dequantize', 'q.safetensors', '-o', 'd.safetensors']);
    const d = readStored(join(dir, 'd.safetensors'));
    expect(d.names).toEqual(MODEL_NAMES);
    expect(d.metadata).toEqual({ format: 'pt' });
    for (const name of MODEL_NAMES) {
      const got = d.tensor(name);
      if (!quantized.includes(name)) {
        expect(got, `${name} passes through`).toEqual(model.tensor(name));
        continue;
      }
      const codes = q.tensor(name).data;
      const want = dequantizeTensor(
        {
          name,
          data: codes,
          spec,
          layout: planLayout(name, model.tensor(name).shape, spec),
          qparams: storedQParams(q, name, spec),
        },
        'float32',
      );
      expect({ dtype: got.dtype, shape: got.shape }, name).toEqual({
        dtype: 'F32',
        shape: model.tensor(name).shape,
      });
      expect(got.data, `${name} dequantized`).toEqual(want);
    }
  });

  it('dequantize computes (q - zp) · scale in float32, within half a step of the input (src/core not consulted)', async () => {
    const dir = scratch(tmp.dir);
    const name = 'layers.0.weight';
    await succeeds(
      dir,
      ['quantize', MODEL, '-o', 'q.safetensors', '--include', name].concat([
        '--qdtype',
        'uint8',
        '--scheme',
        'per_channel',
        '--axis',
        '1',
      ]),
    );
    await succeeds(dir, ['dequantize', 'q.safetensors', '-o', 'd.safetensors']);
    const q = readStored(join(dir, 'q.safetensors'));
    const codes = q.tensor(name).data; // uint8 [48, 64], one scale per column
    const scale = new Float32Array(q.tensor(`${name}.scale`).data.buffer);
    const zp = new Int32Array(q.tensor(`${name}.zero_point`).data.buffer);
    expect([codes.length, scale.length, zp.length]).toEqual([48 * 64, 64, 64]);
    const want = Float32Array.from(codes, (c, i) =>
      Math.fround(Math.fround(c - zp[i % 64]!) * scale[i % 64]!),
    );
    const got = readStored(join(dir, 'd.safetensors')).tensor(name).data;
    expect(got).toEqual(new Uint8Array(want.buffer));
    const x = new Float32Array(model.tensor(name).data.buffer);
    const worst = Math.max(...Array.from(x, (v, i) => Math.abs(want[i]! - v) / scale[i % 64]!));
    expect(worst).toBeLessThanOrEqual(0.5 + 1e-5);
  });

  describe('--dtype', () => {
    const spec = parseSpec({ qdtype: 'int4', scheme: 'per_group', group_size: 16 });
    const quantized = ['layers.0.weight', 'layers.1.weight', 'embed.weight'];
    let dir = '';
    let q: StoredFile;
    beforeAll(async () => {
      dir = scratch(tmp.dir);
      await succeeds(
        dir,
        ['quantize', MODEL, '-o', 'q.safetensors', '--qdtype', 'int4', '--scheme', 'per_group'].concat([
          '--group-size',
          '16',
          '--include',
          '*.weight',
        ]),
      );
      q = readStored(join(dir, 'q.safetensors'));
    });

    it.each<[FloatDType, string]>([
      ['float16', 'F16'],
      ['bfloat16', 'BF16'],
      ['float32', 'F32'],
    ])('%s', async (dtype, st) => {
      const out = `d-${dtype}.safetensors`;
      await succeeds(dir, ['dequantize', 'q.safetensors', '-o', out, '--dtype', dtype]);
      const d = readStored(join(dir, out));
      for (const name of quantized) {
        const want = dequantizeTensor(
          {
            name,
            data: q.tensor(name).data,
            spec,
            layout: planLayout(name, model.tensor(name).shape, spec),
            qparams: storedQParams(q, name, spec),
          },
          dtype,
        );
        expect(d.tensor(name).dtype, name).toBe(st);
        expect(d.tensor(name).shape, name).toEqual(model.tensor(name).shape);
        expect(d.tensor(name).data, name).toEqual(want);
      }
      // Float tensors that were never quantized keep their own dtype.
      for (const name of ['layers.0.bias', 'activations', 'position_ids']) {
        expect(d.tensor(name), name).toEqual(model.tensor(name));
      }
    });
  });
});

describe.concurrent('fake-quantize', () => {
  const spec = parseSpec({ scheme: 'per_channel' });
  const args = ['--scheme', 'per_channel', '--include', 'layers.0.weight', '--include', 'embed.weight'];
  const fq = ['layers.0.weight', 'embed.weight'];

  it.each<[FloatDType, string]>([
    ['float32', 'F32'],
    ['bfloat16', 'BF16'],
  ])('writes NAME (%s) and NAME.mask (BOOL), passes the rest through', async (dtype, st) => {
    const dir = scratch(tmp.dir);
    await succeeds(dir, ['fake-quantize', MODEL, '-o', 'f.safetensors', ...args, '--dtype', dtype]);
    const f = readStored(join(dir, 'f.safetensors'));
    expect(f.names).toEqual(MODEL_NAMES.flatMap((n) => (fq.includes(n) ? [n, `${n}.mask`] : [n])));
    expect(f.metadata).toEqual({ format: 'pt' });
    for (const name of MODEL_NAMES) {
      if (!fq.includes(name)) {
        expect(f.tensor(name), `${name} passes through`).toEqual(model.tensor(name));
        continue;
      }
      const want = fakeQuantizeTensor(floatInput(model, name, spec), spec, dtype);
      const shape = model.tensor(name).shape;
      expect(f.tensor(name)).toEqual({ dtype: st, shape, data: want.data });
      expect(f.tensor(`${name}.mask`)).toEqual({ dtype: 'BOOL', shape, data: want.mask });
    }
  });

  it('uses given qparams; the mask marks the clamped elements; the qparams are not written', async () => {
    const dir = scratch(tmp.dir);
    const x: InputTensor = {
      name: 'x',
      dtype: 'F32',
      shape: [8],
      data: f32([-2, -1, -0.5, 0, 0.5, 1, 1.27, 3]),
    };
    writeTensors(join(dir, 'in.safetensors'), [
      x,
      { name: 'x.scale', dtype: 'F32', shape: [1], data: f32([0.01]) },
      { name: 'x.zero_point', dtype: 'I32', shape: [1], data: i32([0]) },
    ]);
    await succeeds(dir, ['fake-quantize', 'in.safetensors', '-o', 'f.safetensors']);
    const f = readStored(join(dir, 'f.safetensors'));
    expect(f.names).toEqual(['x', 'x.mask']);
    expect(Array.from(f.tensor('x.mask').data)).toEqual([0, 1, 1, 1, 1, 1, 1, 0]);
    const values = Array.from(typedView(Float32Array, f.tensor('x').data));
    expect(values).toEqual([-1.28, -1, -0.5, 0, 0.5, 1, 1.27, 1.27].map(Math.fround));
  });
});

describe.concurrent('qparams', () => {
  it.each<[string, string[], SpecOptions, string[], string]>([
    [
      'per_channel on layers.*',
      ['--scheme', 'per_channel', '--include', 'layers.*'],
      { scheme: 'per_channel' },
      ['layers.0.weight', 'layers.0.bias', 'layers.1.weight'],
      'I32',
    ],
    [
      'per_token affine on activations',
      ['--scheme', 'per_token', '--include', 'activations'],
      { scheme: 'per_token' },
      ['activations'],
      'F32',
    ],
  ])('%s writes only NAME.scale / NAME.zero_point', async (_label, args, options, names, zpDtype) => {
    const dir = scratch(tmp.dir);
    const spec = parseSpec(options);
    await succeeds(dir, ['qparams', MODEL, '-o', 'p.safetensors', ...args]);
    const p = readStored(join(dir, 'p.safetensors'));
    expect(p.names).toEqual(names.flatMap((n) => [`${n}.scale`, `${n}.zero_point`]));
    expect(p.metadata?.['format']).toBe('quantd.qparams/1');
    expect(Object.keys(p.metadata ?? {}).sort()).toEqual(['format', ...names].sort());
    for (const name of names) {
      const input = floatInput(model, name, spec);
      const want = chooseTensorQParams(input, spec);
      const [scale, zp] = bytesOfQParams(want);
      expect(p.tensor(`${name}.scale`)).toEqual({
        dtype: 'F32',
        shape: input.layout.qparamShape,
        data: scale,
      });
      expect(p.tensor(`${name}.zero_point`)).toEqual({
        dtype: zpDtype,
        shape: input.layout.qparamShape,
        data: zp,
      });
    }
  });
});

describe.concurrent('qparams given in the input', () => {
  // A weight whose own min/max would give other qparams than the given ones.
  const values = Array.from({ length: 32 }, (_, i) => Math.sin(i * 1.7) * (1 + (i % 5)));
  const w: InputTensor = { name: 'w', dtype: 'F32', shape: [4, 8], data: f32(values) };
  const other: InputTensor = { name: 'b', dtype: 'F32', shape: [1, 3], data: f32([0.25, -2, 7]) };

  it.each<[string, string[], SpecOptions, InputTensor, InputTensor]>([
    [
      'per_tensor int8',
      [],
      {},
      { name: 'w.scale', dtype: 'F32', shape: [1], data: f32([0.05]) },
      { name: 'w.zero_point', dtype: 'I32', shape: [1], data: i32([-3]) },
    ],
    [
      'per_channel uint8',
      ['--qdtype', 'uint8', '--scheme', 'per_channel'],
      { qdtype: 'uint8', scheme: 'per_channel' },
      { name: 'w.scale', dtype: 'F32', shape: [4], data: f32([0.01, 0.02, 0.04, 0.5]) },
      { name: 'w.zero_point', dtype: 'I32', shape: [4], data: i32([0, 128, 200, 255]) },
    ],
  ])(
    '%s: codes from the given qparams, qparams written through',
    async (_label, args, options, scale, zp) => {
      const dir = scratch(tmp.dir);
      writeTensors(join(dir, 'in.safetensors'), [w, scale, zp, other]);
      await succeeds(dir, ['quantize', 'in.safetensors', '-o', 'q.safetensors', ...args]);
      const q = readStored(join(dir, 'q.safetensors'));
      const input = readStored(join(dir, 'in.safetensors'));
      const spec = parseSpec(options);
      expect(q.names).toEqual(['w', 'w.scale', 'w.zero_point', 'b', 'b.scale', 'b.zero_point']);
      const given: QParams = {
        scale: typedView(Float32Array, scale.data),
        zeroPoint: typedView(Int32Array, zp.data),
      };
      const want = quantizeTensor(floatInput(input, 'w', spec), spec, given);
      expect(q.tensor('w').data).toEqual(want.data);
      // The test can tell: chosen qparams would give other codes.
      expect(quantizeTensor(floatInput(input, 'w', spec), spec).data).not.toEqual(want.data);
      expect(q.tensor('w.scale')).toEqual(stored(scale));
      expect(q.tensor('w.zero_point')).toEqual(stored(zp));
      // b has no qparams of its own: they are chosen.
      expect(q.tensor('b').data).toEqual(quantizeTensor(floatInput(input, 'b', spec), spec).data);
    },
  );

  it('per_tensor qparams may be scalars (shape [])', async () => {
    const dir = scratch(tmp.dir);
    writeTensors(join(dir, 'in.safetensors'), [
      w,
      { name: 'w.scale', dtype: 'F32', shape: [], data: f32([0.05]) },
      { name: 'w.zero_point', dtype: 'I32', shape: [], data: i32([-3]) },
    ]);
    await succeeds(dir, ['quantize', 'in.safetensors', '-o', 'q.safetensors']);
    const q = readStored(join(dir, 'q.safetensors'));
    const spec = parseSpec({});
    const given = { scale: Float32Array.of(0.05), zeroPoint: Int32Array.of(-3) };
    const layout = planLayout('w', w.shape, spec);
    expect(q.tensor('w').data).toEqual(
      quantizeTensor({ name: 'w', dtype: 'float32', data: w.data, layout }, spec, given).data,
    );
    expect(q.tensor('w.scale')).toEqual({ dtype: 'F32', shape: [1], data: f32([0.05]) });
    expect(q.tensor('w.zero_point')).toEqual({ dtype: 'I32', shape: [1], data: i32([-3]) });
  });

  it('qparams passes given qparams through', async () => {
    const dir = scratch(tmp.dir);
    const scale: InputTensor = {
      name: 'w.scale',
      dtype: 'F32',
      shape: [4],
      data: f32([0.5, 0.25, 0.125, 1]),
    };
    const zp: InputTensor = { name: 'w.zero_point', dtype: 'I32', shape: [4], data: i32([1, -2, 3, -4]) };
    writeTensors(join(dir, 'in.safetensors'), [w, scale, zp]);
    await succeeds(dir, ['qparams', 'in.safetensors', '-o', 'p.safetensors', '--scheme', 'per_channel']);
    const p = readStored(join(dir, 'p.safetensors'));
    expect(p.names).toEqual(['w.scale', 'w.zero_point']);
    expect(p.tensor('w.scale')).toEqual(stored(scale));
    expect(p.tensor('w.zero_point')).toEqual(stored(zp));
  });
});

describe.concurrent('--include / --exclude', () => {
  it.each<[string, string[], string[]]>([
    [
      'two --include globs and an --exclude',
      ['--include', 'layers.*', '--include', 'embed.*', '--exclude', '*.bias'],
      ['layers.0.weight', 'layers.1.weight', 'embed.weight'],
    ],
    ['two --exclude globs', ['--exclude', 'layers.*', '--exclude', 'activations'], ['embed.weight']],
    ['an exact name', ['--include', 'layers.0.bias'], ['layers.0.bias']],
  ])('%s', async (_label, args, quantized) => {
    const dir = scratch(tmp.dir);
    const r = await succeeds(dir, ['quantize', MODEL, '-o', 'q.safetensors', ...args]);
    expect(r.stdout).toBe('');
    const q = readStored(join(dir, 'q.safetensors'));
    expect(q.names).toEqual(containerNames(quantized));
    expect(Object.keys(q.metadata ?? {}).sort()).toEqual(['format', ...quantized].sort());
    for (const name of MODEL_NAMES.filter((n) => !quantized.includes(n))) {
      expect(q.tensor(name), `${name} passes through`).toEqual(model.tensor(name));
    }
  });

  it('reports on one stderr line, or not at all with -q', async () => {
    const dir = scratch(tmp.dir);
    const r = await succeeds(dir, ['quantize', MODEL, '-o', 'q.safetensors', '--include', 'embed.weight']);
    expect(r.stderr).toMatch(
      /^quantize: 1 tensors transformed, 5 passed through; [^\n]* wrote q\.safetensors; kernels: (native|wasm|js) \w+[^\n]*\n$/,
    );
    const quiet = await succeeds(dir, [
      'quantize',
      MODEL,
      '-o',
      'q2.safetensors',
      '--include',
      'embed.weight',
      '-q',
    ]);
    expect(quiet.stderr).toBe('');
    expect(quiet.stdout).toBe('');
  });
});

describe.concurrent('a qtensor container quantized again', () => {
  it('passes its quantized tensors through with their metadata, and quantizes the rest', async () => {
    const dir = scratch(tmp.dir);
    await succeeds(
      dir,
      ['quantize', MODEL, '-o', 'c1.safetensors', '--include', 'layers.0.weight'].concat([
        '--qdtype',
        'int4',
        '--scheme',
        'per_group',
        '--group-size',
        '16',
      ]),
    );
    await succeeds(dir, ['quantize', 'c1.safetensors', '-o', 'c2.safetensors', '--scheme', 'per_channel']);
    const c1 = readStored(join(dir, 'c1.safetensors'));
    const c2 = readStored(join(dir, 'c2.safetensors'));
    expect(c2.names).toEqual(containerNames(DEFAULT_NAMES));
    for (const name of ['layers.0.weight', 'layers.0.weight.scale', 'layers.0.weight.zero_point']) {
      expect(c2.tensor(name), name).toEqual(c1.tensor(name));
    }
    expect(c2.metadata?.['layers.0.weight']).toBe(c1.metadata?.['layers.0.weight']);
    expect(JSON.parse(c2.metadata!['layers.0.weight']!)).toMatchObject({
      qdtype: 'int4',
      scheme: 'per_group',
    });
    expect(JSON.parse(c2.metadata!['embed.weight']!)).toMatchObject({
      qdtype: 'int8',
      scheme: 'per_channel',
    });

    // Both generations dequantize; the carried tensor comes out as it did from the first.
    await succeeds(dir, ['dequantize', 'c1.safetensors', '-o', 'd1.safetensors']);
    await succeeds(dir, ['dequantize', 'c2.safetensors', '-o', 'd2.safetensors']);
    const d1 = readStored(join(dir, 'd1.safetensors'));
    const d2 = readStored(join(dir, 'd2.safetensors'));
    expect(d2.names).toEqual(MODEL_NAMES);
    expect(d2.tensor('layers.0.weight')).toEqual(d1.tensor('layers.0.weight'));
  });
});

describe.concurrent('outputs and inputs that are not plain files', () => {
  it('fake-quantize of a container keeps its quantized tensors, labelled, so it still dequantizes', async () => {
    const dir = scratch(tmp.dir);
    await succeeds(dir, ['quantize', MODEL, '-o', 'c.safetensors', '--include', 'layers.0.weight']);
    await succeeds(dir, [
      'fake-quantize',
      'c.safetensors',
      '-o',
      'fq.safetensors',
      '--include',
      'embed.weight',
    ]);
    const c = readStored(join(dir, 'c.safetensors'));
    const fq = readStored(join(dir, 'fq.safetensors'));
    expect(fq.metadata?.['format']).toBe('quantd.qtensor/1');
    expect(fq.metadata?.['layers.0.weight']).toBe(c.metadata?.['layers.0.weight']);
    expect(fq.names).toContain('embed.weight.mask');
    await succeeds(dir, ['dequantize', 'fq.safetensors', '-o', 'd.safetensors']);
    expect(readStored(join(dir, 'd.safetensors')).tensor('layers.0.weight').dtype).toBe('F32');
  });

  it('writes through a symlink: the link stays, the file it points to is replaced', async () => {
    const dir = scratch(tmp.dir);
    writeFileSync(join(dir, 'real.safetensors'), 'old');
    symlinkSync('real.safetensors', join(dir, 'link.safetensors'));
    const args = ['quantize', MODEL, '-o', 'link.safetensors', '--include', 'embed.weight', '--force'];
    await succeeds(dir, args);
    expect(lstatSync(join(dir, 'link.safetensors')).isSymbolicLink()).toBe(true);
    expect(readStored(join(dir, 'real.safetensors')).names).toEqual(containerNames(['embed.weight']));
  });
});
