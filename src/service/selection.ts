/**
 * Which tensors of a multi-tensor file an operation transforms. By default every float tensor;
 * `include` globs narrow that to the names they match (and must then only match float
 * tensors), `exclude` globs remove names. NAME.scale / NAME.zero_point beside a tensor NAME are
 * its qparams, never selected on their own.
 *
 * Tensors of rank < 2 (norms, biases, scalars) are selected but pass through by default (see
 * lowRankNamed): quantizing them saves nothing and per-channel or per-group schemes do not fit
 * them, so whether they were quantized would otherwise depend on the scheme.
 */
import { completeNow, floatDTypeOfSt, type Resumable } from '../core/index.js';
import { QuantdError } from '../errors/index.js';
import { UnusableGlob, anyGlob, patternListProblem } from './name-patterns.js';
import {
  SCALE_SUFFIX,
  ZERO_POINT_SUFFIX,
  entryByName,
  type SafetensorsHeader,
  type TensorEntry,
} from '../format/index.js';

export interface Selection {
  readonly include: readonly string[];
  readonly exclude: readonly string[];
}

/** The tensor a qparam companion belongs to, or undefined for an ordinary tensor. */
export function companionOf(header: SafetensorsHeader, name: string): string | undefined {
  for (const suffix of [SCALE_SUFFIX, ZERO_POINT_SUFFIX]) {
    if (name.endsWith(suffix)) {
      const base = name.slice(0, -suffix.length);
      if (entryByName(header, base)) return base;
    }
  }
  return undefined;
}

function matcher(globs: readonly string[]): (name: string) => boolean {
  if (globs.length === 0) return () => false;
  const problem = patternListProblem(globs);
  if (problem !== null) {
    throw new QuantdError('OPTION_INVALID', {
      option: 'include/exclude',
      detail: `${problem} (a list is compiled before any tensor is tested)`,
      value: `${globs.length} globs: ${globs.slice(0, 3).join(', ').slice(0, 77)}...`,
    });
  }
  try {
    return anyGlob(globs);
  } catch (err) {
    if (!(err instanceof UnusableGlob)) throw err;
    const { glob } = err;
    throw new QuantdError('OPTION_INVALID', {
      option: 'include/exclude',
      detail: `is not a usable glob (it ${err.message})`,
      value: glob.length > 80 ? `${glob.slice(0, 77)}...` : glob,
    });
  }
}

/** The selection in words, for NO_TENSOR_SELECTED. */
export function describeSelection(selection: Selection): string {
  return [
    selection.include.length ? `include ${selection.include.join(', ')}` : 'all float tensors',
    ...(selection.exclude.length ? [`exclude ${selection.exclude.join(', ')}`] : []),
  ].join('; ');
}

/**
 * Entries to transform, in data order. Throws NO_TENSOR_SELECTED when none qualifies, unless
 * `allowEmpty` (one shard of a model: the model as a whole is checked).
 */
export function selectTensors(
  header: SafetensorsHeader,
  selection: Selection,
  allowEmpty = false,
): TensorEntry[] {
  return completeNow(selectTensorsWork(header, selection, allowEmpty));
}

/** selectTensors in units of one entry (../core/time-slice.ts). */
export function* selectTensorsWork(
  header: SafetensorsHeader,
  selection: Selection,
  allowEmpty = false,
): Resumable<TensorEntry[]> {
  const included = matcher(selection.include);
  const excluded = matcher(selection.exclude);
  const chosen: TensorEntry[] = [];
  for (const entry of header.entries) {
    yield;
    if (companionOf(header, entry.name) !== undefined) continue;
    if (excluded(entry.name)) continue;
    const isFloat = floatDTypeOfSt(entry.dtype) !== undefined;
    if (selection.include.length > 0) {
      if (!included(entry.name)) continue;
      if (!isFloat) {
        throw new QuantdError('INPUT_DTYPE_UNSUPPORTED', { tensor: entry.name, dtype: entry.dtype });
      }
    } else if (!isFloat) {
      continue;
    }
    chosen.push(entry);
  }
  if (chosen.length === 0 && !allowEmpty) {
    throw new QuantdError('NO_TENSOR_SELECTED', { detail: describeSelection(selection) });
  }
  return chosen;
}

/**
 * Whether a selected tensor of rank < 2 is quantized without a recipe: only when the request
 * names it — by an `include` glob, or as the one float tensor of its input (a raw tensor
 * request, a file of one tensor beside its qparams or mask; never one shard of a model). Otherwise it passes through, as recipes pass
 * 1-D tensors through (skip_1d, ./recipe.ts): one default on every transport.
 */
export function lowRankNamed(header: SafetensorsHeader, selection: Selection, shard: boolean): boolean {
  if (selection.include.length > 0) return true;
  if (shard) return false;
  // One pass over the header that stops at the second float tensor: the planner asks once per
  // plan (./plan.ts), never once per tensor, which made 16,000 rank-1 tensors cost 30 s.
  let floats = 0;
  for (const e of header.entries) {
    if (floatDTypeOfSt(e.dtype) === undefined || companionOf(header, e.name) !== undefined) continue;
    if (++floats > 1) return false;
  }
  return floats === 1;
}
