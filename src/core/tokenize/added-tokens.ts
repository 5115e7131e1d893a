/**
 * Added tokens (tokenizer.json's `added_tokens`: Llama 3's <|begin_of_text|>, Qwen's
 * <|im_start|>, …) are cut out of the text before anything else sees it, as Hugging Face's
 * AddedVocabulary does (added_vocabulary.rs, find_matches): at the leftmost position where one
 * starts, the longest one there; `lstrip` / `rstrip` take the whitespace beside it into the
 * token (Unicode White_Space, as Rust's char::is_whitespace), never reaching back into the
 * previous token.
 */
import { PrefixTrie } from './prefix-trie.js';
import { isWhiteSpace } from './text.js';

export interface AddedTokenSpec {
  readonly id: number;
  readonly content: string;
  readonly lstrip: boolean;
  readonly rstrip: boolean;
  /** Matched in the normalized text (true) or the raw one (false). */
  readonly normalized: boolean;
  readonly special: boolean;
}

/** A piece of text: a token's id, or text still to tokenize. */
export type Piece = number | string;

/** Index of the end of the whitespace run that ends at `end` going left, not before `floor`. */
function stripLeft(text: string, end: number, floor: number): number {
  let i = end;
  while (i > floor) {
    const c = text.codePointAt(i - 1)!;
    // step back over a surrogate pair as one character
    const low = c >= 0xdc00 && c <= 0xdfff && i - 2 >= floor;
    const ch = low ? String.fromCodePoint(text.codePointAt(i - 2)!) : text[i - 1]!;
    if (!isWhiteSpace(ch)) break;
    i -= ch.length;
  }
  return i;
}

function stripRight(text: string, start: number): number {
  let i = start;
  while (i < text.length) {
    const ch = String.fromCodePoint(text.codePointAt(i)!);
    if (!isWhiteSpace(ch)) break;
    i += ch.length;
  }
  return i;
}

export class AddedTokenMatcher {
  private readonly trie = new PrefixTrie();
  private readonly tokens: AddedTokenSpec[] = [];

  /** `tokens` keyed by the text they are matched as (their content, normalized or not). */
  constructor(tokens: ReadonlyArray<readonly [string, AddedTokenSpec]>) {
    for (const [text, token] of tokens) {
      if (text === '') continue; // an empty token matches nothing
      this.trie.add(text, this.tokens.length);
      this.tokens.push(token);
    }
  }

  get empty(): boolean {
    return this.trie.empty;
  }

  /** Cuts `text` into tokens and the text between them, in order, into `out`. */
  split(text: string, out: Piece[]): void {
    if (this.trie.empty) {
      if (text !== '') out.push(text);
      return;
    }
    let done = 0; // end of the last token
    let pos = 0;
    while (pos < text.length) {
      const n = this.trie.longest(text, pos);
      if (n === 0) {
        pos++;
        continue;
      }
      const token = this.tokens[this.trie.matchValue]!;
      let start = pos;
      let stop = pos + n;
      if (token.lstrip) start = Math.max(stripLeft(text, start, 0), done);
      if (token.rstrip) stop = stripRight(text, stop);
      if (done < start) out.push(text.slice(done, start));
      out.push(token.id);
      done = stop;
      // the reference scans on from the match itself, not from the whitespace it took
      pos += n;
    }
    if (done < text.length) out.push(text.slice(done));
  }
}
