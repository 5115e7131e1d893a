/**
 * How a scheme maps elements to quantization parameters. Every scheme reduces to one rule:
 * element i (flat, row-major) uses qparam index floor(i / inner) % channels, so elements come
 * in runs of `inner` that share a scale. `outer` counts how often the channel sequence repeats.
 *
 *   per_tensor            outer 1,            channels 1,              inner numel
 *   per_channel (axis a)  outer prod(<a),     channels shape[a],       inner prod(>a)
 *   per_token             outer 1,            channels numel/last,     inner shape[-1]
 *   per_group [N, K]      outer 1,            channels N·K/group_size, inner group_size
 */
import { QuantdError, shapeText } from '../errors/index.js';
import { numelOf } from './dtypes.js';
import type { QuantSpec, Scheme } from './spec.js';

export interface Layout {
  readonly scheme: Scheme;
  readonly shape: readonly number[];
  readonly numel: number;
  readonly outer: number;
  readonly channels: number;
  readonly inner: number;
  /** Shape of the scale and zero_point tensors (docs/container.md). */
  readonly qparamShape: readonly number[];
  /** per_channel: the axis, normalised to 0..rank-1; otherwise null. */
  readonly axis: number | null;
  /** per_group: the group size in effect (torch shrinks a group larger than K to K). */
  readonly groupSize: number | null;
}

export function planLayout(tensor: string, shape: readonly number[], spec: QuantSpec): Layout {
  const numel = numelOf(shape);
  const rank = shape.length;
  const base = { scheme: spec.scheme, shape, numel, axis: null, groupSize: null };
  switch (spec.scheme) {
    case 'per_tensor':
      return { ...base, outer: 1, channels: 1, inner: numel, qparamShape: [1] };
    case 'per_channel': {
      const requested = spec.axis ?? 0;
      const axis = requested < 0 ? requested + rank : requested;
      if (rank === 0 || axis < 0 || axis >= rank) {
        throw new QuantdError('AXIS_OUT_OF_RANGE', {
          axis: requested,
          tensor,
          shape: shapeText(shape),
          rank,
        });
      }
      const channels = shape[axis]!;
      return {
        ...base,
        axis,
        outer: numelOf(shape.slice(0, axis)),
        channels,
        inner: numelOf(shape.slice(axis + 1)),
        qparamShape: [channels],
      };
    }
    case 'per_token': {
      if (rank === 0) {
        throw new QuantdError('SHAPE_UNSUPPORTED', {
          tensor,
          shape: shapeText(shape),
          detail: 'per_token needs at least one dimension (the token rows are the last one)',
        });
      }
      const last = shape[rank - 1]!;
      const rows = numelOf(shape.slice(0, rank - 1));
      return {
        ...base,
        outer: 1,
        channels: rows,
        inner: last,
        qparamShape: [...shape.slice(0, rank - 1), 1],
      };
    }
    case 'per_group': {
      if (rank !== 2) {
        throw new QuantdError('SHAPE_UNSUPPORTED', {
          tensor,
          shape: shapeText(shape),
          detail: 'per_group needs a 2-D tensor [N, K] (groups run along K)',
        });
      }
      const [n, k] = shape as [number, number];
      const requested = spec.groupSize ?? 128;
      // torch (quantize_per_channel_group): a group wider than the row becomes the row.
      const groupSize = requested > k && k > 0 ? k : requested;
      if (k % groupSize !== 0) {
        throw new QuantdError('GROUP_SIZE_INVALID', {
          tensor,
          group_size: requested,
          shape: shapeText(shape),
          detail: `K = ${k} is not divisible by group_size`,
        });
      }
      const groups = k / groupSize;
      return {
        ...base,
        groupSize,
        outer: 1,
        channels: n * groups,
        inner: groupSize,
        qparamShape: [n, groups],
      };
    }
  }
}
