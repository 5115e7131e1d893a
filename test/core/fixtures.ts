/** Small builders shared by the core tests (they call src/core; the oracles live in oracles.ts). */
import type { FloatInput, QuantizedInput } from '../../src/core/ops.js';
import { planLayout, type Layout } from '../../src/core/layout.js';
import type { QParams } from '../../src/core/qparams.js';
import { parseSpec, type QuantSpec, type SpecOptions } from '../../src/core/spec.js';

export interface Setup {
  readonly spec: QuantSpec;
  readonly layout: Layout;
  readonly x: Float32Array;
}

export function setup(options: SpecOptions, shape: readonly number[], values: ArrayLike<number>): Setup {
  const spec = parseSpec(options);
  return { spec, layout: planLayout('t', shape, spec), x: Float32Array.from(values) };
}

export function qparams(scale: number[], zeroPoint: number[], floatZeroPoint = false): QParams {
  return {
    scale: Float32Array.from(scale),
    zeroPoint: floatZeroPoint ? Float32Array.from(zeroPoint) : Int32Array.from(zeroPoint),
  };
}

export function floatInput(name: string, x: Float32Array, layout: Layout): FloatInput {
  return { name, dtype: 'float32', data: new Uint8Array(x.buffer, x.byteOffset, x.byteLength), layout };
}

export function quantizedInput(
  name: string,
  data: Uint8Array,
  spec: QuantSpec,
  layout: Layout,
  qp: QParams,
): QuantizedInput {
  return { name, data, spec, layout, qparams: qp };
}

/** Little-endian float32 bytes back to numbers. */
export function float32sOf(bytes: Uint8Array): number[] {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const out: number[] = [];
  for (let i = 0; i + 4 <= bytes.byteLength; i += 4) out.push(view.getFloat32(i, true));
  return out;
}
