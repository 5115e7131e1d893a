/**
 * The tokenizer metadata llama.cpp reads (`tokenizer.ggml.*`, `tokenizer.chat_template`), from a
 * model folder's tokenizer files, as the converter writes it:
 *
 * - SentencePiece (tokenizer.model): model "llama", pre-tokenizer "default", the pieces with
 *   their scores and types; a vocabulary shorter than config.json's vocab_size is padded with
 *   unused "[PAD{i}]" tokens so the embedding rows and the tokens agree; tokens
 *   tokenizer_config.json adds (added_tokens_decoder) take their ids.
 * - byte-level BPE (tokenizer.json, when there is no tokenizer.model): ./tokenizer-bpe.ts.
 * - special ids: SentencePiece's own ids, or the tokens tokenizer_config.json names, else
 *   config.json's *_token_id; add_bos/add_eos from tokenizer_config.json when it says (else,
 *   for tokenizer.json, whether its post-processor puts a special token first); the chat
 *   template from tokenizer_config.json.
 */
import { readFile } from 'node:fs/promises';

import { QuantdError } from '../../../errors/index.js';
import type { GgufKv } from '../../../format/gguf.js';
import { errorDetail } from '../../../format/file-io.js';
import {
  SP_PIECE_TYPES,
  parseSentencePieceModel,
  type SentencePieceModel,
} from '../../../format/sentencepiece-model.js';
import { configBool, configString, hfInvalid, type HfFolder, type JsonObject } from './folder.js';
import { bool, floats, int32s, str, strings, u32 } from './gguf-kv.js';
import { bpeVocabulary } from './tokenizer-bpe.js';

async function readBytes(path: string): Promise<Uint8Array> {
  try {
    return await readFile(path);
  } catch (err) {
    throw new QuantdError('FILE_UNREADABLE', { path, detail: errorDetail(err) });
  }
}

interface Vocabulary {
  readonly kvs: GgufKv[];
  readonly ids: { bos: number; eos: number; unk: number; pad: number };
}

export interface ConfigAddedToken {
  readonly id: number;
  readonly content: string;
  readonly special: boolean;
}

/**
 * tokenizer_config.json's added_tokens_decoder ({"32000": {"content": "<|endoftext|>",
 * "special": true}}): tokens outside tokenizer.model (Phi-3's chat tokens) with their ids, each
 * inside `vocabSize`.
 */
export function configAddedTokens(
  tokenizerConfig: JsonObject,
  vocabSize: number,
  path: string,
): ConfigAddedToken[] {
  const decoder = tokenizerConfig['added_tokens_decoder'];
  if (typeof decoder !== 'object' || decoder === null) return [];
  return Object.entries(decoder as JsonObject).map(([key, token]) => {
    const id = Number(key);
    const content = (token as JsonObject | null)?.['content'];
    if (!Number.isSafeInteger(id) || id < 0 || typeof content !== 'string') {
      throw hfInvalid(path, `added_tokens_decoder has a malformed entry ${JSON.stringify(key)}`);
    }
    if (id >= vocabSize) {
      throw hfInvalid(
        path,
        `added token ${JSON.stringify(content)} has id ${id}, outside vocab_size ${vocabSize}`,
      );
    }
    return { id, content, special: (token as JsonObject)['special'] === true };
  });
}

/** The added tokens placed at their ids: special ones are control tokens, others user-defined. */
function addedTokens(
  tokens: string[],
  types: number[],
  tokenizerConfig: JsonObject,
  vocabSize: number,
  path: string,
): void {
  for (const { id, content, special } of configAddedTokens(tokenizerConfig, vocabSize, path)) {
    tokens[id] = content;
    types[id] = special ? SP_PIECE_TYPES.CONTROL : SP_PIECE_TYPES.USER_DEFINED;
  }
}

/** A tokenizer.model, parsed. */
export async function readSentencePiece(path: string): Promise<SentencePieceModel> {
  return parseSentencePieceModel(await readBytes(path), path);
}

async function sentencePieceVocabulary(
  path: string,
  vocabSize: number,
  tokenizerConfig: JsonObject,
  tokenizerConfigPath: string,
): Promise<Vocabulary> {
  const sp = await readSentencePiece(path);
  if (sp.modelType !== 1 && sp.modelType !== 2) {
    throw hfInvalid(
      path,
      `SentencePiece model type ${sp.modelType} cannot be converted (llama.cpp reads unigram and BPE models)`,
    );
  }
  if (sp.pieces.length > vocabSize) {
    throw hfInvalid(
      path,
      `has ${sp.pieces.length} pieces but config.json's vocab_size is ${vocabSize}: the tokenizer does not belong to these weights`,
    );
  }
  const tokens = [...sp.pieces];
  const scores = [...sp.scores];
  const types = [...sp.types];
  for (let i = tokens.length; i < vocabSize; i++) {
    tokens.push(`[PAD${i}]`);
    scores.push(-1000);
    types.push(SP_PIECE_TYPES.UNUSED);
  }
  addedTokens(tokens, types, tokenizerConfig, vocabSize, tokenizerConfigPath);
  return {
    kvs: [
      str('tokenizer.ggml.model', 'llama'),
      str('tokenizer.ggml.pre', 'default'),
      strings('tokenizer.ggml.tokens', tokens),
      floats('tokenizer.ggml.scores', scores),
      int32s('tokenizer.ggml.token_type', types),
      // whether a space is prepended before tokenizing (SentencePiece's add_dummy_prefix; Gemma's is off)
      bool('tokenizer.ggml.add_space_prefix', sp.addDummyPrefix),
    ],
    ids: { bos: sp.bosId, eos: sp.eosId, unk: sp.unkId, pad: sp.padId },
  };
}

/** A special token of tokenizer_config.json ("<s>" or {"content": "<s>", ...}), as text. */
export function tokenText(value: unknown): string | undefined {
  if (typeof value === 'string') return value;
  if (typeof value === 'object' && value !== null && typeof (value as JsonObject)['content'] === 'string') {
    return (value as JsonObject)['content'] as string;
  }
  return undefined;
}

/** A *_token_id of config.json: a number, or a list whose first entry counts (Llama 3.1's eos). */
export function configId(config: JsonObject, key: string): number | undefined {
  const v = config[key];
  const id = Array.isArray(v) ? (v as unknown[])[0] : v;
  return typeof id === 'number' && Number.isSafeInteger(id) && id >= 0 ? id : undefined;
}

/** The tokenizer metadata of the folder; `vocabSize` is config.json's vocab_size. */
export async function tokenizerMetadata(folder: HfFolder, vocabSize: number): Promise<GgufKv[]> {
  const tc = folder.tokenizerConfig;
  let vocab: Vocabulary;
  let addBos = configBool(tc, 'add_bos_token');
  if (folder.tokenizerJson !== undefined && folder.sentencePiece === undefined) {
    const bpe = await bpeVocabulary(folder.tokenizerJson, vocabSize);
    const byText = (key: string): number => {
      const text = tokenText(tc[key]);
      return text !== undefined ? (bpe.idOf.get(text) ?? -1) : -1;
    };
    vocab = {
      kvs: bpe.kvs,
      ids: {
        bos: byText('bos_token'),
        eos: byText('eos_token'),
        unk: byText('unk_token'),
        pad: byText('pad_token'),
      },
    };
    addBos ??= bpe.addsBos;
  } else if (folder.sentencePiece !== undefined) {
    vocab = await sentencePieceVocabulary(
      folder.sentencePiece,
      vocabSize,
      tc,
      `${folder.dir}/tokenizer_config.json`,
    );
  } else {
    throw hfInvalid(
      folder.dir,
      'has no tokenizer (tokenizer.model or tokenizer.json): llama.cpp needs the vocabulary',
    );
  }
  const id = (key: string, fallback: number): number => configId(folder.config, key) ?? fallback;
  const special: Array<[string, number]> = [
    ['bos', vocab.ids.bos >= 0 ? vocab.ids.bos : id('bos_token_id', -1)],
    ['eos', vocab.ids.eos >= 0 ? vocab.ids.eos : id('eos_token_id', -1)],
    ['unknown', vocab.ids.unk],
    ['padding', vocab.ids.pad >= 0 ? vocab.ids.pad : id('pad_token_id', -1)],
  ];
  const kvs = [...vocab.kvs];
  for (const [name, value] of special) {
    if (value < 0) continue; // the model has none
    if (value >= vocabSize) {
      throw hfInvalid(folder.dir, `the ${name} token id ${value} is outside the vocabulary of ${vocabSize}`);
    }
    kvs.push(u32(`tokenizer.ggml.${name}_token_id`, value));
  }
  const addEos = configBool(tc, 'add_eos_token');
  if (addBos !== undefined) kvs.push(bool('tokenizer.ggml.add_bos_token', addBos));
  if (addEos !== undefined) kvs.push(bool('tokenizer.ggml.add_eos_token', addEos));
  const template = configString(tc, 'chat_template');
  if (template !== undefined) kvs.push(str('tokenizer.chat_template', template));
  return kvs;
}
