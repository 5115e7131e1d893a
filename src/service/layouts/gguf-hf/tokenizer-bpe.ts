/**
 * A byte-level BPE `tokenizer.json` (the Hugging Face tokenizers format, as Llama 3 and Qwen 2
 * ship it) as llama.cpp's "gpt2" vocabulary: the tokens by id (ids the file leaves out become
 * unused "[PAD{i}]" tokens up to config.json's vocab_size), their types (added special tokens
 * are control tokens, other added tokens user-defined), the merges as "a b" strings, and the
 * pre-tokenizer llama.cpp must use, recognised from the file's split regex: llama.cpp
 * implements a fixed set of pre-tokenizers, so an unknown regex is refused rather than guessed.
 */
import { readFile } from 'node:fs/promises';

import { QuantdError } from '../../../errors/index.js';
import type { GgufKv } from '../../../format/gguf.js';
import { errorDetail } from '../../../format/file-io.js';
import { SP_PIECE_TYPES } from '../../../format/sentencepiece-model.js';
import { hfInvalid, type JsonObject } from './folder.js';
import { int32s, str, strings } from './gguf-kv.js';

/** Split regexes of the pre-tokenizers llama.cpp implements → its tokenizer.ggml.pre name. */
const PRE_TOKENIZERS: ReadonlyArray<readonly [string, string]> = [
  [
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    'llama-bpe',
  ],
  [
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    'qwen2',
  ],
];

export interface BpeVocabulary {
  readonly kvs: GgufKv[];
  /** Token id by text (vocabulary and added tokens), to resolve special tokens named by text. */
  readonly idOf: ReadonlyMap<string, number>;
  /** Whether the post-processor puts a special token first (the file's add_bos). */
  readonly addsBos: boolean;
}

const isObject = (v: unknown): v is JsonObject => typeof v === 'object' && v !== null && !Array.isArray(v);

/**
 * Sequences nested deeper than this are not looked into (the walks recurse once per level, and
 * a file's nesting is its author's): they hold no regex and no template here, and the tokenizer
 * (src/core/tokenize) refuses them.
 */
const MAX_SEQUENCE_DEPTH = 16;

/** The split regexes of a pre_tokenizer (a Split, or a Sequence holding Splits). */
function splitPatterns(pre: unknown, depth = 0): string[] {
  if (!isObject(pre) || depth > MAX_SEQUENCE_DEPTH) return [];
  if (pre['type'] === 'Sequence' && Array.isArray(pre['pretokenizers'])) {
    return pre['pretokenizers'].flatMap((p) => splitPatterns(p, depth + 1));
  }
  const pattern = pre['pattern'];
  if (pre['type'] === 'Split' && isObject(pattern) && typeof pattern['Regex'] === 'string') {
    return [pattern['Regex']];
  }
  return [];
}

function preTokenizer(json: JsonObject, path: string): string {
  const patterns = splitPatterns(json['pre_tokenizer']);
  for (const [regex, name] of PRE_TOKENIZERS) if (patterns.includes(regex)) return name;
  throw hfInvalid(
    path,
    `its pre-tokenizer (${patterns.length > 0 ? `split regex ${JSON.stringify(patterns[0])}` : 'no split regex'}) is not one llama.cpp implements that the GGUF conversion recognises (Llama 3, Qwen 2)`,
  );
}

function mergeText(merge: unknown, path: string): string {
  if (typeof merge === 'string') return merge;
  if (Array.isArray(merge) && merge.length === 2 && merge.every((m) => typeof m === 'string')) {
    return `${merge[0]} ${merge[1]}`;
  }
  throw hfInvalid(path, `has a merge that is neither "a b" nor ["a", "b"]: ${JSON.stringify(merge)}`);
}

/** Whether the post-processor's template puts a special token first (`at` 0) or last (-1). */
function templateSpecialAt(post: unknown, at: 0 | -1, depth = 0): boolean {
  if (!isObject(post) || depth > MAX_SEQUENCE_DEPTH) return false;
  if (post['type'] === 'Sequence' && Array.isArray(post['processors'])) {
    return post['processors'].some((p) => templateSpecialAt(p, at, depth + 1));
  }
  const single = post['single'];
  const item: unknown = Array.isArray(single) ? single.at(at) : undefined;
  return post['type'] === 'TemplateProcessing' && isObject(item) ? 'SpecialToken' in item : false;
}

/** Whether the post-processor puts a special token first (Llama 3's BOS). */
export const startsWithSpecial = (post: unknown): boolean => templateSpecialAt(post, 0);
/** Whether the post-processor puts a special token last. */
export const endsWithSpecial = (post: unknown): boolean => templateSpecialAt(post, -1);

/** A tokenizer.json, parsed and checked to be a BPE model with a vocabulary. */
export async function readTokenizerJson(path: string): Promise<JsonObject> {
  let json: unknown;
  try {
    json = JSON.parse(await readFile(path, 'utf8'));
  } catch (err) {
    throw hfInvalid(path, `is not readable JSON: ${errorDetail(err)}`);
  }
  const model = isObject(json) ? json['model'] : undefined;
  if (!isObject(json) || !isObject(model) || model['type'] !== 'BPE' || !isObject(model['vocab'])) {
    throw hfInvalid(path, 'is not a BPE tokenizer (model.type "BPE" with a vocab); quantd reads those');
  }
  return json;
}

export async function bpeVocabulary(path: string, vocabSize: number): Promise<BpeVocabulary> {
  const json = await readTokenizerJson(path);
  const model = json['model'] as JsonObject;
  const decoder = json['decoder'];
  if (!isObject(decoder) || decoder['type'] !== 'ByteLevel') {
    throw new QuantdError('FEATURE_UNSUPPORTED', {
      detail: `${path}: only byte-level BPE tokenizers (decoder ByteLevel) convert to llama.cpp's gpt2 vocabulary`,
    });
  }
  const pre = preTokenizer(json, path);
  const tokens: Array<string | undefined> = new Array<string | undefined>(vocabSize);
  const types: number[] = new Array<number>(vocabSize).fill(SP_PIECE_TYPES.NORMAL);
  const idOf = new Map<string, number>();
  const place = (text: string, id: unknown, type: number): void => {
    if (typeof id !== 'number' || !Number.isSafeInteger(id) || id < 0 || id >= vocabSize) {
      throw hfInvalid(
        path,
        `token ${JSON.stringify(text)} has id ${JSON.stringify(id)}, outside config.json's vocab_size ${vocabSize}`,
      );
    }
    tokens[id] = text;
    types[id] = type;
    idOf.set(text, id);
  };
  for (const [text, id] of Object.entries(model['vocab'] as JsonObject))
    place(text, id, SP_PIECE_TYPES.NORMAL);
  const added = Array.isArray(json['added_tokens']) ? json['added_tokens'] : [];
  for (const a of added) {
    if (!isObject(a) || typeof a['content'] !== 'string')
      throw hfInvalid(path, 'has a malformed added token');
    place(
      a['content'],
      a['id'],
      a['special'] === true ? SP_PIECE_TYPES.CONTROL : SP_PIECE_TYPES.USER_DEFINED,
    );
  }
  for (let i = 0; i < vocabSize; i++) {
    if (tokens[i] === undefined) {
      tokens[i] = `[PAD${i}]`;
      types[i] = SP_PIECE_TYPES.UNUSED;
    }
  }
  const merges = Array.isArray(model['merges']) ? model['merges'].map((m) => mergeText(m, path)) : [];
  return {
    kvs: [
      str('tokenizer.ggml.model', 'gpt2'),
      str('tokenizer.ggml.pre', pre),
      strings('tokenizer.ggml.tokens', tokens as string[]),
      int32s('tokenizer.ggml.token_type', types),
      strings('tokenizer.ggml.merges', merges),
    ],
    idOf,
    addsBos: startsWithSpecial(json['post_processor']),
  };
}
