/**
 * SentencePiece's normalizer (normalizer.cc, Normalizer::Normalize) for models whose rules are
 * the identity (an empty precompiled character map: Llama 2, Mistral, Phi-3, Gemma): every
 * character stays itself, and only the spec's whitespace options act:
 *
 * - remove_extra_whitespaces: leading spaces dropped, runs of spaces collapsed to one, trailing
 *   ones dropped;
 * - add_dummy_prefix: one space before the text (after it with treat_whitespace_as_suffix), so
 *   that a word reads the same at the start of a text as after a space;
 * - escape_whitespaces: each space becomes U+2581 (▁), the character the pieces spell it with.
 *
 * Only U+0020 is a space here (a tab or a newline is an ordinary character). A user-defined
 * piece is one unit of the walk, as in the reference (its prefix matcher runs first). Models
 * with rewriting rules (nmt_nfkc's character map) are refused by the caller, not approximated.
 */
import type { PrefixTrie } from './prefix-trie.js';

export const SPACE_SYMBOL = '\u2581';

export interface SpmNormalizerSpec {
  readonly addDummyPrefix: boolean;
  readonly removeExtraWhitespaces: boolean;
  readonly escapeWhitespaces: boolean;
  readonly treatWhitespaceAsSuffix: boolean;
}

/** Length of the unit at text[pos]: a user-defined piece, else one code point. */
function unitLength(text: string, pos: number, userDefined: PrefixTrie): number {
  if (!userDefined.empty) {
    const n = userDefined.longest(text, pos);
    if (n > 0) return n;
  }
  const c = text.charCodeAt(pos);
  return c >= 0xd800 && c <= 0xdbff && pos + 1 < text.length ? 2 : 1;
}

export function normalizeSpm(text: string, spec: SpmNormalizerSpec, userDefined: PrefixTrie): string {
  if (text.length === 0) return '';
  const ws = spec.escapeWhitespaces ? SPACE_SYMBOL : ' ';
  const escape = (s: string): string => (spec.escapeWhitespaces ? s.replaceAll(' ', SPACE_SYMBOL) : s);
  const prefix = !spec.treatWhitespaceAsSuffix && spec.addDummyPrefix ? ws : '';
  const suffix = spec.treatWhitespaceAsSuffix && spec.addDummyPrefix ? ws : '';
  if (!spec.removeExtraWhitespaces) {
    // each unit passes through with its spaces escaped, so the walk is one replacement
    return prefix + escape(text) + suffix;
  }
  let pos = 0;
  while (pos < text.length) {
    const n = unitLength(text, pos, userDefined);
    if (n !== 1 || text.charCodeAt(pos) !== 0x20) break;
    pos += n;
  }
  if (pos === text.length) return ''; // only spaces
  const parts: string[] = [prefix];
  let prevSpace = true;
  while (pos < text.length) {
    const n = unitLength(text, pos, userDefined);
    let unit = text.slice(pos, pos + n);
    if (prevSpace) {
      let k = 0;
      while (k < unit.length && unit.charCodeAt(k) === 0x20) k++;
      unit = unit.slice(k);
    }
    if (unit.length > 0) {
      parts.push(escape(unit));
      prevSpace = unit.charCodeAt(unit.length - 1) === 0x20;
    }
    pos += n;
  }
  let out = parts.join('');
  // trailing spaces go, in their escaped form, however they came (a literal ▁ included)
  while (out.endsWith(ws)) out = out.slice(0, out.length - ws.length);
  return out + suffix;
}
