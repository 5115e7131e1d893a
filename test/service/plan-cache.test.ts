/** PlanCache: a plan per key, made once; the header it carries is the plan's; bounded. */
import { describe, expect, it } from 'vitest';

import { encodeHeader } from '../../src/format/index.js';
import {
  PlanCache,
  operationRequest,
  planOperation,
  singleTensorFile,
  type Plan,
} from '../../src/service/index.js';

function planFor(shape: readonly number[], params: Record<string, string>): Plan {
  const bytes = shape.reduce((a, b) => a * b, 4);
  const file = singleTensorFile('tensor', 'F32', shape, new Uint8Array(bytes), 'test');
  return planOperation(file.header, operationRequest('quantize', params), 'test');
}

describe('PlanCache', () => {
  it('finds what it prepared under a key, and nothing under another', () => {
    const cache = new PlanCache();
    const plan = planFor([4, 32], { qdtype: 'int4', scheme: 'per_group', group_size: '16' });
    const prepared = cache.prepare('a', plan);
    expect(cache.find('a')).toBe(prepared);
    expect(cache.find('b')).toBeUndefined();
    expect(cache.find(undefined)).toBeUndefined();
    expect(prepared.plan).toBe(plan);
  });

  it("a prepared plan's header is the encoded header of its output, made once", () => {
    const plan = planFor([8, 16], { scheme: 'per_channel', axis: '1' });
    const prepared = new PlanCache().prepare('k', plan);
    expect(prepared.header).toEqual(encodeHeader(plan.tensors, plan.metadata).bytes);
    expect(prepared.header).toBe(prepared.header);
  });

  it('prepares without remembering when there is no key, or the key is long', () => {
    const cache = new PlanCache();
    const plan = planFor([4], {});
    cache.prepare(undefined, plan);
    cache.prepare('x'.repeat(2000), plan);
    expect(cache.size).toBe(0);
    expect(cache.find('x'.repeat(2000))).toBeUndefined();
  });

  it('keeps at most its limit, forgetting the oldest first', () => {
    const cache = new PlanCache(3);
    const plan = planFor([4], {});
    for (const key of ['a', 'b', 'c', 'd']) cache.prepare(key, plan);
    expect(cache.size).toBe(3);
    expect(cache.find('a')).toBeUndefined();
    for (const key of ['b', 'c', 'd']) expect(cache.find(key)).toBeDefined();
  });
});
