/**
 * The agenda of a BPE merge loop: candidate merges of adjacent symbols, the best first. Both
 * reference tokenizers keep one (SentencePiece's bpe_model.cc: the highest score, then the
 * leftmost; Hugging Face's word.rs: the lowest rank, then the leftmost), which makes a word of n
 * symbols cost O(n log n) instead of the O(n²) of rescanning every pair after each merge.
 *
 * Entries live in parallel typed arrays (no object per candidate): `key` orders them (smaller
 * first; SentencePiece passes the negated score), `pos` breaks ties (smaller first), and `a`,
 * `b` carry what the loop needs to tell a stale entry from a live one.
 */
export class MergeHeap {
  private key = new Float64Array(256);
  private pos = new Int32Array(256);
  private a = new Int32Array(256);
  private b = new Int32Array(256);
  size = 0;
  /** The entry the last pop() removed. */
  topKey = 0;
  topPos = 0;
  topA = 0;
  topB = 0;

  clear(): void {
    this.size = 0;
  }

  private before(i: number, j: number): boolean {
    const ki = this.key[i]!;
    const kj = this.key[j]!;
    return ki < kj || (ki === kj && this.pos[i]! < this.pos[j]!);
  }

  private swap(i: number, j: number): void {
    const k = this.key[i]!;
    this.key[i] = this.key[j]!;
    this.key[j] = k;
    const p = this.pos[i]!;
    this.pos[i] = this.pos[j]!;
    this.pos[j] = p;
    const a = this.a[i]!;
    this.a[i] = this.a[j]!;
    this.a[j] = a;
    const b = this.b[i]!;
    this.b[i] = this.b[j]!;
    this.b[j] = b;
  }

  private grow(): void {
    const n = this.key.length * 2;
    const key = new Float64Array(n);
    key.set(this.key);
    this.key = key;
    for (const name of ['pos', 'a', 'b'] as const) {
      const next = new Int32Array(n);
      next.set(this[name]);
      this[name] = next;
    }
  }

  push(key: number, pos: number, a: number, b: number): void {
    if (this.size === this.key.length) this.grow();
    let i = this.size++;
    this.key[i] = key;
    this.pos[i] = pos;
    this.a[i] = a;
    this.b[i] = b;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (!this.before(i, parent)) break;
      this.swap(i, parent);
      i = parent;
    }
  }

  /** Removes the best entry into top*; false when empty. */
  pop(): boolean {
    if (this.size === 0) return false;
    this.topKey = this.key[0]!;
    this.topPos = this.pos[0]!;
    this.topA = this.a[0]!;
    this.topB = this.b[0]!;
    const last = --this.size;
    if (last > 0) {
      this.key[0] = this.key[last]!;
      this.pos[0] = this.pos[last]!;
      this.a[0] = this.a[last]!;
      this.b[0] = this.b[last]!;
      let i = 0;
      for (;;) {
        const l = 2 * i + 1;
        if (l >= last) break;
        const r = l + 1;
        const best = r < last && this.before(r, l) ? r : l;
        if (!this.before(best, i)) break;
        this.swap(i, best);
        i = best;
      }
    }
    return true;
  }
}
