/**
 * The quantization config of a safetensors layout (GPTQ, AWQ, bitsandbytes) and where it goes:
 * a side file (AutoGPTQ's `quantize_config.json`, or `{"quantization_config": …}` to merge), and,
 * in a model folder, config.json's `quantization_config` key, which transformers reads in
 * `from_pretrained`. The config is kept as JSON text so that what a layout writes (bitsandbytes'
 * float `6.0`) reaches both places unchanged.
 */
import { basename, dirname, join } from 'node:path';
import { QuantdError } from '../../errors/index.js';

export interface QuantizationConfig {
  /** The side file's name in a model folder: quantize_config.json or quantization_config.json. */
  readonly sideFile: string;
  /** The side file's content. */
  readonly sideText: string;
  /** config.json's `quantization_config`: a JSON object, as text (indent 2). */
  readonly configText: string;
}

/** A JSON object as text with an indent of 2, as transformers writes config.json. */
export function jsonText(value: Readonly<Record<string, unknown>>): string {
  return JSON.stringify(value, null, 2);
}

/**
 * Where a single-file output's side file goes: named after the output (`out.safetensors` →
 * `out.quantize_config.json`), so that two outputs in one directory never overwrite each other's.
 */
export function sideFilePath(output: string, sideFile: string): string {
  return join(dirname(output), `${basename(output).replace(/\.safetensors$/, '')}.${sideFile}`);
}

/** A layout's `companions`: its side file, inside a folder output or named after a file output. */
export function sideFileCompanion(sideFile: string) {
  return (output: string, folder: boolean): readonly string[] => [
    folder ? join(output, sideFile) : sideFilePath(output, sideFile),
  ];
}

/**
 * A model's config.json text, checked before any tensor is written: a JSON object without a
 * `quantization_config` (a model that has one is quantized already; quantize its float original).
 */
export function checkModelConfig(text: string, path: string): void {
  let config: unknown;
  try {
    config = JSON.parse(text);
  } catch (err) {
    throw new QuantdError('HF_MODEL_INVALID', {
      path,
      detail: `is not valid JSON (${(err as Error).message})`,
    });
  }
  if (typeof config !== 'object' || config === null || Array.isArray(config)) {
    throw new QuantdError('HF_MODEL_INVALID', { path, detail: 'is not a JSON object' });
  }
  if (Object.hasOwn(config, 'quantization_config')) {
    throw new QuantdError('HF_MODEL_INVALID', {
      path,
      detail: 'already has a quantization_config: the model is quantized; start from its float original',
    });
  }
}

/**
 * `configText` (a checked config.json) with `"quantization_config": quantization` added as its
 * last key. The text is edited rather than parsed and re-serialized, so every other key keeps its
 * exact spelling (`1e-05`, `10000.0`, key order, unicode escapes).
 */
export function withQuantizationConfig(configText: string, quantization: string): string {
  const trimmed = configText.trimEnd();
  const body = trimmed.slice(0, -1).trimEnd(); // without the closing brace
  const empty = body.endsWith('{');
  const value = quantization.replace(/\n/g, '\n  ');
  return `${body}${empty ? '' : ','}\n  "quantization_config": ${value}\n}\n`;
}
