/**
 * What a model's tokenizer offers the rest of quantd (calibration and evaluation feed its ids
 * to ONNX Runtime): text in, ids out, exactly as the model's own reference tokenizer gives them
 * (SentencePiece for tokenizer.model, Hugging Face tokenizers for tokenizer.json).
 */
import { QuantdError } from '../../errors/index.js';

export interface EncodeOptions {
  /** Put the BOS id first; by default as the model does (`addsBos`). */
  readonly addBos?: boolean;
  /** Put the EOS id last; by default as the model does (`addsEos`). */
  readonly addEos?: boolean;
}

export interface Tokenizer {
  /** SentencePiece BPE or unigram (tokenizer.model), or byte-level BPE (tokenizer.json). */
  readonly kind: 'sentencepiece-bpe' | 'sentencepiece-unigram' | 'byte-level-bpe';
  /** One more than the largest id the tokenizer can give. */
  readonly vocabSize: number;
  /** -1 when the model has none. */
  readonly bosId: number;
  readonly eosId: number;
  /** Whether the model puts BOS first / EOS last when it encodes a text. */
  readonly addsBos: boolean;
  readonly addsEos: boolean;
  encode(text: string, options?: EncodeOptions): Int32Array;
  /** The text of `ids` (special and control tokens show nothing). */
  decode(ids: ArrayLike<number>): string;
}

/** The special ids encode adds around a text, as the options and the model decide. */
export function specialsAround(
  t: Pick<Tokenizer, 'bosId' | 'eosId' | 'addsBos' | 'addsEos'>,
  options: EncodeOptions | undefined,
): [number[], number[]] {
  const wanted = (asked: boolean | undefined, model: boolean, id: number, name: string): number[] => {
    if (!(asked ?? model)) return [];
    // the loader sets addsBos/addsEos only for a model that has the token
    if (id < 0) {
      throw new QuantdError('FEATURE_UNSUPPORTED', {
        detail: `the model's tokenizer has no ${name} token to add`,
      });
    }
    return [id];
  };
  return [
    wanted(options?.addBos, t.addsBos, t.bosId, 'BOS'),
    wanted(options?.addEos, t.addsEos, t.eosId, 'EOS'),
  ];
}
