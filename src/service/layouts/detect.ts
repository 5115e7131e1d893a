/**
 * Which layout wrote a file: the first whose `detect` recognizes the file's name and first bytes
 * (a GGUF, an ONNX model, a GPTQ / AWQ / bitsandbytes safetensors), or undefined for an ordinary
 * safetensors or qtensor file. `quantd dequantize` and evaluation read files back this way.
 */
import { open } from 'node:fs/promises';

import { LAYOUTS } from './index.js';
import type { InteropLayout } from './types.js';

/** The layout that recognizes the file at `path`, or undefined (then it is a qtensor file). */
export async function detectLayout(path: string): Promise<InteropLayout | undefined> {
  let head: Uint8Array;
  try {
    const fh = await open(path, 'r');
    try {
      const buffer = new Uint8Array(1 << 20);
      const { bytesRead } = await fh.read(buffer, 0, buffer.length, 0);
      head = buffer.subarray(0, bytesRead);
    } finally {
      await fh.close();
    }
  } catch {
    return undefined; // not a readable file: the ordinary path reports it
  }
  return [...LAYOUTS.values()].find((l) => l.detect(path, head));
}
