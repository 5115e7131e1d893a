/**
 * A model folder's tokenizer, ready to encode (src/core/tokenize): the same files, and the same
 * choices, as the GGUF conversion's tokenizer metadata (layouts/gguf-hf/tokenizer.ts), so that
 * quantd's ids are the ones llama.cpp would give the converted model:
 *
 * - tokenizer.model (SentencePiece) when the folder has one, else tokenizer.json (byte-level BPE);
 * - BOS / EOS ids: SentencePiece's own, or the tokens tokenizer_config.json names, else
 *   config.json's *_token_id;
 * - whether encode adds them: tokenizer_config.json's add_bos_token / add_eos_token when it says,
 *   else SentencePiece adds BOS (as LlamaTokenizer and llama.cpp do) and a tokenizer.json does
 *   what its post-processor's template does (Llama 3's puts <|begin_of_text|> first).
 *
 * The tokenizer's ids must fit config.json's vocab_size (the embedding's rows) when it has one:
 * a larger id would index past the embedding.
 */
import { stat } from 'node:fs/promises';
import { join } from 'node:path';

import { byteLevelBpeTokenizer, sentencePieceTokenizer, type Tokenizer } from '../core/tokenize/index.js';
import { QuantdError } from '../errors/index.js';
import { errorCode, errorDetail } from '../format/file-io.js';
import {
  configBool,
  configInt,
  hfInvalid,
  readJsonObject,
  type JsonObject,
} from './layouts/gguf-hf/folder.js';
import { configAddedTokens, configId, readSentencePiece, tokenText } from './layouts/gguf-hf/tokenizer.js';
import { endsWithSpecial, readTokenizerJson, startsWithSpecial } from './layouts/gguf-hf/tokenizer-bpe.js';

async function kindOf(path: string): Promise<'file' | 'dir' | 'none'> {
  try {
    const s = await stat(path);
    return s.isDirectory() ? 'dir' : s.isFile() ? 'file' : 'none';
  } catch (err) {
    if (errorCode(err) === 'ENOENT') return 'none';
    throw new QuantdError('FILE_UNREADABLE', { path, detail: errorDetail(err) });
  }
}

/** Whether encode adds a special token: the config's word, else `fallback`; never one the model lacks. */
function adds(tc: JsonObject, key: string, id: number, fallback: boolean, path: string): boolean {
  const said = configBool(tc, key);
  if (said === true && id < 0) throw hfInvalid(path, `${key} is true but the model has no such token`);
  return said ?? (fallback && id >= 0);
}

async function sentencePiece(
  path: string,
  dir: string,
  config: JsonObject,
  tc: JsonObject,
): Promise<Tokenizer> {
  const sp = await readSentencePiece(path);
  const tcPath = join(dir, 'tokenizer_config.json');
  const added = new Map(
    configAddedTokens(tc, Number.MAX_SAFE_INTEGER, tcPath)
      .filter((t) => t.id >= sp.pieces.length) // those inside are the model's own pieces
      .map((t) => [t.id, t] as const),
  );
  const bosId = sp.bosId >= 0 ? sp.bosId : (configId(config, 'bos_token_id') ?? -1);
  const eosId = sp.eosId >= 0 ? sp.eosId : (configId(config, 'eos_token_id') ?? -1);
  return sentencePieceTokenizer(
    { ...sp, bosId, eosId },
    {
      source: path,
      addsBos: adds(tc, 'add_bos_token', bosId, true, tcPath),
      addsEos: adds(tc, 'add_eos_token', eosId, false, tcPath),
      added,
    },
  );
}

async function tokenizerJson(
  path: string,
  dir: string,
  config: JsonObject,
  tc: JsonObject,
): Promise<Tokenizer> {
  const json = await readTokenizerJson(path);
  const idOf = new Map<string, number>();
  for (const [text, id] of Object.entries((json['model'] as JsonObject)['vocab'] as JsonObject)) {
    if (typeof id === 'number') idOf.set(text, id);
  }
  const added = Array.isArray(json['added_tokens']) ? (json['added_tokens'] as unknown[]) : [];
  for (const a of added) {
    const t = a as JsonObject | null;
    if (typeof t?.['content'] === 'string' && typeof t['id'] === 'number') idOf.set(t['content'], t['id']);
  }
  const special = (key: string, configKey: string): number => {
    const text = tokenText(tc[key]);
    const id = text !== undefined ? idOf.get(text) : undefined;
    return id ?? configId(config, configKey) ?? -1;
  };
  const bosId = special('bos_token', 'bos_token_id');
  const eosId = special('eos_token', 'eos_token_id');
  const tcPath = join(dir, 'tokenizer_config.json');
  return byteLevelBpeTokenizer(json, {
    source: path,
    bosId,
    eosId,
    addsBos: adds(tc, 'add_bos_token', bosId, startsWithSpecial(json['post_processor']), tcPath),
    addsEos: adds(tc, 'add_eos_token', eosId, endsWithSpecial(json['post_processor']), tcPath),
  });
}

/** The tokenizer of the model folder `dir`. */
export async function loadTokenizer(dir: string): Promise<Tokenizer> {
  const kind = await kindOf(dir);
  if (kind === 'none') throw new QuantdError('FILE_NOT_FOUND', { path: dir });
  if (kind === 'file') throw hfInvalid(dir, 'is a file; a tokenizer is read from a model folder');
  const config = await readJsonObject(join(dir, 'config.json'), false);
  const tc = await readJsonObject(join(dir, 'tokenizer_config.json'), false);
  const spPath = join(dir, 'tokenizer.model');
  const jsonPath = join(dir, 'tokenizer.json');
  let tokenizer: Tokenizer;
  if ((await kindOf(spPath)) === 'file') tokenizer = await sentencePiece(spPath, dir, config, tc);
  else if ((await kindOf(jsonPath)) === 'file') tokenizer = await tokenizerJson(jsonPath, dir, config, tc);
  else throw hfInvalid(dir, 'has no tokenizer (tokenizer.model or tokenizer.json)');
  const configPath = join(dir, 'config.json');
  const rows = configInt(config, 'vocab_size', configPath);
  if (rows !== undefined && tokenizer.vocabSize > rows) {
    throw hfInvalid(
      configPath,
      `vocab_size is ${rows} but the tokenizer has ids up to ${tokenizer.vocabSize - 1}: the tokenizer does not belong to these weights`,
    );
  }
  for (const [name, id] of [
    ['BOS', tokenizer.bosId],
    ['EOS', tokenizer.eosId],
  ] as const) {
    if (id >= tokenizer.vocabSize) {
      throw hfInvalid(
        dir,
        `the ${name} token id ${id} is outside the tokenizer's ${tokenizer.vocabSize} ids`,
      );
    }
  }
  return tokenizer;
}
