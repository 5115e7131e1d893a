/**
 * The members of a JSON object text, in document order and including duplicates, each as its
 * decoded key and the span of its value in the text, found by one scan that yields between runs
 * of text (../core/time-slice.ts).
 *
 * Two reasons for not handing the whole text to JSON.parse. JSON.parse keeps the last of
 * duplicate keys without a word, so a safetensors header naming a tensor twice would silently
 * lose one entry (and the other reader in a pipeline might keep the first). And JSON.parse is
 * one call: a header of 65,536 entries held a server's event loop for 40-170 ms, a header of the
 * largest size (100 MB) for over a second. The caller parses each value on its own instead, a
 * unit each, and may refuse a value by its length before parsing it.
 *
 * The scan checks the object's own syntax — braces, quoted keys, colons, commas, whitespace,
 * nothing after the closing brace — and finds where each value ends by tracking nesting and
 * string literals; it does not check the values, which their own JSON.parse does. So the text is
 * valid JSON exactly when the scan succeeds and every value parses; when either fails, the
 * caller asks JSON.parse of the whole text why, for its usual message.
 */
import { completeNow, type Resumable } from '../core/time-slice.js';

const QUOTE = 0x22; // "
const BACKSLASH = 0x5c; // \
const COMMA = 0x2c; // ,
const COLON = 0x3a; // :
const OPEN_BRACE = 0x7b; // {
const CLOSE_BRACE = 0x7d; // }
const OPEN_BRACKET = 0x5b; // [
const CLOSE_BRACKET = 0x5d; // ]

/** JSON's whitespace: space, tab, line feed, carriage return (nothing else). */
const isSpace = (c: number): boolean => c === 0x20 || c === 0x09 || c === 0x0a || c === 0x0d;

/** Characters scanned in one unit (a few milliseconds). */
const SCAN_RUN = 1 << 20;

export interface MemberSpan {
  readonly key: string;
  /** The value is text.slice(start, end) (unchecked; trailing whitespace included). */
  readonly start: number;
  readonly end: number;
}

/** The members of the object text[from, to), or null when it is not one (see the module). */
export function objectMembers(text: string, from = 0, to = text.length): MemberSpan[] | null {
  return completeNow(objectMembersWork(text, from, to));
}

/** objectMembers in units of about a megabyte of text, and of one member. */
export function* objectMembersWork(text: string, from = 0, to = text.length): Resumable<MemberSpan[] | null> {
  const members: MemberSpan[] = [];
  let pause = from + SCAN_RUN;
  let i = skipSpace(text, from, to);
  if (text.charCodeAt(i) !== OPEN_BRACE || i >= to) return null;
  i = skipSpace(text, i + 1, to);
  if (i < to && text.charCodeAt(i) === CLOSE_BRACE) {
    return skipSpace(text, i + 1, to) === to ? members : null;
  }
  for (;;) {
    // "key"
    if (i >= to || text.charCodeAt(i) !== QUOTE) return null;
    const close = stringEnd(text, i, to);
    if (close < 0) return null;
    let key: string;
    try {
      key = JSON.parse(text.slice(i, close + 1)) as string; // decodes escapes, refuses bad ones
    } catch {
      return null;
    }
    // :
    i = skipSpace(text, close + 1, to);
    if (i >= to || text.charCodeAt(i) !== COLON) return null;
    // the value, up to the comma or brace that ends it
    const start = skipSpace(text, i + 1, to);
    let depth = 0;
    let end = start;
    for (; end < to; end++) {
      if (end >= pause) {
        pause = end + SCAN_RUN;
        yield;
      }
      const c = text.charCodeAt(end);
      if (c === QUOTE) {
        end = stringEnd(text, end, to);
        if (end < 0) return null;
      } else if (c === OPEN_BRACE || c === OPEN_BRACKET) {
        depth++;
      } else if (c === CLOSE_BRACE || c === CLOSE_BRACKET) {
        if (depth === 0) break;
        depth--;
      } else if (c === COMMA && depth === 0) {
        break;
      }
    }
    if (end >= to || end === start) return null; // no end, or no value
    members.push({ key, start, end });
    yield;
    i = end + 1;
    if (text.charCodeAt(end) === COMMA) {
      i = skipSpace(text, i, to);
      continue;
    }
    // the closing brace must be one (not a bracket) and end the text
    return text.charCodeAt(end) === CLOSE_BRACE && skipSpace(text, i, to) === to ? members : null;
  }
}

function skipSpace(text: string, i: number, to: number): number {
  while (i < to && isSpace(text.charCodeAt(i))) i++;
  return i;
}

/**
 * The index of the quote closing the string literal that opens at `open`, or -1. A backslash
 * always escapes exactly the next code unit (\uXXXX's hex digits hold no quote or backslash).
 */
function stringEnd(text: string, open: number, to: number): number {
  for (let i = open + 1; i < to;) {
    const c = text.charCodeAt(i);
    if (c === BACKSLASH) i += 2;
    else if (c === QUOTE) return i;
    else i++;
  }
  return -1;
}
