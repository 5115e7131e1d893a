/**
 * float16 / bfloat16 inputs read by the kernel tasks themselves (src/kernels/tasks.ts): widened
 * in registers by the one-pass choose+quantize loop (native/src/simd_choose.h: units of whole
 * SIMD blocks), or a chunk of 64 Ki elements at a time for the float32 kernels. Tensors of a few
 * hundred thousand elements cross several chunks (and chunk boundaries inside per_group units'
 * runs, per_channel channels and packed int4/int2 bytes); every kernel variant gives exactly the
 * reference's bytes, and the quality statistics equal those of the same values given as float32
 * (summed in the same order).
 */
import { describe, expect, it } from 'vitest';

import {
  chooseTensorQParams,
  fakeQuantizeTensor,
  fromFloat32,
  parseSpec,
  planLayout,
  quantizeTensor,
  toFloat32,
  type FloatDType,
  type FloatInput,
} from '../../src/core/index.js';
import { InlineExecutor, KernelCompute } from '../../src/kernels/index.js';
import { expectSameBytes, expectSameQParams, parityVariants } from './helpers.js';

/** xorshift values of mixed magnitudes, rounded to `dtype` (so float32 and half inputs agree). */
function values(n: number, dtype: FloatDType, seed = 7): Float32Array {
  const x = new Float32Array(n);
  let s = seed;
  for (let i = 0; i < n; i++) {
    s ^= s << 13;
    s ^= s >>> 17;
    s ^= s << 5;
    x[i] = ((s >>> 0) / 4294967296 - 0.5) * ((i % 13) + 1) * 40;
  }
  return toFloat32(fromFloat32(x, dtype), dtype);
}

function input(
  x: Float32Array,
  dtype: FloatDType,
  shape: number[],
  options: Record<string, unknown>,
): FloatInput {
  const spec = parseSpec(options);
  return { name: 'w', dtype, data: fromFloat32(x, dtype), layout: planLayout('w', shape, spec) };
}

// 3 × 65 536 + 1 000 elements: four chunks of a task, the last one partial
const ROWS = 200;
const COLS = 988;
// rows of whole SIMD blocks, for the one-pass loop (3 × 65 536 + 1 792 elements)
const BLOCKS: [number, number] = [194, 1024];
const CASES: Array<[string, Record<string, unknown>, [number, number]]> = [
  ['per_tensor int8', { qdtype: 'int8' }, [ROWS, COLS]],
  ['per_channel uint8 asymmetric', { qdtype: 'uint8', scheme: 'per_channel' }, [ROWS, COLS]],
  ['per_channel int2', { qdtype: 'int2', scheme: 'per_channel' }, [ROWS, COLS]],
  [
    'per_group int4 g76',
    { qdtype: 'int4', scheme: 'per_group', group_size: 76, mode: 'symmetric' },
    [ROWS, COLS],
  ],
  ['per_token float8_e4m3fn', { qdtype: 'float8_e4m3fn', scheme: 'per_token' }, [ROWS, COLS]],
  [
    'per_group int4 g128, one pass',
    { qdtype: 'int4', scheme: 'per_group', group_size: 128, mode: 'symmetric' },
    BLOCKS,
  ],
  [
    'per_group uint4 g64 asymmetric, one pass',
    { qdtype: 'uint4', scheme: 'per_group', group_size: 64 },
    BLOCKS,
  ],
  ['per_channel int8 rows, one pass', { qdtype: 'int8', scheme: 'per_channel' }, BLOCKS],
  ['per_token int16, one pass', { qdtype: 'int16', scheme: 'per_token' }, BLOCKS],
];

describe.each(parityVariants())('%s: half-precision input across task chunks', (_name, module) => {
  const compute = new KernelCompute(new InlineExecutor(module), module.backend);

  describe.each(['bfloat16', 'float16'] as const)('%s', (dtype) => {
    it.each(CASES)(
      '%s: codes and qparams equal the reference, quality equals float32 input',
      async (_c, o, shape) => {
        const x = values(shape[0] * shape[1], dtype);
        const half = input(x, dtype, shape, o);
        const spec = parseSpec(o);
        const expected = quantizeTensor(half, spec);
        const got = await compute.quantize(half, spec, undefined, undefined, { quality: true });
        expectSameBytes('codes', got.data, expected.data);
        expectSameQParams('qparams', got.qparams, expected.qparams);
        const asFloat32 = await compute.quantize(input(x, 'float32', shape, o), spec, undefined, undefined, {
          quality: true,
        });
        expectSameBytes('codes from float32', asFloat32.data, expected.data);
        expect(got.quality).toEqual(asFloat32.quality);
      },
    );

    it('chosen qparams and fake-quantized values equal the reference', async () => {
      const x = values(ROWS * COLS, dtype);
      const o = { qdtype: 'uint8', scheme: 'per_channel', axis: 1 };
      const half = input(x, dtype, [ROWS, COLS], o);
      const spec = parseSpec(o);
      expectSameQParams('chosen', await compute.chooseQParams(half, spec), chooseTensorQParams(half, spec));
      const expected = fakeQuantizeTensor(half, spec, 'float32');
      const got = await compute.fakeQuantize(half, spec, 'float32');
      expectSameBytes('fake-quantized', got.data, expected.data);
      expectSameBytes('mask', got.mask, expected.mask);
    });
  });
});
