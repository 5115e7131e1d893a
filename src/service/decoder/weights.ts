/**
 * The ways a decoder graph reaches its weights (./graph.ts DecoderWeights):
 *  - `initializerWeights`: the checkpoint's tensors as initializers under their own names, a
 *    16-bit one cast to float32, a linear weight transposed for MatMul (ONNX Runtime folds both
 *    when it loads the model), a quantized one as the MatMulNBits node of its packed tensors.
 */
import type { StDType } from '../../core/dtypes.js';
import { ONNX_DTYPE } from '../../format/onnx.js';
import type { GraphBuilder } from '../../format/onnx-graph.js';
import { MS_DOMAIN, type DecoderWeights } from './graph.js';

/** A linear weight stored as MatMulNBits tensors (the onnx layout's names). */
export interface NBitsWeight {
  readonly q: string;
  readonly scales: string;
  readonly zeroPoints: string | null;
  readonly K: number;
  readonly N: number;
  readonly bits: number;
  readonly blockSize: number;
  readonly accuracyLevel?: number;
}

export function initializerWeights(
  dtypes: ReadonlyMap<string, StDType>,
  nbits: ReadonlyMap<string, NBitsWeight> = new Map(),
): DecoderWeights {
  const floats = new Map<string, string>();
  const transposed = new Map<string, string>();
  const float = (g: GraphBuilder, name: string): string => {
    let value = floats.get(name);
    if (value === undefined) {
      const dtype = dtypes.get(name);
      value = dtype === 'F32' ? name : g.op('Cast', [name], `${name}/Cast`, { to: ONNX_DTYPE.FLOAT });
      floats.set(name, value);
    }
    return value;
  };
  return {
    has: (name) => dtypes.has(name) || nbits.has(name),
    float,
    linear(g, x, name) {
      const packed = nbits.get(name);
      if (packed !== undefined) {
        return g.op(
          'MatMulNBits',
          [x, packed.q, packed.scales, ...(packed.zeroPoints === null ? [] : [packed.zeroPoints])],
          `${name}/MatMulNBits`,
          {
            K: packed.K,
            N: packed.N,
            bits: packed.bits,
            block_size: packed.blockSize,
            ...(packed.accuracyLevel === undefined ? {} : { accuracy_level: packed.accuracyLevel }),
          },
          MS_DOMAIN,
        );
      }
      let t = transposed.get(name);
      if (t === undefined) {
        t = g.op('Transpose', [float(g, name)], `${name}/Transpose`, { perm: [1, 0] });
        transposed.set(name, t);
      }
      return g.op('MatMul', [x, t], `${name}/MatMul`);
    },
  };
}

/**
 * Weights as float32 graph inputs named after the tensors (`shapes` gives each one's shape), fed
 * at every run: the block graphs of calibration run every layer, with float or quantized
 * weights, in one session.
 */
export function inputWeights(shapes: ReadonlyMap<string, readonly number[]>): DecoderWeights {
  const inputs = new Map<string, string>();
  const transposed = new Map<string, string>();
  const float = (g: GraphBuilder, name: string): string => {
    let value = inputs.get(name);
    if (value === undefined) {
      value = g.input({ name, elemType: ONNX_DTYPE.FLOAT, dims: [...shapes.get(name)!] });
      inputs.set(name, value);
    }
    return value;
  };
  return {
    has: (name) => shapes.has(name),
    float,
    linear(g, x, name) {
      let t = transposed.get(name);
      if (t === undefined) {
        t = g.op('Transpose', [float(g, name)], `${name}/Transpose`, { perm: [1, 0] });
        transposed.set(name, t);
      }
      return g.op('MatMul', [x, t], `${name}/MatMul`);
    },
  };
}
