/**
 * Plans of recent requests, remembered by what decides them. A plan (and the safetensors header
 * of its output) depends only on the request's options and the input's header — names, dtypes,
 * shapes — never on the tensor data, and small requests repeat both: a client quantizing
 * activations sends one shape with one spec thousands of times a second. Planning and encoding
 * the header were a quarter of such a request's own CPU time (`node --cpu-prof bench/http.js`);
 * a hit costs a Map lookup. Only successful plans are kept (a refused request is refused
 * afresh each time), and plans are frozen data, shared by concurrent requests.
 */
import { encodeHeader } from '../format/index.js';
import { encodeResultHeader } from './files.js';
import type { Plan } from './plan.js';

/** A plan with its output's safetensors header (the bytes a response starts with), encoded once. */
export class PreparedPlan {
  private headerBytes: Uint8Array | undefined;

  constructor(readonly plan: Plan) {}

  get header(): Uint8Array {
    return (this.headerBytes ??= encodeHeader(this.plan.tensors, this.plan.metadata).bytes);
  }

  /**
   * The header, encoded with the event loop turning meanwhile: a plan of 200,000 output tensors
   * takes most of a second to encode (../core/time-slice.ts). A one-tensor plan costs what the
   * getter does.
   */
  async encodedHeader(signal?: AbortSignal): Promise<Uint8Array> {
    if (this.headerBytes === undefined) {
      const bytes = await encodeResultHeader(this.plan, signal);
      this.headerBytes ??= bytes;
    }
    return this.headerBytes;
  }
}

/** Distinct request shapes remembered; the oldest is forgotten first. */
export const PLAN_CACHE_ENTRIES = 256;

/** Keys longer than this are not cached (a long query string is not a hot small request). */
const MAX_KEY_LENGTH = 1024;

export class PlanCache {
  private readonly plans = new Map<string, PreparedPlan>();

  constructor(private readonly limit = PLAN_CACHE_ENTRIES) {}

  /** The plan remembered for `key`, if any. */
  find(key: string | undefined): PreparedPlan | undefined {
    return key === undefined ? undefined : this.plans.get(key);
  }

  /**
   * `plan`, prepared, and remembered for `key` (none: not remembered). The caller's key must
   * capture everything the plan was made from (the operation, its options, the input's header).
   */
  prepare(key: string | undefined, plan: Plan): PreparedPlan {
    const prepared = new PreparedPlan(plan);
    if (key !== undefined && key.length <= MAX_KEY_LENGTH && this.limit > 0) {
      if (this.plans.size >= this.limit) this.plans.delete(this.plans.keys().next().value!);
      this.plans.set(key, prepared);
    }
    return prepared;
  }

  get size(): number {
    return this.plans.size;
  }
}
