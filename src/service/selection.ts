/**
 * Which tensors of a multi-tensor file an operation transforms. By default every float tensor;
 * `include` globs narrow that to the names they match (and must then only match float
 * tensors), `exclude` globs remove names. NAME.scale / NAME.zero_point beside a tensor NAME are
 * its qparams, never selected on their own.
 */
import picomatch from 'picomatch';
import { floatDTypeOfSt } from '../core/index.js';
import { QuantdError } from '../errors/index.js';
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
  const tests = globs.map((glob) => {
    try {
      return picomatch(glob, { dot: true });
    } catch (err) {
      throw new QuantdError('OPTION_INVALID', {
        option: 'include/exclude',
        detail: `is not a usable glob (${(err as Error).message})`,
        value: glob.length > 80 ? `${glob.slice(0, 77)}...` : glob,
      });
    }
  });
  return (name) => tests.some((t) => t(name));
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
  const included = matcher(selection.include);
  const excluded = matcher(selection.exclude);
  const chosen: TensorEntry[] = [];
  for (const entry of header.entries) {
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
