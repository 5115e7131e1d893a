/**
 * SentencePiece's unigram segmentation (unigram_model.cc, Model::EncodeOptimized, the encoder
 * `encode` uses): the Viterbi path of the highest total score, found by keeping, for each
 * character boundary, the best path that ends there. From each boundary, in text order, every
 * piece that starts there (normal or user-defined; unused pieces are skipped) offers its end
 * the score so far plus its own; the first offer wins a tie. A user-defined piece scores
 * (UTF-8 length × the highest normal score − 0.1), so that it is always taken; a character no
 * one-character piece covers is offered as the unknown piece at (lowest normal score − 10).
 *
 * The reference keeps each boundary's best score in float32 but compares a piece's offer in
 * float64 (an unknown character's in float32); the typed array and Math.fround repeat each
 * rounding, so near-ties fall the same way.
 */
import type { PrefixTrie } from './prefix-trie.js';
import type { PieceSink } from './spm-bpe.js';

const UNK_PENALTY = 10;
/** FLT_MIN, the reference's starting "highest score" (the smallest positive float32). */
const FLT_MIN = 1.1754943508222875e-38;

export interface UnigramVocabulary {
  /** Normal, user-defined and unused pieces. */
  readonly trie: PrefixTrie;
  readonly scores: Float64Array;
  /** 1 for unused pieces, by id. */
  readonly unused: Uint8Array;
  /** UTF-8 length of each user-defined piece by id (0 for the others). */
  readonly userDefinedBytes: Int32Array;
  readonly unkId: number;
  /** Types by id, to find the normal pieces' score range. */
  readonly types: readonly number[];
}

export class SpmUnigram {
  private readonly maxScore: number;
  private readonly unkScore: number;

  constructor(private readonly vocab: UnigramVocabulary) {
    let min = 3.4028234663852886e38; // FLT_MAX
    let max = FLT_MIN;
    vocab.types.forEach((t, i) => {
      if (t === 1) {
        min = Math.min(min, vocab.scores[i]!);
        max = Math.max(max, vocab.scores[i]!);
      }
    });
    this.maxScore = max;
    this.unkScore = Math.fround(min - UNK_PENALTY);
  }

  /** Segments all of `text` and hands each piece, in order, to `sink`. */
  encode(text: string, sink: PieceSink): void {
    const n = text.length;
    if (n === 0) return;
    const score = new Float32Array(n + 1);
    const startsAt = new Int32Array(n + 1).fill(-1);
    const id = new Int32Array(n + 1);
    const { trie, scores, unused, userDefinedBytes, unkId } = this.vocab;
    for (let start = 0; start < n;) {
      const c = text.charCodeAt(start);
      const charLen = c >= 0xd800 && c <= 0xdbff && start + 1 < n ? 2 : 1;
      const here = score[start]!;
      let single = false;
      trie.eachPrefix(text, start, (length, piece) => {
        if (unused[piece] === 1) return;
        const end = start + length;
        const bytes = userDefinedBytes[piece]!;
        // the reference's piece score is a double (its ?: mixes the bonus's double with a float),
        // so the sum is compared unrounded and rounded to float32 only when stored
        const candidate = (bytes > 0 ? Math.fround(bytes * this.maxScore) - 0.1 : scores[piece]!) + here;
        if (startsAt[end] === -1 || candidate > score[end]!) {
          score[end] = candidate;
          startsAt[end] = start;
          id[end] = piece;
        }
        if (length === charLen) single = true;
      });
      if (!single) {
        const end = start + charLen;
        const candidate = Math.fround(this.unkScore + here);
        if (startsAt[end] === -1 || candidate > score[end]!) {
          score[end] = candidate;
          startsAt[end] = start;
          id[end] = unkId;
        }
      }
      start += charLen;
    }
    const ends: number[] = [];
    for (let end = n; end > 0; end = startsAt[end]!) ends.push(end);
    for (let k = ends.length - 1; k >= 0; k--) {
      const end = ends[k]!;
      sink(text.slice(startsAt[end]!, end), id[end]!);
    }
  }
}
