/**
 * The "onnx" layout against the real tools, when a Python with numpy, onnx and onnxruntime is
 * named by QUANTD_ORT_PYTHON (skipped otherwise — CI has none): golden/onnx_ort_check.py runs
 * onnx.checker (full_check), compares every MatMulNBits tensor with ORT's own quantizer byte for
 * byte, and runs the model in onnxruntime against the weights quantd reads back. The second
 * block needs only onnxruntime-node (QUANTD_ORT_NODE = its package directory, e.g. after
 * `npm i --prefix /tmp/ort --ignore-scripts onnxruntime-node`): ORT loads the file, runs every
 * MatMulNBits node, and Y must equal A · Wᵀ for the W quantd dequantizes from the same file.
 */
import { spawnSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { join } from 'node:path';

import { afterAll, describe, expect, it } from 'vitest';

import { float16BitsFromFloat32, float32FromFloat16Bits } from '../../src/core/float16.js';
import { LAYOUTS } from '../../src/service/layouts/index.js';
import { GOLDEN, readRaw, tempRoot, writeLlama } from './gptq-awq-bnb.helpers.js';

const python = process.env['QUANTD_ORT_PYTHON'];
const scratch = tempRoot('quantd-onnx-ort-');
afterAll(() => scratch.cleanup());

describe.skipIf(python === undefined || python === '')(
  'onnx layout in onnxruntime (QUANTD_ORT_PYTHON)',
  () => {
    it.each([
      ['asym, block 32', { block_size: '32' }, 32, false, []],
      ['sym, block 16', { block_size: '16', sym: 'true' }, 16, true, []],
      // accuracy_level 4: ORT quantizes A to int8 per block, so Y is only close
      ['asym, block 128, accuracy_level 4', { block_size: '128', accuracy_level: '4' }, 128, false, ['0.05']],
    ] as const)('%s', async (_, options, blockSize, sym, tolerance) => {
      const input = join(scratch.dir, 'llama.safetensors');
      await writeLlama(input, 4, 128); // bfloat16 layers and a float16 one
      const model = join(scratch.dir, `m${blockSize}${sym ? 's' : 'a'}.onnx`);
      const back = `${model}.back.safetensors`;
      const onnx = LAYOUTS.get('onnx')!;
      await onnx.write(input, model, options);
      await onnx.read(model, back);
      const r = spawnSync(
        python!,
        [join(GOLDEN, 'onnx_ort_check.py'), input, model, back, String(blockSize), String(sym), ...tolerance],
        { encoding: 'utf8' },
      );
      expect(r.status, `${r.stdout}\n${r.stderr}`).toBe(0);
      expect(r.stdout).toContain('byte-identical to ORT');
    });
  },
);

interface OrtTensor {
  readonly data: Float32Array | Uint16Array;
}
interface Ort {
  Tensor: new (type: 'float32' | 'float16', data: Float32Array | Uint16Array, dims: number[]) => OrtTensor;
  InferenceSession: {
    create(
      path: string,
      options: object,
    ): Promise<{
      readonly inputNames: readonly string[];
      run(feeds: Record<string, OrtTensor>): Promise<Record<string, OrtTensor>>;
    }>;
  };
}

const ortNode = process.env['QUANTD_ORT_NODE'];

describe.skipIf(ortNode === undefined || ortNode === '')(
  'onnx layout in onnxruntime-node (QUANTD_ORT_NODE)',
  () => {
    it.each([
      ['asym, block 32', { block_size: '32' }],
      ['sym, block 16', { block_size: '16', sym: 'true' }],
      ['asym, block 256', { block_size: '256' }],
    ] as const)('%s: every node runs and Y = A·Wᵀ of the weights read back', async (_, options) => {
      const ort = createRequire(import.meta.url)(ortNode!) as Ort;
      const input = join(scratch.dir, 'llama-node.safetensors');
      await writeLlama(input, 4, 128);
      const model = join(scratch.dir, `node-${options.block_size}.onnx`);
      const back = `${model}.back.safetensors`;
      const onnx = LAYOUTS.get('onnx')!;
      await onnx.write(input, model, options);
      await onnx.read(model, back);
      const weights = readRaw(back).byName;
      // A and Y have the weight's float type: float16 for a float16 weight, float32 otherwise
      const inputTypes = readRaw(input).byName;
      const half = (name: string): boolean => inputTypes.get(`${name.slice(2)}.weight`)!.dtype === 'F16';
      const session = await ort.InferenceSession.create(model, { logSeverityLevel: 3 });
      const rows = 3;
      const feeds: Record<string, OrtTensor> = {};
      for (const name of session.inputNames) {
        const k = weights.get(`${name.slice(2)}.weight`)!.shape[1]!;
        const a = Float32Array.from({ length: rows * k }, (_, i) => Math.sin(i * 0.37));
        feeds[name] = half(name)
          ? new ort.Tensor('float16', Uint16Array.from(a, float16BitsFromFloat32), [rows, k])
          : new ort.Tensor('float32', a, [rows, k]);
      }
      const outputs = await session.run(feeds);
      expect(session.inputNames.length).toBeGreaterThan(0);
      for (const name of session.inputNames) {
        const w = weights.get(`${name.slice(2)}.weight`)!;
        const [n, k] = w.shape as [number, number];
        const wf = new Float32Array(w.data.buffer, w.data.byteOffset, n * k);
        const asFloat = (d: Float32Array | Uint16Array): Float32Array =>
          d instanceof Uint16Array ? Float32Array.from(d, float32FromFloat16Bits) : d;
        const a = asFloat(feeds[name]!.data);
        const y = asFloat(outputs[name.replace(/^A_/, 'Y_')]!.data);
        // float16 accumulation and output rounding: ~1e-3 relative
        const tolerance = half(name) ? 4e-3 : 1e-4;
        for (let r = 0; r < rows; r++) {
          for (let j = 0; j < n; j++) {
            let sum = 0;
            for (let i = 0; i < k; i++) sum += a[r * k + i]! * wf[j * k + i]!;
            expect(Math.abs(sum - y[r * n + j]!)).toBeLessThan(tolerance * (1 + Math.abs(sum)));
          }
        }
      }
    });
  },
);
