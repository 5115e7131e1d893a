/**
 * Activation observers fed by the model itself: the float decoder runs on each window with a tap
 * at every linear input (src/service/decoder/graph.ts), and each tap's values are a batch for the
 * recipe's observers under the name `M.input` of each linear module M that reads them (q, k and v
 * read one input: three names, one tensor). What the observers hold then gives static activation
 * qparams, as a calibration session fed by the user's own hooks would (src/service/calibration).
 */
import { join } from 'node:path';

import { throwIfAborted } from '../../errors/index.js';
import type { TapPoint } from '../decoder/graph.js';
import { DecoderSession } from '../engines/onnxruntime.js';
import type { CalibrationSession, BatchTensor } from '../calibration/session.js';
import { writeOnnxDecoder } from '../layouts/onnx-decoder.js';
import type { CalibrationContext } from './context.js';

/** The activation name of the input of weight `M.weight`. */
export const inputName = (weight: string): string => `${weight.replace(/\.weight$/, '')}.input`;

/** Folds every window's linear inputs into `session`'s observers; returns the names observed. */
export async function observeFromText(
  model: string,
  windows: readonly Int32Array[],
  session: CalibrationSession,
  ctx: CalibrationContext,
): Promise<string[]> {
  let taps: readonly TapPoint[] = [];
  const graph = join(ctx.work, 'observers.onnx');
  await writeOnnxDecoder(
    model,
    graph,
    { weights: 'float', blockSize: 32, sym: false, accuracyLevel: undefined },
    { encoding: ctx.encoding, signal: ctx.signal },
    { taps: { inputs: true }, onTaps: (t) => (taps = t), maxPositions: ctx.seqLen },
  );
  const decoder = await DecoderSession.open(graph, ctx.purpose, ctx.ort);
  const observed = new Set<string>();
  try {
    for (const [i, ids] of windows.entries()) {
      throwIfAborted(ctx.signal);
      const out = await decoder.run(
        ids,
        taps.map((t) => t.input!),
      );
      const batch: BatchTensor[] = taps.flatMap((t) =>
        t.weights.map((w) => ({
          name: inputName(w),
          shape: [1, ids.length, t.features],
          x: out[t.input!]!,
        })),
      );
      const result = await session.fold(batch, ctx.compute, async () => {}, ctx.signal);
      for (const name of result.observed) observed.add(name);
      ctx.onProgress?.('observers', i + 1, windows.length);
    }
  } finally {
    await decoder.close();
  }
  return [...observed].sort();
}
