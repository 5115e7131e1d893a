/**
 * SentencePiece's BPE segmentation (bpe_model.cc, Model::SampleEncode without dropout) of a run
 * of normalized text already cut into its initial symbols: every adjacent pair whose
 * concatenation is a piece (normal, user-defined or unused) is a candidate; the candidate of
 * the highest score is merged first, ties going to the leftmost; the merged symbol forms new
 * candidates with its neighbours. A candidate is stale when either side has changed since it
 * was queued, which shows as a different combined length (symbols only grow). User-defined
 * pieces are frozen: they never merge.
 *
 * A final symbol that is an unused piece is split back into the two symbols that formed it
 * (recursively), as the reference does with its `rev_merge` map — whose entries, like the
 * reference's, are the last split queued for that piece text anywhere in the call.
 */
import { MergeHeap } from './merge-heap.js';

export interface SpmVocabulary {
  /** pieces_ of the reference: normal, user-defined and unused pieces by text. */
  readonly normal: ReadonlyMap<string, number>;
  /** Control, unknown and byte pieces by text (looked up first when a symbol becomes an id). */
  readonly reserved: ReadonlyMap<string, number>;
  readonly scores: Float64Array;
  /** 1 for unused pieces, by id. */
  readonly unused: Uint8Array;
  readonly unkId: number;
}

/** Receives each final piece: its text and id. */
export type PieceSink = (piece: string, id: number) => void;

export class SpmBpe {
  private readonly heap = new MergeHeap();
  private start = new Int32Array(64);
  private end = new Int32Array(64);
  private prev = new Int32Array(64);
  private next = new Int32Array(64);
  private frozen = new Uint8Array(64);
  /** Per call: unused piece text → the two texts that last formed it. */
  private revMerge = new Map<string, readonly [string, string]>();
  private text = '';

  constructor(private readonly vocab: SpmVocabulary) {}

  /** Starts a call of the reference (rev_merge is per call). */
  reset(): void {
    this.revMerge.clear();
  }

  private ensure(n: number): void {
    if (n <= this.start.length) return;
    let size = this.start.length;
    while (size < n) size *= 2;
    const grow = <T extends Int32Array | Uint8Array>(a: T): T => {
      const b = new (a.constructor as new (n: number) => T)(size);
      b.set(a);
      return b;
    };
    this.start = grow(this.start);
    this.end = grow(this.end);
    this.prev = grow(this.prev);
    this.next = grow(this.next);
    this.frozen = grow(this.frozen);
  }

  private maybeAdd(left: number, right: number): void {
    if (left < 0 || right < 0 || this.frozen[left] === 1 || this.frozen[right] === 1) return;
    const from = this.start[left]!;
    const to = this.end[right]!;
    const piece = this.text.slice(from, to);
    const id = this.vocab.normal.get(piece);
    if (id === undefined) return;
    this.heap.push(-this.vocab.scores[id]!, left, right, to - from);
    if (this.vocab.unused[id] === 1) {
      this.revMerge.set(piece, [
        this.text.slice(from, this.end[left]!),
        this.text.slice(this.start[right]!, to),
      ]);
    }
  }

  /**
   * Segments the symbols [starts[i], ends[i]) of `text` (contiguous, in order; frozen[i] for a
   * user-defined piece) and hands each final piece to `sink`.
   */
  encode(
    text: string,
    starts: ArrayLike<number>,
    ends: ArrayLike<number>,
    frozen: ArrayLike<number>,
    count: number,
    sink: PieceSink,
  ): void {
    if (count === 0) return;
    this.text = text;
    this.ensure(count);
    for (let i = 0; i < count; i++) {
      this.start[i] = starts[i]!;
      this.end[i] = ends[i]!;
      this.prev[i] = i - 1;
      this.next[i] = i + 1 < count ? i + 1 : -1;
      this.frozen[i] = frozen[i]!;
    }
    const heap = this.heap;
    heap.clear();
    for (let i = 1; i < count; i++) this.maybeAdd(i - 1, i);
    while (heap.pop()) {
      // pos is the left symbol (the tie-break), a the right one, b the merged length
      const left = heap.topPos;
      const right = heap.topA;
      const leftLen = this.end[left]! - this.start[left]!;
      const rightLen = this.end[right]! - this.start[right]!;
      if (leftLen === 0 || rightLen === 0 || leftLen + rightLen !== heap.topB) continue;
      this.end[left] = this.end[right]!;
      const after = this.next[right]!;
      this.next[left] = after;
      if (after >= 0) this.prev[after] = left;
      this.end[right] = this.start[right]!; // emptied
      this.maybeAdd(this.prev[left]!, left);
      this.maybeAdd(left, after);
    }
    for (let i = 0; i !== -1; i = this.next[i]!) {
      this.resegment(text.slice(this.start[i]!, this.end[i]!), sink);
    }
  }

  /** The reference's recursive split, with a stack of its own (a model's chains can be long). */
  private resegment(whole: string, sink: PieceSink): void {
    const pending = [whole];
    while (pending.length > 0) {
      const piece = pending.pop()!;
      const id = this.vocab.reserved.get(piece) ?? this.vocab.normal.get(piece) ?? this.vocab.unkId;
      const split = this.vocab.unused[id] === 1 ? this.revMerge.get(piece) : undefined;
      if (split !== undefined)
        pending.push(split[1], split[0]); // left first
      else sink(piece, id);
    }
  }
}
