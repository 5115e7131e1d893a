/**
 * A layout's `calibration=FILE` option: the layer statistics file (src/format/layer-stats.ts) that
 * GPTQ takes its Hessians from, found beside the model (a path relative to the model's folder, as
 * llama-quantize's --imatrix; the CLI passes an absolute one), and the statistics of each weight:
 * those of the activation `M.input` (or `M`) for the weight `M.weight`.
 */
import { dirname, resolve } from 'node:path';
import { QuantdError } from '../../errors/index.js';
import { indexLayerStats, type LayerStatsRef } from '../../format/layer-stats.js';

export interface CalibrationIndex {
  readonly path: string;
  readonly layers: ReadonlyMap<string, LayerStatsRef>;
}

/** The statistics file of `option` for the model file `input`. */
export async function openCalibration(input: string, option: string): Promise<CalibrationIndex> {
  const path = resolve(dirname(input), option);
  return { path, layers: await indexLayerStats(path) };
}

/** The statistics of module `m` (the weight `m.weight`), with the activation name they are under. */
export function statsFor(
  index: CalibrationIndex,
  m: string,
): { readonly name: string; readonly ref: LayerStatsRef } | undefined {
  for (const name of [`${m}.input`, m]) {
    const ref = index.layers.get(name);
    if (ref) return { name, ref };
  }
  return undefined;
}

/** Refuses a file of which no layer fits the model: statistics of another model, or misnamed. */
export function noLayerMatched(index: CalibrationIndex, example: string): QuantdError {
  const names = [...index.layers.keys()];
  return new QuantdError('CALIBRATION_INVALID', {
    source: index.path.split('/').pop() ?? index.path,
    detail:
      `none of its ${names.length} layers (${names.slice(0, 2).join(', ')}${names.length > 2 ? ', …' : ''}) ` +
      `is the input of a weight of this model: statistics of ${example} are named ${example.replace(/\.weight$/, '')}.input`,
  });
}
