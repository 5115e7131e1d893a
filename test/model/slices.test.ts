/**
 * Large tensors in slices (src/service/slices.ts): a model run that reads, quantizes and writes a
 * tensor a slice of rows at a time, and copies a passed-through tensor in parts, writes the same
 * file, byte for byte, as one that holds every tensor whole — on the worker pool and on the
 * TypeScript reference, for every scheme that slices, float32 / float16 / bfloat16 input, packed
 * codes whose rows end inside a byte, and a recorded checksum. The report's histograms are the
 * same and its sums agree to rounding (the kernels' float32 partial sums). A bad value in a later slice is reported as the whole
 * tensor reports it (the same flat index; the same choice between two defects), and no output
 * file is left.
 *
 * The slices here are a few KiB (`sliceBytes`), so that small tensors are cut into several.
 */
import { existsSync, readFileSync } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';

import { QuantdError } from '../../src/errors/index.js';
import { parseSafetensors, serializeSafetensors } from '../../src/format/index.js';
import { createCompute } from '../../src/pool/index.js';
import {
  combineRecipe,
  referenceCompute,
  runModel,
  unitsOf,
  type Compute,
  type OperationRequest,
} from '../../src/service/index.js';
import { planOperation } from '../../src/service/plan.js';
import { useTempDir } from '../format/helpers.js';
import { plantedBytes, type PlantedSpec } from './helpers.js';

type Spec = PlantedSpec;

/** Values whose ranges differ from unit to unit. */
const tensorBytes = (spec: Spec, seed: number): Uint8Array =>
  plantedBytes(spec, seed, (i) => (1 + (i % 11)) * (1 + (Math.floor(i / 97) % 5)));

/** Every scheme that slices, each tensor several slices of SLICE bytes (and a last short one). */
const SLICE = 4096;
const TENSORS: readonly Spec[] = [
  { name: 'embed.weight', dtype: 'BF16', shape: [121, 40] }, // skipped: copied in parts
  { name: 'l0.channel.weight', dtype: 'F32', shape: [61, 48] }, // int8 per_channel
  { name: 'l0.group.weight', dtype: 'BF16', shape: [75, 64] }, // int4 per_group g32 symmetric
  { name: 'l0.ugroup.weight', dtype: 'F16', shape: [53, 128] }, // uint4 per_group g64 affine
  { name: 'l0.token.weight', dtype: 'F16', shape: [5, 29, 36] }, // int8 per_token
  { name: 'l0.odd.weight', dtype: 'F32', shape: [83, 33] }, // int4 rows of 16.5 bytes
  { name: 'l0.two.weight', dtype: 'BF16', shape: [131, 37] }, // int2 rows of 9.25 bytes
  { name: 'l0.small.weight', dtype: 'F32', shape: [8, 16] }, // too small to slice
  { name: 'l0.norm', dtype: 'F32', shape: [64] },
];

const RULES = [
  'embed.*:skip',
  '*.channel.*:qdtype=int8,scheme=per_channel',
  '*.group.*:qdtype=int4,scheme=per_group,group_size=32,mode=symmetric',
  '*.ugroup.*:qdtype=uint4,scheme=per_group,group_size=64,mode=affine',
  '*.token.*:qdtype=int8,scheme=per_token,mode=symmetric',
  '*.odd.*:qdtype=int4,scheme=per_channel,mode=symmetric',
  '*.two.*:qdtype=int2,scheme=per_channel,mode=affine',
];

function request(): OperationRequest {
  const recipe = combineRecipe({ defaults: { qdtype: 'int8', scheme: 'per_channel' }, rules: RULES });
  return { op: 'quantize', spec: recipe.defaultSpec!, recipe, outDType: 'float32', include: [], exclude: [] };
}

const dir = useTempDir();
const pool = createCompute();
afterAll(() => pool.close());

async function writeModel(specs: readonly Spec[]): Promise<string> {
  const path = join(dir(), 'model.safetensors');
  await writeFile(
    path,
    serializeSafetensors(
      specs.map((s, k) => ({ ...s, data: tensorBytes(s, 7 + k) })),
      null,
    ),
  );
  return path;
}

async function run(input: string, name: string, compute: Compute, sliceBytes: number, checksum = false) {
  const output = join(dir(), name);
  const result = await runModel(input, output, request(), { compute, sliceBytes, checksum, concurrency: 3 });
  return { bytes: readFileSync(output), report: result.report };
}

describe('a model run in slices', () => {
  it('cuts every sliceable tensor, and only those, into several units', async () => {
    const input = await writeModel(TENSORS);
    const { header } = parseSafetensors(readFileSync(input), input);
    const plan = planOperation(header, request(), input);
    const units = unitsOf(plan, SLICE);
    const count = (name: string) =>
      units.filter((u) => u.step.kind !== 'dequantize' && u.step.entry.name === name).length;
    for (const t of TENSORS.slice(0, 7)) expect(count(t.name), t.name).toBeGreaterThan(1);
    expect(count('l0.small.weight')).toBe(1);
    expect(count('l0.norm')).toBe(1);
  });

  for (const [label, compute] of [
    ['the worker pool', () => pool.compute],
    ['the TypeScript reference', () => referenceCompute],
  ] as const) {
    it(`writes the file a whole-tensor run writes, byte for byte (${label})`, async () => {
      const input = await writeModel(TENSORS);
      const whole = await run(input, 'whole.safetensors', compute(), Infinity, true);
      const sliced = await run(input, 'sliced.safetensors', compute(), SLICE, true);
      expect(sliced.bytes.equals(whole.bytes)).toBe(true);

      const byName = (r: typeof whole.report) => new Map(r.tensors.map((t) => [t.name, t]));
      const a = byName(whole.report);
      const b = byName(sliced.report);
      expect([...b.keys()].sort()).toEqual([...a.keys()].sort());
      for (const [name, t] of a) {
        const s = b.get(name)!;
        expect(s.error_histogram, name).toEqual(t.error_histogram);
        expect(s.clipped_fraction, name).toBe(t.clipped_fraction);
        expect(s.elements, name).toBe(t.elements);
        expect(s.max_abs_error, name).toBe(t.max_abs_error);
        // the kernels sum in float32 within chunks that slices cut elsewhere
        expect(Math.abs(s.rmse - t.rmse) / t.rmse, name).toBeLessThan(1e-6);
        expect(s.bytes_out, name).toBe(t.bytes_out);
      }
      expect(sliced.report.passed_through).toEqual(whole.report.passed_through);
    });
  }

  it('reports a non-finite value in a later slice at its flat index in the tensor, and writes nothing', async () => {
    const bad = 61 * 48 - 5; // in the last slice of l0.channel.weight
    const specs = TENSORS.map((t) => (t.name === 'l0.channel.weight' ? { ...t, plant: { [bad]: NaN } } : t));
    const input = await writeModel(specs);
    const errors: QuantdError[] = [];
    for (const sliceBytes of [Infinity, SLICE]) {
      const output = join(dir(), `nan-${sliceBytes}.safetensors`);
      const err = await runModel(input, output, request(), { compute: pool.compute, sliceBytes }).catch(
        (e) => e,
      );
      expect(err).toBeInstanceOf(QuantdError);
      expect(existsSync(output)).toBe(false);
      errors.push(err as QuantdError);
    }
    expect(errors[0]!.code).toBe('INPUT_NOT_FINITE');
    expect(errors[0]!.params['index']).toBe(bad);
    expect(errors[1]!.message).toBe(errors[0]!.message);
  });

  it('reports what the whole tensor reports when one slice overflows and a later one is not finite', async () => {
    // row 0 spans the float32 range (its scale overflows); a NaN sits in the last slice
    const plant = { 0: -3e38, 1: 3e38, [61 * 48 - 1]: NaN };
    const specs = TENSORS.map((t) => (t.name === 'l0.channel.weight' ? { ...t, plant } : t));
    const input = await writeModel(specs);
    const messages: string[] = [];
    for (const sliceBytes of [Infinity, SLICE]) {
      const output = join(dir(), `two-${sliceBytes}.safetensors`);
      const err = await runModel(input, output, request(), { compute: pool.compute, sliceBytes }).catch(
        (e) => e,
      );
      expect(err).toBeInstanceOf(QuantdError);
      expect(existsSync(output)).toBe(false);
      messages.push((err as QuantdError).message);
    }
    expect(messages[1]).toBe(messages[0]);
  });
});
