/**
 * What a file is, from its first bytes, when it was expected to be safetensors and is not: a
 * model in another format is common (a GGUF, an ONNX model, a PyTorch checkpoint, the shard
 * index JSON given instead of the model), and saying so beats reporting its first 8 bytes as an
 * absurd header length.
 */
import { GGUF_MAGIC } from './gguf.js';
import { looksLikeOnnxModel } from './onnx.js';

const ascii = (head: Uint8Array, from: number, to: number): string =>
  String.fromCharCode(...head.subarray(from, to));

/** Printable ASCII or whitespace: what the start of a JSON text is made of. */
const isText = (byte: number): boolean => (byte >= 0x20 && byte < 0x7f) || [0x09, 0x0a, 0x0d].includes(byte);

function looksLikeJson(head: Uint8Array): boolean {
  const text = head.subarray(0, Math.min(head.length, 64));
  if (!text.every(isText)) return false;
  return /^\s*[{[]/.test(ascii(text, 0, text.length));
}

/**
 * Why `head` (a file's first bytes, 8 or more) is another kind of file than safetensors, in
 * words that say what was expected; undefined when it is no format recognised here.
 */
export function describeOtherFormat(head: Uint8Array): string | undefined {
  if (ascii(head, 0, 4) === GGUF_MAGIC) {
    return 'it is a GGUF file (llama.cpp)';
  }
  if (head[0] === 0x50 && head[1] === 0x4b && head[2] === 0x03 && head[3] === 0x04) {
    return 'it is a zip archive, as PyTorch saves checkpoints (.bin, .pt, .pth); convert it to safetensors first';
  }
  // pickle protocol 2-5 opens with PROTO (0x80) and its version: old PyTorch checkpoints
  if (head[0] === 0x80 && head[1] !== undefined && head[1] >= 2 && head[1] <= 5) {
    return 'it is a Python pickle, as older PyTorch checkpoints are; convert it to safetensors first';
  }
  if (looksLikeJson(head)) {
    return (
      'it is JSON text, such as a shard index (model.safetensors.index.json); give the model as its ' +
      'folder, or one of the .safetensors shards the index names'
    );
  }
  if (looksLikeOnnxModel(head)) return 'it looks like an ONNX model (protobuf)';
  return undefined;
}
