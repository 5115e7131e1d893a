/**
 * What the tokenizers refuse, each with a catalogued error: a folder without a tokenizer, a
 * malformed tokenizer file, what quantd does not implement (a normalizer that rewrites text, a
 * word model, a pre-tokenizer or post-processor it does not know, a regex construct it does
 * not translate), a tokenizer whose ids do not fit the model, and text or ids that cannot be
 * encoded or decoded. Refusing is the point: tokenizing some other way would give ids the model
 * was never trained on, silently.
 */
import { cpSync, mkdtempSync, readFileSync, rmSync, unlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';

import { onigurumaRegExp, sentencePieceTokenizer } from '../../src/core/tokenize/index.js';
import { QuantdError } from '../../src/errors/index.js';
import { parseSentencePieceModel } from '../../src/format/sentencepiece-model.js';
import { loadTokenizer } from '../../src/service/load-tokenizer.js';

const FIXTURES = join(import.meta.dirname, '..', 'gguf-hf', 'fixtures');
const DIR = mkdtempSync(join(tmpdir(), 'quantd-tokenize-errors-'));
afterAll(() => rmSync(DIR, { recursive: true, force: true }));
let seq = 0;

/** A copy of a fixture folder, changed by `edit`. */
function folder(fixture: string, edit: (dir: string) => void): string {
  const dir = join(DIR, `model-${seq++}`);
  cpSync(join(FIXTURES, fixture), dir, { recursive: true });
  edit(dir);
  return dir;
}

type Json = Record<string, unknown>;

function editJson(dir: string, file: string, change: (j: Json) => void): void {
  const path = join(dir, file);
  const json = JSON.parse(readFileSync(path, 'utf8')) as Json;
  change(json);
  writeFileSync(path, JSON.stringify(json));
}

/** A qwen2-bpe copy whose tokenizer.json is changed by `change`. */
const bpeFolder = (change: (j: Json) => void): string =>
  folder('qwen2-bpe', (d) => editJson(d, 'tokenizer.json', change));

async function failure(run: () => unknown): Promise<QuantdError> {
  const err = await Promise.resolve()
    .then(run)
    .then(
      () => undefined,
      (e: unknown) => e,
    );
  expect(err).toBeInstanceOf(QuantdError);
  return err as QuantdError;
}

/** A protobuf length-delimited field (wire type 2) holding `body`. */
function field(number: number, body: Uint8Array): Uint8Array {
  const out = [(number << 3) | 2];
  for (let n = body.length; ; n >>>= 7) {
    if (n < 0x80) {
      out.push(n);
      break;
    }
    out.push((n & 0x7f) | 0x80);
  }
  return Uint8Array.from([...out, ...body]);
}

/** A varint field (wire type 0). */
const varint = (number: number, value: number): Uint8Array => Uint8Array.of(number << 3, value);

const LLAMA_MODEL = readFileSync(join(FIXTURES, 'llama-spm', 'tokenizer.model'));

/** llama-spm's tokenizer.model with `extra` appended (a later field overrides an earlier one). */
const spmFolder = (extra: Uint8Array): string =>
  folder('llama-spm', (d) => writeFileSync(join(d, 'tokenizer.model'), Buffer.concat([LLAMA_MODEL, extra])));

describe('loadTokenizer refuses', () => {
  it('a folder that does not exist, a file, a folder with no tokenizer', async () => {
    expect((await failure(() => loadTokenizer(join(DIR, 'nowhere')))).code).toBe('FILE_NOT_FOUND');
    const file = join(DIR, 'a-file');
    writeFileSync(file, 'x');
    expect((await failure(() => loadTokenizer(file))).code).toBe('HF_MODEL_INVALID');
    const err = await failure(() =>
      loadTokenizer(folder('llama-spm', (d) => unlinkSync(join(d, 'tokenizer.model')))),
    );
    expect(err.code).toBe('HF_MODEL_INVALID');
    expect(err.message).toMatch(/has no tokenizer \(tokenizer\.model or tokenizer\.json\)/);
  });

  it('a tokenizer.model that is not a SentencePiece model', async () => {
    const dir = folder('llama-spm', (d) =>
      writeFileSync(join(d, 'tokenizer.model'), 'not a protobuf \xff\xff'),
    );
    const err = await failure(() => loadTokenizer(dir));
    expect(err.code).toBe('HF_MODEL_INVALID');
    expect(err.message).toMatch(/not a SentencePiece model/);
  });

  it('a tokenizer.json that is not JSON, or not a BPE model', async () => {
    const broken = folder('qwen2-bpe', (d) => writeFileSync(join(d, 'tokenizer.json'), '{"model": '));
    expect((await failure(() => loadTokenizer(broken))).code).toBe('HF_MODEL_INVALID');
    const unigram = bpeFolder((j) => ((j['model'] as Json)['type'] = 'Unigram'));
    const err = await failure(() => loadTokenizer(unigram));
    expect(err.code).toBe('HF_MODEL_INVALID');
    expect(err.message).toMatch(/is not a BPE tokenizer/);
  });

  it('a SentencePiece normalizer that rewrites characters (a precompiled map, as nmt_nfkc)', async () => {
    // NormalizerSpec { name: "nmt_nfkc", precompiled_charsmap: <bytes> }
    const spec = Buffer.concat([field(1, Buffer.from('nmt_nfkc')), field(2, Uint8Array.of(1, 2, 3, 4))]);
    const err = await failure(() => loadTokenizer(spmFolder(field(3, spec))));
    expect(err.code).toBe('FEATURE_UNSUPPORTED');
    expect(err.message).toMatch(/normalizer "nmt_nfkc" rewrites characters/);
  });

  it('a SentencePiece word or char model', async () => {
    for (const [type, name] of [
      [3, 'word'],
      [4, 'char'],
    ] as const) {
      const err = await failure(() => loadTokenizer(spmFolder(field(2, varint(3, type)))));
      expect(err.code).toBe('FEATURE_UNSUPPORTED');
      expect(err.message).toMatch(new RegExp(`SentencePiece ${name} models are not tokenized`));
    }
  });

  it('a tokenizer.json normalizer, pre-tokenizer or post-processor quantd does not implement', async () => {
    const cases: Array<[(j: Json) => void, RegExp]> = [
      [(j) => (j['normalizer'] = { type: 'Lowercase' }), /normalizer "Lowercase"/],
      [(j) => (j['pre_tokenizer'] = { type: 'Metaspace', replacement: '▁' }), /pre-tokenizer "Metaspace"/],
      [
        (j) => (j['pre_tokenizer'] = { type: 'Split', pattern: { Regex: ' ' }, behavior: 'Isolated' }),
        /no ByteLevel step/,
      ],
      [
        (j) =>
          (((j['pre_tokenizer'] as Json)['pretokenizers'] as Json[])[0]!['behavior'] = 'MergedWithPrevious'),
        /behavior "MergedWithPrevious"/,
      ],
      [(j) => (((j['pre_tokenizer'] as Json)['pretokenizers'] as Json[])[0]!['invert'] = true), /inverted/],
      [(j) => (j['post_processor'] = { type: 'RobertaProcessing' }), /post-processor "RobertaProcessing"/],
      [(j) => ((j['model'] as Json)['dropout'] = 0.1), /dropout/],
      [(j) => ((j['model'] as Json)['end_of_word_suffix'] = '</w>'), /end_of_word_suffix/],
      [(j) => ((j['added_tokens'] as Json[])[0]!['single_word'] = true), /single_word/],
      [
        (j) => delete ((j['model'] as Json)['vocab'] as Json)['Ā'],
        /lacks the byte-level character of byte 0x0/,
      ],
      [
        (j) =>
          (((j['pre_tokenizer'] as Json)['pretokenizers'] as Json[])[0]!['pattern'] = { Regex: '\\d+|\\s+' }),
        /does not translate from Oniguruma: unsupported escape/,
      ],
    ];
    for (const [change, message] of cases) {
      const err = await failure(() => loadTokenizer(bpeFolder(change)));
      expect(err.code, String(message)).toBe('FEATURE_UNSUPPORTED');
      expect(err.message).toMatch(message);
    }
  });

  it('a malformed tokenizer.json: a merge of unknown tokens, a bad added token, a bad regex', async () => {
    const cases: Array<[(j: Json) => void, RegExp]> = [
      [
        (j) => ((j['model'] as Json)['merges'] as unknown[]).push('zz qq'),
        /names a token not in the vocabulary/,
      ],
      [(j) => ((j['model'] as Json)['merges'] as unknown[]).push('a b c'), /neither "a b" nor/],
      [(j) => (j['added_tokens'] as Json[]).push({ content: 5 }), /added token 3 is malformed/],
      [
        (j) =>
          (((j['pre_tokenizer'] as Json)['pretokenizers'] as Json[])[0]!['pattern'] = { Regex: '[z-a]' }),
        /is not a valid pattern/,
      ],
    ];
    for (const [change, message] of cases) {
      const err = await failure(() => loadTokenizer(bpeFolder(change)));
      expect(err.code, String(message)).toBe('HF_MODEL_INVALID');
      expect(err.message).toMatch(message);
    }
  });

  it('Sequences and regex groups nested deep enough to exhaust the stack', async () => {
    // written as text: JSON.stringify itself recurses once per level
    const depth = 100_000;
    const nested = (key: string, leaf: string): string =>
      `{"type":"Sequence","${key}":[`.repeat(depth) + leaf + ']}'.repeat(depth);
    const cases: Array<[string, string, string, RegExp]> = [
      [
        'normalizer',
        nested('normalizers', '{"type":"NFC"}'),
        'HF_MODEL_INVALID',
        /normalizer Sequences nested/,
      ],
      [
        'pre_tokenizer',
        nested('pretokenizers', '{"type":"ByteLevel"}'),
        'HF_MODEL_INVALID',
        /pre-tokenizer Sequences nested/,
      ],
      [
        'post_processor',
        nested('processors', '{"type":"ByteLevel"}'),
        'HF_MODEL_INVALID',
        /post-processor Sequences nested/,
      ],
      [
        'pre_tokenizer',
        JSON.stringify({
          type: 'Split',
          pattern: { Regex: `${'('.repeat(depth)}a${')'.repeat(depth)}` },
          behavior: 'Isolated',
        }),
        'FEATURE_UNSUPPORTED',
        /groups nested more than 64 deep/,
      ],
    ];
    for (const [key, text, code, message] of cases) {
      const dir = folder('qwen2-bpe', (d) => {
        const path = join(d, 'tokenizer.json');
        const json = JSON.parse(readFileSync(path, 'utf8')) as Json;
        json[key] = 'DEEP';
        writeFileSync(path, JSON.stringify(json).replace('"DEEP"', text));
      });
      const err = await failure(() => loadTokenizer(dir));
      expect(err.code, String(message)).toBe(code);
      expect(err.message).toMatch(message);
      expect(err.message.length, 'a message quotes a cut of the pattern').toBeLessThan(600);
    }
  });

  it('ids that do not fit config.json’s vocab_size, and a BOS asked for that the model lacks', async () => {
    const small = folder('llama3-bpe', (d) => editJson(d, 'config.json', (c) => (c['vocab_size'] = 300)));
    const err = await failure(() => loadTokenizer(small));
    expect(err.code).toBe('HF_MODEL_INVALID');
    expect(err.message).toMatch(/vocab_size is 300 but the tokenizer has ids up to 458/);
    const noBos = folder('qwen2-bpe', (d) => {
      editJson(d, 'config.json', (c) => delete c['bos_token_id']);
      editJson(d, 'tokenizer_config.json', (c) => (c['add_bos_token'] = true));
    });
    const bos = await failure(() => loadTokenizer(noBos));
    expect(bos.code).toBe('HF_MODEL_INVALID');
    expect(bos.message).toMatch(/add_bos_token is true but the model has no such token/);
  });
});

describe('SentencePiece models the reference itself refuses to load', () => {
  const base = parseSentencePieceModel(LLAMA_MODEL, 'tokenizer.model');
  const options = { source: 'tokenizer.model', addsBos: true, addsEos: false };
  const withTypes = (change: (types: number[], pieces: string[]) => void): Error | undefined => {
    const types = [...base.types];
    const pieces = [...base.pieces];
    change(types, pieces);
    try {
      sentencePieceTokenizer({ ...base, types, pieces }, options);
      return undefined;
    } catch (err) {
      return err as Error;
    }
  };

  it.each([
    ['no unknown piece', (t: number[]) => (t[0] = 1), /has no unknown piece/],
    ['two unknown pieces', (t: number[]) => (t[5] = 2), /has two unknown pieces/],
    ['a piece twice', (_t: number[], p: string[]) => (p[300] = p[301]!), /is defined twice/],
    ['an empty piece', (_t: number[], p: string[]) => (p[300] = ''), /piece 300 is empty/],
    ['a byte piece missing', (t: number[]) => (t[3] = 1), /not the 256 byte pieces/],
  ])('%s', (_name, change, message) => {
    const err = withTypes(change);
    expect(err).toBeInstanceOf(QuantdError);
    expect((err as QuantdError).code).toBe('HF_MODEL_INVALID');
    expect((err as QuantdError).message).toMatch(message);
  });

  it('a control piece the text spells as a whole symbol (the reference fails to encode it)', async () => {
    // make the one-character piece "a" a control piece: "a" in a text is that symbol
    const a = base.pieces.indexOf('a');
    expect(a).toBeGreaterThan(0);
    const types = [...base.types];
    types[a] = 3;
    const t = sentencePieceTokenizer({ ...base, types }, options);
    const err = await failure(() => t.encode('xa'));
    expect(err.code).toBe('FEATURE_UNSUPPORTED');
  });
});

describe('encode and decode refuse', () => {
  it('text that is not Unicode (a lone surrogate), in both kinds', async () => {
    for (const name of ['llama-spm', 'llama3-bpe']) {
      const t = await loadTokenizer(join(FIXTURES, name));
      const err = await failure(() => t.encode('ok \ud800 no'));
      expect(err.code).toBe('TOKENIZER_INPUT_INVALID');
      expect(err.message).toMatch(/lone surrogate \(U\+D800\) at UTF-16 index 3/);
    }
  });

  it('ids the tokenizer does not have', async () => {
    for (const name of ['llama-spm', 'qwen2-bpe']) {
      const t = await loadTokenizer(join(FIXTURES, name));
      for (const id of [-1, t.vocabSize, 1.5]) {
        const err = await failure(() => t.decode([1, id]));
        expect(err.code).toBe('TOKENIZER_INPUT_INVALID');
        expect(err.message).toMatch(/is not an id of this tokenizer/);
      }
    }
  });

  it('a BOS asked for that the model does not have', async () => {
    const dir = folder('qwen2-bpe', (d) => editJson(d, 'config.json', (c) => delete c['bos_token_id']));
    const t = await loadTokenizer(dir);
    expect(t.bosId).toBe(-1);
    expect(Array.from(t.encode('hi'))).toEqual(Array.from(t.encode('hi', { addBos: false })));
    const err = await failure(() => t.encode('hi', { addBos: true }));
    expect(err.code).toBe('FEATURE_UNSUPPORTED');
  });
});

describe('the Oniguruma translation refuses what it cannot translate exactly', () => {
  it.each([
    ['\\d+', /unsupported escape/],
    ['\\w|\\b', /unsupported escape/],
    ['^a|b$', /anchor/],
    ['a{1,2}+', /repetition in Ruby syntax/],
    ['(?x) a', /inline options/],
    ['(?i)a', /inline options/],
    ['[[:alpha:]]', /nested class or POSIX bracket/],
    ['[a-z&&[^aeiou]]', /class intersection/],
    ['\\p{Han}', /general categories only/],
    ['(?i:[a-z])', /character class under \(\?i:/],
    ['(?i:é)', /non-ASCII letter/],
    ['(a)\\1', /unsupported escape/],
    ['a**', /nested quantifier/],
    ['[\\s-z]', /range starting at a set/],
    ['(ab', /unclosed group/],
    ['a{2', /not an interval/],
  ])('%s', (pattern, reason) => {
    let err: unknown;
    try {
      onigurumaRegExp(pattern, 'tokenizer.json');
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(QuantdError);
    expect((err as QuantdError).code).toBe('FEATURE_UNSUPPORTED');
    expect((err as QuantdError).message).toMatch(reason);
  });
});
