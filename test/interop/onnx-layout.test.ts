/**
 * The "onnx" layout (src/service/layouts/onnx.ts): the .onnx file decoded by a protobuf reader
 * written here from onnx.proto's field numbers (sharing no code with src/format/onnx*.ts) — IR
 * version, opsets, MatMulNBits nodes and their attributes, graph inputs and outputs, initializer
 * dtypes, shapes and external-data entries — the tensor bytes against the numerics, the round trip
 * write → read, the CLI (quantize --layout onnx, dequantize auto-detecting it), detection, and the
 * errors.
 */
import { existsSync, readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

import { afterAll, describe, expect, it } from 'vitest';

import {
  matMulNBitsDequantize,
  matMulNBitsQuantize,
  matMulNBitsShapes,
} from '../../src/core/interop/onnx.js';
import { fromFloat32 } from '../../src/core/tensor.js';
import { OnnxFileReader } from '../../src/format/onnx-file.js';
import { LAYOUTS } from '../../src/service/layouts/index.js';
import { quantdAsync } from '../cli/cli-helpers.js';
import {
  errorCode,
  f32Bytes,
  floatsOf,
  head,
  readRaw,
  sameBytes,
  tempRoot,
  tree,
  writeLlama,
  writeSafetensors,
} from './gptq-awq-bnb.helpers.js';

const onnx = LAYOUTS.get('onnx')!;
const scratch = tempRoot('quantd-onnx-');
afterAll(() => scratch.cleanup());

// --- an independent protobuf reader (protobuf.dev encoding; onnx.proto field numbers) ----------

type Value = number | Uint8Array;
type Msg = Map<number, Value[]>;

function varint(b: Uint8Array, at: number): [number, number] {
  let v = 0n;
  let shift = 0n;
  for (;;) {
    const byte = b[at++]!;
    v |= BigInt(byte & 0x7f) << shift;
    shift += 7n;
    if (byte < 0x80) return [Number(BigInt.asIntN(64, v)), at];
  }
}

function msg(b: Uint8Array): Msg {
  const m: Msg = new Map();
  let at = 0;
  while (at < b.length) {
    let key: number;
    [key, at] = varint(b, at);
    const field = key >> 3;
    let value: Value;
    if ((key & 7) === 0) [value, at] = varint(b, at);
    else if ((key & 7) === 2) {
      let n: number;
      [n, at] = varint(b, at);
      value = b.subarray(at, at + n);
      at += n;
    } else throw new Error(`wire type ${key & 7}`);
    m.set(field, [...(m.get(field) ?? []), value]);
  }
  return m;
}

const text = (v: Value | undefined): string => new TextDecoder().decode(v as Uint8Array);
const sub = (m: Msg, f: number): Msg[] => (m.get(f) ?? []).map((v) => msg(v as Uint8Array));
const num = (m: Msg, f: number): number | undefined => m.get(f)?.[0] as number | undefined;
const str = (m: Msg, f: number): string | undefined => (m.has(f) ? text(m.get(f)![0]) : undefined);
const strs = (m: Msg, f: number): string[] => (m.get(f) ?? []).map(text);

interface Tensor {
  name: string;
  dtype: number;
  dims: number[];
  location: string;
  offset: number;
  length: number;
  external: boolean;
}

function decodeFile(path: string) {
  const model = msg(readFileSync(path));
  const graph = sub(model, 7)[0]!;
  const opsets = sub(model, 8).map((o) => [str(o, 1) ?? '', num(o, 2)]);
  const nodes = sub(graph, 1).map((n) => ({
    inputs: strs(n, 1),
    outputs: strs(n, 2),
    name: str(n, 3),
    opType: str(n, 4),
    domain: str(n, 7),
    attrs: Object.fromEntries(sub(n, 5).map((a) => [str(a, 1), { type: num(a, 20), i: num(a, 3) }])),
  }));
  const tensors: Tensor[] = sub(graph, 5).map((t) => {
    const ext = Object.fromEntries(sub(t, 13).map((e) => [str(e, 1), str(e, 2)]));
    return {
      name: str(t, 8)!,
      dtype: num(t, 2)!,
      dims: (t.get(1) ?? []) as number[],
      location: ext['location']!,
      offset: Number(ext['offset']),
      length: Number(ext['length']),
      external: num(t, 14) === 1,
    };
  });
  const valueInfo = (v: Msg) => {
    const tensor = sub(sub(v, 2)[0]!, 1)[0]!;
    const dims = sub(sub(tensor, 2)[0]!, 1).map((d) => num(d, 1) ?? str(d, 2));
    return { name: str(v, 1), elemType: num(tensor, 1), dims };
  };
  return {
    irVersion: num(model, 1),
    producer: str(model, 2),
    opsets,
    metadata: Object.fromEntries(sub(model, 14).map((e) => [str(e, 1), str(e, 2)])),
    nodes,
    tensors,
    inputs: sub(graph, 11).map(valueInfo),
    outputs: sub(graph, 12).map(valueInfo),
  };
}

const FLOAT = 1;
const UINT8 = 2;
const FLOAT16 = 10;
const ONNX_OF: Record<string, number> = { F32: 1, F16: 10, BF16: 16, I64: 7 };

// --- the tests --------------------------------------------------------------------------------

const input = join(scratch.dir, 'llama.safetensors');
const written = (async () => {
  await writeLlama(input, 4, 64); // layer 3 is float16, the others bfloat16
  const out = join(scratch.dir, 'out.onnx');
  const result = await onnx.write(input, out, {});
  return { out, result };
})();

function dataOf(out: string, t: Tensor): Uint8Array {
  return new Uint8Array(readFileSync(`${out}.data`).subarray(t.offset, t.offset + t.length));
}

describe('the onnx layout writes an ONNX model of MatMulNBits nodes', () => {
  it('ModelProto: IR 9, opsets "" 19 and com.microsoft 1, producer, metadata', async () => {
    const { out, result } = await written;
    expect(result.files).toEqual([out, `${out}.data`]);
    const m = decodeFile(out);
    expect(m.irVersion).toBe(9);
    expect(m.opsets).toEqual([
      ['', 19],
      ['com.microsoft', 1],
    ]);
    expect(m.producer).toBe('quantd');
    expect(m.metadata).toMatchObject({
      'quantd.layout': 'onnx',
      'quantd.block_size': '32',
      'quantd.sym': 'false',
    });
  });

  it('one MatMulNBits per linear weight: attributes K, N, bits 4, block_size; typed graph inputs and outputs', async () => {
    const { out } = await written;
    const m = decodeFile(out);
    const raw = readRaw(input);
    const linear = raw.tensors.filter((t) => /_proj\.weight$/.test(t.name));
    expect(m.nodes.length).toBe(linear.length);
    for (const [i, w] of linear.entries()) {
      const mod = w.name.slice(0, -'.weight'.length);
      const [N, K] = w.shape as [number, number];
      const node = m.nodes[i]!;
      expect(node).toMatchObject({ opType: 'MatMulNBits', domain: 'com.microsoft', outputs: [`Y_${mod}`] });
      expect(node.inputs).toEqual([`A_${mod}`, `${w.name}_Q4`, `${w.name}_scales`, `${w.name}_zero_points`]);
      expect(node.attrs).toEqual({
        K: { type: 2, i: K },
        N: { type: 2, i: N },
        bits: { type: 2, i: 4 },
        block_size: { type: 2, i: 32 },
      });
      const floatType = w.dtype === 'F16' ? FLOAT16 : FLOAT;
      expect(m.inputs[i]).toEqual({ name: `A_${mod}`, elemType: floatType, dims: ['batch', K] });
      expect(m.outputs[i]).toEqual({ name: `Y_${mod}`, elemType: floatType, dims: ['batch', N] });
    }
  });

  it('initializers in input order: B uint8 [N, k_blocks, 16], scales [N·k_blocks], zero points [N·⌈k_blocks/2⌉], all external', async () => {
    const { out } = await written;
    const m = decodeFile(out);
    const raw = readRaw(input);
    const expected: { name: string; dtype: number; dims: number[] }[] = [];
    for (const t of raw.tensors) {
      if (!/_proj\.weight$/.test(t.name)) {
        expected.push({ name: t.name, dtype: ONNX_OF[t.dtype]!, dims: [...t.shape] });
        continue;
      }
      const [N, K] = t.shape as [number, number];
      const kb = Math.ceil(K / 32);
      expected.push(
        { name: `${t.name}_Q4`, dtype: UINT8, dims: [N, kb, 16] },
        { name: `${t.name}_scales`, dtype: t.dtype === 'F16' ? FLOAT16 : FLOAT, dims: [N * kb] },
        { name: `${t.name}_zero_points`, dtype: UINT8, dims: [N * Math.ceil(kb / 2)] },
      );
    }
    expect(m.tensors.map((t) => ({ name: t.name, dtype: t.dtype, dims: t.dims }))).toEqual(expected);
    const dataBytes = readFileSync(`${out}.data`).length;
    let end = 0;
    for (const t of m.tensors) {
      expect(t.external, t.name).toBe(true);
      expect(t.location).toBe('out.onnx.data');
      expect(t.offset).toBeGreaterThanOrEqual(end);
      expect(t.offset % (t.length >= 65536 ? 4096 : 16)).toBe(0);
      end = t.offset + t.length;
    }
    expect(dataBytes).toBe(end);
  });

  it('the tensors’ bytes: plain ones as in the input, quantized ones as matMulNBitsQuantize packs them', async () => {
    const { out } = await written;
    const m = decodeFile(out);
    const byName = new Map(m.tensors.map((t) => [t.name, t]));
    for (const t of readRaw(input).tensors) {
      if (!/_proj\.weight$/.test(t.name)) {
        expect(sameBytes(dataOf(out, byName.get(t.name)!), t.data), t.name).toBeNull();
        continue;
      }
      const scaleType = t.dtype === 'F16' ? 'float16' : 'float32';
      const p = matMulNBitsQuantize(t.name, floatsOf(t), t.shape, { blockSize: 32, sym: false, scaleType });
      expect(sameBytes(dataOf(out, byName.get(`${t.name}_Q4`)!), p.b), t.name).toBeNull();
      expect(
        sameBytes(dataOf(out, byName.get(`${t.name}_scales`)!), fromFloat32(p.scales, scaleType)),
      ).toBeNull();
      expect(sameBytes(dataOf(out, byName.get(`${t.name}_zero_points`)!), p.zeroPoints!)).toBeNull();
    }
  });

  it('round trip: read gives each weight as matMulNBitsDequantize does (F32 [N, K]), everything else unchanged', async () => {
    const { out } = await written;
    const back = join(scratch.dir, 'back.safetensors');
    expect(await onnx.read(out, back)).toEqual({ tensors: readRaw(input).tensors.length });
    const r = readRaw(back);
    const src = readRaw(input);
    expect(r.tensors.map((t) => t.name)).toEqual(src.tensors.map((t) => t.name));
    expect(r.metadata).toMatchObject({ format: 'pt', 'quantd.source': 'onnx' });
    for (const t of src.tensors) {
      const b = r.byName.get(t.name)!;
      if (!/_proj\.weight$/.test(t.name)) {
        expect({ dtype: b.dtype, shape: b.shape }).toEqual({ dtype: t.dtype, shape: t.shape });
        expect(sameBytes(b.data, t.data), t.name).toBeNull();
        continue;
      }
      expect({ dtype: b.dtype, shape: b.shape }).toEqual({ dtype: 'F32', shape: t.shape });
      const scaleType = t.dtype === 'F16' ? 'float16' : 'float32';
      const p = matMulNBitsQuantize(t.name, floatsOf(t), t.shape, { blockSize: 32, sym: false, scaleType });
      const w = matMulNBitsDequantize(p.b, p.scales, p.zeroPoints, matMulNBitsShapes(t.name, t.shape, 32));
      expect(sameBytes(b.data, f32Bytes(w)), t.name).toBeNull();
      // and close to the original: 4-bit steps of a block's range
      const x = floatsOf(t);
      const err = Math.max(...Array.from(w, (v, i) => Math.abs(v - x[i]!)));
      expect(err).toBeLessThan(0.05);
    }
  });

  it('tensors read at once share one handle of the data file, closed with the reader', async () => {
    const { out } = await written;
    const fds = (): number => readdirSync('/proc/self/fd').length;
    const before = fds();
    const reader = await OnnxFileReader.open(out);
    try {
      // every initializer at once: before the fix, each first read opened the file again
      await Promise.all(reader.model.initializers.map((t) => reader.read(t)));
      expect(fds()).toBe(before + 1);
    } finally {
      await reader.close();
    }
    expect(fds()).toBe(before);
  });

  it('sym: no zero_points input or initializer; accuracy_level and block_size options become attributes', async () => {
    const out = join(scratch.dir, 'sym.onnx');
    const result = await onnx.write(input, out, { sym: 'true', block_size: '64', accuracy_level: '4' });
    expect(result.tensors.find((t) => t.name.endsWith('q_proj.weight'))?.type).toBe(
      'MatMulNBits int4 b64 sym',
    );
    const m = decodeFile(out);
    for (const n of m.nodes) {
      expect(n.inputs.length).toBe(3);
      expect(n.attrs['block_size']).toEqual({ type: 2, i: 64 });
      expect(n.attrs['accuracy_level']).toEqual({ type: 2, i: 4 });
    }
    expect(m.tensors.some((t) => t.name.endsWith('_zero_points'))).toBe(false);
    const back = join(scratch.dir, 'sym.back.safetensors');
    await onnx.read(out, back);
    const t = readRaw(input).byName.get('model.layers.0.mlp.down_proj.weight')!;
    const p = matMulNBitsQuantize(t.name, floatsOf(t), t.shape, {
      blockSize: 64,
      sym: true,
      scaleType: 'float32',
    });
    const w = matMulNBitsDequantize(p.b, p.scales, null, matMulNBitsShapes(t.name, t.shape, 64));
    expect(sameBytes(readRaw(back).byName.get(t.name)!.data, f32Bytes(w))).toBeNull();
  });

  it('a row length that is not a multiple of block_size (ORT pads the last block)', async () => {
    const path = join(scratch.dir, 'odd.safetensors');
    const values = Array.from({ length: 3 * 45 }, (_, i) => Math.sin(i * 0.37) * 0.1);
    writeSafetensors(path, [
      { name: 'model.layers.0.mlp.up_proj.weight', dtype: 'F32', shape: [3, 45], data: f32Bytes(values) },
    ]);
    const out = join(scratch.dir, 'odd.onnx');
    await onnx.write(path, out, { block_size: '16' });
    const m = decodeFile(out);
    expect(m.tensors.map((t) => t.dims)).toEqual([[3, 3, 8], [9], [6]]);
    const back = join(scratch.dir, 'odd.back.safetensors');
    await onnx.read(out, back);
    const p = matMulNBitsQuantize('w', Float32Array.from(values), [3, 45], {
      blockSize: 16,
      sym: false,
      scaleType: 'float32',
    });
    const w = matMulNBitsDequantize(p.b, p.scales, p.zeroPoints, matMulNBitsShapes('w', [3, 45], 16));
    expect(sameBytes(readRaw(back).tensors[0]!.data, f32Bytes(w))).toBeNull();
  });
});

describe('the command line', () => {
  it('quantize --layout onnx writes OUT.onnx + OUT.onnx.data; dequantize recognizes the .onnx', async () => {
    const out = join(scratch.dir, 'cli.onnx');
    const q = await quantdAsync(['quantize', input, '-o', out, '--layout', 'onnx:block_size=32']);
    expect(q.code, q.stderr).toBe(0);
    expect(q.stderr).toContain('MatMulNBits int4 b32 asym');
    const { out: viaApi } = await written;
    expect(sameBytes(readFileSync(`${out}.data`), readFileSync(`${viaApi}.data`))).toBeNull();
    const back = join(scratch.dir, 'cli.back.safetensors');
    const d = await quantdAsync(['dequantize', out, '-o', back]);
    expect(d.code, d.stderr).toBe(0);
    expect(d.stderr).toContain('onnx file');
    const apiBack = join(scratch.dir, 'api.back.safetensors');
    await onnx.read(viaApi, apiBack);
    expect(sameBytes(readFileSync(back), readFileSync(apiBack))).toBeNull();
  });
});

describe('detect', () => {
  it('an .onnx file that starts like a ModelProto, and nothing else', async () => {
    const { out } = await written;
    expect(onnx.detect(out, head(out))).toBe(true);
    expect(onnx.detect(out, head(out, 3))).toBe(true);
    expect(onnx.detect(join(scratch.dir, 'x.bin'), head(out))).toBe(false);
    expect(onnx.detect(join(scratch.dir, 'x.onnx'), head(input))).toBe(false);
    expect(onnx.detect(join(scratch.dir, 'x.onnx'), Uint8Array.from([0x08, 0x00]))).toBe(false);
    expect(onnx.detect(join(scratch.dir, 'x.onnx'), new TextEncoder().encode('GGUF\x03\x00'))).toBe(false);
    for (const other of LAYOUTS.values()) {
      if (other !== onnx) expect(other.detect(out, head(out)), other.name).toBe(false);
    }
  });
});

describe('errors', () => {
  it('bad options: OPTION_INVALID, before anything is written', async () => {
    for (const options of [
      { block_size: '48' },
      { block_size: '512' },
      { sym: 'maybe' },
      { accuracy_level: '5' },
      { bits: '4' },
    ]) {
      const out = join(scratch.dir, 'bad-option.onnx');
      expect(await errorCode(() => onnx.write(input, out, options)), JSON.stringify(options)).toBe(
        'OPTION_INVALID',
      );
      expect(existsSync(out)).toBe(false);
    }
  });

  it('no linear weight: NO_TENSOR_SELECTED; a NaN weight: INPUT_NOT_FINITE, and nothing left behind', async () => {
    const dir = tempRoot('quantd-onnx-err-');
    try {
      const none = join(dir.dir, 'none.safetensors');
      writeSafetensors(none, [
        { name: 'norm.weight', dtype: 'F32', shape: [4], data: f32Bytes([1, 2, 3, 4]) },
      ]);
      expect(await errorCode(() => onnx.write(none, join(dir.dir, 'none.onnx'), {}))).toBe(
        'NO_TENSOR_SELECTED',
      );
      const nan = join(dir.dir, 'nan.safetensors');
      const values = Array.from({ length: 64 }, (_, i) => (i === 40 ? NaN : i / 64));
      writeSafetensors(nan, [
        {
          name: 'model.layers.0.self_attn.q_proj.weight',
          dtype: 'F32',
          shape: [2, 32],
          data: f32Bytes(values),
        },
      ]);
      expect(await errorCode(() => onnx.write(nan, join(dir.dir, 'nan.onnx'), {}))).toBe('INPUT_NOT_FINITE');
      expect(tree(dir.dir)).toEqual(['nan.safetensors', 'none.safetensors']);
    } finally {
      dir.cleanup();
    }
  });

  it('reading a damaged model: LAYOUT_INVALID naming it; a missing data file: FILE_NOT_FOUND', async () => {
    const { out } = await written;
    const dir = tempRoot('quantd-onnx-read-');
    try {
      const bytes = readFileSync(out);
      const cut = join(dir.dir, 'cut.onnx');
      writeFileSync(cut, bytes.subarray(0, bytes.length - 7));
      expect(await errorCode(() => onnx.read(cut, join(dir.dir, 'x.safetensors')))).toBe('LAYOUT_INVALID');
      const alone = join(dir.dir, 'alone.onnx');
      writeFileSync(alone, bytes); // names out.onnx.data, which is not beside it
      expect(await errorCode(() => onnx.read(alone, join(dir.dir, 'x.safetensors')))).toBe('FILE_NOT_FOUND');
      // a location that leaves the model's directory is refused, whatever is there
      const escape = join(dir.dir, 'escape.onnx');
      writeFileSync(
        escape,
        Buffer.from(bytes.toString('latin1').replaceAll('out.onnx.data', '../o.onnx.dat'), 'latin1'),
      );
      expect(await errorCode(() => onnx.read(escape, join(dir.dir, 'x.safetensors')))).toBe('LAYOUT_INVALID');
      // a data file shorter than the tensors it holds
      const short = join(dir.dir, 'short.onnx');
      writeFileSync(
        short,
        Buffer.from(bytes.toString('latin1').replaceAll('out.onnx.data', 'shrt.onnx.dat'), 'latin1'),
      );
      writeFileSync(join(dir.dir, 'shrt.onnx.dat'), readFileSync(`${out}.data`).subarray(0, 1000));
      expect(await errorCode(() => onnx.read(short, join(dir.dir, 'x.safetensors')))).toBe('LAYOUT_INVALID');
      expect(tree(dir.dir).some((f) => f.endsWith('.safetensors'))).toBe(false);
    } finally {
      dir.cleanup();
    }
  });
});
