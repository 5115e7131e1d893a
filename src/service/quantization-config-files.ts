/**
 * Where a model's quantization config is found, as a loader finds it: config.json's
 * `quantization_config`, else the side file a layout wrote (AutoGPTQ's quantize_config.json, or
 * quantization_config.json); for one weight file, first the side file named after it.
 */
import { basename, dirname, join } from 'node:path';
import { QuantdError } from '../errors/index.js';
import { readTextIfAny } from '../format/file-io.js';

/** A config found: the file it came from and the config object. */
export interface FoundConfig {
  readonly file: string;
  readonly config: Readonly<Record<string, unknown>>;
}

/** The files a quantization config is looked for in, first found wins, with how to take it out. */
const CONFIG_SOURCES: ReadonlyArray<readonly [string, (json: Record<string, unknown>) => unknown]> = [
  ['config.json', (json) => json['quantization_config']],
  ['quantize_config.json', (json) => json],
  ['quantization_config.json', (json) => json['quantization_config']],
];

/** A JSON object file, or null when there is no such file (HF_MODEL_INVALID when it is not one). */
export async function readJsonObject(path: string): Promise<Record<string, unknown> | null> {
  const text = await readTextIfAny(path);
  if (text === null) return null;
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (err) {
    throw new QuantdError('HF_MODEL_INVALID', {
      path,
      detail: `is not valid JSON (${(err as Error).message})`,
    });
  }
  if (typeof json !== 'object' || json === null || Array.isArray(json)) {
    throw new QuantdError('HF_MODEL_INVALID', { path, detail: 'is not a JSON object' });
  }
  return json as Record<string, unknown>;
}

async function firstConfig(folder: string, sources: typeof CONFIG_SOURCES): Promise<FoundConfig | null> {
  for (const [file, take] of sources) {
    const json = await readJsonObject(join(folder, file));
    const config = json === null ? undefined : take(json);
    if (typeof config === 'object' && config !== null && !Array.isArray(config)) {
      return { file, config: config as Record<string, unknown> };
    }
  }
  return null;
}

export const quantizationConfigOf = (folder: string): Promise<FoundConfig | null> =>
  firstConfig(folder, CONFIG_SOURCES);

/**
 * The quantization config of one weight file: the side file a layout wrote beside it
 * (`NAME.quantize_config.json`, `NAME.quantization_config.json` for NAME.safetensors), else its
 * folder's.
 */
export async function quantizationConfigOfFile(path: string): Promise<FoundConfig | null> {
  const base = basename(path).replace(/\.safetensors$/, '');
  const sides: typeof CONFIG_SOURCES = [
    [`${base}.quantize_config.json`, (json) => json],
    [`${base}.quantization_config.json`, (json) => json['quantization_config']],
  ];
  return (await firstConfig(dirname(path), sides)) ?? (await quantizationConfigOf(dirname(path)));
}
