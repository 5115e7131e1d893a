/**
 * SentencePiece's `tokenizer.model`: a serialized `ModelProto` (sentencepiece_model.proto),
 * read with the protobuf wire reader of ./onnx-proto.ts. Only what a GGUF vocabulary needs:
 * the pieces (text, score, type), the model type, the special ids, and what the tokenizer
 * (src/core/tokenize/sentencepiece.ts) needs of the normalizer to encode as SentencePiece does.
 * Field numbers, from the public .proto:
 *
 *   ModelProto      pieces = 1 (repeated SentencePiece) · trainer_spec = 2 · normalizer_spec = 3 ·
 *                   denormalizer_spec = 5
 *   SentencePiece   piece = 1 (string) · score = 2 (float) · type = 3 (enum, NORMAL when absent)
 *   TrainerSpec     model_type = 3 (UNIGRAM 1, BPE 2, WORD 3, CHAR 4) ·
 *                   treat_whitespace_as_suffix = 24 (default false) · byte_fallback = 35 ·
 *                   unk_id = 40 (default 0) · bos_id = 41 (1) · eos_id = 42 (2) · pad_id = 43 (-1) ·
 *                   unk_surface = 44 (default " \u2047 ")
 *   NormalizerSpec  name = 1 · precompiled_charsmap = 2 (bytes) · add_dummy_prefix = 3 (default
 *                   true) · remove_extra_whitespaces = 4 (default true) · escape_whitespaces = 5
 *                   (default true) · normalization_rule_tsv = 6
 */
import { QuantdError } from '../errors/index.js';
import {
  ProtoError,
  WIRE_I32,
  WIRE_LEN,
  WIRE_VARINT,
  protoFields,
  utf8,
  type ProtoField,
} from './onnx-proto.js';

/** SentencePiece.Type; llama.cpp's token types (tokenizer.ggml.token_type) use the same numbers. */
export const SP_PIECE_TYPES = {
  NORMAL: 1,
  UNKNOWN: 2,
  CONTROL: 3,
  USER_DEFINED: 4,
  UNUSED: 5,
  BYTE: 6,
} as const;

export interface SentencePieceModel {
  readonly pieces: readonly string[];
  readonly scores: readonly number[];
  readonly types: readonly number[];
  /** TrainerSpec.model_type: 1 unigram, 2 BPE, 3 word, 4 char. */
  readonly modelType: number;
  readonly byteFallback: boolean;
  /** Special ids; -1 when the model has none. */
  readonly unkId: number;
  readonly bosId: number;
  readonly eosId: number;
  readonly padId: number;
  readonly addDummyPrefix: boolean;
  /** NormalizerSpec.name ("identity", "nmt_nfkc", …; "" when absent). */
  readonly normalizerName: string;
  /** Bytes of the normalizer's precompiled character map (0: no rewriting rules, identity). */
  readonly charsmapBytes: number;
  /** Whether a custom normalization_rule_tsv is set (it is compiled into the charsmap). */
  readonly hasRuleTsv: boolean;
  readonly removeExtraWhitespaces: boolean;
  readonly escapeWhitespaces: boolean;
  readonly treatWhitespaceAsSuffix: boolean;
  /** Bytes of the denormalizer's character map (decoding rewrites; 0 when none). */
  readonly denormalizerCharsmapBytes: number;
  /** What decoding shows for the unknown piece. */
  readonly unkSurface: string;
}

function float32(f: ProtoField): number {
  if (f.wire !== WIRE_I32) throw new ProtoError(f.offset, `field ${f.field} is not a float`);
  return new DataView(f.bytes.buffer, f.bytes.byteOffset, 4).getFloat32(0, true);
}

function int(f: ProtoField): number {
  if (f.wire !== WIRE_VARINT) throw new ProtoError(f.offset, `field ${f.field} is not an integer`);
  // int32 fields written negative (pad_id = -1) arrive as ten-byte int64 varints
  return f.int;
}

function message(f: ProtoField): Uint8Array {
  if (f.wire !== WIRE_LEN) throw new ProtoError(f.offset, `field ${f.field} is not a message`);
  return f.bytes;
}

/** Parses `bytes` (a tokenizer.model); `source` names it in errors. */
export function parseSentencePieceModel(bytes: Uint8Array, source: string): SentencePieceModel {
  const pieces: string[] = [];
  const scores: number[] = [];
  const types: number[] = [];
  const model = {
    modelType: 1,
    byteFallback: false,
    unkId: 0,
    bosId: 1,
    eosId: 2,
    padId: -1,
    addDummyPrefix: true,
    normalizerName: '',
    charsmapBytes: 0,
    hasRuleTsv: false,
    removeExtraWhitespaces: true,
    escapeWhitespaces: true,
    treatWhitespaceAsSuffix: false,
    denormalizerCharsmapBytes: 0,
    unkSurface: ' \u2047 ',
  };
  try {
    for (const f of protoFields(bytes)) {
      if (f.field === 1) {
        let piece = '';
        let score = 0;
        let type: number = SP_PIECE_TYPES.NORMAL;
        for (const p of protoFields(message(f))) {
          if (p.field === 1) piece = utf8(p);
          else if (p.field === 2) score = float32(p);
          else if (p.field === 3) type = int(p);
        }
        pieces.push(piece);
        scores.push(score);
        types.push(type);
      } else if (f.field === 2) {
        for (const t of protoFields(message(f))) {
          if (t.field === 3) model.modelType = int(t);
          else if (t.field === 24) model.treatWhitespaceAsSuffix = int(t) !== 0;
          else if (t.field === 35) model.byteFallback = int(t) !== 0;
          else if (t.field === 40) model.unkId = int(t);
          else if (t.field === 41) model.bosId = int(t);
          else if (t.field === 42) model.eosId = int(t);
          else if (t.field === 43) model.padId = int(t);
          else if (t.field === 44) model.unkSurface = utf8(t);
        }
      } else if (f.field === 3) {
        for (const n of protoFields(message(f))) {
          if (n.field === 1) model.normalizerName = utf8(n);
          else if (n.field === 2) model.charsmapBytes = message(n).length;
          else if (n.field === 3) model.addDummyPrefix = int(n) !== 0;
          else if (n.field === 4) model.removeExtraWhitespaces = int(n) !== 0;
          else if (n.field === 5) model.escapeWhitespaces = int(n) !== 0;
          else if (n.field === 6) model.hasRuleTsv = utf8(n) !== '';
        }
      } else if (f.field === 5) {
        for (const n of protoFields(message(f))) {
          if (n.field === 2) model.denormalizerCharsmapBytes = message(n).length;
        }
      }
    }
  } catch (err) {
    if (!(err instanceof ProtoError)) throw err;
    throw new QuantdError('HF_MODEL_INVALID', {
      path: source,
      detail: `not a SentencePiece model: ${err.message}`,
    });
  }
  if (pieces.length === 0) {
    throw new QuantdError('HF_MODEL_INVALID', {
      path: source,
      detail: 'the SentencePiece model has no pieces',
    });
  }
  for (const [i, t] of types.entries()) {
    if (t < SP_PIECE_TYPES.NORMAL || t > SP_PIECE_TYPES.BYTE) {
      throw new QuantdError('HF_MODEL_INVALID', {
        path: source,
        detail: `piece ${i} (${JSON.stringify(pieces[i])}) has unknown type ${t}`,
      });
    }
  }
  return { pieces, scores, types, ...model };
}
