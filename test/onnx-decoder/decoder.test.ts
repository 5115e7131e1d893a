/**
 * The decoder graph (src/service/decoder) runs in ONNX Runtime and gives the logits of a torch
 * forward pass (test/onnx-decoder/generate.py) at every position, for each architecture, within
 * 1e-4 of the largest logit.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';

import { GraphBuilder } from '../../src/format/onnx-graph.js';
import { encodeModel, ONNX_OF_ST, type OnnxInitializer } from '../../src/format/onnx.js';
import { SafetensorsFileReader } from '../../src/format/safetensors-file.js';
import { buildDecoder } from '../../src/service/decoder/graph.js';
import { decoderSpec } from '../../src/service/decoder/spec.js';
import { initializerWeights } from '../../src/service/decoder/weights.js';
import { HAVE_ONNXRUNTIME } from '../setup/engines.js';

const FIXTURES = new URL('../gguf-hf/fixtures/', import.meta.url).pathname;
const EXPECTED = new URL('./expected/', import.meta.url).pathname;

interface Expected {
  readonly fixture: string;
  readonly config: Record<string, unknown>;
  readonly ids: number[];
  readonly logits: number[][];
}

async function modelBytes(expected: Expected): Promise<Uint8Array> {
  const dir = join(FIXTURES, expected.fixture);
  const config = { ...JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8')), ...expected.config };
  const spec = decoderSpec(config, 'config.json');
  const reader = await SafetensorsFileReader.open(join(dir, 'model.safetensors'));
  const initializers: OnnxInitializer[] = [];
  try {
    for (const e of reader.header.entries) {
      initializers.push({
        name: e.name,
        dataType: ONNX_OF_ST[e.dtype],
        dims: e.shape,
        data: { kind: 'raw', bytes: await reader.read(e) },
      });
    }
  } finally {
    await reader.close();
  }
  const g = new GraphBuilder();
  g.reserve(initializers.map((i) => i.name));
  const dtypes = new Map(initializers.map((i) => [i.name, i.dataType === 1 ? 'F32' : 'F16'] as const));
  buildDecoder(g, spec, initializerWeights(dtypes), { maxPositions: 64 });
  return encodeModel({
    irVersion: 9,
    opsets: [
      { domain: '', version: 21 },
      { domain: 'com.microsoft', version: 1 },
    ],
    producerName: 'quantd',
    producerVersion: '',
    docString: '',
    metadata: [],
    graphName: 'decoder',
    nodes: g.nodes,
    inputs: g.inputs,
    outputs: g.outputs,
    initializers: [...g.inline, ...initializers],
  });
}

const CASES = [
  'llama-spm',
  'llama3-bpe',
  'mistral-spm',
  'qwen2-bpe',
  'qwen3-bpe',
  'phi3-spm',
  'phi3-window',
  'gemma2-spm',
  'gemma2-window',
];

describe.skipIf(!HAVE_ONNXRUNTIME)('decoder graph in ONNX Runtime', () => {
  for (const name of CASES) {
    it(`${name}: logits at every position equal the torch forward pass`, async () => {
      const expected = JSON.parse(readFileSync(join(EXPECTED, `${name}.json`), 'utf8')) as Expected;
      const ort = await import('onnxruntime-node');
      const session = await ort.InferenceSession.create(await modelBytes(expected), {
        graphOptimizationLevel: 'all',
        intraOpNumThreads: 1,
      });
      const n = expected.ids.length;
      const feeds: Record<string, InstanceType<typeof ort.Tensor>> = {
        input_ids: new ort.Tensor('int64', BigInt64Array.from(expected.ids.map(BigInt)), [1, n]),
        attention_mask: new ort.Tensor('int64', new BigInt64Array(n).fill(1n), [1, n]),
      };
      for (const input of session.inputNames) {
        if (!input.startsWith('past_key_values.')) continue;
        const meta = session.inputMetadata.find((m) => m.name === input) as unknown as {
          shape: (number | string)[];
        };
        feeds[input] = new ort.Tensor('float32', new Float32Array(0), [
          1,
          meta.shape[1] as number,
          0,
          meta.shape[3] as number,
        ]);
      }
      const out = await session.run(feeds, ['logits']);
      const logits = out['logits']!.data as Float32Array;
      const vocab = expected.logits[0]!.length;
      let largest = 0;
      let worst = 0;
      for (let t = 0; t < n; t++) {
        for (let v = 0; v < vocab; v++) {
          const ref = expected.logits[t]![v]!;
          largest = Math.max(largest, Math.abs(ref));
          worst = Math.max(worst, Math.abs(logits[t * vocab + v]! - ref));
        }
      }
      expect(worst / largest).toBeLessThan(1e-4);
      await session.release();
    });
  }
});
