/**
 * Properties of the tokenizers beyond the reference vectors: encoding is deterministic (the word
 * cache changes nothing, whatever came before), decoding gives the text back (SentencePiece with
 * identity normalization and byte fallback, byte-level BPE: both are lossless), the model's
 * BOS / EOS choice, and the ids stay inside the vocabulary.
 */
import fc from 'fast-check';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';

import type { Tokenizer } from '../../src/core/tokenize/index.js';
import { loadTokenizer } from '../../src/service/load-tokenizer.js';

const FIXTURES = join(import.meta.dirname, '..', 'gguf-hf', 'fixtures');
const MODELS = join(import.meta.dirname, 'models');

/**
 * Folders whose tokenizer decodes every text back: SentencePiece with identity normalization, byte
 * fallback and the dummy prefix before the text (decoding drops it; a suffix one would stay), and
 * byte-level BPE without a prefix space. A SentencePiece text must not hold ▁ itself, which is
 * how it writes a space.
 */
const LOSSLESS = [
  join(FIXTURES, 'llama-spm'),
  join(FIXTURES, 'gemma2-spm'),
  join(FIXTURES, 'phi3-spm'),
  join(FIXTURES, 'llama3-bpe'),
  join(FIXTURES, 'qwen2-bpe'),
  join(MODELS, 'spm-across-spaces'),
  join(MODELS, 'spm-unused'),
  join(MODELS, 'spm-unigram'),
];

/** Text from a mix of alphabets, spaces, tabs, newlines, digits, emoji and rare characters. */
const text = fc
  .array(
    fc.oneof(
      fc.constantFrom(
        ' ',
        '  ',
        '\t',
        '\n',
        '\r\n',
        '\u2581',
        'the',
        'The',
        "'s",
        '12',
        '.',
        ',',
        '🙂',
        '東京',
      ),
      fc.string({ unit: 'grapheme', maxLength: 6 }),
      fc.string({ unit: 'binary', maxLength: 4 }),
    ),
    { maxLength: 40 },
  )
  .map((parts) => parts.join(''))
  // lone surrogates are refused (errors.test.ts); the text of a special token is not plain text
  .filter((s) => !/\p{Cs}/u.test(s) && !s.includes('<|'));

const tokenizers = new Map<string, Tokenizer>();
async function tokenizer(folder: string): Promise<Tokenizer> {
  let t = tokenizers.get(folder);
  if (t === undefined) {
    t = await loadTokenizer(folder);
    tokenizers.set(folder, t);
  }
  return t;
}

describe.each(LOSSLESS)('%s', (folder) => {
  it('decode(encode(text)) is the text, and every id is inside the vocabulary', async () => {
    const t = await tokenizer(folder);
    fc.assert(
      fc.property(text, (s) => {
        if (t.kind !== 'byte-level-bpe') s = s.replaceAll('\u2581', '_');
        const ids = t.encode(s, { addBos: false, addEos: false });
        for (const id of ids) expect(id >= 0 && id < t.vocabSize).toBe(true);
        expect(t.decode(ids)).toBe(s);
      }),
      { numRuns: 300 },
    );
  });

  it('encode is deterministic: a fresh tokenizer, and one that encoded other texts, agree', async () => {
    const used = await tokenizer(folder);
    fc.assert(
      fc.property(fc.array(text, { minLength: 2, maxLength: 4 }), (texts) => {
        const first = texts.map((s) => Array.from(used.encode(s)));
        const again = texts.map((s) => Array.from(used.encode(s)));
        expect(again).toEqual(first);
      }),
      { numRuns: 50 },
    );
    const fresh = await loadTokenizer(folder);
    const sample = 'Hello  world,\tthe world says 12345 🙂 東京 hello again';
    expect(Array.from(fresh.encode(sample))).toEqual(Array.from(used.encode(sample)));
  });
});

describe('special tokens', () => {
  it('Llama 2 and Llama 3 put BOS first by default, Qwen 2 does not; options override', async () => {
    const llama = await tokenizer(join(FIXTURES, 'llama-spm'));
    const llama3 = await tokenizer(join(FIXTURES, 'llama3-bpe'));
    const qwen = await tokenizer(join(FIXTURES, 'qwen2-bpe'));
    expect([llama.addsBos, llama3.addsBos, qwen.addsBos]).toEqual([true, true, false]);
    expect(llama.encode('hi')[0]).toBe(llama.bosId);
    expect(llama3.encode('hi')[0]).toBe(llama3.bosId);
    expect(Array.from(qwen.encode('hi'))).toEqual(Array.from(qwen.encode('hi', { addBos: false })));
    const body = Array.from(llama.encode('hi', { addBos: false }));
    expect(Array.from(llama.encode('hi', { addEos: true }))).toEqual([llama.bosId, ...body, llama.eosId]);
    expect(Array.from(qwen.encode('hi', { addBos: true }))).toEqual([qwen.bosId, ...qwen.encode('hi')]);
  });

  it('added tokens in a tokenizer.json text are matched whole, and decode skips the special ones', async () => {
    const qwen = await tokenizer(join(FIXTURES, 'qwen2-bpe'));
    const ids = Array.from(qwen.encode('<|im_start|>user\nhi<|im_end|>'));
    expect(ids[0]).toBe(436 + 1); // <|im_start|>, after <|endoftext|> (436)
    expect(ids.at(-1)).toBe(436 + 2);
    expect(qwen.decode(ids)).toBe('user\nhi');
  });

  it('SentencePiece decodes its unknown piece as " ⁇ " and control pieces as nothing', async () => {
    const t = await tokenizer(join(MODELS, 'spm-no-fallback'));
    const ids = Array.from(t.encode('a\u{10fffd}b', { addBos: true }));
    expect(ids).toContain(0); // <unk>
    expect(t.decode(ids)).toBe('a ⁇ b');
  });
});
