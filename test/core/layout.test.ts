import fc from 'fast-check';
import { describe, expect, it } from 'vitest';

import { planLayout } from '../../src/core/layout.js';
import { parseSpec } from '../../src/core/spec.js';
import { expectQuantdError } from './oracles.js';

const perChannel = (axis: number) => parseSpec({ scheme: 'per_channel', axis });
const perGroup = (groupSize?: number) =>
  parseSpec(
    groupSize === undefined ? { scheme: 'per_group' } : { scheme: 'per_group', group_size: groupSize },
  );

describe('planLayout', () => {
  it('per_tensor: one unit over everything, qparams [1]', () => {
    expect(planLayout('w', [2, 3, 4], parseSpec({}))).toEqual({
      scheme: 'per_tensor',
      shape: [2, 3, 4],
      numel: 24,
      outer: 1,
      channels: 1,
      inner: 24,
      qparamShape: [1],
      axis: null,
      groupSize: null,
    });
    expect(planLayout('w', [], parseSpec({}))).toMatchObject({ numel: 1, outer: 1, channels: 1, inner: 1 });
    expect(planLayout('w', [0, 5], parseSpec({}))).toMatchObject({ numel: 0, inner: 0, qparamShape: [1] });
  });

  it.each([
    // [axis, normalised, outer, channels, inner] for shape [2, 3, 4]
    [0, 0, 1, 2, 12],
    [1, 1, 2, 3, 4],
    [2, 2, 6, 4, 1],
    [-1, 2, 6, 4, 1],
    [-2, 1, 2, 3, 4],
    [-3, 0, 1, 2, 12],
  ])(
    'per_channel axis %i on [2, 3, 4] → axis %i, outer %i, channels %i, inner %i',
    (axis, norm, outer, ch, inner) => {
      expect(planLayout('w', [2, 3, 4], perChannel(axis))).toEqual({
        scheme: 'per_channel',
        shape: [2, 3, 4],
        numel: 24,
        axis: norm,
        outer,
        channels: ch,
        inner,
        qparamShape: [ch],
        groupSize: null,
      });
    },
  );

  it('per_channel rejects an axis outside the rank', () => {
    expectQuantdError(() => planLayout('w', [2, 3, 4], perChannel(3)), 'AXIS_OUT_OF_RANGE', {
      axis: 3,
      tensor: 'w',
      rank: 3,
      shape: '[2, 3, 4]',
    });
    expectQuantdError(() => planLayout('w', [2, 3, 4], perChannel(-4)), 'AXIS_OUT_OF_RANGE', { axis: -4 });
    expectQuantdError(() => planLayout('b', [7], perChannel(1)), 'AXIS_OUT_OF_RANGE', {
      tensor: 'b',
      rank: 1,
    });
    expectQuantdError(() => planLayout('s', [], perChannel(0)), 'AXIS_OUT_OF_RANGE', { rank: 0 });
    const err = expectQuantdError(
      () => planLayout('layer.weight', [2, 3], perChannel(5)),
      'AXIS_OUT_OF_RANGE',
    );
    expect(err.message).toContain('layer.weight');
    expect(err.message).toContain('5');
  });

  it('per_token: one unit per row of the last dimension, qparams shaped like the input with last dim 1', () => {
    expect(planLayout('x', [2, 3, 4], parseSpec({ scheme: 'per_token' }))).toMatchObject({
      outer: 1,
      channels: 6,
      inner: 4,
      qparamShape: [2, 3, 1],
    });
    expect(planLayout('x', [5], parseSpec({ scheme: 'per_token' }))).toMatchObject({
      channels: 1,
      inner: 5,
      qparamShape: [1],
    });
    expectQuantdError(() => planLayout('x', [], parseSpec({ scheme: 'per_token' })), 'SHAPE_UNSUPPORTED', {
      tensor: 'x',
    });
  });

  it('per_group: groups along K of a 2-D [N, K], qparams [N, K / group_size]', () => {
    expect(planLayout('w', [4, 256], perGroup())).toEqual({
      scheme: 'per_group',
      shape: [4, 256],
      numel: 1024,
      outer: 1,
      channels: 8,
      inner: 128,
      qparamShape: [4, 2],
      axis: null,
      groupSize: 128,
    });
    expect(planLayout('w', [3, 12], perGroup(4))).toMatchObject({
      channels: 9,
      inner: 4,
      qparamShape: [3, 3],
    });
  });

  it('per_group shrinks a group wider than K to K (as torch does)', () => {
    expect(planLayout('w', [3, 96], perGroup())).toMatchObject({
      groupSize: 96,
      channels: 3,
      inner: 96,
      qparamShape: [3, 1],
    });
    expect(planLayout('w', [2, 100], perGroup())).toMatchObject({ groupSize: 100, qparamShape: [2, 1] });
    expect(planLayout('w', [2, 6], perGroup(64))).toMatchObject({ groupSize: 6, inner: 6 });
  });

  it('per_group rejects non-2-D shapes and K not divisible by the group size', () => {
    expectQuantdError(() => planLayout('w', [2, 4, 8], perGroup(4)), 'SHAPE_UNSUPPORTED', {
      tensor: 'w',
      shape: '[2, 4, 8]',
    });
    expectQuantdError(() => planLayout('w', [8], perGroup(4)), 'SHAPE_UNSUPPORTED');
    expectQuantdError(() => planLayout('w', [], perGroup(4)), 'SHAPE_UNSUPPORTED');
    const err = expectQuantdError(() => planLayout('w', [2, 100], perGroup(64)), 'GROUP_SIZE_INVALID', {
      tensor: 'w',
      group_size: 64,
      shape: '[2, 100]',
    });
    expect(err.message).toContain('100');
    expectQuantdError(() => planLayout('w', [4, 130], perGroup()), 'GROUP_SIZE_INVALID', { group_size: 128 });
  });

  it('per_channel: floor(i / inner) % channels is the coordinate along the axis (fast-check)', () => {
    const shapeAndAxis = fc
      .array(fc.integer({ min: 1, max: 5 }), { minLength: 1, maxLength: 4 })
      .chain((shape) =>
        fc.tuple(fc.constant(shape), fc.integer({ min: -shape.length, max: shape.length - 1 })),
      );
    fc.assert(
      fc.property(shapeAndAxis, ([shape, axis]) => {
        const layout = planLayout('w', shape, perChannel(axis));
        const a = axis < 0 ? axis + shape.length : axis;
        expect(layout.outer * layout.channels * layout.inner).toBe(layout.numel);
        // row-major coordinate of flat index i along dimension a, computed from strides
        const stride = shape.slice(a + 1).reduce((p, d) => p * d, 1);
        for (let i = 0; i < layout.numel; i++) {
          const coordinate = Math.floor(i / stride) % shape[a]!;
          expect(Math.floor(i / layout.inner) % layout.channels).toBe(coordinate);
        }
      }),
      { numRuns: 200 },
    );
  });
});
