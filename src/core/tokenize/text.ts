/**
 * Text facts the tokenizers share: which strings can be tokenized at all, their UTF-8 bytes, and
 * Unicode White_Space, the set both reference tokenizers mean by "whitespace" (Oniguruma's `\s`
 * in a tokenizer.json's split regex, Rust's `char::is_whitespace` when an added token strips the
 * spaces beside it). JavaScript's own `\s` differs from it (it has U+FEFF and lacks U+0085), so
 * it is never used for them.
 */
import { QuantdError } from '../../errors/index.js';

/** Unicode White_Space as the ranges of a RegExp character class (without the brackets). */
export const WHITE_SPACE_RANGES =
  '\\t-\\r \\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000';

const WHITE_SPACE = new RegExp(`^[${WHITE_SPACE_RANGES}]$`, 'u');

export function isWhiteSpace(ch: string): boolean {
  return WHITE_SPACE.test(ch);
}

const LONE_SURROGATE = /\p{Cs}/u;

/**
 * Refuses a string that is not Unicode (a lone UTF-16 surrogate): it has no UTF-8 form, so no
 * reference tokenizer accepts it (Python's encode raises), and replacing it would give ids for
 * a text nobody wrote.
 */
export function checkText(text: string): void {
  const m = LONE_SURROGATE.exec(text);
  if (m !== null) {
    const unit = text.charCodeAt(m.index).toString(16).toUpperCase();
    throw new QuantdError('TOKENIZER_INPUT_INVALID', {
      detail: `the text holds a lone surrogate (U+${unit}) at UTF-16 index ${m.index}; it is not Unicode and has no UTF-8 form`,
    });
  }
}

/**
 * A value from a tokenizer file, as an error message shows it: a string quoted and cut to
 * `max` characters (a file's strings can be megabytes), anything else by its kind — never
 * serialized whole (JSON.stringify recurses once per level of a hostile file's nesting).
 */
export function quoted(value: unknown, max = 80): string {
  if (typeof value === 'string') {
    return value.length <= max
      ? JSON.stringify(value)
      : `${JSON.stringify(value.slice(0, max))}… (${value.length} characters)`;
  }
  if (typeof value === 'number' || typeof value === 'boolean' || value === null || value === undefined) {
    return String(value);
  }
  return Array.isArray(value) ? `an array of ${value.length}` : 'an object';
}

const UTF8 = new TextEncoder();

export function utf8Bytes(text: string): Uint8Array {
  return UTF8.encode(text);
}

/** Decodes UTF-8 as Rust's from_utf8_lossy does: each maximal invalid subpart becomes U+FFFD. */
const LOSSY = new TextDecoder('utf-8', { fatal: false, ignoreBOM: true });

export function utf8Lossy(bytes: Uint8Array): string {
  return LOSSY.decode(bytes);
}

/** A growable list of token ids, handed out as an Int32Array. */
export class IdList {
  private ids = new Int32Array(64);
  length = 0;

  push(id: number): void {
    if (this.length === this.ids.length) {
      const grown = new Int32Array(this.ids.length * 2);
      grown.set(this.ids);
      this.ids = grown;
    }
    this.ids[this.length++] = id;
  }

  pushAll(ids: ArrayLike<number>): void {
    for (let i = 0; i < ids.length; i++) this.push(ids[i]!);
  }

  /** The ids, `before` first and `after` last. */
  result(before: readonly number[], after: readonly number[]): Int32Array {
    const out = new Int32Array(before.length + this.length + after.length);
    out.set(before, 0);
    out.set(this.ids.subarray(0, this.length), before.length);
    out.set(after, before.length + this.length);
    return out;
  }
}
