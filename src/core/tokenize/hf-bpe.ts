/**
 * Hugging Face's BPE model (tokenizers' models/bpe: model.rs, word.rs) on one pre-token spelled
 * in the byte-level alphabet: each character starts as its own symbol; the adjacent pair with
 * the lowest merge rank merges first, ties going to the leftmost; a queued pair is stale when
 * the symbols at its place no longer form a merge giving the same token. With `ignore_merges`
 * (Llama 3), a pre-token that is itself in the vocabulary is that one token, whatever the
 * merges would make of it.
 */
import { QuantdError } from '../../errors/index.js';
import { MergeHeap } from './merge-heap.js';
import { IdList, quoted } from './text.js';

/** The word cache's bounds (as ./sentencepiece.ts's): a few MB at most. */
const CACHE_LIMIT = 1 << 15;
const CACHE_WORD = 256;

export class HfBpe {
  /** Merge of the pair (a, b), keyed a * PAIR + b: its index in rank / result. */
  private readonly pairs = new Map<number, number>();
  private readonly rank: Int32Array;
  private readonly result: Int32Array;
  private readonly pairBase: number;
  private readonly heap = new MergeHeap();
  private readonly cache = new Map<string, Int32Array>();
  private sym = new Int32Array(64);
  private len = new Int32Array(64);
  private prev = new Int32Array(64);
  private next = new Int32Array(64);

  constructor(
    private readonly vocab: ReadonlyMap<string, number>,
    merges: ReadonlyArray<readonly [string, string]>,
    private readonly ignoreMerges: boolean,
    source: string,
  ) {
    let maxId = 0;
    for (const id of vocab.values()) maxId = Math.max(maxId, id);
    this.pairBase = maxId + 1;
    this.rank = new Int32Array(merges.length);
    this.result = new Int32Array(merges.length);
    merges.forEach(([a, b], i) => {
      const ia = vocab.get(a);
      const ib = vocab.get(b);
      const merged = vocab.get(a + b);
      if (ia === undefined || ib === undefined || merged === undefined) {
        throw new QuantdError('HF_MODEL_INVALID', {
          path: source,
          detail: `merge ${i} (${quoted(`${a} ${b}`)}) names a token not in the vocabulary`,
        });
      }
      // a pair listed twice keeps its last rank, as the reference's map does
      this.pairs.set(ia * this.pairBase + ib, i);
      this.rank[i] = i;
      this.result[i] = merged;
    });
  }

  private ensure(n: number): void {
    if (n <= this.sym.length) return;
    let size = this.sym.length;
    while (size < n) size *= 2;
    this.sym = new Int32Array(size);
    this.len = new Int32Array(size);
    this.prev = new Int32Array(size);
    this.next = new Int32Array(size);
  }

  private queue(pos: number, right: number): void {
    const m = this.pairs.get(this.sym[pos]! * this.pairBase + this.sym[right]!);
    if (m !== undefined) this.heap.push(this.rank[m]!, pos, this.result[m]!, 0);
  }

  /** Appends the ids of `word` (non-empty, every character in the vocabulary) to `out`. */
  encode(word: string, out: IdList): void {
    const cached = this.cache.get(word);
    if (cached !== undefined) {
      out.pushAll(cached);
      return;
    }
    const whole = this.ignoreMerges ? this.vocab.get(word) : undefined;
    const ids = whole !== undefined ? Int32Array.of(whole) : this.merge(word);
    if (word.length <= CACHE_WORD) {
      if (this.cache.size >= CACHE_LIMIT) this.cache.clear();
      this.cache.set(word, ids); // built by byteLevelString: its own string, no slice of the text
    }
    out.pushAll(ids);
  }

  private merge(word: string): Int32Array {
    this.ensure(word.length);
    let n = 0;
    for (const ch of word) {
      this.sym[n] = this.vocab.get(ch)!;
      this.len[n] = 1;
      this.prev[n] = n - 1;
      this.next[n] = n + 1;
      n++;
    }
    this.next[n - 1] = -1;
    const heap = this.heap;
    heap.clear();
    for (let i = 0; i + 1 < n; i++) this.queue(i, i + 1);
    while (heap.pop()) {
      const pos = heap.topPos;
      if (this.len[pos] === 0) continue;
      const right = this.next[pos]!;
      if (right < 0) continue;
      const m = this.pairs.get(this.sym[pos]! * this.pairBase + this.sym[right]!);
      if (m === undefined || this.result[m] !== heap.topA) continue; // stale
      this.sym[pos] = heap.topA;
      this.len[pos] = this.len[pos]! + this.len[right]!;
      const after = this.next[right]!;
      this.next[pos] = after;
      this.len[right] = 0;
      if (after >= 0) this.prev[after] = pos;
      const before = this.prev[pos]!;
      if (before >= 0) this.queue(before, pos);
      if (after >= 0) this.queue(pos, after);
    }
    const ids: number[] = [];
    for (let i = 0; i !== -1; i = this.next[i]!) ids.push(this.sym[i]!);
    return Int32Array.from(ids);
  }
}
