/**
 * The tokenizer metadata llama.cpp reads (`tokenizer.ggml.*`, `tokenizer.chat_template`), from a
 * model folder's tokenizer files, as the converter writes it:
 *
 * - SentencePiece (tokenizer.model): model "llama", pre-tokenizer "default", the pieces with
 *   their scores and types; a vocabulary shorter than config.json's vocab_size is padded with
 *   unused "[PAD{i}]" tokens so the embedding rows and the tokens agree.
 * - special ids: config.json's bos/eos/pad_token_id when given, else the SentencePiece model's;
 *   add_bos/add_eos from tokenizer_config.json when it says; the chat template from it too.
 */
import { readFile } from 'node:fs/promises';

import { QuantdError } from '../../../errors/index.js';
import type { GgufKv } from '../../../format/gguf.js';
import { errorDetail } from '../../../format/file-errors.js';
import { SP_PIECE_TYPES, parseSentencePieceModel } from '../../../format/sentencepiece-model.js';
import { configBool, configInt, configString, hfInvalid, type HfFolder } from './folder.js';
import { bool, floats, int32s, str, strings, u32 } from './gguf-kv.js';

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

async function sentencePieceVocabulary(path: string, vocabSize: number): Promise<Vocabulary> {
  const sp = parseSentencePieceModel(await readBytes(path), path);
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
  return {
    kvs: [
      str('tokenizer.ggml.model', 'llama'),
      str('tokenizer.ggml.pre', 'default'),
      strings('tokenizer.ggml.tokens', tokens),
      floats('tokenizer.ggml.scores', scores),
      int32s('tokenizer.ggml.token_type', types),
    ],
    ids: { bos: sp.bosId, eos: sp.eosId, unk: sp.unkId, pad: sp.padId },
  };
}

/** The tokenizer metadata of the folder; `vocabSize` is config.json's vocab_size. */
export async function tokenizerMetadata(folder: HfFolder, vocabSize: number): Promise<GgufKv[]> {
  if (folder.sentencePiece === undefined) {
    throw hfInvalid(
      folder.dir,
      folder.tokenizerJson !== undefined
        ? 'its tokenizer.json is not a tokenizer the GGUF conversion reads yet (SentencePiece tokenizer.model is)'
        : 'has no tokenizer (tokenizer.model or tokenizer.json): llama.cpp needs the vocabulary',
    );
  }
  const vocab = await sentencePieceVocabulary(folder.sentencePiece, vocabSize);
  const configPath = `${folder.dir}/config.json`;
  const id = (key: string, fallback: number): number => configInt(folder.config, key, configPath) ?? fallback;
  const special: Array<[string, number]> = [
    ['bos', id('bos_token_id', vocab.ids.bos)],
    ['eos', id('eos_token_id', vocab.ids.eos)],
    ['unknown', vocab.ids.unk],
    ['padding', id('pad_token_id', vocab.ids.pad)],
  ];
  const kvs = [...vocab.kvs];
  for (const [name, value] of special) {
    if (value < 0) continue; // the model has none
    if (value >= vocabSize) {
      throw hfInvalid(folder.dir, `the ${name} token id ${value} is outside the vocabulary of ${vocabSize}`);
    }
    kvs.push(u32(`tokenizer.ggml.${name}_token_id`, value));
  }
  const tc = folder.tokenizerConfig;
  const addBos = configBool(tc, 'add_bos_token');
  const addEos = configBool(tc, 'add_eos_token');
  if (addBos !== undefined) kvs.push(bool('tokenizer.ggml.add_bos_token', addBos));
  if (addEos !== undefined) kvs.push(bool('tokenizer.ggml.add_eos_token', addEos));
  const template = configString(tc, 'chat_template');
  if (template !== undefined) kvs.push(str('tokenizer.chat_template', template));
  return kvs;
}
