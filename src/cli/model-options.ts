/**
 * The command-line form of model runs: recipe flags (--recipe FILE, --rule, --skip, --min-size,
 * --keep-1d), where the quality report goes, how many tensors run at once and within what memory.
 */
import { readFileSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { QuantdError } from '../errors/index.js';
import { combineRecipe, type Recipe } from '../service/index.js';
import { specOptionsOf, type ParsedCommand } from './args.js';

type Values = ParsedCommand['values'];

const list = (values: Values, key: string): string[] => (values[key] as string[] | undefined) ?? [];

/** Whether the command asks for recipe semantics (per-tensor rules, 1-D and small tensors kept). */
export function usesRecipe(values: Values): boolean {
  return (
    values['recipe'] !== undefined ||
    list(values, 'rule').length > 0 ||
    list(values, 'skip').length > 0 ||
    values['min-size'] !== undefined ||
    values['keep-1d'] === true
  );
}

export function readRecipeFile(path: string): unknown {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ENOENT') throw new QuantdError('FILE_NOT_FOUND', { path });
    throw new QuantdError('FILE_UNREADABLE', { path, detail: (err as Error).message });
  }
  try {
    return JSON.parse(text);
  } catch (err) {
    throw new QuantdError('RECIPE_INVALID', {
      where: `(${path})`,
      detail: `is not valid JSON: ${(err as Error).message}`,
    });
  }
}

function wholeNumber(option: string, text: string): number {
  const n = /^\d+$/.test(text.trim()) ? Number(text) : NaN;
  if (!Number.isSafeInteger(n)) {
    throw new QuantdError('OPTION_INVALID', { option, detail: 'must be a whole number', value: text });
  }
  return n;
}

/** The recipe of a command, or undefined when it gives no recipe flag. */
export function recipeOf(values: Values): Recipe | undefined {
  if (!usesRecipe(values)) return undefined;
  const defaults = Object.fromEntries(
    Object.entries(specOptionsOf(values)).filter(([, v]) => v !== undefined),
  );
  const minSize = values['min-size'] as string | undefined;
  return combineRecipe({
    recipe: values['recipe'] === undefined ? undefined : readRecipeFile(values['recipe'] as string),
    defaults,
    rules: list(values, 'rule'),
    skip: list(values, 'skip'),
    ...(minSize !== undefined && { minSize: wholeNumber('min-size', minSize) }),
    ...(values['keep-1d'] === true && { skip1d: false }),
  });
}

const UNITS: Readonly<Record<string, number>> = { '': 1, k: 2 ** 10, m: 2 ** 20, g: 2 ** 30, t: 2 ** 40 };

/** "512M", "2GiB", "1073741824" → bytes (binary units). */
export function parseByteSize(option: string, text: string): number {
  const m = /^(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?$/i.exec(text.trim());
  const bytes = m ? Math.floor(Number(m[1]) * UNITS[m[2]!.toLowerCase()]!) : NaN;
  if (!Number.isSafeInteger(bytes) || bytes <= 0) {
    throw new QuantdError('OPTION_INVALID', {
      option,
      detail: 'must be a size such as 512M or 2G',
      value: text,
    });
  }
  return bytes;
}

export interface RunShape {
  readonly concurrency: number;
  readonly memoryBudget: number | undefined;
}

export function runShapeOf(values: Values): RunShape {
  const c = values['concurrency'] as string | undefined;
  const concurrency = c === undefined ? availableParallelism() : wholeNumber('concurrency', c);
  if (concurrency < 1)
    throw new QuantdError('OPTION_INVALID', {
      option: 'concurrency',
      detail: 'must be at least 1',
      value: c,
    });
  const m = values['memory'] as string | undefined;
  return { concurrency, memoryBudget: m === undefined ? undefined : parseByteSize('memory', m) };
}

/** Where the report of a run goes by default: beside a file output, inside a directory output. */
export function defaultReportPath(output: string, folder: boolean): string {
  if (folder) return `${output.replace(/\/+$/, '')}/quantd-report.json`;
  return `${output.replace(/\.safetensors$/, '')}.report.json`;
}
