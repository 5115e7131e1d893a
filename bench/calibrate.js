#!/usr/bin/env node
// npm run bench:calibrate: how fast quantd runs a model for calibration, beside llama.cpp's own
// evaluation of the same model in the same run. The model (a Hugging Face folder; default the
// trained test model) is converted to an F32 GGUF, then the same windows of a text go through
//   - llama.cpp (node-llama-cpp's CPU build): each window evaluated from an empty context, no
//     logits asked (its prompt processing), the anchor;
//   - quantd's importance-matrix pass: the float decoder in ONNX Runtime with a ReduceSumSquare tap
//     at every linear input (what `quantd calibrate --imatrix` runs);
//   - quantd's GPTQ statistics (layer by layer, sequential stages, each stage's weights quantized on
//     the pool), and AWQ's block searches — reported in tokens per second of calibration text.
// Prints tokens/s of each and the ratio of the forward pass to llama.cpp's (target ≥ 0.5). Give both
// the same --threads on an idle machine: ggml's threads spin while they wait, so on a loaded machine
// two of them fall to a fraction of one.
// Usage: node bench/calibrate.js [--model DIR] [--text FILE] [--seq-len 256] [--windows 16] [--threads N]
import { mkdtempSync, rmSync } from 'node:fs';
import { availableParallelism, tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';

import { createCompute } from '../dist/src/pool/index.js';
import { readText, windowsOf } from '../dist/src/service/eval/text.js';
import { loadTokenizer } from '../dist/src/service/load-tokenizer.js';
import { calibrateFromText } from '../dist/src/service/calibrate/run.js';
import { writeLayoutOutput } from '../dist/src/service/layouts/write-folder.js';
import { LAYOUTS } from '../dist/src/service/layouts/index.js';
import { writeOnnxDecoder } from '../dist/src/service/layouts/onnx-decoder.js';
import { DecoderSession } from '../dist/src/service/engines/onnxruntime.js';

const root = new URL('../', import.meta.url).pathname;
const { values } = parseArgs({
  options: {
    model: { type: 'string', default: join(root, 'test/trained-llama/model') },
    text: { type: 'string', default: join(root, 'test/trained-llama/calib.txt') },
    'seq-len': { type: 'string', default: '256' },
    windows: { type: 'string', default: '16' },
    threads: { type: 'string', default: String(availableParallelism()) },
  },
});
const seqLen = Number(values['seq-len']);
const count = Number(values.windows);
const threads = Number(values.threads);
const work = mkdtempSync(join(tmpdir(), 'quantd-bench-calibrate-'));

try {
  const tokenizer = await loadTokenizer(values.model);
  const all = windowsOf(await readText(values.text), values.text, tokenizer, seqLen).windows;
  const windows = all.slice(0, count);
  const tokens = windows.length * seqLen;
  console.log(
    `${values.model}: ${windows.length} windows of ${seqLen} tokens (${tokens} tokens), ${threads} threads`,
  );

  // llama.cpp: the F32 GGUF, each window's prompt processed from an empty context
  const gguf = join(work, 'model.gguf');
  await writeLayoutOutput(LAYOUTS.get('gguf'), values.model, gguf, { type: 'F32' }, {});
  const { getLlama, LlamaLogLevel } = await import('node-llama-cpp');
  const llama = await getLlama({
    gpu: false,
    build: 'never',
    progressLogs: false,
    logLevel: LlamaLogLevel.error,
  });
  const model = await llama.loadModel({ modelPath: gguf, gpuLayers: 0 });
  const context = await model.createContext({
    contextSize: seqLen,
    batchSize: seqLen,
    threads,
    flashAttention: false,
  });
  let llamaSeconds = Infinity;
  const sequence = context.getSequence();
  for (let rep = 0; rep < 2; rep++) {
    const t = performance.now();
    for (const ids of windows) {
      await sequence.clearHistory();
      await sequence.evaluateWithoutGeneratingNewTokens([...ids]);
    }
    llamaSeconds = Math.min(llamaSeconds, (performance.now() - t) / 1000);
  }
  await context.dispose();
  await model.dispose();

  // quantd's forward pass alone: the float decoder with the imatrix taps, the same windows
  let taps = [];
  const graph = join(work, 'imatrix.onnx');
  await writeOnnxDecoder(
    values.model,
    graph,
    { weights: 'float', blockSize: 32, sym: false, accuracyLevel: undefined },
    {},
    {
      taps: { sumSquares: true },
      onTaps: (t) => (taps = t),
      maxPositions: seqLen,
    },
  );
  const session = await DecoderSession.open(graph, 'benchmark', { threads });
  let ortSeconds = Infinity;
  for (let rep = 0; rep < 2; rep++) {
    const t = performance.now();
    for (const ids of windows)
      await session.run(
        ids,
        taps.map((p) => p.sumSquares),
      );
    ortSeconds = Math.min(ortSeconds, (performance.now() - t) / 1000);
  }
  await session.close();

  const handle = createCompute();
  const run = async (outputs) => {
    const t = performance.now();
    await calibrateFromText(
      {
        model: values.model,
        text: values.text,
        seqLen,
        samples: count,
        seed: 1,
        ort: { threads },
        ...outputs,
      },
      { compute: handle.compute, encoding: handle.encoding() },
    );
    return (performance.now() - t) / 1000;
  };
  // the samples are a seeded choice of windows: the same count as llama.cpp's
  const imatrixSeconds = Math.min(
    await run({ imatrix: join(work, 'a.gguf') }),
    await run({ imatrix: join(work, 'b.gguf') }),
  );
  const gptqSeconds = await run({
    gptq: {
      output: join(work, 'gptq.safetensors'),
      options: {
        params: { bits: 4, groupSize: 128, sym: true },
        damp: 0.01,
        actOrder: false,
        trueSequential: true,
      },
    },
  });
  const awqSeconds = await run({
    awq: { output: join(work, 'awq.safetensors'), options: { groupSize: 128, nGrid: 20 } },
  });
  await handle.close();

  const rate = (s) => (tokens / s).toFixed(0).padStart(8);
  console.log('run                                      seconds   tokens/s   × llama.cpp');
  const row = (name, s) =>
    console.log(
      `${name.padEnd(40)} ${s.toFixed(2).padStart(7)}   ${rate(s)}   ${(llamaSeconds / s).toFixed(2).padStart(6)}`,
    );
  row('llama.cpp F32 GGUF, prompt processing', llamaSeconds);
  row('forward pass with imatrix taps (ORT)', ortSeconds);
  row('quantd calibrate --imatrix (all of it)', imatrixSeconds);
  row('GPTQ statistics, sequential', gptqSeconds);
  row('AWQ block searches', awqSeconds);
  console.log(`forward pass / llama.cpp = ${(llamaSeconds / ortSeconds).toFixed(2)} (target ≥ 0.5)`);
} finally {
  rmSync(work, { recursive: true, force: true });
}
