/**
 * The few torch 1.13 CPU float32 operations whose rounding the observers depend on, evaluated in
 * torch's order so that their results are bit-identical:
 *
 *   torchSum     torch.sum of a contiguous float32 vector (the cascade sum of ATen's SumKernel,
 *                as an AVX2 build runs it: 8-lane vectors, 4 vectors interleaved, 4 levels);
 *   floorDivide  torch.div(a, b, rounding_mode='floor') for float32;
 *   histc        torch.histc (bin edges from min/max, float32 bin index by linear mapping,
 *                counts in float32).
 */
import { fround } from '../rounding.js';

const LANES = 8;
const INTERLEAVE = 4;
const LEVELS = 4;

function ceilLog2(n: number): number {
  return n <= 1 ? 0 : Math.ceil(Math.log2(n));
}

/**
 * ATen's multi_row_sum: `rows` rows of `width` independent float32 accumulators each (a vector
 * lane, or a scalar column), summed in a 4-level cascade so that no accumulator adds more than
 * 2^levelPower terms before it is carried up a level. `load(i, k)` is the term of row i, column k.
 */
function cascade(rows: number, width: number, load: (i: number, k: number) => number): Float64Array {
  const levelPower = Math.max(4, Math.floor(ceilLog2(rows) / LEVELS));
  const levelStep = 2 ** levelPower;
  const acc = Array.from({ length: LEVELS }, () => new Float64Array(width));
  let i = 0;
  while (i + levelStep <= rows) {
    for (let j = 0; j < levelStep; j++, i++) {
      const a0 = acc[0]!;
      for (let k = 0; k < width; k++) a0[k] = fround(a0[k]! + load(i, k));
    }
    for (let j = 1; j < LEVELS; j++) {
      const up = acc[j]!;
      const down = acc[j - 1]!;
      for (let k = 0; k < width; k++) {
        up[k] = fround(up[k]! + down[k]!);
        down[k] = 0;
      }
      // carry further up only when i is a multiple of levelStep^(j+1)
      if (Math.floor(i / 2 ** (j * levelPower)) % levelStep !== 0) break;
    }
  }
  for (; i < rows; i++) {
    const a0 = acc[0]!;
    for (let k = 0; k < width; k++) a0[k] = fround(a0[k]! + load(i, k));
  }
  const out = acc[0]!;
  for (let j = 1; j < LEVELS; j++) {
    const aj = acc[j]!;
    for (let k = 0; k < width; k++) out[k] = fround(out[k]! + aj[k]!);
  }
  return out;
}

/** torch.sum(x) for a contiguous float32 vector, as torch computes it on an AVX2 CPU. */
export function torchSum(x: ArrayLike<number>): number {
  const n = x.length;
  if (n < LANES) {
    // scalar path: 4 interleaved scalar accumulators, then the remainder, then the 4 summed
    const rows = Math.floor(n / INTERLEAVE);
    const partial = cascade(rows, INTERLEAVE, (i, k) => x[i * INTERLEAVE + k]!);
    let p0 = partial[0]!;
    for (let i = rows * INTERLEAVE; i < n; i++) p0 = fround(p0 + x[i]!);
    for (let k = 1; k < INTERLEAVE; k++) p0 = fround(p0 + partial[k]!);
    return p0;
  }
  // vector path: a row is INTERLEAVE vectors of LANES floats; lanes stay separate until the end
  const vectors = Math.floor(n / LANES);
  const rows = Math.floor(vectors / INTERLEAVE);
  const width = INTERLEAVE * LANES;
  const partial = cascade(rows, width, (i, k) => x[i * width + k]!);
  const acc = partial.subarray(0, LANES);
  for (let v = rows * INTERLEAVE; v < vectors; v++) {
    for (let l = 0; l < LANES; l++) acc[l] = fround(acc[l]! + x[v * LANES + l]!);
  }
  for (let r = 1; r < INTERLEAVE; r++) {
    for (let l = 0; l < LANES; l++) acc[l] = fround(acc[l]! + partial[r * LANES + l]!);
  }
  let total = 0;
  for (let i = vectors * LANES; i < n; i++) total = fround(total + x[i]!);
  for (let l = 0; l < LANES; l++) total = fround(total + acc[l]!);
  return total;
}

/** torch.div(a, b, rounding_mode='floor') for float32 a and b (Python's floor division). */
export function floorDivide(a: number, b: number): number {
  if (b === 0) return fround(a / b);
  let mod = fround(a % b); // fmod is exact
  let div = fround(fround(a - mod) / b);
  if (mod !== 0 && b < 0 !== mod < 0) {
    mod = fround(mod + b);
    div = fround(div - 1);
  }
  if (div === 0) {
    const q = a / b; // copysign(0, a / b)
    return q < 0 || Object.is(q, -0) ? -0 : 0;
  }
  let floored = Math.floor(div);
  if (fround(div - floored) > 0.5) floored += 1;
  return floored;
}

/**
 * torch.histc's bin edges for histc(x, bins, min, max): min and max as float32, unless they are
 * equal — then the data's own extremes `data` (absent for an empty input) — and, when those are
 * equal too, widened by one each way.
 */
export function histcEdges(min: number, max: number, data?: readonly [number, number]): [number, number] {
  let lo = min;
  let hi = max;
  if (lo === hi && data) {
    [lo, hi] = data;
  }
  if (lo === hi) {
    lo -= 1;
    hi += 1;
  }
  return [fround(lo), fround(hi)];
}

/**
 * torch.histc's counting, added to `out` (float32 counts): v in [left, right] (NaN never) goes to
 * bin trunc((v - left) · bins / (right - left)), each step in float32, the last bin closed on the
 * right; a bin index that overflows float32 is not counted (torch's cast would be undefined).
 * The reference of the kernels' qd_histc.
 */
export function histcCount(x: ArrayLike<number>, left: number, right: number, out: Float32Array): void {
  const bins = out.length;
  const width = fround(right - left);
  const nb = fround(bins);
  for (let i = 0; i < x.length; i++) {
    const v = x[i]!;
    if (!(v >= left && v <= right)) continue;
    const t = fround(fround(fround(v - left) * nb) / width);
    if (!(t < nb + 1)) continue;
    let pos = Math.trunc(t);
    if (pos === bins) pos -= 1;
    out[pos] = out[pos]! + 1; // a Float32Array store rounds to float32
  }
}

/** torch.histc(x, bins, min, max) into `out` (float32 counts, added to what `out` holds). */
export function histc(x: ArrayLike<number>, bins: number, min: number, max: number, out: Float32Array): void {
  let data: [number, number] | undefined;
  if (min === max && x.length > 0) {
    data = [Infinity, -Infinity];
    for (let i = 0; i < x.length; i++) {
      const v = x[i]!;
      if (v < data[0]) data[0] = v;
      if (v > data[1]) data[1] = v;
    }
  }
  const [left, right] = histcEdges(min, max, data);
  histcCount(x, left, right, out.length === bins ? out : out.subarray(0, bins));
}
