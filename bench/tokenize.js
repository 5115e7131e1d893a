#!/usr/bin/env node
// npm run bench:tokenize: tokens per second of quantd's tokenizers (src/core/tokenize) on 1 MiB
// texts, one thread, for each tokenizer of the GGUF fixtures (and the trained llama's when the
// folder has it): ordinary text (the repository's docs and sources: prose, code, whitespace),
// and two texts that defeat the shortcuts — 1 MiB of CJK without a space (one pre-token / one
// SentencePiece run) and 1 MiB of random letters (one long word) — where a merge loop that
// rescans its pairs would be quadratic.
// Each figure is the best of --reps runs (after one warm-up), each on a freshly loaded tokenizer.
// Usage: node bench/tokenize.js [--reps 3] [--folder DIR ...]
import { readFileSync, readdirSync, existsSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { loadTokenizer } from '../dist/src/service/load-tokenizer.js';

const { values } = parseArgs({
  options: { reps: { type: 'string', default: '3' }, folder: { type: 'string', multiple: true } },
});
const reps = Number(values.reps);
const MIB = 1 << 20;

/** The first MiB of the repository's docs, README and TypeScript sources, in a fixed order. */
function ordinaryText() {
  const files = [
    ...readdirSync('docs', { recursive: true, encoding: 'utf8' })
      .filter((f) => f.endsWith('.md'))
      .map((f) => join('docs', f)),
    'README.md',
    ...readdirSync('src', { recursive: true, encoding: 'utf8' })
      .filter((f) => f.endsWith('.ts'))
      .map((f) => join('src', f)),
  ].sort();
  let text = '';
  for (const f of files) {
    text += readFileSync(f, 'utf8') + '\n';
    if (text.length >= MIB) break;
  }
  return text.slice(0, MIB);
}

/** Deterministic pseudo-random text of `n` characters drawn from `alphabet`. */
function randomText(alphabet, n) {
  let x = 12345;
  let s = '';
  for (let i = 0; i < n; i++) {
    x = (Math.imul(x, 1103515245) + 12345) >>> 0;
    s += alphabet[(x >>> 8) % alphabet.length];
  }
  return s;
}

const texts = [
  ['docs+sources', ordinaryText()],
  [
    'CJK, no spaces',
    randomText([...'東京は晴れ大阪雨今日良い天気です中文测试你好世界漢字とかなカナ'], MIB / 3),
  ],
  ['one long word', randomText([...'abcdefghijklmnopqrstuvwxyz'], MIB)],
];
const folders = values.folder ?? [
  ...['llama-spm', 'gemma2-spm', 'llama3-bpe', 'qwen2-bpe'].map((n) => join('test/gguf-hf/fixtures', n)),
  ...(existsSync('test/trained-llama/model/tokenizer.model') ? ['test/trained-llama/model'] : []),
];
console.log(
  'tokenizer (vocab)                 text              UTF-8 MiB   tokens      s    tokens/s   MiB/s',
);
for (const folder of folders) {
  const { vocabSize } = await loadTokenizer(folder);
  for (const [name, text] of texts) {
    let ids;
    // a fresh tokenizer each time: its cache of repeated words starts empty, as in one real call
    let best = Infinity;
    for (let r = 0; r <= reps; r++) {
      const tokenizer = await loadTokenizer(folder);
      const t0 = process.hrtime.bigint();
      ids = tokenizer.encode(text);
      if (r > 0) best = Math.min(best, Number(process.hrtime.bigint() - t0) / 1e9);
    }
    const s = best;
    const mib = Buffer.byteLength(text) / MIB;
    console.log(
      `${`${folder.split('/').at(-1)} (${vocabSize})`.padEnd(34)}${name.padEnd(18)}${mib.toFixed(2).padStart(9)}` +
        `${String(ids.length).padStart(9)}${s.toFixed(3).padStart(7)}${Math.round(ids.length / s)
          .toLocaleString('en')
          .padStart(12)}` +
        `${(mib / s).toFixed(2).padStart(8)}`,
    );
  }
}
