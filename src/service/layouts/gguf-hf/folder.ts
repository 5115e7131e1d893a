/**
 * A Hugging Face model folder as the GGUF converter reads it: config.json (required), the
 * optional tokenizer_config.json, generation_config.json and special_tokens_map.json, the
 * tokenizer files (tokenizer.model for SentencePiece, tokenizer.json for the `tokenizers`
 * library) and the weights (one .safetensors file, or shards named by
 * model.safetensors.index.json; ../../shards.ts resolves and checks them).
 */
import { readFile, stat } from 'node:fs/promises';
import { join } from 'node:path';

import { QuantdError } from '../../../errors/index.js';
import { errorCode, errorDetail } from '../../../format/file-io.js';
import { resolveModelInput } from '../../shards.js';

export type JsonObject = Readonly<Record<string, unknown>>;

export interface HfFolder {
  readonly dir: string;
  readonly config: JsonObject;
  readonly tokenizerConfig: JsonObject;
  readonly generationConfig: JsonObject;
  readonly specialTokensMap: JsonObject;
  /** Path of tokenizer.model, when the folder has one. */
  readonly sentencePiece: string | undefined;
  /** Path of tokenizer.json, when the folder has one. */
  readonly tokenizerJson: string | undefined;
}

export function hfInvalid(path: string, detail: string): QuantdError {
  return new QuantdError('HF_MODEL_INVALID', { path, detail });
}

/** Whether `path` is a directory (the converter's input) rather than a file. */
export async function isDirectory(path: string): Promise<boolean> {
  try {
    return (await stat(path)).isDirectory();
  } catch {
    return false; // the file readers report a missing path in their own words
  }
}

async function exists(path: string): Promise<boolean> {
  try {
    return (await stat(path)).isFile();
  } catch {
    return false;
  }
}

/** Whether `path` is a Hugging Face model folder: a directory holding a config.json. */
export async function isModelFolder(path: string): Promise<boolean> {
  return (await isDirectory(path)) && (await exists(join(path, 'config.json')));
}

/** A JSON object file; `{}` when optional and absent. */
export async function readJsonObject(path: string, required: boolean): Promise<JsonObject> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (err) {
    const code = errorCode(err);
    if (code === 'ENOENT' && !required) return {};
    if (code === 'ENOENT') throw hfInvalid(path, 'is missing (a model folder needs its config.json)');
    throw new QuantdError('FILE_UNREADABLE', { path, detail: errorDetail(err) });
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (err) {
    throw hfInvalid(path, `is not valid JSON: ${errorDetail(err)}`);
  }
  if (typeof json !== 'object' || json === null || Array.isArray(json)) {
    throw hfInvalid(path, 'is not a JSON object');
  }
  return json as JsonObject;
}

/** The files of a model folder the conversion reads besides its weights. */
export const MODEL_FOLDER_FILES = [
  'config.json',
  'tokenizer_config.json',
  'generation_config.json',
  'special_tokens_map.json',
  'tokenizer.model',
  'tokenizer.json',
] as const;

/** Reads the folder's JSON files and finds its tokenizer and weight files. */
export async function readHfFolder(dir: string): Promise<HfFolder> {
  const config = await readJsonObject(join(dir, 'config.json'), true);
  const sp = join(dir, 'tokenizer.model');
  const tj = join(dir, 'tokenizer.json');
  return {
    dir,
    config,
    tokenizerConfig: await readJsonObject(join(dir, 'tokenizer_config.json'), false),
    generationConfig: await readJsonObject(join(dir, 'generation_config.json'), false),
    specialTokensMap: await readJsonObject(join(dir, 'special_tokens_map.json'), false),
    sentencePiece: (await exists(sp)) ? sp : undefined,
    tokenizerJson: (await exists(tj)) ? tj : undefined,
  };
}

/** The folder's safetensors files (the index's shards, or its one file). */
export async function weightFiles(dir: string): Promise<readonly string[]> {
  return (await resolveModelInput(dir)).files;
}

// --- typed reads of config values --------------------------------------------------------------

/** A positive integer config value; undefined when absent and `fallback` is undefined. */
export function configInt(
  json: JsonObject,
  key: string,
  path: string,
  fallback?: number,
): number | undefined {
  const v = json[key];
  if (v === undefined || v === null) return fallback;
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < 0) {
    throw hfInvalid(path, `${key} must be a non-negative integer (got ${JSON.stringify(v)})`);
  }
  return v;
}

export function requireInt(json: JsonObject, key: string, path: string): number {
  const v = configInt(json, key, path);
  if (v === undefined) throw hfInvalid(path, `has no ${key}`);
  return v;
}

export function configNumber(json: JsonObject, key: string, path: string): number | undefined {
  const v = json[key];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'number' || !Number.isFinite(v)) {
    throw hfInvalid(path, `${key} must be a number (got ${JSON.stringify(v)})`);
  }
  return v;
}

export function configString(json: JsonObject, key: string): string | undefined {
  const v = json[key];
  return typeof v === 'string' ? v : undefined;
}

export function configBool(json: JsonObject, key: string): boolean | undefined {
  const v = json[key];
  return typeof v === 'boolean' ? v : undefined;
}
