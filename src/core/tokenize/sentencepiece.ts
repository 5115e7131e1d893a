/**
 * A SentencePiece model (tokenizer.model) as a Tokenizer that gives the ids SentencePiece's own
 * `encode` gives (sentencepiece_processor.cc): normalize (./spm-normalize.ts), segment — BPE
 * (./spm-bpe.ts) on symbols that are a user-defined piece whole or one character, or unigram
 * (./spm-unigram.ts) — then turn each final piece into its id: an unknown piece into its UTF-8
 * bytes' <0xXX> pieces when the model has byte fallback, else into the unknown id, a run of
 * unknown pieces into one.
 *
 * Long texts: the reference runs one merge loop over the whole text. Where no piece a merge can
 * form holds a character followed by a space symbol (true of models trained with
 * split_by_whitespace, Llama 2's among them), no merge crosses the start of a space-led word,
 * and each such word is segmented on its own — the same pieces, a small heap each, and a cache
 * of repeated words. Otherwise (and when the model has unused pieces, whose splitting back
 * depends on the whole call) the whole text is one run, as in the reference; the heap keeps it
 * O(n log n) either way. Unigram models always run whole (Viterbi is linear).
 *
 * Refused, not approximated: normalization rules (a non-empty precompiled character map, e.g.
 * nmt_nfkc), word and char models, and models the reference itself refuses to load (no unknown
 * piece, duplicate pieces, byte pieces without byte fallback).
 */
import { QuantdError } from '../../errors/index.js';
import { PrefixTrie } from './prefix-trie.js';
import { SpmBpe, type PieceSink, type SpmVocabulary } from './spm-bpe.js';
import { SpmUnigram } from './spm-unigram.js';
import { SPACE_SYMBOL, normalizeSpm, type SpmNormalizerSpec } from './spm-normalize.js';
import { IdList, checkText, quoted } from './text.js';
import { specialsAround, type EncodeOptions, type Tokenizer } from './tokenizer.js';

/** SentencePiece.Type (sentencepiece_model.proto). */
const NORMAL = 1;
const UNKNOWN = 2;
const CONTROL = 3;
const USER_DEFINED = 4;
const UNUSED = 5;
const BYTE = 6;

const MODEL_UNIGRAM = 1;
const MODEL_BPE = 2;
const MODEL_NAMES: Record<number, string> = { 1: 'unigram', 2: 'BPE', 3: 'word', 4: 'char' };

/** What the tokenizer needs of a parsed tokenizer.model (src/format/sentencepiece-model.ts). */
export interface SentencePieceSpec extends SpmNormalizerSpec {
  readonly pieces: readonly string[];
  readonly scores: readonly number[];
  readonly types: readonly number[];
  readonly modelType: number;
  readonly byteFallback: boolean;
  readonly bosId: number;
  readonly eosId: number;
  readonly normalizerName: string;
  readonly charsmapBytes: number;
  readonly hasRuleTsv: boolean;
  readonly denormalizerCharsmapBytes: number;
  readonly unkSurface: string;
}

export interface AddedToken {
  readonly content: string;
  readonly special: boolean;
}

export interface SentencePieceOptions {
  /** Names the model file in errors. */
  readonly source: string;
  readonly addsBos: boolean;
  readonly addsEos: boolean;
  /**
   * Tokens with ids beyond the pieces (tokenizer_config.json's added_tokens_decoder: Phi-3's
   * chat tokens). SentencePiece does not know them, so encode never gives them; decode shows a
   * non-special one's text.
   */
  readonly added?: ReadonlyMap<number, AddedToken>;
}

const invalid = (source: string, detail: string): QuantdError =>
  new QuantdError('HF_MODEL_INVALID', { path: source, detail });

function bytePieceValue(piece: string): number {
  const m = /^<0x([0-9A-F]{2})>$/.exec(piece);
  return m === null ? -1 : parseInt(m[1]!, 16);
}

/** The reference's model checks (ModelInterface::InitializePieces), and the pieces' maps. */
function vocabulary(spec: SentencePieceSpec, source: string): SpmVocabulary & { byteIds: Int32Array } {
  const normal = new Map<string, number>();
  const reserved = new Map<string, number>();
  const n = spec.pieces.length;
  const scores = new Float64Array(n);
  const unused = new Uint8Array(n);
  const byteIds = new Int32Array(256).fill(-1);
  let unkId = -1;
  for (let i = 0; i < n; i++) {
    const piece = spec.pieces[i]!;
    const type = spec.types[i]!;
    if (piece === '') throw invalid(source, `piece ${i} is empty`);
    const map = type === NORMAL || type === USER_DEFINED || type === UNUSED ? normal : reserved;
    if (map.has(piece)) throw invalid(source, `piece ${quoted(piece)} is defined twice`);
    map.set(piece, i);
    scores[i] = spec.scores[i]!;
    if (type === UNUSED) unused[i] = 1;
    if (type === UNKNOWN) {
      if (unkId >= 0) throw invalid(source, `has two unknown pieces (${unkId} and ${i})`);
      unkId = i;
    }
    if (type === BYTE) {
      if (!spec.byteFallback) {
        throw invalid(source, `has byte piece ${quoted(piece)} but byte_fallback is off`);
      }
      const b = bytePieceValue(piece);
      if (b < 0) throw invalid(source, `byte piece ${quoted(piece)} is not <0xXX>`);
      byteIds[b] = i;
    }
  }
  if (unkId < 0) throw invalid(source, 'has no unknown piece (<unk>)');
  if (spec.byteFallback && byteIds.includes(-1)) {
    throw invalid(source, 'has byte_fallback on but not the 256 byte pieces <0x00>…<0xFF>');
  }
  return { normal, reserved, scores, unused, unkId, byteIds };
}

/**
 * Whether a piece merges can form (normal, user-defined or unused) holds a space symbol `ws`
 * right after another character (`firstIsSpace` false), or another character right after a
 * space symbol (true): if none does, no merge crosses such a place in a text.
 */
function someAdjacency(normal: ReadonlyMap<string, number>, ws: string, firstIsSpace: boolean): boolean {
  for (const piece of normal.keys()) {
    for (let i = 1; i < piece.length; i++) {
      const a = piece[i - 1] === ws;
      const b = piece[i] === ws;
      if (a === firstIsSpace && b !== firstIsSpace) return true;
    }
  }
  return false;
}

/** The unigram model over the same pieces (user-defined ones scored, not frozen). */
function unigramModel(spec: SentencePieceSpec, vocab: SpmVocabulary): SpmUnigram {
  const trie = new PrefixTrie();
  const userDefinedBytes = new Int32Array(spec.pieces.length);
  for (const [piece, id] of vocab.normal) {
    trie.add(piece, id);
    if (spec.types[id] === USER_DEFINED) userDefinedBytes[id] = new TextEncoder().encode(piece).length;
  }
  return new SpmUnigram({
    trie,
    scores: vocab.scores,
    unused: vocab.unused,
    userDefinedBytes,
    unkId: vocab.unkId,
    types: spec.types,
  });
}

/**
 * A run's ids; without byte fallback, -1 marks an unknown piece (a run of which, across runs
 * too, becomes one unknown id when the text's ids are put together).
 */
type Segmented = Int32Array;

/** Appends the ids of the byte pieces of `piece`'s UTF-8 bytes (byte fallback). */
function pushBytes(piece: string, byteIds: Int32Array, ids: number[]): void {
  for (const ch of piece) {
    const cp = ch.codePointAt(0)!;
    if (cp < 0x80) ids.push(byteIds[cp]!);
    else if (cp < 0x800) ids.push(byteIds[0xc0 | (cp >> 6)]!, byteIds[0x80 | (cp & 0x3f)]!);
    else if (cp < 0x10000) {
      ids.push(
        byteIds[0xe0 | (cp >> 12)]!,
        byteIds[0x80 | ((cp >> 6) & 0x3f)]!,
        byteIds[0x80 | (cp & 0x3f)]!,
      );
    } else {
      ids.push(
        byteIds[0xf0 | (cp >> 18)]!,
        byteIds[0x80 | ((cp >> 12) & 0x3f)]!,
        byteIds[0x80 | ((cp >> 6) & 0x3f)]!,
        byteIds[0x80 | (cp & 0x3f)]!,
      );
    }
  }
}

/**
 * The word cache's bounds: words up to CACHE_WORD UTF-16 units, CACHE_LIMIT of them (then it
 * starts again), so that it holds a few MB at most however many texts go through it.
 */
const CACHE_LIMIT = 1 << 15;
const CACHE_WORD = 256;

export function sentencePieceTokenizer(spec: SentencePieceSpec, options: SentencePieceOptions): Tokenizer {
  const source = options.source;
  if (spec.modelType !== MODEL_BPE && spec.modelType !== MODEL_UNIGRAM) {
    throw new QuantdError('FEATURE_UNSUPPORTED', {
      detail: `${source}: SentencePiece ${MODEL_NAMES[spec.modelType] ?? `type ${spec.modelType}`} models are not tokenized by quantd (BPE and unigram models are)`,
    });
  }
  if (spec.charsmapBytes > 0 || spec.hasRuleTsv) {
    throw new QuantdError('FEATURE_UNSUPPORTED', {
      detail: `${source}: the SentencePiece normalizer ${quoted(spec.normalizerName)} rewrites characters (a precompiled character map); quantd tokenizes identity-normalized models only`,
    });
  }
  const vocab = vocabulary(spec, source);
  const userDefined = new PrefixTrie();
  spec.types.forEach((t, i) => {
    if (t === USER_DEFINED) userDefined.add(spec.pieces[i]!, i);
  });
  const ws = spec.escapeWhitespaces ? SPACE_SYMBOL : ' ';
  const wsCode = ws.charCodeAt(0);
  const hasUnused = vocab.unused.includes(1);
  // a boundary no merge crosses: before a space led word, or (suffix models) after a word's space
  const splitBefore = !hasUnused && !someAdjacency(vocab.normal, ws, false);
  const splitAfter = !hasUnused && !splitBefore && !someAdjacency(vocab.normal, ws, true);
  const bpe = new SpmBpe(vocab);
  const unigram = spec.modelType === MODEL_UNIGRAM ? unigramModel(spec, vocab) : undefined;
  const cache = new Map<string, Segmented>();
  const added = options.added ?? new Map<number, AddedToken>();
  let vocabSize = spec.pieces.length;
  for (const id of added.keys()) vocabSize = Math.max(vocabSize, id + 1);

  // scratch: the initial symbols of the current segment
  let starts = new Int32Array(1024);
  let ends = new Int32Array(1024);
  let frozen = new Uint8Array(1024);

  /** The ids of the pieces a segmentation gives (`run` hands them to the callback). */
  const segmentWith = (run: (sink: PieceSink) => void): Segmented => {
    const ids: number[] = [];
    run((piece, id) => {
      const type = spec.types[id];
      if (type === UNKNOWN) {
        if (spec.byteFallback) pushBytes(piece, vocab.byteIds, ids);
        else ids.push(-1);
      } else if (type === CONTROL) {
        // the reference's encode fails on a control piece spelled in the text (no surface)
        throw new QuantdError('FEATURE_UNSUPPORTED', {
          detail: `${source}: the text spells control piece ${quoted(piece)} as a whole symbol, which SentencePiece cannot encode`,
        });
      } else ids.push(id);
    });
    return Int32Array.from(ids);
  };
  const segment = (text: string, count: number): Segmented =>
    segmentWith((sink) => bpe.encode(text, starts, ends, frozen, count, sink));

  const encode = (text: string, opts?: EncodeOptions): Int32Array => {
    checkText(text);
    const [before, after] = specialsAround(tokenizer, opts);
    const normalized = normalizeSpm(text, spec, userDefined);
    const out = new IdList();
    let prevUnknown = false;
    const emit = (ids: Segmented): void => {
      for (let k = 0; k < ids.length; k++) {
        const id = ids[k]!;
        if (id >= 0) {
          out.push(id);
          prevUnknown = false;
        } else {
          if (!prevUnknown) out.push(vocab.unkId); // a run of unknown pieces is one unknown id
          prevUnknown = true;
        }
      }
    };
    if (unigram !== undefined) {
      // float32 path scores make a run's choices depend on what precedes it: one run, as the reference
      emit(segmentWith((sink) => unigram.encode(normalized, sink)));
      return out.result(before, after);
    }
    bpe.reset();
    let count = 0;
    let segStart = 0;
    const flush = (segEnd: number): void => {
      if (count === 0) return;
      if ((!splitBefore && !splitAfter) || segEnd - segStart > CACHE_WORD) {
        emit(segment(normalized, count));
      } else {
        const key = normalized.slice(segStart, segEnd);
        let s = cache.get(key);
        if (s === undefined) {
          s = segment(normalized, count);
          if (cache.size >= CACHE_LIMIT) cache.clear();
          // a copy: a slice would keep the whole text it was cut from alive in the cache
          cache.set(` ${key}`.slice(1), s);
        }
        emit(s);
      }
      count = 0;
      segStart = segEnd;
    };
    let pos = 0;
    while (pos < normalized.length) {
      let n = userDefined.empty ? 0 : userDefined.longest(normalized, pos);
      const isUser = n > 0;
      if (!isUser) {
        const c = normalized.charCodeAt(pos);
        n = c >= 0xd800 && c <= 0xdbff ? 2 : 1;
      }
      if (count > 0 && (splitBefore || splitAfter)) {
        const prevSpace = normalized.charCodeAt(pos - 1) === wsCode;
        const nextSpace = normalized.charCodeAt(pos) === wsCode;
        if (splitBefore ? !prevSpace && nextSpace : prevSpace && !nextSpace) flush(pos);
      }
      if (count === starts.length) {
        const grow = <T extends Int32Array | Uint8Array>(a: T): T => {
          const b = new (a.constructor as new (n: number) => T)(a.length * 2);
          b.set(a);
          return b;
        };
        starts = grow(starts);
        ends = grow(ends);
        frozen = grow(frozen);
      }
      starts[count] = pos;
      ends[count] = pos + n;
      frozen[count] = isUser ? 1 : 0;
      count++;
      pos += n;
    }
    flush(normalized.length);
    return out.result(before, after);
  };

  const decode = (ids: ArrayLike<number>): string => decodeSentencePiece(spec, vocab.byteIds, added, ids);

  const tokenizer: Tokenizer = {
    kind: unigram === undefined ? 'sentencepiece-bpe' : 'sentencepiece-unigram',
    vocabSize,
    bosId: spec.bosId,
    eosId: spec.eosId,
    addsBos: options.addsBos,
    addsEos: options.addsEos,
    encode,
    decode,
  };
  return tokenizer;
}

/**
 * Decodes a valid UTF-8 sequence at bytes[i] as SentencePiece's IsValidDecodeUTF8 does; returns
 * its length, or 0 when the byte starts no valid character (it then shows as U+FFFD alone).
 */
function utf8CharLength(bytes: readonly number[], i: number): number {
  const b0 = bytes[i]!;
  if (b0 < 0x80) return 1;
  const cont = (k: number): boolean => i + k < bytes.length && (bytes[i + k]! & 0xc0) === 0x80;
  if (b0 >= 0xc2 && b0 <= 0xdf) return cont(1) ? 2 : 0;
  if (b0 >= 0xe0 && b0 <= 0xef) {
    if (!cont(1) || !cont(2)) return 0;
    const cp = ((b0 & 0x0f) << 12) | ((bytes[i + 1]! & 0x3f) << 6) | (bytes[i + 2]! & 0x3f);
    return cp >= 0x800 && (cp < 0xd800 || cp > 0xdfff) ? 3 : 0;
  }
  if (b0 >= 0xf0 && b0 <= 0xf4) {
    if (!cont(1) || !cont(2) || !cont(3)) return 0;
    const cp =
      ((b0 & 0x07) << 18) |
      ((bytes[i + 1]! & 0x3f) << 12) |
      ((bytes[i + 2]! & 0x3f) << 6) |
      (bytes[i + 3]! & 0x3f);
    return cp >= 0x10000 && cp <= 0x10ffff ? 4 : 0;
  }
  return 0;
}

const UTF8 = new TextDecoder();

/** SentencePieceProcessor::Decode: pieces joined, ▁ as a space, the dummy prefix's space dropped. */
function decodeSentencePiece(
  spec: SentencePieceSpec,
  byteIds: Int32Array,
  added: ReadonlyMap<number, AddedToken>,
  ids: ArrayLike<number>,
): string {
  if (spec.denormalizerCharsmapBytes > 0) {
    throw new QuantdError('FEATURE_UNSUPPORTED', {
      detail: 'the SentencePiece model has denormalization rules; quantd does not decode with them',
    });
  }
  const byteOf = new Map<number, number>();
  byteIds.forEach((id, b) => byteOf.set(id, b));
  let text = '';
  let bytes: number[] = [];
  const flushBytes = (): void => {
    let i = 0;
    while (i < bytes.length) {
      const n = utf8CharLength(bytes, i);
      if (n === 0) {
        text += '\ufffd';
        i++;
      } else {
        text += UTF8.decode(Uint8Array.from(bytes.slice(i, i + n)));
        i += n;
      }
    }
    bytes = [];
  };
  // the reference drops the space of the first piece that starts with one (the dummy prefix),
  // and only of a piece nothing visible precedes
  let atStart = true;
  let startSpaceSeen = false;
  const stripsFirstSpace = spec.addDummyPrefix || spec.removeExtraWhitespaces;
  for (let k = 0; k < ids.length; k++) {
    const id = ids[k]!;
    if (!Number.isInteger(id) || id < 0 || (id >= spec.pieces.length && !added.has(id))) {
      throw new QuantdError('TOKENIZER_INPUT_INVALID', {
        detail: `token id ${id} (at index ${k}) is not an id of this tokenizer`,
      });
    }
    const type = id < spec.pieces.length ? spec.types[id]! : -1;
    if (type === BYTE) {
      bytes.push(byteOf.get(id)!);
      continue;
    }
    flushBytes();
    if (startSpaceSeen || text !== '') atStart = false;
    startSpaceSeen = false;
    if (type === -1) {
      const token = added.get(id)!;
      if (!token.special) text += token.content;
    } else if (type === UNKNOWN) {
      text += spec.unkSurface;
    } else if (type !== CONTROL) {
      let piece = spec.pieces[id]!;
      if (atStart && stripsFirstSpace && piece.startsWith(SPACE_SYMBOL)) {
        piece = piece.slice(SPACE_SYMBOL.length);
        // with remove_extra_whitespaces every leading space piece goes
        startSpaceSeen = !spec.removeExtraWhitespaces;
      }
      text += piece.replaceAll(SPACE_SYMBOL, ' ');
    }
  }
  flushBytes();
  return text;
}
