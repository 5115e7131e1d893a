/**
 * `--layout NAME[:key=value,...]`: write a model in a layout another tool loads (GGUF, GPTQ,
 * AWQ, bitsandbytes NF4/FP4, ONNX MatMulNBits, compressed-tensors; src/service/layouts), and, for
 * dequantize, read one back: a file whose first bytes a layout recognizes is dequantized by that
 * layout. A model folder in a safetensors layout (gptq, awq, nf4, fp4, compressed-tensors) gives a
 * model folder. The
 * NAME:key=value syntax is parsed in src/service/layouts/parse.ts (shared with the jobs API).
 */
import { isAbsolute, relative, resolve, sep } from 'node:path';

import { QuantdError } from '../errors/index.js';
import { LAYOUTS } from '../service/layouts/index.js';
import { detectLayout } from '../service/layouts/detect.js';
import { parseLayout } from '../service/layouts/parse.js';
import { layoutReport, type LayoutReport } from '../service/layouts/report.js';
import type { LayoutHooks } from '../service/layouts/types.js';
import { writeLayoutOutput } from '../service/layouts/write-folder.js';

export { detectLayout, parseLayout };
export type { LayoutReport };

export function layoutHelp(): string {
  return [...LAYOUTS.values()]
    .map((l) => {
      // a name longer than the column (compressed-tensors) gets a line of its own
      const name = l.name.length <= 6 ? `  ${l.name.padEnd(6)} ` : `  ${l.name}\n         `;
      return `${name}${l.summary}\n         options: ${Object.keys(l.options).join(', ') || 'none'}`;
    })
    .join('\n');
}

export async function writeLayout(
  text: string,
  input: string,
  output: string,
  hooks: LayoutHooks,
): Promise<{ summary: string; report: LayoutReport }> {
  const { layout, options } = parseLayout(text);
  const result = await writeLayoutOutput(layout, input, output, options, hooks);
  const report = layoutReport(layout.name, options, result);
  const worst = report.tensors.find((t) => t.quality !== undefined);
  const types = new Map<string, number>();
  for (const t of result.tensors) types.set(t.type, (types.get(t.type) ?? 0) + 1);
  const counts = [...types].map(([type, n]) => `${n} ${type}`).join(', ');
  return {
    summary:
      `${layout.name}: ${result.tensors.length} tensors (${counts})` +
      (result.size !== undefined && result.size.weights > 0
        ? `, ${(result.size.bits / result.size.weights).toFixed(2)} bits per weight`
        : '') +
      (worst?.quality !== undefined
        ? `; worst ${worst.name} (${worst.type}, SQNR ${worst.quality.sqnr_db?.toFixed(1) ?? '∞'} dB)`
        : '') +
      `; wrote ${result.files.join(', ')}`,
    report,
  };
}

/** The flags that name a file the layout reads beside the model, and the option each becomes. */
const LAYOUT_FILE_FLAGS = {
  imatrix: {
    // the layout decides which types a matrix changes (Q8_0 is refused there, with its reason)
    applies: /^gguf:(.*,)?f?type=/,
    usage:
      '--imatrix applies to a GGUF type or a llama-quantize file type: --layout gguf:type=Q4_K or gguf:ftype=Q4_K_M (for example)',
  },
  calibration: {
    applies: /^(?:gptq|awq)(:|$)/,
    usage: '--calibration (layer statistics) applies to --layout gptq or --layout awq',
  },
} as const;

/**
 * `--imatrix FILE` / `--calibration FILE` (relative to the working directory, as llama-quantize
 * takes --imatrix) as the layout's option of that name, which the layout resolves against the
 * model folder: an absolute path here; with --remote the file's name, for the folder upload
 * carries it to the server.
 */
export function layoutWithFile(
  flag: keyof typeof LAYOUT_FILE_FLAGS,
  text: string | undefined,
  file: string,
  input: string,
  remote: boolean,
): string {
  if (text === undefined || !LAYOUT_FILE_FLAGS[flag].applies.test(text)) {
    throw new QuantdError('USAGE', { detail: LAYOUT_FILE_FLAGS[flag].usage });
  }
  const joined = (value: string): string => `${text}${text.includes(':') ? ',' : ':'}${flag}=${value}`;
  if (!remote) return joined(resolve(file));
  const name = relative(resolve(input), resolve(file));
  if (name === '' || name.startsWith('..') || isAbsolute(name) || name.includes(sep)) {
    throw new QuantdError('USAGE', {
      detail: `with --remote, --${flag} must be a file of the model folder ${input} (the upload carries the folder, nothing else)`,
    });
  }
  return joined(name);
}
