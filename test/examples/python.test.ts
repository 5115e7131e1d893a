/**
 * The Python examples (examples/python, README "Python") against a real server: quantd_client.py
 * sends a float32 tensor (.npy) and a safetensors file, load_qtensor.py unpacks the qtensor
 * answer into torch and dequantizes it. Its float32 values must equal the TypeScript dequantize
 * bit for bit, and the error it reports against the original floats must be the one computed
 * here. Runs /usr/bin/python3 (Debian's python3-torch, python3-numpy, python3-requests); without
 * them the test is skipped with a printed reason, or fails when CI is set.
 */
import { execFile, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { dequantize, typedView } from '../../src/core/index.js';
import { findQuantizedGroups, parseSafetensors, serializeSafetensors } from '../../src/format/index.js';
import { REPO } from '../cli/run-cli.js';
import { startTestServer, type TestServer } from '../http/helpers.js';

const PYTHON = '/usr/bin/python3';
const EXAMPLES = join(REPO, 'examples', 'python');
const run = promisify(execFile);

/** Why the Python examples cannot run here, or null. */
function pythonMissing(): string | null {
  const probe = spawnSync(PYTHON, ['-c', 'import torch, numpy, requests'], { encoding: 'utf8' });
  if (probe.error) return `${PYTHON}: ${probe.error.message}`;
  if (probe.status !== 0)
    return `${PYTHON} lacks torch, numpy or requests: ${probe.stderr.trim().split('\n').pop()}`;
  return null;
}

const missing = pythonMissing();
if (missing !== null && !process.env['CI']) {
  console.warn(
    `test/examples/python.test.ts skipped: ${missing} (apt-get install python3-torch python3-numpy python3-requests)`,
  );
}

/** A .npy file (format 1.0) of a float32 array in C order. */
function npy(shape: readonly number[], values: Float32Array): Buffer {
  let header = `{'descr': '<f4', 'fortran_order': False, 'shape': (${shape.map((d) => `${d},`).join(' ')}), }`;
  header += ' '.repeat(63 - ((10 + header.length) % 64)) + '\n';
  const prefix = Buffer.alloc(10);
  prefix.write('\x93NUMPY', 0, 'latin1');
  prefix.writeUInt8(1, 6);
  prefix.writeUInt16LE(header.length, 8);
  return Buffer.concat([prefix, Buffer.from(header, 'latin1'), Buffer.from(values.buffer)]);
}

/** Deterministic floats with a spread of magnitudes and signs. */
const floats = (n: number, seed: number): Float32Array =>
  Float32Array.from({ length: n }, (_, i) => Math.sin(i * 0.7 + seed) * (1 + (i % 5)) * 0.37);

/** The TypeScript dequantize of every quantized tensor of a qtensor file: name → float32. */
function tsDequantize(file: Uint8Array): Map<string, Float32Array> {
  const { header, tensorBytes } = parseSafetensors(file, 'q.safetensors');
  const out = new Map<string, Float32Array>();
  for (const g of findQuantizedGroups(header, 'q.safetensors')) {
    const scale = typedView(Float32Array, tensorBytes(g.scale));
    const zp = tensorBytes(g.zeroPoint);
    const zeroPoint = g.zeroPoint.dtype === 'I32' ? typedView(Int32Array, zp) : typedView(Float32Array, zp);
    out.set(g.name, dequantize(tensorBytes(g.codes), g.spec.qdtype, g.layout, { scale, zeroPoint }));
  }
  return out;
}

/** The float32 tensors of a safetensors file: name → values. */
function floatTensors(file: Uint8Array): Map<string, Float32Array> {
  const { header, tensorBytes } = parseSafetensors(file, 'out.safetensors');
  return new Map(header.entries.map((e) => [e.name, typedView(Float32Array, tensorBytes(e))]));
}

const bytesOf = (a: Float32Array): Buffer => Buffer.from(a.buffer, a.byteOffset, a.byteLength);

const maxAbsError = (a: Float32Array, b: Float32Array): number =>
  a.reduce((m, v, i) => Math.max(m, Math.abs(Math.fround(v - b[i]!))), 0);

describe.skipIf(missing !== null && !process.env['CI'])('the Python examples', () => {
  let server: TestServer;
  let dir: string;
  beforeAll(async () => {
    expect(missing, 'CI must have python3-torch, python3-numpy and python3-requests').toBeNull();
    dir = mkdtempSync(join(tmpdir(), 'quantd-py-'));
    server = await startTestServer({ QUANTD_DATA_DIR: join(dir, 'data') });
  });
  afterAll(async () => {
    await server?.server.shutdown('test done');
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  const python = (script: string, args: readonly string[]): Promise<{ stdout: string }> =>
    run(PYTHON, [join(EXAMPLES, script), ...args], {
      cwd: dir,
      env: { ...process.env, QUANTD_URL: server.base },
    });

  /** Runs both scripts on INPUT; checks the values against TypeScript and ORIGINALS. */
  async function roundTrip(input: string, options: readonly string[], originals: Map<string, Float32Array>) {
    const q = join(dir, `q-${input}.safetensors`);
    const back = join(dir, `back-${input}.safetensors`);
    await python('quantd_client.py', ['quantize', input, '-o', q, ...options]);
    const { stdout } = await python('load_qtensor.py', [q, '--original', input, '--out', back]);
    const lines = stdout
      .trim()
      .split('\n')
      .map(
        (l) => JSON.parse(l) as { name: string; qdtype: string; max_abs_error: number; max_scale: number },
      );

    const expected = tsDequantize(readFileSync(q));
    const actual = floatTensors(readFileSync(back));
    expect([...actual.keys()]).toEqual([...expected.keys()]);
    expect([...expected.keys()].sort()).toEqual([...originals.keys()].sort());
    for (const [name, values] of expected) {
      expect(bytesOf(actual.get(name)!).equals(bytesOf(values)), name).toBe(true);
      const line = lines.find((l) => l.name === name)!;
      expect(line.max_abs_error, name).toBe(maxAbsError(values, originals.get(name)!));
      expect(line.max_abs_error, name).toBeLessThanOrEqual(line.max_scale / 2 + 1e-6);
      expect(line.max_abs_error, name).toBeGreaterThan(0); // the comparison is not vacuous
    }
    return lines;
  }

  it('int8 per_channel: a float32 tensor (.npy) as the raw body', async () => {
    const values = floats(8 * 16, 1);
    writeFileSync(join(dir, 'x.npy'), npy([8, 16], values));
    const lines = await roundTrip(
      'x.npy',
      ['qdtype=int8', 'scheme=per_channel'],
      new Map([['tensor', values]]),
    );
    expect(lines.map((l) => [l.name, l.qdtype])).toEqual([['tensor', 'int8']]);
  });

  it('int4 per_group: a safetensors file, an odd element count (a padded last byte)', async () => {
    const a = floats(4 * 9, 2);
    const b = floats(3 * 9, 3);
    const tensors = [
      { name: 'a', shape: [4, 9], values: a },
      { name: 'b', shape: [3, 9], values: b },
    ];
    const file = serializeSafetensors(
      tensors.map((t) => ({
        name: t.name,
        dtype: 'F32',
        shape: t.shape,
        data: new Uint8Array(t.values.buffer),
      })),
      null,
    );
    writeFileSync(join(dir, 'x.safetensors'), file);
    const lines = await roundTrip(
      'x.safetensors',
      ['qdtype=int4', 'scheme=per_group', 'group_size=3'],
      new Map([
        ['a', a],
        ['b', b],
      ]),
    );
    expect(lines.map((l) => l.qdtype)).toEqual(['int4', 'int4']);
  });

  it('a server error is the catalogue code on stderr and exit 2', async () => {
    writeFileSync(join(dir, 'x.npy'), npy([8, 16], floats(8 * 16, 1)));
    const err = await python('quantd_client.py', [
      'quantize',
      'x.npy',
      '-o',
      'never.safetensors',
      'group_size=5',
      'scheme=per_group',
      'qdtype=int4',
    ]).catch((e: { code: number; stderr: string }) => e);
    expect(err).toMatchObject({
      code: 2,
      stderr: expect.stringContaining('error GROUP_SIZE_INVALID:') as unknown,
    });
  });

  it("calibrate_torch_model.py: a session's qparams equal torch's own observers, its statistics torch's sums", async () => {
    const { stdout } = await python('calibrate_torch_model.py', ['--batches', '4']);
    const lines = stdout
      .trim()
      .split('\n')
      .map(
        (l) =>
          JSON.parse(l) as {
            name: string;
            kind: string;
            scale: number;
            torch_equal: boolean;
            tokens: number;
            hessian_rel_error: number;
            abs_sum_rel_error: number;
          },
      );
    expect(lines.map((l) => [l.name, l.kind])).toEqual([
      ['fc1.input', 'histogram'],
      ['fc2.input', 'moving_average_min_max'],
    ]);
    for (const l of lines) {
      expect(l.torch_equal, l.name).toBe(true);
      expect(l.scale, l.name).toBeGreaterThan(0);
      // GPTQ's statistics against torch's float64 sums (another summation order: to rounding)
      expect(l.tokens, l.name).toBe(4 * 8);
      expect(l.hessian_rel_error, l.name).toBeLessThan(1e-12);
      expect(l.abs_sum_rel_error, l.name).toBeLessThan(1e-12);
    }
  });
});
