/**
 * A model folder the GGUF conversion cannot convert fails with a catalogued error naming what
 * is wrong, before any output is written: no config.json, an unsupported architecture, a
 * config.json contradicting the weights, a missing or broken tokenizer, options config.json
 * decides.
 */
import { cpSync, existsSync, mkdtempSync, readFileSync, rmSync, unlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';

import { QuantdError } from '../../src/errors/index.js';
import { parseSentencePieceModel } from '../../src/format/sentencepiece-model.js';
import { ggufLayout } from '../../src/service/layouts/gguf.js';
import { fixtureDir } from './llama-cpp.js';

const DIR = mkdtempSync(join(tmpdir(), 'quantd-gguf-hf-errors-'));
afterAll(() => rmSync(DIR, { recursive: true, force: true }));
let seq = 0;

/** A copy of a fixture folder (the SentencePiece llama by default), changed by `edit`. */
function folder(edit: (dir: string) => void, fixture = 'llama-spm'): string {
  const dir = join(DIR, `model-${seq++}`);
  cpSync(fixtureDir(fixture), dir, { recursive: true });
  edit(dir);
  return dir;
}

function editConfig(dir: string, change: (c: Record<string, unknown>) => void): void {
  const path = join(dir, 'config.json');
  const config = JSON.parse(readFileSync(path, 'utf8')) as Record<string, unknown>;
  change(config);
  writeFileSync(path, JSON.stringify(config));
}

async function failure(dir: string, options: Record<string, string> = {}): Promise<QuantdError> {
  const out = join(DIR, `out-${seq++}.gguf`);
  const err = await ggufLayout.write(dir, out, options).then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(existsSync(out)).toBe(false);
  expect(err).toBeInstanceOf(QuantdError);
  return err as QuantdError;
}

describe('HF folder → GGUF: refusals', () => {
  it('a folder without config.json', async () => {
    const err = await failure(folder((d) => unlinkSync(join(d, 'config.json'))));
    expect(err.code).toBe('HF_MODEL_INVALID');
    expect(err.message).toMatch(/config\.json: is missing/);
  });

  it('an unsupported architecture, naming it and the supported ones', async () => {
    const dir = folder((d) => editConfig(d, (c) => (c['architectures'] = ['GPTNeoXForCausalLM'])));
    const err = await failure(dir);
    expect(err.code).toBe('FEATURE_UNSUPPORTED');
    expect(err.message).toMatch(/GPTNeoXForCausalLM/);
    expect(err.message).toMatch(/supported: LlamaForCausalLM/);
  });

  it('a config.json contradicting the tensor shapes', async () => {
    const dir = folder((d) => editConfig(d, (c) => (c['num_key_value_heads'] = 4)));
    const err = await failure(dir);
    expect(err.code).toBe('HF_MODEL_INVALID');
    expect(err.message).toMatch(/k_proj\.weight has shape \[32, 64\], config\.json implies \[64, 64\]/);
  });

  it('a config.json with more layers than the weights', async () => {
    const err = await failure(folder((d) => editConfig(d, (c) => (c['num_hidden_layers'] = 3))));
    expect(err.code).toBe('HF_MODEL_INVALID');
    expect(err.message).toMatch(/3 layers but the weights lack blk\.2\./);
  });

  it('no tokenizer', async () => {
    const err = await failure(folder((d) => unlinkSync(join(d, 'tokenizer.model'))));
    expect(err.code).toBe('HF_MODEL_INVALID');
    expect(err.message).toMatch(/has no tokenizer/);
  });

  it('a tokenizer.model that is not a SentencePiece model', async () => {
    const err = await failure(folder((d) => writeFileSync(join(d, 'tokenizer.model'), 'not protobuf \xff')));
    expect(err.code).toBe('HF_MODEL_INVALID');
    expect(err.message).toMatch(/tokenizer\.model: not a SentencePiece model/);
  });

  it('a vocabulary larger than vocab_size', async () => {
    const err = await failure(folder((d) => editConfig(d, (c) => (c['vocab_size'] = 300))));
    expect(err.code).toBe('HF_MODEL_INVALID');
    expect(err.message).toMatch(/400 pieces but config\.json's vocab_size is 300/);
  });

  it('a tokenizer.json whose pre-tokenizer llama.cpp does not implement', async () => {
    const dir = folder((d) => {
      const path = join(d, 'tokenizer.json');
      const tok = JSON.parse(readFileSync(path, 'utf8')) as { pre_tokenizer: unknown };
      tok.pre_tokenizer = { type: 'Split', pattern: { Regex: '\\w+|\\s+' }, behavior: 'Isolated' };
      writeFileSync(path, JSON.stringify(tok));
    }, 'llama3-bpe');
    const err = await failure(dir);
    expect(err.code).toBe('HF_MODEL_INVALID');
    expect(err.message).toMatch(
      /tokenizer\.json: its pre-tokenizer \(split regex "\\\\w\+\|\\\\s\+"\) is not one/,
    );
  });

  it('a tokenizer.json that is not byte-level BPE', async () => {
    const dir = folder((d) => {
      const path = join(d, 'tokenizer.json');
      const tok = JSON.parse(readFileSync(path, 'utf8')) as { model: { type: string } };
      tok.model.type = 'WordPiece';
      writeFileSync(path, JSON.stringify(tok));
    }, 'llama3-bpe');
    const err = await failure(dir);
    expect(err.code).toBe('HF_MODEL_INVALID');
    expect(err.message).toMatch(/is not a BPE tokenizer/);
  });

  it('a tokenizer.json whose Sequences nest deep enough to exhaust the stack', async () => {
    // written as text: JSON.stringify itself recurses once per level
    const depth = 100_000;
    const deep =
      '{"type":"Sequence","pretokenizers":['.repeat(depth) + '{"type":"ByteLevel"}' + ']}'.repeat(depth);
    const dir = folder((d) => {
      const path = join(d, 'tokenizer.json');
      const tok = JSON.parse(readFileSync(path, 'utf8')) as Record<string, unknown>;
      tok['pre_tokenizer'] = 'DEEP';
      tok['post_processor'] = 'DEEPER';
      const post = deep.replaceAll('pretokenizers', 'processors');
      writeFileSync(path, JSON.stringify(tok).replace('"DEEP"', deep).replace('"DEEPER"', post));
    }, 'llama3-bpe');
    const err = await failure(dir);
    expect(err.code).toBe('HF_MODEL_INVALID');
    expect(err.message).toMatch(/its pre-tokenizer \(no split regex\) is not one llama\.cpp implements/);
  });

  it('options that config.json decides', async () => {
    const err = await failure(fixtureDir('llama-spm'), { heads: '4' });
    expect(err.code).toBe('OPTION_INVALID');
    expect(err.message).toMatch(/option gguf:heads does not apply to a model folder/);
  });
});

describe('SentencePiece model parser', () => {
  it('reads pieces, scores, types and special ids of the fixture', () => {
    const path = join(fixtureDir('llama-spm'), 'tokenizer.model');
    const sp = parseSentencePieceModel(readFileSync(path), path);
    expect(sp.pieces).toHaveLength(400);
    expect(sp.pieces.slice(0, 4)).toEqual(['<unk>', '<s>', '</s>', '<0x00>']);
    expect(sp.types.slice(0, 4)).toEqual([2, 3, 3, 6]);
    expect(sp.types[300]).toBe(1);
    expect(sp.scores[300]).toBeLessThan(0);
    expect([sp.unkId, sp.bosId, sp.eosId, sp.padId]).toEqual([0, 1, 2, -1]);
    expect([sp.modelType, sp.byteFallback, sp.addDummyPrefix]).toEqual([2, true, true]);
  });
});
