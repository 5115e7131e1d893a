/**
 * The text a model is run on (evaluation, calibration): a plain text file, or a JSON Lines
 * dataset whose lines are objects with a "text" field, tokenized once and cut into windows the
 * way llama.cpp's perplexity and imatrix tools cut them: consecutive windows of `seqLen` tokens
 * from the tokenized text (which starts with BOS where the model adds one), each window's first
 * token replaced by BOS, so that every window starts as a fresh sequence does.
 */
import { readFile } from 'node:fs/promises';

import { QuantdError } from '../../errors/index.js';

/** What the windows need of a model's tokenizer (src/core/tokenize). */
export interface TextTokenizer {
  /** The ids of a text, with BOS first when the model adds one. */
  encode(text: string): ArrayLike<number>;
  /** -1 when the model has none. */
  readonly bosId: number;
  /** Whether the model starts a sequence with BOS. */
  readonly addsBos: boolean;
}

/** Largest text read: a calibration or evaluation text of this size is far more than enough. */
export const TEXT_LIMIT = 512 * 1024 * 1024;

function invalid(path: string, detail: string): QuantdError {
  return new QuantdError('TEXT_INVALID', { path, detail });
}

/** The text of a file: plain text, or the "text" fields of a .jsonl dataset joined by blank lines. */
export async function readText(path: string): Promise<string> {
  let bytes: Buffer;
  try {
    bytes = await readFile(path);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    throw new QuantdError(code === 'ENOENT' ? 'FILE_NOT_FOUND' : 'FILE_UNREADABLE', {
      path,
      detail: (err as Error).message,
    });
  }
  if (bytes.length > TEXT_LIMIT) throw invalid(path, `is ${bytes.length} bytes, more than ${TEXT_LIMIT}`);
  let text: string;
  try {
    text = new TextDecoder('utf-8', { fatal: true }).decode(bytes);
  } catch {
    throw invalid(path, 'is not UTF-8 text');
  }
  if (!/\.jsonl$/i.test(path)) return text;
  const samples: string[] = [];
  const lines = text.split('\n');
  for (const [i, line] of lines.entries()) {
    if (line.trim() === '') continue;
    let row: unknown;
    try {
      row = JSON.parse(line);
    } catch {
      throw invalid(path, `line ${i + 1} is not JSON`);
    }
    const value = (row as { text?: unknown } | null)?.text;
    if (typeof value !== 'string') throw invalid(path, `line ${i + 1} has no "text" string`);
    samples.push(value);
  }
  return samples.join('\n\n');
}

/** Consecutive windows of `seqLen` tokens, each starting with BOS (when the model has one). */
export function tokenWindows(tokens: ArrayLike<number>, seqLen: number, bos: number | null): Int32Array[] {
  const windows: Int32Array[] = [];
  for (let start = 0; start + seqLen <= tokens.length; start += seqLen) {
    const w = Int32Array.from({ length: seqLen }, (_, i) => tokens[start + i]!);
    if (bos !== null) w[0] = bos;
    windows.push(w);
  }
  return windows;
}

/** `count` of `windows` chosen at random (seeded: the same choice every run), in text order. */
export function sampleWindows<T>(windows: readonly T[], count: number, seed: number): T[] {
  if (count >= windows.length) return [...windows];
  // xorshift32: a small seeded generator, so that a calibration is reproducible
  let s = seed >>> 0 || 0x9e3779b9;
  const next = (): number => {
    s ^= s << 13;
    s >>>= 0;
    s ^= s >>> 17;
    s ^= s << 5;
    s >>>= 0;
    return s / 2 ** 32;
  };
  const order = windows.map((_, i) => i);
  for (let i = order.length - 1; i > 0; i--) {
    const j = Math.floor(next() * (i + 1));
    [order[i], order[j]] = [order[j]!, order[i]!];
  }
  return order
    .slice(0, count)
    .sort((a, b) => a - b)
    .map((i) => windows[i]!);
}

/** The windows of a text, refused when it holds fewer tokens than one window. */
export function windowsOf(
  text: string,
  path: string,
  tokenizer: TextTokenizer,
  seqLen: number,
): { windows: Int32Array[]; tokens: number } {
  const tokens = tokenizer.encode(text);
  const windows = tokenWindows(tokens, seqLen, tokenizer.addsBos ? tokenizer.bosId : null);
  if (windows.length === 0) {
    throw invalid(path, `holds ${tokens.length} tokens, fewer than one window of ${seqLen} (--seq-len)`);
  }
  return { windows, tokens: tokens.length };
}
