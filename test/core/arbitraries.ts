/** fast-check generators for random quantization cases (spec options + shape + float32 values). */
import fc from 'fast-check';

import type { SpecOptions } from '../../src/core/spec.js';

export const INT_QDTYPES = ['int8', 'uint8', 'int16', 'int32', 'int4', 'uint4', 'int2', 'uint2'] as const;
export const FP8_QDTYPES = ['float8_e4m3fn', 'float8_e5m2'] as const;
export type IntQDType = (typeof INT_QDTYPES)[number];
export type AnyQDType = IntQDType | (typeof FP8_QDTYPES)[number];
export type SchemeName = 'per_tensor' | 'per_channel' | 'per_token' | 'per_group';

/** Full ranges written out from docs/numerics.md (not read from src). */
export const RANGE: Readonly<Record<AnyQDType, readonly [number, number]>> = {
  int8: [-128, 127],
  uint8: [0, 255],
  int16: [-32768, 32767],
  int32: [-2147483648, 2147483647],
  int4: [-8, 7],
  uint4: [0, 15],
  int2: [-2, 1],
  uint2: [0, 3],
  float8_e4m3fn: [-448, 448],
  float8_e5m2: [-57344, 57344],
};

export const BITS: Readonly<Record<AnyQDType, number>> = {
  int8: 8,
  uint8: 8,
  int16: 16,
  int32: 32,
  int4: 4,
  uint4: 4,
  int2: 2,
  uint2: 2,
  float8_e4m3fn: 8,
  float8_e5m2: 8,
};

export interface QuantCase {
  readonly qdtype: AnyQDType;
  readonly scheme: SchemeName;
  readonly mode: 'affine' | 'symmetric' | 'float_qparams';
  readonly shape: number[];
  readonly axis: number | undefined;
  readonly groupSize: number | undefined;
  readonly quantMin: number | undefined;
  readonly quantMax: number | undefined;
  readonly x: Float32Array;
}

export function optionsOf(c: QuantCase): SpecOptions {
  return {
    qdtype: c.qdtype,
    scheme: c.scheme,
    mode: c.mode,
    axis: c.axis,
    group_size: c.groupSize,
    quant_min: c.quantMin,
    quant_max: c.quantMax,
  };
}

function modes(qdtype: AnyQDType, scheme: SchemeName): QuantCase['mode'][] {
  if (qdtype.startsWith('float8')) return ['symmetric'];
  const signed = RANGE[qdtype][0] < 0;
  switch (scheme) {
    case 'per_tensor':
    case 'per_group':
      return ['affine', 'symmetric'];
    case 'per_channel':
      return ['affine', 'symmetric', 'float_qparams'];
    case 'per_token':
      return signed ? ['affine', 'symmetric'] : ['affine'];
  }
}

const dims = (minRank: number, maxRank: number) =>
  fc.array(fc.integer({ min: 1, max: 5 }), { minLength: minRank, maxLength: maxRank });

interface ShapePart {
  shape: number[];
  axis: number | undefined;
  groupSize: number | undefined;
}

function shapeFor(scheme: SchemeName): fc.Arbitrary<ShapePart> {
  switch (scheme) {
    case 'per_tensor':
      return dims(0, 4).map((shape) => ({ shape, axis: undefined, groupSize: undefined }));
    case 'per_token':
      return dims(1, 4).map((shape) => ({ shape, axis: undefined, groupSize: undefined }));
    case 'per_channel':
      return dims(1, 4).chain((shape) =>
        fc
          .integer({ min: -shape.length, max: shape.length - 1 })
          .map((axis) => ({ shape, axis, groupSize: undefined })),
      );
    case 'per_group':
      // [N, groups · g]; sometimes a group_size wider than K, which torch shrinks to K
      return fc
        .record({
          n: fc.integer({ min: 1, max: 4 }),
          groups: fc.integer({ min: 1, max: 4 }),
          g: fc.integer({ min: 2, max: 8 }),
          wide: fc.boolean(),
        })
        .map(({ n, groups, g, wide }) => ({
          shape: [n, groups * g],
          axis: undefined,
          groupSize: wide && groups === 1 ? g + 1 + n : g,
        }));
  }
}

/** A narrowed [quant_min, quant_max] inside the type's range, or the full range (undefined). */
function rangeFor(qdtype: AnyQDType): fc.Arbitrary<[number | undefined, number | undefined]> {
  const [lo, hi] = RANGE[qdtype];
  // int32: narrow most of the time, near zero, so float32 holds every code exactly
  const inner =
    qdtype === 'int32'
      ? fc.tuple(fc.integer({ min: -(2 ** 20), max: 2 ** 20 }), fc.integer({ min: -(2 ** 20), max: 2 ** 20 }))
      : fc.tuple(fc.integer({ min: lo, max: hi }), fc.integer({ min: lo, max: hi }));
  const narrowed = inner
    .filter(([a, b]) => a !== b)
    .map(([a, b]): [number, number] => [Math.min(a, b), Math.max(a, b)]);
  const full = fc.constant<[undefined, undefined]>([undefined, undefined]);
  return qdtype === 'int32'
    ? fc.oneof({ arbitrary: narrowed, weight: 3 }, { arbitrary: full, weight: 1 })
    : fc.oneof({ arbitrary: narrowed, weight: 1 }, { arbitrary: full, weight: 3 });
}

/**
 * float32 values of varied magnitude: a per-tensor scale 2^k (k in -20..30), elements drawn
 * uniformly over float32 bit patterns below it, on a coarse grid, or exactly zero, and the whole
 * tensor sometimes shifted to one sign (so zero points clamp).
 */
export function valuesOf(numel: number): fc.Arbitrary<Float32Array> {
  return fc
    .record({ k: fc.integer({ min: -20, max: 30 }), shift: fc.constantFrom(0, 0, 1, -1) })
    .chain(({ k, shift }) => {
      const m = 2 ** k;
      const element = fc.oneof(
        fc.float({ min: Math.fround(-m), max: Math.fround(m), noNaN: true, noDefaultInfinity: true }),
        fc.integer({ min: -256, max: 256 }).map((i) => (i / 256) * m),
        fc.constantFrom(0, -0),
      );
      return fc
        .array(element, { minLength: numel, maxLength: numel })
        .map((xs) => Float32Array.from(xs, (v) => (shift === 0 ? v : Math.fround(v + shift * m))));
    });
}

/**
 * Qparams are only chosen for a range that includes 0 (torch validate_qmin_qmax), and per_token
 * symmetric divides by quant_max, which must then be positive; ranges outside that are refused
 * (QUANT_RANGE_INVALID) and covered by dedicated tests.
 */
function choosableRange(c: QuantCase): boolean {
  const qmin = c.quantMin ?? RANGE[c.qdtype][0];
  const qmax = c.quantMax ?? RANGE[c.qdtype][1];
  if (!(qmin <= 0 && 0 <= qmax)) return false;
  return !(c.scheme === 'per_token' && c.mode === 'symmetric' && qmax <= 0);
}

/** Random (spec, shape, values) for the given qdtypes, over every scheme. */
export function quantCase(qdtypes: readonly AnyQDType[]): fc.Arbitrary<QuantCase> {
  return fc
    .record({
      qdtype: fc.constantFrom(...qdtypes),
      scheme: fc.constantFrom<SchemeName>('per_tensor', 'per_channel', 'per_token', 'per_group'),
    })
    .chain(({ qdtype, scheme }) =>
      fc
        .record({
          mode: fc.constantFrom(...modes(qdtype, scheme)),
          shapePart: shapeFor(scheme),
          range: rangeFor(qdtype),
        })
        .chain(({ mode, shapePart, range }) =>
          valuesOf(shapePart.shape.reduce((p, d) => p * d, 1)).map((x): QuantCase => ({
            qdtype,
            scheme,
            mode,
            shape: shapePart.shape,
            axis: shapePart.axis,
            groupSize: shapePart.groupSize,
            quantMin: range[0],
            quantMax: range[1],
            x,
          })),
        ),
    )
    .filter(choosableRange);
}
