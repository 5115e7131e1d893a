/**
 * Kernel parity (fast-check; a failure prints the seed and the shrunk case): for every kernel
 * variant — native AVX-512 / AVX2 / scalar, wasm SIMD128 / scalar — KernelCompute gives exactly
 * the reference's (src/core/ops.ts) bytes: codes, scales and zero points (typed-array type and
 * bits), dequantized outputs (float32 / float16 / bfloat16), fake-quantized outputs and masks,
 * chosen qparams — or throws exactly the reference's error (code and message).
 *
 * Inputs: random specs of every qdtype, scheme and mode (test/core/arbitraries.ts), with chosen
 * and with given qparams (some invalid), float32 / float16 / bfloat16 data placed at odd byte
 * offsets inside larger buffers; lengths 1..129 (2·(4·16)+1: every tail of the AVX-512 loops);
 * per_channel with inner 1 and 64..129 channels; NaN and ±Infinity at random positions;
 * saturation (±1e30 and FLOAT32_MAX with small scales); exact halves.
 *
 * Every property runs on three executors: inline (one range per op); a splitting executor that
 * runs tasks inline but reports parallelism 3 with minPart 64, so tensors of a few hundred
 * elements are cut into 3 ranges (run last range first) and merged: the merge is bit-identical;
 * and the same with windows of 192 elements, so float16 / bfloat16 tensors of a few hundred
 * elements are converted and worked window by window (per_group / per_token: windows of 64 whole
 * units), each window cut into ranges.
 */
import { readFileSync } from 'node:fs';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  chooseTensorQParams,
  dequantizeTensor,
  fakeQuantizeTensor,
  fp8DecodeTable,
  fromFloat32,
  hasFloatZeroPoint,
  parseSpec,
  planLayout,
  quantizedByteLength,
  quantizeTensor,
  QDTYPE_INFO,
  FLOAT_DTYPES,
  type FloatDType,
  type FloatInput,
  type Fp8Format,
  type Layout,
  type QParams,
  type QuantSpec,
  type QuantizedInput,
} from '../../src/core/index.js';
import {
  CODES,
  InlineExecutor,
  KernelCompute,
  loadNative,
  type KernelModule,
} from '../../src/kernels/index.js';
import {
  FP8_QDTYPES,
  INT_QDTYPES,
  RANGE,
  optionsOf,
  quantCase,
  valuesOf,
  type AnyQDType,
  type QuantCase,
  type SchemeName,
} from '../core/arbitraries.js';
import {
  expectSameBytes,
  expectSameOutcome,
  expectSameQParams,
  expectSameTyped,
  fitFloat16,
  parityVariants,
  settle,
  SplittingExecutor,
} from './helpers.js';

const NAME = 'model.layers.0.mlp.weight';
const ALL_QDTYPES: readonly AnyQDType[] = [...INT_QDTYPES, ...FP8_QDTYPES];
const FLOAT32_MAX = 3.4028234663852886e38;

interface Setup {
  readonly compute: KernelCompute;
  readonly splitter: SplittingExecutor | null;
  /** Whether float16 / bfloat16 tensors of a few hundred elements are worked in several windows. */
  readonly windowed: boolean;
}

type Executors = Array<[string, (m: KernelModule) => Setup]>;
const EXECUTORS: Executors = [
  [
    'inline',
    (m) => ({
      compute: new KernelCompute(new InlineExecutor(m), m.backend),
      splitter: null,
      windowed: false,
    }),
  ],
  [
    'split into 3 ranges',
    (m) => {
      const splitter = new SplittingExecutor(m);
      return { compute: new KernelCompute(splitter, m.backend, { minPart: 64 }), splitter, windowed: false };
    },
  ],
  [
    'windows of 192 elements, split into ranges',
    (m) => {
      const splitter = new SplittingExecutor(m);
      const options = { minPart: 64, windowElements: 192 };
      return { compute: new KernelCompute(splitter, m.backend, options), splitter, windowed: true };
    },
  ],
];

// ---------------------------------------------------------------------------------------------
// Cases: a QuantCase (spec options, shape, float32 values) plus how it is presented.

interface Raw {
  readonly c: QuantCase;
  readonly inDType: FloatDType;
  /** Byte offset of the data inside a larger buffer (odd offsets: unaligned). */
  readonly offset: number;
  readonly given: QParams | undefined;
  /** Random codes (storage bytes) to dequantize with the given or chosen qparams. */
  readonly codes: Uint8Array;
}

const specOf = (c: QuantCase): QuantSpec => parseSpec(optionsOf(c));
const layoutOf = (c: QuantCase, spec = specOf(c)): Layout => planLayout(NAME, c.shape, spec);
const numelOf = (shape: readonly number[]): number => shape.reduce((p, d) => p * d, 1);

/** `bytes` at `offset` in a larger buffer whose other bytes are 0xff (NaN as float32 / float16). */
function placed(bytes: Uint8Array, offset: number): Uint8Array {
  const buffer = new ArrayBuffer(offset + bytes.length + 8);
  new Uint8Array(buffer).fill(0xff);
  const view = new Uint8Array(buffer, offset, bytes.length);
  view.set(bytes);
  return view;
}

function encode(x: Float32Array, dtype: FloatDType): Uint8Array {
  return dtype === 'float32' ? new Uint8Array(Float32Array.from(x).buffer) : fromFloat32(x, dtype);
}

const inDTypes = fc.constantFrom<FloatDType>('float32', 'float16', 'bfloat16');
const anyOffset = fc.constantFrom(0, 0, 1, 2, 3, 5, 7);
const oddOffset = fc.constantFrom(1, 3, 5, 7);

function clampScale(s: number): number {
  return Math.fround(Math.min(Math.max(s, 1e-37), 1e37));
}

/** Given qparams for the case: valid, or (when `invalid`) sometimes with one bad entry. */
function givenFor(c: QuantCase, invalid: boolean): fc.Arbitrary<QParams> {
  const spec = specOf(c);
  const n = layoutOf(c, spec).channels;
  const { quantMin: qmin, quantMax: qmax } = spec;
  let amax = 0;
  for (const v of c.x) if (Number.isFinite(v)) amax = Math.max(amax, Math.abs(v));
  const unit = amax > 0 ? amax / Math.max(1, (qmax - qmin) / 2) : 1;
  const scale = fc.oneof(
    fc.double({ min: 0.25, max: 4, noNaN: true }).map((f) => clampScale(unit * f)),
    fc.integer({ min: -30, max: 30 }).map((e) => 2 ** e),
    fc.float({ min: Math.fround(1e-30), max: Math.fround(1e30), noNaN: true }).map(clampScale),
  );
  const floatZp = hasFloatZeroPoint(spec);
  const zeroPoint: fc.Arbitrary<number> = QDTYPE_INFO[spec.qdtype].float8
    ? fc.constant(0)
    : floatZp
      ? fc.oneof(
          fc.integer({ min: qmin, max: qmax }),
          fc.integer({ min: 2 * qmin, max: 2 * qmax }).map((k) => k / 2),
          fc.double({ min: qmin, max: qmax, noNaN: true }).map(Math.fround),
        )
      : fc.integer({ min: qmin, max: qmax });
  const valid = fc
    .record({
      scale: fc.array(scale, { minLength: n, maxLength: n }),
      zeroPoint: fc.array(zeroPoint, { minLength: n, maxLength: n }),
    })
    .map(({ scale, zeroPoint }) => ({
      scale: Float32Array.from(scale),
      zeroPoint: floatZp ? Float32Array.from(zeroPoint) : Int32Array.from(zeroPoint),
    }));
  if (!invalid) return valid;
  const broken = fc
    .tuple(
      valid,
      fc.nat(),
      fc.constantFrom(
        ['scale', 0],
        ['scale', -1],
        ['scale', NaN],
        ['scale', Infinity],
        ['scale', 1e-40],
        ['zero_point', qmin - 1],
        ['zero_point', qmax + 1],
        ['zero_point', NaN],
        ['zero_point', Infinity],
        ['zero_point', 0.5],
      ),
    )
    .map(([qp, at, [which, value]]) => {
      const target = which === 'scale' ? qp.scale : qp.zeroPoint;
      target[at % n] = value as number;
      return qp;
    });
  return fc.oneof({ arbitrary: valid, weight: 4 }, { arbitrary: broken, weight: 1 });
}

function rawOf(
  cases: fc.Arbitrary<QuantCase>,
  given: 'none' | 'valid' | 'maybe invalid',
  offsets = anyOffset,
  dtypes = inDTypes,
): fc.Arbitrary<Raw> {
  return fc.tuple(cases, dtypes).chain(([c0, inDType]) => {
    const c = inDType === 'float16' ? { ...c0, x: fitFloat16(c0.x) } : c0;
    const bytes = quantizedByteLength(c.qdtype, numelOf(c.shape));
    return fc.record({
      c: fc.constant(c),
      inDType: fc.constant(inDType),
      offset: offsets,
      given: given === 'none' ? fc.constant(undefined) : givenFor(c, given === 'maybe invalid'),
      codes: fc.uint8Array({ minLength: bytes, maxLength: bytes }),
    });
  });
}

// ---------------------------------------------------------------------------------------------
// The check: every op, on the kernels and on the reference.

const ELEMENT_BYTES: Record<FloatDType, number> = { float32: 4, float16: 2, bfloat16: 2 };

async function checkParity(
  compute: KernelCompute,
  r: Raw,
  outs: readonly FloatDType[] = FLOAT_DTYPES,
): Promise<void> {
  const spec = specOf(r.c);
  const layout = layoutOf(r.c, spec);
  const input: FloatInput = {
    name: NAME,
    dtype: r.inDType,
    data: placed(encode(r.c.x, r.inDType), r.offset),
    layout,
  };
  const given = r.given;

  expectSameOutcome(
    'chooseQParams',
    await settle(() => compute.chooseQParams(input, spec, given)),
    await settle(() => chooseTensorQParams(input, spec, given)),
    (k, ref) => expectSameQParams('chooseQParams', k, ref),
  );

  const reference = await settle(() => quantizeTensor(input, spec, given));
  expectSameOutcome(
    'quantize',
    await settle(() => compute.quantize(input, spec, given)),
    reference,
    (k, ref) => {
      expectSameTyped('quantize: codes', k.data, ref.data);
      expectSameQParams('quantize', k.qparams, ref.qparams);
    },
  );

  const toDequantize: Array<[string, Uint8Array, QParams]> = [];
  if (reference.ok)
    toDequantize.push(['its codes', placed(reference.value.data, r.offset), reference.value.qparams]);
  const qparams = given ?? (reference.ok ? reference.value.qparams : undefined);
  if (qparams) toDequantize.push(['random codes', placed(r.codes, r.offset), qparams]);
  for (const [what, data, qp] of toDequantize) {
    const q: QuantizedInput = { name: NAME, data, spec, layout, qparams: qp };
    for (const out of outs) {
      expectSameOutcome(
        `dequantize ${what} to ${out}`,
        await settle(() => compute.dequantize(q, out)),
        await settle(() => dequantizeTensor(q, out)),
        (k, ref) => expectSameBytes(`dequantize ${what} to ${out}`, k, ref, ELEMENT_BYTES[out]),
      );
    }
  }

  for (const out of outs) {
    expectSameOutcome(
      `fakeQuantize to ${out}`,
      await settle(() => compute.fakeQuantize(input, spec, out, given)),
      await settle(() => fakeQuantizeTensor(input, spec, out, given)),
      (k, ref) => {
        expectSameBytes(`fakeQuantize to ${out}: out`, k.data, ref.data, ELEMENT_BYTES[out]);
        expectSameTyped(`fakeQuantize to ${out}: mask`, k.mask, ref.mask);
        expectSameQParams(`fakeQuantize to ${out}`, k.qparams, ref.qparams);
      },
    );
  }
}

// ---------------------------------------------------------------------------------------------
// Shapes beyond the arbitraries' (which stay under a few hundred elements).

/** The modes a qdtype and scheme allow (as arbitraries.ts draws them). */
function modesOf(qdtype: AnyQDType, scheme: SchemeName): QuantCase['mode'][] {
  if (qdtype.startsWith('float8')) return ['symmetric'];
  const signed = RANGE[qdtype][0] < 0;
  if (scheme === 'per_channel') return ['affine', 'symmetric', 'float_qparams'];
  if (scheme === 'per_token') return signed ? ['affine', 'symmetric'] : ['affine'];
  return ['affine', 'symmetric'];
}

interface ShapePart {
  readonly shape: number[];
  readonly axis: number | undefined;
  readonly groupSize: number | undefined;
}

/** A few hundred to a few thousand elements, enough units for 3 ranges of 64 (and 64 units). */
function bigShape(scheme: SchemeName): fc.Arbitrary<ShapePart> {
  const plain = (shape: number[]): ShapePart => ({ shape, axis: undefined, groupSize: undefined });
  switch (scheme) {
    case 'per_tensor':
      return fc.oneof(
        fc.integer({ min: 192, max: 1500 }).map((n) => plain([n])),
        fc
          .tuple(fc.integer({ min: 8, max: 40 }), fc.integer({ min: 24, max: 40 }))
          .map(([a, b]) => plain([a, b])),
      );
    case 'per_channel':
      return fc
        .tuple(
          fc.integer({ min: 1, max: 6 }),
          fc.integer({ min: 1, max: 130 }),
          fc.integer({ min: 1, max: 6 }),
        )
        .filter(([a, b, c]) => a * b * c >= 192)
        .chain(([a, b, c]) =>
          fc.integer({ min: -3, max: 2 }).map((axis) => ({ shape: [a, b, c], axis, groupSize: undefined })),
        );
    case 'per_token':
      return fc.oneof(
        fc
          .tuple(fc.integer({ min: 130, max: 320 }), fc.integer({ min: 1, max: 5 }))
          .map(([r, k]) => plain([r, k])),
        fc
          .tuple(fc.integer({ min: 65, max: 130 }), fc.integer({ min: 1, max: 9 }))
          .map(([r, k]) => plain([2, r, k])),
      );
    case 'per_group':
      return fc
        .record({
          g: fc.integer({ min: 2, max: 8 }),
          perRow: fc.integer({ min: 1, max: 4 }),
          extraRows: fc.integer({ min: 0, max: 40 }),
        })
        .map(({ g, perRow, extraRows }) => ({
          shape: [Math.ceil(192 / perRow) + extraRows, perRow * g],
          axis: undefined,
          groupSize: g,
        }));
  }
}

const smallCases = quantCase(ALL_QDTYPES);
const bigCases = smallCases.chain((c) =>
  bigShape(c.scheme).chain((part) =>
    valuesOf(numelOf(part.shape)).map((x): QuantCase => ({ ...c, ...part, x })),
  ),
);

/** Special float32 bit patterns: quiet and signalling NaNs of both signs, ±Infinity. */
const SPECIAL_BITS = [0x7fc00000, 0xffc00000, 0x7f800001, 0xffffffff, 0x7f800000, 0xff800000];

const withSpecials = fc
  .tuple(
    fc.oneof(smallCases, bigCases),
    fc.array(fc.tuple(fc.nat(), fc.constantFrom(...SPECIAL_BITS)), { minLength: 1, maxLength: 3 }),
  )
  .map(([c, specials]): QuantCase => {
    const x = Float32Array.from(c.x);
    const bits = new Uint32Array(x.buffer);
    for (const [at, pattern] of specials) if (x.length > 0) bits[at % x.length] = pattern;
    return { ...c, x };
  });

/** Values at or near the float32 limits, at random positions. */
const saturating = fc
  .tuple(
    fc.oneof(smallCases, bigCases),
    fc.array(fc.tuple(fc.nat(), fc.constantFrom(1e30, -1e30, FLOAT32_MAX, -FLOAT32_MAX, 3e38, -2e38)), {
      minLength: 1,
      maxLength: 20,
    }),
  )
  .map(([c, huge]): QuantCase => {
    const x = Float32Array.from(c.x);
    for (const [at, v] of huge) if (x.length > 0) x[at % x.length] = v;
    return { ...c, x };
  });

/** Small given scales: x · (1 / scale) overflows to ±Infinity or far beyond every code range. */
function smallScales(c: QuantCase): fc.Arbitrary<QParams> {
  const spec = specOf(c);
  const n = layoutOf(c, spec).channels;
  const scale = fc.oneof(
    fc.constantFrom(1e-3, 1e-10, 1e-30, 2 ** -126, 1e-37),
    fc.float({ min: Math.fround(1e-30), max: Math.fround(1e-3), noNaN: true }),
  );
  return givenFor(c, false).chain((qp) =>
    fc.array(scale, { minLength: n, maxLength: n }).map((s) => ({ ...qp, scale: Float32Array.from(s) })),
  );
}

/**
 * Values whose scaled value (plus zero point where it is added first) is exactly halfway between
 * two codes: k + 1/2 for integer codes (scale 2^e, so x · inv is exact), the midpoint of two
 * adjacent fp8 values. Ties round to even.
 */
const halves: fc.Arbitrary<Raw> = smallCases.chain((c0) => {
  const spec = specOf(c0);
  const layout = layoutOf(c0, spec);
  const { quantMin: qmin, quantMax: qmax } = spec;
  const n = layout.channels;
  const float8 = QDTYPE_INFO[spec.qdtype].float8;
  const floatZp = hasFloatZeroPoint(spec);
  const lo = Math.max(qmin, -(2 ** 20));
  const hi = Math.min(qmax, 2 ** 20);
  const zeroPoint = float8
    ? fc.constant(0)
    : floatZp
      ? fc.integer({ min: 2 * lo, max: 2 * hi }).map((k) => k / 2)
      : fc.integer({ min: lo, max: hi });
  const fp8 = float8 ? fp8DecodeTable(spec.qdtype as Fp8Format) : null;
  return fc
    .record({
      exps: fc.array(fc.integer({ min: -8, max: 8 }), { minLength: n, maxLength: n }),
      zps: fc.array(zeroPoint, { minLength: n, maxLength: n }),
      picks: fc.array(fc.tuple(fc.nat(), fc.boolean()), { minLength: layout.numel, maxLength: layout.numel }),
      offset: anyOffset,
    })
    .map(({ exps, zps, picks, offset }): Raw => {
      const scale = Float32Array.from(exps, (e) => 2 ** e);
      const x = new Float32Array(layout.numel);
      for (let i = 0; i < layout.numel; i++) {
        const u = Math.floor(i / layout.inner) % layout.channels;
        const [pick, negative] = picks[i]!;
        let t: number;
        if (fp8) {
          // midpoint of codes k and k + 1 (positive, finite: 0..0x7d for e4m3fn, 0..0x7a for e5m2)
          const top = spec.qdtype === 'float8_e4m3fn' ? 0x7d : 0x7a;
          const k = pick % (top + 1);
          t = ((fp8[k]! + fp8[k + 1]!) / 2) * (negative ? -1 : 1);
        } else {
          // round(t) + zp (or round(t + zp)) lands next to [qmin, qmax], t + zp (or t) a half
          const span = Math.min(hi - lo + 6, 2 ** 16);
          const code = lo - 3 + (pick % span) + 0.5;
          t = code - zps[u]!;
        }
        x[i] = Math.fround(t * scale[u]!);
      }
      const qp: QParams = {
        scale,
        zeroPoint: floatZp ? Float32Array.from(zps) : Int32Array.from(zps),
      };
      const codes = new Uint8Array(quantizedByteLength(spec.qdtype, layout.numel)).fill(0x5a);
      return { c: { ...c0, x }, inDType: 'float32', offset, given: qp, codes };
    });
});

/**
 * Every length 1..129 = 2·(4·VL)+1 for VL = 16 (AVX-512 float32 lanes, 4× unrolled): per_tensor
 * [n] (also with the extreme in the last element, which the loop tails must see), per_token
 * [2, n], per_group [2, 2n] with group size n, and per_channel [outer, C] along axis 1 (inner 1)
 * for C = 64..129; each with chosen and with given qparams.
 */
async function checkLengths(
  compute: KernelCompute,
  qdtypes: 'all' | 'random',
  numRuns: number,
): Promise<void> {
  const arb = fc.record({
    qdtype: qdtypes === 'all' ? fc.constant(undefined) : fc.constantFrom(...ALL_QDTYPES),
    modePick: fc.nat(),
    inDType: inDTypes,
    offset: anyOffset,
    x: valuesOf(4 * 129),
    out: fc.constantFrom(...FLOAT_DTYPES),
    outer: fc.integer({ min: 1, max: 3 }),
  });
  await fc.assert(
    fc.asyncProperty(arb, async ({ qdtype: picked, modePick, inDType, offset, x: x0, out, outer }) => {
      const x = inDType === 'float16' ? fitFloat16(x0) : x0;
      let amax = 1;
      for (const v of x) amax = Math.max(amax, Math.abs(v));
      for (const qdtype of picked ? [picked] : ALL_QDTYPES) {
        const run = async (scheme: SchemeName, part: ShapePart, values: Float32Array): Promise<void> => {
          const modes = modesOf(qdtype, scheme);
          const c: QuantCase = {
            qdtype,
            scheme,
            mode: modes[modePick % modes.length]!,
            ...part,
            quantMin: undefined,
            quantMax: undefined,
            x: values,
          };
          const spec = specOf(c);
          const n = layoutOf(c, spec).channels;
          const { quantMin: qmin, quantMax: qmax } = spec;
          const zp = QDTYPE_INFO[qdtype].float8 ? 0 : Math.round((qmin + qmax) / 2);
          const given: QParams = {
            scale: new Float32Array(n).fill(clampScale(amax / ((qmax - qmin) / 2))),
            zeroPoint: hasFloatZeroPoint(spec)
              ? new Float32Array(n).fill(zp + 0.25)
              : new Int32Array(n).fill(zp),
          };
          const codes = encode(values, 'float32').subarray(0, quantizedByteLength(qdtype, values.length));
          try {
            await checkParity(compute, { c, inDType, offset, given: undefined, codes }, [out]);
            await checkParity(compute, { c, inDType, offset, given, codes }, [out]);
          } catch (err) {
            throw new Error(
              `${qdtype} ${scheme} ${c.mode} shape [${c.shape.join(', ')}]: ${(err as Error).message}`,
            );
          }
        };
        const plain = (shape: number[], groupSize?: number): ShapePart => ({
          shape,
          axis: undefined,
          groupSize,
        });
        for (let n = 1; n <= 129; n++) {
          const prefix = x.subarray(0, n);
          await run('per_tensor', plain([n]), prefix);
          const tail = Float32Array.from(prefix);
          tail[n - 1] = (n % 2 ? 1 : -1) * (1.5 * amax + 1);
          await run('per_tensor', plain([n]), tail);
          await run('per_token', plain([2, n]), x.subarray(0, 2 * n));
          if (n >= 2) await run('per_group', plain([2, 2 * n], n), x.subarray(0, 4 * n));
        }
        for (let channels = 64; channels <= 129; channels++) {
          const part = { shape: [outer, channels], axis: channels % 2 ? 1 : -1, groupSize: undefined };
          await run('per_channel', part, x.subarray(0, outer * channels));
        }
      }
    }),
    { numRuns },
  );
}

// ---------------------------------------------------------------------------------------------

const variants = parityVariants();

describe('native ISA selection', () => {
  const flags = (() => {
    try {
      const text = readFileSync('/proc/cpuinfo', 'utf8');
      return new Set(/^flags\s*:(.*)$/m.exec(text)?.[1]?.trim().split(/\s+/) ?? []);
    } catch {
      return new Set<string>();
    }
  })();
  const has = (...names: string[]): boolean => names.every((f) => flags.has(f));

  it('every ISA this CPU has is a variant under test (the addon must be built)', () => {
    const names = variants.map(([name]) => name);
    const expected = ['native scalar', 'wasm simd128', 'wasm scalar'];
    if (has('avx2', 'f16c')) expected.push('native avx2');
    if (has('avx512f', 'avx512bw', 'avx512vl', 'avx512dq')) expected.push('native avx512');
    expect(names).toEqual(expect.arrayContaining(expected));
    for (const [name, m] of variants) expect(name).toBe(`${m.backend} ${m.isa}`);
  });

  /** Best of a few runs of a 1M-element int8 quantize on module `m`, in ms. */
  function timeQuantize(m: KernelModule, before: () => void = () => {}): number {
    const n = 1 << 20;
    const x = Float32Array.from({ length: n }, (_, i) => Math.sin(i) * 100);
    const out = new Uint8Array(n);
    const layout = { outer: 1, channels: 1, inner: n };
    const q = { codes: CODES.int8, qmin: -128, qmax: 127, addFirst: false, rejectInf: false };
    let best = Infinity;
    for (let r = 0; r < 7; r++) {
      before();
      const t0 = performance.now();
      expect(m.quantize(x, 0, layout, Float32Array.of(0.5), Float32Array.of(0), q, out)).toBe(0);
      best = Math.min(best, performance.now() - t0);
    }
    return best;
  }

  const simd = variants.filter(([name]) => name === 'native avx512' || name === 'native avx2');

  it.skipIf(simd.length === 0)(
    'each native SIMD variant under test runs its own ISA (faster than scalar)',
    () => {
      const scalar = variants.find(([name]) => name === 'native scalar')![1];
      const scalarMs = timeQuantize(scalar);
      for (const [name, m] of simd) {
        // scalar is selected before every run: a variant that did not select its own ISA would run scalar code
        const ms = timeQuantize(m, () => void loadNative('scalar'));
        expect(ms, `${name}: ${ms.toFixed(2)} ms, scalar ${scalarMs.toFixed(2)} ms`).toBeLessThan(
          scalarMs / 2,
        );
      }
    },
  );

  // Each module is bound to its own ISA's table (addon.c js_bind): loading another one in the
  // same thread must not change it.
  it.skipIf(simd.length === 0)(
    'a module from loadNative(isa) keeps its ISA after another loadNative()',
    () => {
      const isa = simd[0]![1].isa;
      const module = loadNative(isa);
      const scalar = loadNative('scalar'); // selects scalar for this thread
      const scalarMs = timeQuantize(scalar);
      const ms = timeQuantize(module);
      expect(module.isa).toBe(isa);
      expect(
        ms,
        `loadNative('${isa}') after loadNative('scalar'): ${ms} ms, scalar ${scalarMs} ms`,
      ).toBeLessThan(scalarMs / 2);
    },
  );
});

describe.each(variants)('%s', (_name, module) => {
  describe.each(EXECUTORS)('%s', (executor, make) => {
    const splitting = executor !== 'inline';
    it('random specs of every qdtype and scheme, chosen qparams, float32/float16/bfloat16 input', async () => {
      const { compute } = make(module);
      await fc.assert(
        fc.asyncProperty(rawOf(smallCases, 'none'), (r) => checkParity(compute, r)),
        { numRuns: 300 },
      );
    });

    it('random specs with given qparams (some invalid: the same errors)', async () => {
      const { compute } = make(module);
      await fc.assert(
        fc.asyncProperty(rawOf(smallCases, 'maybe invalid'), (r) => checkParity(compute, r)),
        { numRuns: 300 },
      );
    });

    it('tensors of a few hundred elements (split into 3 ranges, and windows, on the splitting executors)', async () => {
      const { compute, splitter, windowed } = make(module);
      await fc.assert(
        fc.asyncProperty(fc.oneof(rawOf(bigCases, 'none'), rawOf(bigCases, 'valid')), (r) =>
          checkParity(compute, r),
        ),
        { numRuns: 60 },
      );
      if (splitter) {
        // a window of 64 whole per_group / per_token units is mostly one range: not required
        const split = [...splitter.split].filter((op) => !windowed || op !== 'chooseQuantize');
        expect(split.sort()).toEqual(
          [
            'convert',
            'dequantize',
            'fakeQuantize',
            'minmax',
            'quantize',
            ...(windowed ? [] : ['chooseQuantize']),
          ].sort(),
        );
        // the ops that read float32 values ran on windows (after the first), and only when asked
        expect([...splitter.windowed].sort()).toEqual(
          windowed ? ['chooseQuantize', 'fakeQuantize', 'minmax', 'quantize'] : [],
        );
      }
    });

    it('unaligned input: data at odd byte offsets of a larger buffer', async () => {
      const { compute } = make(module);
      await fc.assert(
        fc.asyncProperty(
          fc.oneof(rawOf(smallCases, 'valid', oddOffset), rawOf(bigCases, 'none', oddOffset)),
          (r) => checkParity(compute, r),
        ),
        { numRuns: 60 },
      );
    });

    it('lengths 1..129 (per_tensor, per_token rows, per_group groups) and per_channel with inner 1, 64..129 channels', async () => {
      const { compute } = make(module);
      // inline: every qdtype on every length; split: a random qdtype (lengths < 192 are not split,
      // but per_channel [3, C] and per_group [2, 2n] are)
      await checkLengths(compute, splitting ? 'random' : 'all', splitting ? 3 : 1);
    });

    it('NaN and ±Infinity at random positions: the reference error, code and message', async () => {
      const { compute } = make(module);
      await fc.assert(
        fc.asyncProperty(fc.oneof(rawOf(withSpecials, 'none'), rawOf(withSpecials, 'valid')), (r) =>
          checkParity(compute, r),
        ),
        { numRuns: 250 },
      );
    });

    it('saturation: ±1e30 and FLOAT32_MAX, with chosen qparams and with small given scales', async () => {
      const { compute } = make(module);
      const arb = fc.oneof(
        rawOf(saturating, 'none'),
        rawOf(saturating, 'none').chain((r) => smallScales(r.c).map((given): Raw => ({ ...r, given }))),
      );
      await fc.assert(
        fc.asyncProperty(arb, (r) => checkParity(compute, r)),
        { numRuns: 250 },
      );
    });

    it('exact halves round to even', async () => {
      const { compute } = make(module);
      await fc.assert(
        fc.asyncProperty(halves, (r) => checkParity(compute, r)),
        { numRuns: 250 },
      );
    });
  });
});
