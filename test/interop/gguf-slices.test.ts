/**
 * GGUF weights in slices (src/service/layouts/job-slices.ts): a layout run that reads, encodes
 * and writes each large weight a slice of rows at a time writes the same GGUF file, byte for
 * byte, as one that encodes every weight whole — for block types and k-quants, float32 /
 * float16 / bfloat16 input, q/k rows permuted per head (slices of whole heads), on the native
 * and wasm kernels. A bad value in a later slice is reported as the whole weight reports it (its
 * index; a non-finite value before an overflowing block), and no output file is left.
 *
 * The slices here are a few KiB (`sliceBytes`), so that small weights are cut into several.
 */
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';

import { QuantdError } from '../../src/errors/index.js';
import { serializeSafetensors } from '../../src/format/safetensors.js';
import type { Encoding } from '../../src/kernels/encoders.js';
import { createCompute } from '../../src/pool/index.js';
import { ggufLayout } from '../../src/service/layouts/gguf.js';
import type { LayoutHooks } from '../../src/service/layouts/run-jobs.js';
import { plantedBytes, type PlantedSpec } from '../model/helpers.js';

const DIR = mkdtempSync(join(tmpdir(), 'quantd-gguf-slices-'));
const native = createCompute({ backend: 'native', threads: 2 });
const wasm = createCompute({ backend: 'wasm', threads: 2 });
afterAll(async () => {
  await native.close();
  await wasm.close();
  rmSync(DIR, { recursive: true, force: true });
});
let seq = 0;
const tmp = (name: string): string => join(DIR, `${seq++}-${name}`);

const SLICE = 8 * 1024;

type Spec = PlantedSpec;

const bytes = (spec: Spec, seed: number): Uint8Array => plantedBytes(spec, seed, (i) => 0.1 * (1 + (i % 13)));

/** A llama-named model: q/k (permuted with names=gguf, 4 heads / 2 kv heads), and an MLP. */
function model(plants: Readonly<Record<string, Spec['plant']>> = {}): string {
  const specs: Spec[] = [
    { name: 'model.embed_tokens.weight', dtype: 'BF16', shape: [64, 256] },
    { name: 'model.layers.0.self_attn.q_proj.weight', dtype: 'BF16', shape: [256, 256] },
    { name: 'model.layers.0.self_attn.k_proj.weight', dtype: 'F16', shape: [128, 256] },
    { name: 'model.layers.0.self_attn.v_proj.weight', dtype: 'F32', shape: [128, 256] },
    { name: 'model.layers.0.mlp.down_proj.weight', dtype: 'BF16', shape: [200, 512] },
    { name: 'model.layers.0.input_layernorm.weight', dtype: 'F32', shape: [256] },
    { name: 'lm_head.weight', dtype: 'F32', shape: [96, 256] },
  ];
  const path = tmp('model.safetensors');
  const tensors = specs.map((s) => ({ ...s, plant: plants[s.name] }));
  writeFileSync(
    path,
    serializeSafetensors(
      tensors.map((t, k) => ({ name: t.name, dtype: t.dtype, shape: t.shape, data: bytes(t, 3 + k) })),
      { format: 'pt' },
    ),
  );
  return path;
}

const OPTIONS = { names: 'gguf', heads: '4', kv_heads: '2', arch: 'llama' };

async function write(input: string, type: string, hooks: LayoutHooks): Promise<Buffer> {
  const out = tmp(`${type}.gguf`);
  await ggufLayout.write(input, out, { ...OPTIONS, type }, hooks);
  return readFileSync(out);
}

describe('GGUF weights in slices', () => {
  for (const [backend, handle] of [
    ['native', native],
    ['wasm', wasm],
  ] as const) {
    for (const type of ['Q8_0', 'Q4_0', 'Q5_1', 'Q4_K', 'Q6_K']) {
      it(`${type} (${backend}): the same bytes as whole weights`, async () => {
        const input = model();
        const encoding = handle.encoding();
        const whole = await write(input, type, { encoding, sliceBytes: Infinity });
        // the tasks the sliced run sends: every weight but the norm in several windows
        const windows = new Map<string, number>();
        const spy: Encoding = {
          parallelism: encoding.parallelism,
          shared: encoding.shared,
          kernels: encoding.kernels,
          encode: (task, signal) => {
            if (task.call.kind === 'ggml' && task.call.window)
              windows.set(task.call.tensor, (windows.get(task.call.tensor) ?? 0) + 1);
            return encoding.encode(task, signal);
          },
        };
        const sliced = await write(input, type, { encoding: spy, sliceBytes: SLICE });
        expect(sliced.length).toBe(whole.length);
        expect(sliced.equals(whole)).toBe(true);
        expect(windows.size).toBe(6);
        for (const [tensor, n] of windows) expect(n, tensor).toBeGreaterThan(1);
      });
    }
  }

  it('reports progress once per weight, ending at every tensor', async () => {
    const seen: string[] = [];
    await write(model(), 'Q8_0', {
      encoding: native.encoding(),
      sliceBytes: SLICE,
      onProgress: (p) => seen.push(`${p.tensorsDone}/${p.tensorsTotal}`),
    });
    expect(seen).toEqual(Array.from({ length: 7 }, (_, i) => `${i + 1}/7`));
  });

  it("a non-finite value in a later slice: the whole weight's error, and no file", async () => {
    const input = model({ 'model.layers.0.mlp.down_proj.weight': { [199 * 512 + 7]: NaN } });
    const messages: string[] = [];
    for (const sliceBytes of [Infinity, SLICE]) {
      const out = tmp('nan.gguf');
      const err = await ggufLayout
        .write(input, out, { ...OPTIONS, type: 'Q8_0' }, { encoding: native.encoding(), sliceBytes })
        .catch((e: unknown) => e);
      expect(err).toBeInstanceOf(QuantdError);
      expect((err as QuantdError).code).toBe('INPUT_NOT_FINITE');
      expect(existsSync(out)).toBe(false);
      messages.push((err as QuantdError).message);
    }
    expect(messages[1]).toBe(messages[0]);
  });

  it("an overflowing block in the first slice and a non-finite value in a later one: the whole weight's choice", async () => {
    // 1e38 makes a Q8_0 block's float16 scale overflow; the NaN sits in the last slice
    const plant = { 3: 1e38, [199 * 512 + 7]: NaN };
    const input = model({ 'model.layers.0.mlp.down_proj.weight': plant });
    const errors: QuantdError[] = [];
    for (const sliceBytes of [Infinity, SLICE]) {
      const out = tmp('two.gguf');
      const err = await ggufLayout
        .write(input, out, { ...OPTIONS, type: 'Q8_0' }, { encoding: native.encoding(), sliceBytes })
        .catch((e: unknown) => e);
      expect(err).toBeInstanceOf(QuantdError);
      expect(existsSync(out)).toBe(false);
      errors.push(err as QuantdError);
    }
    expect(errors[0]!.code).toBe('INPUT_NOT_FINITE');
    expect(errors[1]!.message).toBe(errors[0]!.message);
  });
});
