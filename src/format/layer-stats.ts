/**
 * A layer statistics file: the linear-layer input statistics of a calibration (core/linear-stats)
 * as one safetensors file, what GPTQ and AWQ read with `calibration=FILE`. For each activation
 * tensor NAME (`model.layers.0.mlp.down_proj.input`: the input of the layer whose weight is
 * `model.layers.0.mlp.down_proj.weight`):
 *
 *   NAME.hessian   F64 [in, in]   Σ xᵀx over the tokens seen
 *   NAME.abs_sum   F64 [in]       Σ |x| per input channel
 *   NAME.tokens    F64 [1]        the number of tokens (rows of x) seen
 *
 * metadata `quantd.layer_statistics` = "1". Any tool can write one (safetensors.torch.save_file
 * with float64 tensors); F32 tensors are accepted too. It is written tensor by tensor and read
 * layer by layer, so a whole model's statistics never sit in memory at once.
 */
import { open, type FileHandle } from 'node:fs/promises';
import { basename } from 'node:path';
import type { LinearStats } from '../core/linear-stats.js';
import { QuantdError } from '../errors/index.js';
import { entryByName, type TensorEntry } from './safetensors.js';
import { SafetensorsFileReader, SafetensorsFileWriter } from './safetensors-file.js';

export const LAYER_STATS_KEY = 'quantd.layer_statistics';
/**
 * Metadata of a statistics file that also holds AWQ's chosen scales (quantd calibrate --awq):
 * `M.awq_scales` F64 [in] per scaled module, which the awq layout applies instead of searching.
 */
export const AWQ_SCALES_KEY = 'quantd.awq_scales';
const SUFFIXES = ['.hessian', '.abs_sum', '.tokens'] as const;

const bytesOf = (a: Float64Array): Uint8Array => new Uint8Array(a.buffer, a.byteOffset, a.byteLength);

/** Writes `stats` (activation name → statistics) to `path`, atomically, names sorted. */
export async function writeLayerStats(
  path: string,
  stats: ReadonlyMap<string, LinearStats>,
  metadata: Readonly<Record<string, string>> = {},
): Promise<void> {
  const names = [...stats.keys()].sort();
  const plan = names.flatMap((name) => {
    const k = stats.get(name)!.inFeatures;
    return [
      { name: `${name}.hessian`, dtype: 'F64' as const, shape: [k, k] },
      { name: `${name}.abs_sum`, dtype: 'F64' as const, shape: [k] },
      { name: `${name}.tokens`, dtype: 'F64' as const, shape: [1] },
    ];
  });
  const writer = await SafetensorsFileWriter.create(path, plan, { ...metadata, [LAYER_STATS_KEY]: '1' });
  try {
    for (const name of names) {
      const s = stats.get(name)!;
      await writer.write(`${name}.hessian`, bytesOf(s.hessian));
      await writer.write(`${name}.abs_sum`, bytesOf(s.absSum));
      await writer.write(`${name}.tokens`, bytesOf(Float64Array.of(s.tokens)));
    }
    await writer.commit();
  } catch (err) {
    await writer.abort();
    throw err;
  }
}

/** Where one layer's statistics lie in a statistics file (what a worker reads them by). */
export interface LayerStatsRef {
  readonly path: string;
  readonly inFeatures: number;
  readonly hessian: FileSlice;
  readonly absSum: FileSlice;
  readonly tokens: FileSlice;
}

export interface FileSlice {
  /** absolute offset in the file */
  readonly offset: number;
  readonly dtype: 'F64' | 'F32';
  readonly count: number;
}

function invalid(path: string, detail: string): QuantdError {
  return new QuantdError('CALIBRATION_INVALID', { source: basename(path), detail });
}

/**
 * The layers of a statistics file by activation name, checked (dtypes and shapes); their values
 * stay in the file.
 */
export async function indexLayerStats(path: string): Promise<Map<string, LayerStatsRef>> {
  const reader = await SafetensorsFileReader.open(path);
  try {
    const { header } = reader;
    if (header.metadata?.[LAYER_STATS_KEY] === undefined) {
      throw invalid(path, `is not a layer statistics file (its metadata has no ${LAYER_STATS_KEY})`);
    }
    const layers = new Map<string, LayerStatsRef>();
    const slice = (e: TensorEntry): FileSlice => ({
      offset: header.dataOffset + e.begin,
      dtype: e.dtype as 'F64' | 'F32',
      count: e.shape.reduce((a, b) => a * b, 1),
    });
    for (const entry of header.entries) {
      if (!entry.name.endsWith('.hessian')) continue;
      const name = entry.name.slice(0, -'.hessian'.length);
      const parts = SUFFIXES.map((s) => entryByName(header, `${name}${s}`));
      const [h, a, t] = parts;
      if (!a || !t) throw invalid(path, `${name} has a hessian but no ${!a ? 'abs_sum' : 'tokens'}`);
      for (const e of parts) {
        if (e!.dtype !== 'F64' && e!.dtype !== 'F32')
          throw invalid(path, `${e!.name} is ${e!.dtype}; F64 or F32 expected`);
      }
      const k = h!.shape[0] ?? 0;
      if (h!.shape.length !== 2 || h!.shape[1] !== k || k === 0) {
        throw invalid(path, `${h!.name} has shape [${h!.shape.join(', ')}]; a square [in, in] expected`);
      }
      if (a.shape.length !== 1 || a.shape[0] !== k)
        throw invalid(path, `${a.name} has shape [${a.shape.join(', ')}]; [${k}] expected`);
      if (t.shape.reduce((x, y) => x * y, 1) !== 1) throw invalid(path, `${t.name} must hold one value`);
      layers.set(name, { path, inFeatures: k, hessian: slice(h!), absSum: slice(a), tokens: slice(t) });
    }
    if (layers.size === 0) throw invalid(path, 'holds no NAME.hessian tensor');
    return layers;
  } finally {
    await reader.close();
  }
}

async function readSlice(fh: FileHandle, path: string, s: FileSlice): Promise<Float64Array> {
  const size = s.dtype === 'F64' ? 8 : 4;
  const bytes = new Uint8Array(s.count * size);
  let done = 0;
  while (done < bytes.length) {
    const { bytesRead } = await fh.read(bytes, done, bytes.length - done, s.offset + done);
    if (bytesRead === 0) throw invalid(path, 'ends inside its statistics');
    done += bytesRead;
  }
  if (size === 8) return new Float64Array(bytes.buffer);
  return Float64Array.from(new Float32Array(bytes.buffer));
}

/**
 * One layer's statistics from the file. A token count below one, or a diagonal or abs_sum value
 * that is negative or not finite, is CALIBRATION_INVALID (the rest of the Hessian is checked by
 * the worker that uses it: n² values are not scanned on the event loop).
 */
export async function readLayerStats(ref: LayerStatsRef, name: string): Promise<LinearStats> {
  let fh: FileHandle;
  try {
    fh = await open(ref.path, 'r');
  } catch (err) {
    throw new QuantdError('FILE_UNREADABLE', { path: basename(ref.path), detail: (err as Error).message });
  }
  try {
    const hessian = await readSlice(fh, ref.path, ref.hessian);
    const absSum = await readSlice(fh, ref.path, ref.absSum);
    const tokens = (await readSlice(fh, ref.path, ref.tokens))[0]!;
    const k = ref.inFeatures;
    if (!(tokens >= 1) || !Number.isFinite(tokens)) {
      throw invalid(ref.path, `${name}.tokens is ${tokens}; statistics of at least one token expected`);
    }
    for (let i = 0; i < k; i++) {
      const d = hessian[i * k + i]!;
      if (!(d >= 0) || !Number.isFinite(d)) throw invalid(ref.path, `${name}.hessian's diagonal holds ${d}`);
      if (!(absSum[i]! >= 0) || !Number.isFinite(absSum[i]!)) {
        throw invalid(ref.path, `${name}.abs_sum holds ${absSum[i]}`);
      }
    }
    return { inFeatures: k, tokens, hessian, absSum };
  } finally {
    await fh.close();
  }
}
