/**
 * The longest of a set of strings that starts at a position of a text: SentencePiece's
 * PrefixMatcher (its user-defined pieces) and the leftmost-longest matching of Hugging Face's
 * added tokens both ask this at each position. A trie over UTF-16 code units answers in time
 * proportional to the match, not to the number of strings (Gemma declares thousands).
 */
interface Node {
  readonly next: Map<number, Node>;
  /** The value of the string ending here; -1 when none does. */
  value: number;
}

const node = (): Node => ({ next: new Map(), value: -1 });

export class PrefixTrie {
  private readonly root = node();
  /** Whether the trie holds no string (the callers' fast path). */
  empty = true;
  /** The value of the string the last longest() found. */
  matchValue = -1;

  /** Adds `word` (non-empty) with `value` (>= 0); a later add of the same word replaces it. */
  add(word: string, value: number): void {
    let n = this.root;
    for (let i = 0; i < word.length; i++) {
      const c = word.charCodeAt(i);
      let child = n.next.get(c);
      if (child === undefined) {
        child = node();
        n.next.set(c, child);
      }
      n = child;
    }
    n.value = value;
    this.empty = false;
  }

  /** Calls `found(length, value)` for each word starting at text[pos], shortest first. */
  eachPrefix(text: string, pos: number, found: (length: number, value: number) => void): void {
    let n: Node | undefined = this.root;
    for (let i = pos; i < text.length; i++) {
      n = n.next.get(text.charCodeAt(i));
      if (n === undefined) return;
      if (n.value >= 0) found(i + 1 - pos, n.value);
    }
  }

  /** Length (in UTF-16 units) of the longest word starting at text[pos], 0 when none. */
  longest(text: string, pos: number): number {
    let n: Node | undefined = this.root;
    let best = 0;
    for (let i = pos; i < text.length; i++) {
      n = n.next.get(text.charCodeAt(i));
      if (n === undefined) break;
      if (n.value >= 0) {
        best = i + 1 - pos;
        this.matchValue = n.value;
      }
    }
    return best;
  }
}
