/**
 * The gguf layout's llama-quantize options: `ftype=Q4_K_M` (a file type: a mixture of tensor types
 * chosen by llama.cpp's rules, src/core/interop/llama-mixtures.ts) and the overrides llama-quantize
 * takes with it — `pure`, `output_tensor_type`, `token_embedding_type` and
 * `tensor_type=PATTERN=TYPE;PATTERN=TYPE` (regexes searched in the GGUF name, first match wins,
 * lower-cased as llama-quantize lower-cases them; RE2 syntax: linear time, no backreferences).
 */
import { resolve } from 'node:path';

import { QUANT_TYPES, isQuantType, type GgmlWriteType } from '../../core/interop/ggml.js';
import {
  LLAMA_FILE_TYPES,
  chooseMixture,
  llamaFileType,
  type MixtureModel,
  type MixtureOptions,
  type MixtureTensor,
} from '../../core/interop/llama-mixtures.js';
import { QuantdError } from '../../errors/index.js';
import { readImportanceMatrix } from '../../format/imatrix.js';
import { UnusablePattern, linearRegex } from '../name-patterns.js';
import { fitImportanceMatrix, type FittedMatrix } from './gguf-imatrix.js';
import type { LayoutOptions } from './types.js';

export const MIXTURE_OPTIONS: Readonly<Record<string, string>> = {
  ftype: `llama-quantize's file type, a mixture by llama.cpp's per-tensor rules: ${[...LLAMA_FILE_TYPES.keys()].join(', ')} (Q3_K, Q4_K, Q5_K: the _M ones); instead of type`,
  pure: 'with ftype: true gives every quantized tensor the file type’s default type (llama-quantize --pure)',
  output_tensor_type: 'with ftype: the type of output.weight (llama-quantize --output-tensor-type)',
  token_embedding_type: 'with ftype: the type of token_embd.weight (llama-quantize --token-embedding-type)',
  tensor_type:
    'with ftype: PATTERN=TYPE;PATTERN=TYPE — tensors whose GGUF name matches the regex get TYPE (llama-quantize --tensor-type)',
  imatrix:
    "with ftype, or with a type whose quantizer uses it (all but Q8_0; llama-quantize --pure): llama.cpp's importance matrix (GGUF or legacy .dat, from llama-imatrix), a path relative to the model folder (llama-quantize --imatrix)",
};

/** The mixture options as given: the importance matrix is read when the model is (its path here). */
export interface GgufMixture extends MixtureOptions {
  readonly imatrixPath?: string;
}

const WRITABLE = [...QUANT_TYPES, 'F16', 'F32'];

function bad(option: string, detail: string, value: string): QuantdError {
  return new QuantdError('OPTION_INVALID', { option, detail, value });
}

function writableType(option: string, value: string): GgmlWriteType {
  const upper = value.toUpperCase();
  if (upper !== 'F16' && upper !== 'F32' && !isQuantType(upper)) {
    throw bad(option, `must be a type quantd writes: ${WRITABLE.join(', ')}`, value);
  }
  return upper;
}

/**
 * The mixture options, or undefined when `ftype` is not given (then none of them may be but
 * `imatrix`, which one type takes too: gguf-imatrix.ts's singleTypeImatrix).
 */
export function mixtureOptions(options: LayoutOptions): GgufMixture | undefined {
  const ftypeText = options['ftype'];
  if (ftypeText === undefined) {
    const stray = Object.keys(MIXTURE_OPTIONS).find((k) => k !== 'imatrix' && options[k] !== undefined);
    if (stray !== undefined) throw bad(stray, 'only applies with ftype', options[stray]!);
    return undefined;
  }
  if (options['type'] !== undefined) {
    throw bad(
      'type',
      'and ftype exclude each other: type gives every weight one type, ftype a llama-quantize mixture',
      options['type'],
    );
  }
  const fileType = llamaFileType(ftypeText);
  if (fileType === undefined) {
    throw bad('ftype', `must be one of ${[...LLAMA_FILE_TYPES.keys()].join(', ')}`, ftypeText);
  }
  const pure = options['pure'];
  if (pure !== undefined && pure !== 'true' && pure !== 'false')
    throw bad('pure', 'must be true or false', pure);
  const output = options['output_tensor_type'];
  const embedding = options['token_embedding_type'];
  return {
    fileType,
    pure: pure === 'true',
    ...(output !== undefined && { outputTensorType: writableType('output_tensor_type', output) }),
    ...(embedding !== undefined && { tokenEmbeddingType: writableType('token_embedding_type', embedding) }),
    ...(options['tensor_type'] !== undefined && { tensorTypes: tensorTypes(options['tensor_type']) }),
    ...(options['imatrix'] !== undefined && { imatrixPath: nonEmpty('imatrix', options['imatrix']) }),
  };
}

function nonEmpty(option: string, value: string): string {
  if (value.trim() === '') throw bad(option, 'must name a file', value);
  return value;
}

function tensorTypes(text: string): MixtureOptions['tensorTypes'] {
  return text.split(';').map((rule) => {
    const eq = rule.indexOf('='); // llama-quantize splits at the first =
    const pattern = rule.slice(0, eq).trim().toLowerCase();
    if (eq <= 0 || pattern === '') throw bad('tensor_type', 'takes PATTERN=TYPE rules separated by ;', rule);
    const type = writableType('tensor_type', rule.slice(eq + 1).trim());
    try {
      return { matches: linearRegex(pattern), type };
    } catch (err) {
      if (err instanceof UnusablePattern) throw bad('tensor_type', `the regex ${err.message}`, pattern);
      throw err;
    }
  });
}

export interface MixedTensor {
  readonly type: GgmlWriteType;
  readonly note?: string;
}

/**
 * Each tensor's type in the mixture. A tensor llama.cpp does not quantize keeps what the
 * converter gives it: F32 for rank ≤ 1, F16 otherwise (as convert_hf_to_gguf.py writes them).
 */
export function mixtureTypes(
  tensors: readonly MixtureTensor[],
  model: MixtureModel,
  o: MixtureOptions,
): Map<string, MixedTensor> {
  const chosen = chooseMixture(tensors, model, o);
  return new Map(
    tensors.map((t) => {
      const c = chosen.get(t.name)!;
      if (c.type === undefined) {
        const rank = t.ne.filter((n) => n > 1).length;
        return [t.name, { type: rank <= 1 ? 'F32' : 'F16' }];
      }
      if (c.type !== 'F16' && c.type !== 'F32' && !isQuantType(c.type)) {
        throw new QuantdError('FEATURE_UNSUPPORTED', {
          detail: `${o.fileType.name} gives tensor ${t.name} the type ${c.type}, which quantd does not write yet (it writes ${WRITABLE.join(', ')})`,
        });
      }
      return [t.name, { type: c.type, ...(c.note !== undefined && { note: c.note }) }];
    }),
  );
}

/** The mixture's decisions for a model: each tensor's type, its importance weights, the metadata. */
export interface MixturePlan extends FittedMatrix {
  readonly types: ReadonlyMap<string, MixedTensor>;
}

/**
 * Reads the importance matrix (if any), chooses each tensor's type (the rules differ with a
 * matrix) and fits the matrix to the tensors as llama-quantize does (gguf-imatrix.ts).
 */
export async function planMixture(
  tensors: readonly MixtureTensor[],
  model: MixtureModel,
  mixture: GgufMixture,
  folder: string,
): Promise<MixturePlan> {
  if (mixture.imatrixPath === undefined) {
    return { types: mixtureTypes(tensors, model, mixture), weights: new Map(), kvs: [] };
  }
  const path = resolve(folder, mixture.imatrixPath);
  const matrix = await readImportanceMatrix(path);
  const types = mixtureTypes(tensors, model, { ...mixture, hasImatrix: matrix.entries.size > 0 });
  return { types, ...fitImportanceMatrix(matrix, path, tensors, (name) => types.get(name)!.type) };
}
