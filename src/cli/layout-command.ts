/**
 * `--layout NAME[:key=value,...]`: write a model in a layout another tool loads (GGUF, GPTQ,
 * AWQ, bitsandbytes NF4/FP4, ONNX MatMulNBits; src/service/layouts), and, for dequantize, read
 * one back: a file whose first bytes a layout recognizes is dequantized by that layout. The
 * NAME:key=value syntax is parsed in src/service/layouts/parse.ts (shared with the jobs API).
 */
import { open } from 'node:fs/promises';
import { LAYOUTS, type InteropLayout } from '../service/layouts/index.js';
import { parseLayout } from '../service/layouts/parse.js';
import type { LayoutHooks } from '../service/layouts/types.js';

export { parseLayout };

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

export function layoutHelp(): string {
  return [...LAYOUTS.values()]
    .map(
      (l) =>
        `  ${l.name.padEnd(6)} ${l.summary}\n         options: ${Object.keys(l.options).join(', ') || 'none'}`,
    )
    .join('\n');
}

export async function writeLayout(
  text: string,
  input: string,
  output: string,
  hooks: LayoutHooks,
): Promise<{ summary: string }> {
  const { layout, options } = parseLayout(text);
  const result = await layout.write(input, output, options, hooks);
  const types = new Map<string, number>();
  for (const t of result.tensors) types.set(t.type, (types.get(t.type) ?? 0) + 1);
  const counts = [...types].map(([type, n]) => `${n} ${type}`).join(', ');
  return {
    summary: `${layout.name}: ${result.tensors.length} tensors (${counts}); wrote ${result.files.join(', ')}`,
  };
}
