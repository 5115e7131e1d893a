export * from './tokenizer.js';
export {
  sentencePieceTokenizer,
  type SentencePieceSpec,
  type SentencePieceOptions,
} from './sentencepiece.js';
export { byteLevelBpeTokenizer, type ByteLevelBpeOptions } from './byte-level-bpe.js';
export { onigurumaRegExp } from './onig-regex.js';
