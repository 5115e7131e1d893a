/** The slab of small kernel arrays: zeroed, aligned, disjoint views; large arrays on their own. */
import { describe, expect, it } from 'vitest';

import { SMALL_ARRAY_BYTES, freshArrays, slabArrays } from '../../src/kernels/small-arrays.js';

describe('slabArrays', () => {
  it('gives zeroed, aligned views that never overlap, across slabs', () => {
    const views: ArrayBufferView[] = [];
    for (let i = 0; i < 2000; i++) {
      const length = 1 + (i % 37);
      const view = [
        () => slabArrays(Uint8Array, length),
        () => slabArrays(Float32Array, length),
        () => slabArrays(Float64Array, length),
        () => slabArrays(Int32Array, length),
      ][i % 4]!();
      expect(view.byteOffset % 8).toBe(0);
      expect([...new Uint8Array(view.buffer, view.byteOffset, view.byteLength)].every((b) => b === 0)).toBe(
        true,
      );
      new Uint8Array(view.buffer, view.byteOffset, view.byteLength).fill(0xff); // later views stay zero
      views.push(view);
    }
    const buffers = new Set(views.map((v) => v.buffer));
    expect(buffers.size).toBeGreaterThan(1); // 2000 views outgrow one slab
    for (const buffer of buffers) {
      const mine = views.filter((v) => v.buffer === buffer).sort((a, b) => a.byteOffset - b.byteOffset);
      for (let i = 1; i < mine.length; i++) {
        expect(mine[i]!.byteOffset).toBeGreaterThanOrEqual(mine[i - 1]!.byteOffset + mine[i - 1]!.byteLength);
      }
    }
  });

  it('allocates arrays over SMALL_ARRAY_BYTES on their own, as freshArrays always does', () => {
    const large = slabArrays(Uint8Array, SMALL_ARRAY_BYTES + 1);
    expect(large.byteOffset).toBe(0);
    expect(large.buffer.byteLength).toBe(SMALL_ARRAY_BYTES + 1);
    const fresh = freshArrays(Float32Array, 3);
    expect(fresh.length).toBe(3);
    expect(fresh.byteLength).toBe(12);
  });
});
