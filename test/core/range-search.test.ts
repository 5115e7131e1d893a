/**
 * The greedy range search ends on every input. torch's loop shrinks [min, max] by 1/200 of its
 * width per step; when that step is below one float32 ulp of the bounds, neither bound moves and
 * the loop (torch's too) would never end. quantd stops where the search stands.
 */
import { describe, expect, it } from 'vitest';
import { greedyRangeSearch, parseSpec, planLayout, quantizeTensor } from '../../src/core/index.js';

describe('greedy range search on ranges too narrow for float32 steps', () => {
  it.each([
    ['around 1000', [1000, 1000.0001, 1000.00006, 1000]],
    ['around -2048', [-2048, -2048.0002, -2048.0001]],
    ['one ulp apart', [1, Math.fround(1 + 2 ** -23)]],
  ])('%s: ends, inside [min, max]', (_what, values) => {
    const x = Float32Array.from(values);
    const started = performance.now();
    const r = greedyRangeSearch('t', x, 4);
    expect(performance.now() - started).toBeLessThan(1000);
    expect(r.min).toBeGreaterThanOrEqual(Math.min(...x));
    expect(r.max).toBeLessThanOrEqual(Math.max(...x));
  });

  it('quantize with range_search greedy on such a tensor completes', () => {
    const spec = parseSpec({ qdtype: 'uint4', range_search: 'greedy', quant_min: 0, quant_max: 15 });
    const x = Float32Array.from([1000, 1000.0001, 1000.00006, 1000]);
    const input = {
      name: 't',
      dtype: 'float32' as const,
      data: new Uint8Array(x.buffer),
      layout: planLayout('t', [4], spec),
    };
    expect(() => quantizeTensor(input, spec)).not.toThrow();
  });
});
