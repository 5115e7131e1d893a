/**
 * Kernel tasks: one kernel call on one range of a tensor, as a plain object that crosses a
 * worker boundary by structured clone. Arrays of a task running in a worker are views of
 * SharedArrayBuffers, so inputs are not copied and outputs land in place.
 */
import type { ChooseArgs, KernelModule, LayoutArgs, QuantArgs } from './module.js';

export type KernelTask =
  | {
      readonly op: 'convert';
      readonly kind: number;
      readonly input: Uint16Array | Float32Array;
      readonly out: Float32Array | Uint16Array;
    }
  | {
      readonly op: 'minmax';
      readonly x: Float32Array;
      readonly start: number;
      readonly layout: LayoutArgs;
    }
  | {
      readonly op: 'determine';
      readonly mins: Float32Array;
      readonly maxs: Float32Array;
      readonly choose: ChooseArgs;
    }
  | {
      readonly op: 'quantize';
      readonly x: Float32Array;
      readonly start: number;
      readonly layout: LayoutArgs;
      readonly scale: Float32Array;
      readonly zeroPoint: Float32Array;
      readonly quant: QuantArgs;
      readonly out: Uint8Array;
      /** Also measure the codes (TaskResult.stats), in the same pass. */
      readonly measure?: boolean;
    }
  | {
      readonly op: 'dequantize';
      readonly codes: Uint8Array;
      readonly kind: number;
      readonly start: number;
      readonly count: number;
      readonly layout: LayoutArgs;
      readonly scale: Float32Array;
      readonly zeroPoint: Float32Array;
      readonly out: Float32Array;
    }
  | {
      readonly op: 'fakeQuantize';
      readonly x: Float32Array;
      readonly start: number;
      readonly layout: LayoutArgs;
      readonly scale: Float32Array;
      readonly zeroPoint: Float32Array;
      readonly qmin: number;
      readonly qmax: number;
      readonly floatZeroPoint: boolean;
      readonly out: Float32Array;
      readonly mask: Uint8Array;
    }
  | {
      readonly op: 'quality';
      readonly x: Float32Array;
      readonly codes: Uint8Array;
      readonly start: number;
      readonly layout: LayoutArgs;
      readonly scale: Float32Array;
      readonly zeroPoint: Float32Array;
      readonly quant: QuantArgs;
    }
  | {
      readonly op: 'chooseQuantize';
      readonly x: Float32Array;
      readonly first: number;
      readonly unitSize: number;
      readonly choose: ChooseArgs;
      readonly quant: QuantArgs;
      readonly scale: Float32Array;
      readonly zeroPoint: Float64Array;
      readonly out: Uint8Array;
      /** Also measure the codes (TaskResult.stats), in the same pass. */
      readonly measure?: boolean;
    };

export interface TaskResult {
  /** qd_status */
  readonly status: number;
  /** The index the kernel rejected (element, or unit for RANGE_OVERFLOW); -1 when OK. */
  readonly bad: number;
  /** minmax: the range's per-unit minima and maxima. determine: scale and zero points. */
  readonly mins?: Float32Array;
  readonly maxs?: Float32Array;
  readonly scale?: Float32Array;
  readonly zeroPoint?: Float64Array;
  /** quality, and measured quantize / chooseQuantize: [Σerr², Σx², max|err|, clipped, count] of the range. */
  readonly stats?: Float64Array;
}

const ok: TaskResult = { status: 0, bad: -1 };

export function runKernelTask(k: KernelModule, task: KernelTask): TaskResult {
  const done = (status: number): TaskResult => (status === 0 ? ok : { status, bad: k.lastBad() });
  switch (task.op) {
    case 'convert':
      k.convert(task.kind, task.input, task.out);
      return ok;
    case 'minmax': {
      const mins = new Float32Array(task.layout.channels).fill(Infinity);
      const maxs = new Float32Array(task.layout.channels).fill(-Infinity);
      const status = k.minmax(task.x, task.start, task.layout, mins, maxs);
      return { ...done(status), mins, maxs };
    }
    case 'determine': {
      const scale = new Float32Array(task.mins.length);
      const zeroPoint = new Float64Array(task.mins.length);
      const status = k.determine(task.mins, task.maxs, task.choose, scale, zeroPoint);
      return { ...done(status), scale, zeroPoint };
    }
    case 'quantize': {
      const stats = task.measure ? new Float64Array(5) : undefined;
      const status = k.quantize(
        task.x,
        task.start,
        task.layout,
        task.scale,
        task.zeroPoint,
        task.quant,
        task.out,
        stats,
      );
      return stats ? { ...done(status), stats } : done(status);
    }
    case 'dequantize':
      return done(
        k.dequantize(
          task.codes,
          task.kind,
          task.start,
          task.count,
          task.layout,
          task.scale,
          task.zeroPoint,
          task.out,
        ),
      );
    case 'fakeQuantize':
      return done(
        k.fakeQuantize(
          task.x,
          task.start,
          task.layout,
          task.scale,
          task.zeroPoint,
          task.qmin,
          task.qmax,
          task.floatZeroPoint,
          task.out,
          task.mask,
        ),
      );
    case 'quality': {
      const stats = new Float64Array(5);
      const status = k.quality(
        task.x,
        task.codes,
        task.start,
        task.layout,
        task.scale,
        task.zeroPoint,
        task.quant,
        stats,
      );
      return { ...done(status), stats };
    }
    case 'chooseQuantize': {
      const stats = task.measure ? new Float64Array(5) : undefined;
      const status = k.chooseQuantize(
        task.x,
        task.first,
        task.unitSize,
        task.choose,
        task.quant,
        task.scale,
        task.zeroPoint,
        task.out,
        stats,
      );
      return stats ? { ...done(status), stats } : done(status);
    }
  }
}
