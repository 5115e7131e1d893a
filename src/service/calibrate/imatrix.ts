/**
 * An importance matrix computed by running the model, as llama-imatrix computes one: for each
 * weight a linear layer multiplies, the sum over every token of every window of each input
 * column's squared activation (`in_sum2`) and the tokens counted. ONNX Runtime runs the float
 * decoder with a ReduceSumSquare tap at each linear input (src/service/decoder/graph.ts); the
 * window sums, float32 as ONNX Runtime gives them, are added in float64. Names are llama.cpp's
 * (blk.0.attn_q.weight): q, k and v share one input and so one sum; the output projection is
 * left out, as llama-imatrix leaves it without --process-output.
 */
import { join } from 'node:path';

import { throwIfAborted } from '../../errors/index.js';
import type { ImatrixSums } from '../../format/imatrix.js';
import type { TapPoint } from '../decoder/graph.js';
import { DecoderSession } from '../engines/onnxruntime.js';
import type { Architecture } from '../layouts/gguf-hf/architectures.js';
import { writeOnnxDecoder } from '../layouts/onnx-decoder.js';
import type { CalibrationContext } from './context.js';

export async function computeImatrix(
  model: string,
  arch: Architecture,
  windows: readonly Int32Array[],
  ctx: CalibrationContext,
): Promise<ImatrixSums[]> {
  let taps: readonly TapPoint[] = [];
  const graph = join(ctx.work, 'imatrix.onnx');
  await writeOnnxDecoder(
    model,
    graph,
    { weights: 'float', blockSize: 32, sym: false, accuracyLevel: undefined },
    { encoding: ctx.encoding, signal: ctx.signal },
    { taps: { sumSquares: true }, onTaps: (t) => (taps = t), maxPositions: ctx.seqLen },
  );
  const session = await DecoderSession.open(graph, ctx.purpose, ctx.ort);
  const sums = taps.map((t) => new Float64Array(t.features));
  let tokens = 0;
  try {
    const outputs = taps.map((t) => t.sumSquares!);
    for (const [i, ids] of windows.entries()) {
      throwIfAborted(ctx.signal);
      const out = await session.run(ids, outputs);
      taps.forEach((t, k) => {
        const s = out[t.sumSquares!]!;
        const acc = sums[k]!;
        for (let c = 0; c < acc.length; c++) acc[c]! += s[c]!;
      });
      tokens += ids.length;
      ctx.onProgress?.('importance matrix', i + 1, windows.length);
    }
  } finally {
    await session.close();
  }
  return taps.flatMap((t, k) =>
    t.weights.map((w) => ({
      name: arch.tensorName(w)!,
      sumSquares: Float32Array.from(sums[k]!),
      count: tokens,
    })),
  );
}
