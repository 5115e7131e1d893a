/**
 * config.json's rope_scaling as llama.cpp takes it: linear scaling as `{arch}.rope.scaling.*`
 * metadata, Llama 3.1's ("llama3") as a rope_freqs tensor; anything else is refused.
 */
import { QuantdError } from '../../../errors/index.js';
import type { GgufKv } from '../../../format/gguf.js';
import { configNumber, hfInvalid, type JsonObject } from './folder.js';
import { f32, str } from './gguf-kv.js';
import type { GeneratedTensor, Hyperparameters } from './hyperparameters.js';

/** config.json's rope_scaling and its type, or undefined when it has none. */
function ropeScaling(config: JsonObject, path: string): { s: JsonObject; type: unknown } | undefined {
  const scaling = config['rope_scaling'];
  if (scaling === undefined || scaling === null) return undefined;
  if (typeof scaling !== 'object' || Array.isArray(scaling)) {
    throw hfInvalid(path, 'rope_scaling must be an object or null');
  }
  const s = scaling as JsonObject;
  return { s, type: s['rope_type'] ?? s['type'] };
}

/** rope_scaling of config.json: linear scaling as metadata (llama3's is a rope_freqs tensor). */
export function ropeScalingMetadata(arch: string, config: JsonObject, path: string): GgufKv[] {
  const scaling = ropeScaling(config, path);
  if (scaling === undefined || scaling.type === 'llama3') return [];
  const { s, type } = scaling;
  if (type === 'linear') {
    const factor = configNumber(s, 'factor', path);
    if (factor === undefined) throw hfInvalid(path, 'rope_scaling of type linear has no factor');
    return [str(`${arch}.rope.scaling.type`, 'linear'), f32(`${arch}.rope.scaling.factor`, factor)];
  }
  throw new QuantdError('FEATURE_UNSUPPORTED', {
    detail: `${path}: rope_scaling type ${JSON.stringify(type)} is not supported by the GGUF conversion (supported: linear, llama3)`,
  });
}

/**
 * Llama 3.1's rope scaling as llama.cpp applies it: a divisor per rotary frequency (the
 * rope_freqs tensor). Short wavelengths keep their frequency, long ones are divided by
 * `factor`, and the band between blends the two smoothly.
 */
export function llama3RopeFreqs(h: Hyperparameters, config: JsonObject, path: string): GeneratedTensor[] {
  const scaling = ropeScaling(config, path);
  if (scaling?.type !== 'llama3') return [];
  const { s } = scaling;
  const need = (key: string): number => {
    const v = configNumber(s, key, path);
    if (v === undefined || v <= 0)
      throw hfInvalid(path, `rope_scaling of type llama3 needs a positive ${key}`);
    return v;
  };
  const factor = need('factor');
  const low = need('low_freq_factor');
  const high = need('high_freq_factor');
  const original = need('original_max_position_embeddings');
  const lowWavelen = original / low;
  const highWavelen = original / high;
  const data = new Float32Array(h.headDim / 2);
  for (let i = 0; i < data.length; i++) {
    const freq = 1 / h.ropeTheta ** ((2 * i) / h.headDim);
    const wavelen = (2 * Math.PI) / freq;
    if (wavelen < highWavelen) data[i] = 1;
    else if (wavelen > lowWavelen) data[i] = factor;
    else {
      const smooth = (original / wavelen - low) / (high - low);
      data[i] = 1 / ((1 - smooth) / factor + smooth);
    }
  }
  return [{ name: 'rope_freqs.weight', data }];
}
