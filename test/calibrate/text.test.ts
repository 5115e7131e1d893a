/**
 * Calibration from text on a fixture model (the quality claims are tested on the trained model,
 * test/trained-llama): the layer-by-layer runner with float weights gives the full decoder's
 * hidden states, the importance matrix is llama.cpp's GGUF format with llama.cpp's tensor names
 * and equals the sums of the decoder's own layer inputs, GPTQ's statistics file feeds the gptq
 * layout, and bad requests are refused before the model runs.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';

import { referenceCompute } from '../../src/core/compute.js';
import { readImportanceMatrix } from '../../src/format/imatrix.js';
import { indexLayerStats } from '../../src/format/layer-stats.js';
import { inlineEncoding } from '../../src/kernels/encoders.js';
import { LayerRunner } from '../../src/service/calibrate/layers.js';
import { decoderSpec } from '../../src/service/decoder/spec.js';
import { DecoderSession } from '../../src/service/engines/onnxruntime.js';
import { architectureOf } from '../../src/service/layouts/gguf-hf/architectures.js';
import { openCheckpoint } from '../../src/service/layouts/gguf-hf/checkpoint.js';
import { readHfFolder } from '../../src/service/layouts/gguf-hf/folder.js';
import { writeOnnxDecoder } from '../../src/service/layouts/onnx-decoder.js';
import { quantd } from '../cli/run-cli.js';
import { HAVE_ONNXRUNTIME } from '../setup/engines.js';

const FIXTURES = new URL('../gguf-hf/fixtures/', import.meta.url).pathname;
const dir = mkdtempSync(join(tmpdir(), 'quantd-calibrate-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const TEXT = join(dir, 'text.txt');
writeFileSync(
  TEXT,
  'The quick brown fox jumps over the lazy dog. Hello world, the world says hello. '.repeat(8),
);

describe.skipIf(!HAVE_ONNXRUNTIME)('calibration from text', () => {
  for (const name of ['llama-spm', 'gemma2-spm', 'qwen3-bpe', 'phi3-spm']) {
    it(`${name}: layer by layer with float weights gives the decoder's hidden states`, async () => {
      const model = join(FIXTURES, name);
      const folder = await readHfFolder(model);
      const spec = decoderSpec(folder.config, 'config.json');
      const arch = architectureOf(folder.config, 'config.json');
      const graph = join(dir, `${name}.onnx`);
      await writeOnnxDecoder(
        model,
        graph,
        { weights: 'float', blockSize: 32, sym: false, accuracyLevel: undefined },
        {},
        { hiddenStates: true, maxPositions: 32 },
      );
      const session = await DecoderSession.open(graph, 'test');
      const ids = Int32Array.from({ length: 24 }, (_, i) => (i * 7 + 3) % 300);
      const names = Array.from({ length: spec.h.layers }, (_, i) => `hidden.${i}`);
      const expected = await session.run(ids, names);
      await session.close();
      const checkpoint = await openCheckpoint(model, arch, spec.h, 'config.json');
      const runner = new LayerRunner(spec, checkpoint, {
        work: dir,
        compute: referenceCompute,
        encoding: inlineEncoding(null),
        seqLen: 32,
        ort: {},
        purpose: 'test',
      });
      try {
        let hidden = await runner.embeddings([ids]);
        for (let i = 0; i < spec.h.layers; i++) {
          hidden = await runner.forward(i, await runner.layerWeights(i), hidden);
          const want = expected[`hidden.${i}`]!;
          let worst = 0;
          let largest = 0;
          for (let j = 0; j < want.length; j++) {
            worst = Math.max(worst, Math.abs(hidden[0]![j]! - want[j]!));
            largest = Math.max(largest, Math.abs(want[j]!));
          }
          expect(worst / largest).toBeLessThan(1e-5);
        }
      } finally {
        await runner.close();
        await checkpoint.close();
      }
    });
  }

  it('writes an importance matrix llama-quantize reads and GPTQ statistics the gptq layout takes', async () => {
    const model = join(FIXTURES, 'llama-spm');
    const imatrix = join(dir, 'imatrix.gguf');
    const stats = join(dir, 'gptq.safetensors');
    const r = quantd([
      'calibrate',
      model,
      '--text',
      TEXT,
      '--seq-len',
      '32',
      '--samples',
      '4',
      '--seed',
      '7',
      '--imatrix',
      imatrix,
      '--gptq',
      stats,
      '--gptq-options',
      'bits=4,group_size=32',
      '-q',
    ]);
    expect(r.code, r.stderr).toBe(0);
    const m = await readImportanceMatrix(imatrix);
    expect(m.chunks).toBe(4);
    expect([...m.entries.keys()].sort()).toEqual(
      ['attn_k', 'attn_output', 'attn_q', 'attn_v', 'ffn_down', 'ffn_gate', 'ffn_up']
        .flatMap((t) => [0, 1].map((l) => `blk.${l}.${t}.weight`))
        .sort(),
    );
    // q, k and v read one input: one sum
    expect([...m.entries.get('blk.0.attn_q.weight')!]).toEqual([...m.entries.get('blk.0.attn_v.weight')!]);
    const layers = await indexLayerStats(stats);
    expect(layers.get('model.layers.1.mlp.down_proj.input')!.inFeatures).toBe(128);
    const out = join(dir, 'gptq-cal');
    const q = quantd([
      'quantize',
      model,
      '-o',
      out,
      '--layout',
      'gptq:bits=4,group_size=32',
      '--calibration',
      stats,
      '-q',
    ]);
    expect(q.code, q.stderr).toBe(0);
  });

  it('writes AWQ scales chosen on the block output that the awq layout applies', async () => {
    const model = join(FIXTURES, 'llama-spm');
    const stats = join(dir, 'awq.safetensors');
    const r = quantd([
      'calibrate',
      model,
      '--text',
      TEXT,
      '--seq-len',
      '32',
      '--samples',
      '4',
      '--awq',
      stats,
      '--awq-options',
      'group_size=32',
    ]);
    expect(r.code, r.stderr).toBe(0);
    // one line per group of layers that share an input: the candidate chosen, against round-to-nearest
    expect(r.stderr).toMatch(
      /model\.layers\.0\.self_attn\.q_proj, .*k_proj, .*v_proj: (α = [\d.]+|round-to-nearest kept)/,
    );
    expect(r.stderr).toMatch(/model\.layers\.1\.mlp\.gate_proj, model\.layers\.1\.mlp\.up_proj: /);
    const layers = await indexLayerStats(stats);
    expect(layers.get('model.layers.0.self_attn.o_proj.input')!.inFeatures).toBe(64);
    const out = join(dir, 'awq-cal');
    const q = quantd([
      'quantize',
      model,
      '-o',
      out,
      '--layout',
      'awq:group_size=32',
      '--calibration',
      stats,
      '--report',
      join(dir, 'awq-report.json'),
      '-q',
    ]);
    expect(q.code, q.stderr).toBe(0);
  });

  it('feeds activation observers with every linear input, for static activation qparams', async () => {
    const model = join(FIXTURES, 'llama-spm');
    const recipe = join(dir, 'recipe.json');
    writeFileSync(
      recipe,
      JSON.stringify({
        observers: [
          {
            match: '*.input',
            observer: { kind: 'min_max', dtype: 'qint8', qscheme: 'per_tensor_symmetric' },
          },
        ],
      }),
    );
    const qparams = join(dir, 'qparams.safetensors');
    const r = quantd([
      'calibrate',
      model,
      '--text',
      TEXT,
      '--seq-len',
      '32',
      '--samples',
      '3',
      '--observers',
      recipe,
      '-o',
      qparams,
    ]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr).toContain('observers: 14 activations observed');
    const i = quantd(['inspect', qparams, '--json']);
    const names = (JSON.parse(i.stdout) as { tensors: { name: string }[] }).tensors.map((t) => t.name);
    expect(names).toContain('model.layers.1.mlp.down_proj.input.scale');
    expect(names).toContain('model.layers.0.self_attn.q_proj.input.zero_point');
  });

  it('refuses what it cannot do before the model runs', () => {
    const model = join(FIXTURES, 'llama-spm');
    const a = quantd(['calibrate', model, '--text', TEXT, '--seq-len', '32']);
    expect(a.stderr).toMatch(/^error USAGE: calibration from text needs an output/);
    const b = quantd([
      'calibrate',
      model,
      '--text',
      TEXT,
      '--imatrix',
      join(dir, 'x.gguf'),
      '--seq-len',
      '4096',
    ]);
    expect(b.stderr).toMatch(/^error OPTION_INVALID: .*longer than the model's context/);
    const c = quantd([
      'calibrate',
      model,
      '--text',
      TEXT,
      '--gptq',
      join(dir, 'x.st'),
      '--gptq-options',
      'bits=3',
    ]);
    expect(c.stderr).toMatch(/^error OPTION_INVALID: option gptq:bits/);
    const d = quantd(['calibrate', join(FIXTURES, 'gemma2-spm'), '--text', TEXT, '--awq', join(dir, 'g.st')]);
    expect(d.stderr).toMatch(
      /^error FEATURE_UNSUPPORTED: AWQ calibration from text supports Llama, Mistral, Qwen 2 and Qwen 3/,
    );
  });
});
