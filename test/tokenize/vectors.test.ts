/**
 * quantd's tokenizers against the reference tokenizers, id for id: SentencePiece (Python's
 * sp.encode) for tokenizer.model folders, Hugging Face's tokenizers.js for tokenizer.json ones,
 * on the vectors test/tokenize/generate.py wrote (a several-KB multilingual text, each of its
 * lines, and edge cases, for the GGUF fixtures and for models trained with the options the
 * fixtures lack), and on the ids the GGUF fixtures' logits were computed from. The split regexes'
 * translation is checked against Oniguruma itself (through jq).
 */
import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';

import { onigurumaRegExp } from '../../src/core/tokenize/index.js';
import { loadTokenizer } from '../../src/service/load-tokenizer.js';

const VECTORS = join(import.meta.dirname, 'vectors');
const FIXTURES = join(import.meta.dirname, '..', 'gguf-hf', 'fixtures');

interface Vectors {
  readonly folder: string;
  readonly reference: string;
  /** Texts of this model alone (added tokens inside), after texts.json's. */
  readonly extraTexts: readonly string[];
  /** The ids of each text: texts.json's, then extraTexts. */
  readonly ids: ReadonlyArray<readonly number[]>;
  /** SentencePiece's decoding of [BOS] + ids[i] + [EOS]. */
  readonly decoded?: readonly string[];
  /** Id sequences no encoding gives (broken UTF-8 in byte pieces, spaces around control pieces)… */
  readonly decodeIds?: ReadonlyArray<readonly number[]>;
  /** …and SentencePiece's decoding of each. */
  readonly decodeTexts?: readonly string[];
}

const read = <T>(path: string): T => JSON.parse(readFileSync(path, 'utf8')) as T;

const TEXTS = read<{ texts: string[] }>(join(VECTORS, 'texts.json')).texts;

const vectorFiles = readdirSync(VECTORS)
  .filter((f) => f.endsWith('.json') && f !== 'onig-regex.json' && f !== 'texts.json')
  .sort();

describe('encode gives the reference ids', () => {
  it('cover several KB of varied text, each of its lines and edge cases', () => {
    expect(new TextEncoder().encode(TEXTS[0]).length).toBeGreaterThan(4000);
    expect(TEXTS.length).toBeGreaterThan(60);
  });

  it('cover every tokenizer kind the converter reads', () => {
    expect(vectorFiles).toEqual(
      expect.arrayContaining([
        'llama-spm.json',
        'gemma2-spm.json',
        'phi3-spm.json',
        'llama3-bpe.json',
        'qwen2-bpe.json',
        'qwen3-bpe.json',
      ]),
    );
  });

  it.each(vectorFiles)('%s', async (file) => {
    const v = read<Vectors>(join(VECTORS, file));
    const tokenizer = await loadTokenizer(v.folder);
    const texts = [...TEXTS, ...v.extraTexts];
    expect(v.ids.length).toBe(texts.length);
    texts.forEach((text, i) => {
      const ids = Array.from(tokenizer.encode(text, { addBos: false, addEos: false }));
      expect(ids, `${file}: text ${i} ${JSON.stringify(text.slice(0, 60))}`).toEqual(v.ids[i]);
    });
  });
});

describe('decode gives the reference text', () => {
  const spm = vectorFiles.filter((f) => read<Vectors>(join(VECTORS, f)).decoded !== undefined);

  it('covers the SentencePiece models', () => {
    expect(spm.length).toBeGreaterThanOrEqual(8);
  });

  it.each(spm)(
    '%s: the same text as SentencePiece from [BOS] + ids + [EOS] and odd sequences',
    async (file) => {
      const v = read<Vectors>(join(VECTORS, file));
      const tokenizer = await loadTokenizer(v.folder);
      v.ids.forEach((ids, i) => {
        const decoded = tokenizer.decode([tokenizer.bosId, ...ids, tokenizer.eosId]);
        expect(decoded, `${file}: text ${i}`).toBe(v.decoded![i]);
      });
      expect(v.decodeIds!.length).toBeGreaterThanOrEqual(5);
      v.decodeIds!.forEach((ids, k) => {
        expect(tokenizer.decode(ids), `${file}: ${JSON.stringify(ids)}`).toBe(v.decodeTexts![k]);
      });
    },
  );
});

describe('the GGUF fixtures: the ids their reference logits were computed from', () => {
  const fixtures = readdirSync(FIXTURES)
    .filter((f) => f.endsWith('.expected.json'))
    .map((f) => f.replace('.expected.json', ''))
    .sort();

  it.each(fixtures)('%s: the text, and the prompt with BOS as the model adds it', async (name) => {
    const expected = read<{ text: string; ids: number[]; prompt: string; promptIds: number[] }>(
      join(FIXTURES, `${name}.expected.json`),
    );
    const tokenizer = await loadTokenizer(join(FIXTURES, name));
    expect(Array.from(tokenizer.encode(expected.text, { addBos: false }))).toEqual(expected.ids);
    // the default: Llama 2, Phi-3, Gemma and Llama 3 put BOS first, Qwen does not
    expect(Array.from(tokenizer.encode(expected.prompt))).toEqual(expected.promptIds);
  });
});

describe('split regexes match what Oniguruma matches', () => {
  const v = read<{ text: string; cases: ReadonlyArray<{ pattern: string; matches: string[] }> }>(
    join(VECTORS, 'onig-regex.json'),
  );

  it.each(v.cases.map((c) => [c.pattern, c] as const))('%s', (_pattern, c) => {
    const regex = onigurumaRegExp(c.pattern, 'test');
    const matches = Array.from(v.text.matchAll(regex), (m) => m[0]);
    expect(matches).toEqual(c.matches);
  });
});
