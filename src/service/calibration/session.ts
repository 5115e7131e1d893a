/**
 * A calibration session: a recipe's observers and what they have seen. Batches fold in one at
 * a time (a chain of promises), so concurrent uploads lose no update; a batch is all or
 * nothing (every tensor's new state is computed before any is kept), so a refused tensor
 * leaves the session as it was. Its export form `quantd.calibration/1` is what the store
 * persists and what an import restores. Linear-layer statistics (Hessians: in² float64 values
 * each) are not part of that JSON: the store keeps them in a layer statistics file beside it.
 */
import {
  newObserverState,
  observerQParams,
  type ObserverConfig,
  type ObserverState,
} from '../../core/observers/index.js';
import type { Compute } from '../../core/compute.js';
import { observeBatch } from '../../core/observers/index.js';
import {
  accumulateLinearStats,
  batchFeatures,
  emptyLinearStats,
  type LinearStats,
} from '../../core/linear-stats.js';
import { QuantdError, isQuantdError } from '../../errors/index.js';
import { exportObserver, importObserver, type ExportedObserver } from '../../format/observer-state.js';
import { serializeSafetensors } from '../../format/safetensors.js';
import { parseCalibrationRecipe, ruleFor, type CalibrationRecipe } from './recipe.js';

export const CALIBRATION_FORMAT = 'quantd.calibration/1';
/** Observers (distinct tensor names) one session may hold. */
export const MAX_OBSERVERS = 10_000;
/** Bytes of linear-layer statistics one session may hold (a 4096-input layer takes 128 MiB). */
export const MAX_STATISTICS_BYTES = 2 * 1024 ** 3;

const statsBytes = (inFeatures: number): number => 8 * inFeatures * (inFeatures + 1);

export interface CalibrationExport {
  readonly format: typeof CALIBRATION_FORMAT;
  readonly id: string;
  readonly created: string;
  readonly updated: string;
  readonly ttl_seconds: number;
  readonly batches: number;
  readonly recipe: unknown;
  readonly observers: Record<string, ExportedObserver>;
  /** What the statistics are of (their values are not in the export). */
  readonly statistics?: Record<string, { readonly in_features: number; readonly tokens: number }>;
}

export interface BatchTensor {
  readonly name: string;
  readonly shape: readonly number[];
  readonly x: Float32Array;
}

export interface FoldResult {
  readonly batches: number;
  /** tensor names observed by this batch, and those no rule matched */
  readonly observed: readonly string[];
  readonly ignored: readonly string[];
}

interface Watched {
  readonly config: ObserverConfig;
  state: ObserverState;
}

export class CalibrationSession {
  readonly observers = new Map<string, Watched>();
  /** Linear-layer statistics by activation name. */
  readonly stats = new Map<string, LinearStats>();
  /** The API key's owner id that created it (null with auth off): others do not see it. */
  owner: string | null = null;
  batches = 0;
  updated: Date;
  private tail: Promise<unknown> = Promise.resolve();

  constructor(
    readonly id: string,
    readonly recipe: CalibrationRecipe,
    readonly ttlSeconds: number,
    readonly created: Date,
  ) {
    this.updated = created;
  }

  get expires(): Date {
    return new Date(this.updated.getTime() + this.ttlSeconds * 1000);
  }

  /** Runs `work` after every earlier one of this session has finished (one at a time). */
  serialized<T>(work: () => Promise<T>): Promise<T> {
    const run = this.tail.then(work, work);
    this.tail = run.catch(() => {});
    return run;
  }

  /**
   * Folds one batch in (call inside `serialized`): all of it, or none of it. `persist` runs
   * before the new states are kept, so a batch is acknowledged only once it is on disk.
   */
  async fold(
    tensors: readonly BatchTensor[],
    compute: Compute,
    persist: (next: CalibrationExport, stats: ReadonlyMap<string, LinearStats> | null) => Promise<void>,
    signal?: AbortSignal,
  ): Promise<FoldResult> {
    const observed: string[] = [];
    const ignored: string[] = [];
    const planned: [BatchTensor, Watched][] = [];
    const gathered: [BatchTensor, LinearStats | number][] = [];
    let added = 0;
    let addedBytes = 0;
    for (const t of tensors) {
      let watched = this.observers.get(t.name);
      let stats: LinearStats | number | undefined = this.stats.get(t.name);
      if (!watched && !stats) {
        const rule = ruleFor(this.recipe, t.name);
        if (!rule) {
          ignored.push(t.name);
          continue;
        }
        if (rule.config) {
          watched = { config: rule.config, state: newObserverState(rule.config) };
          added++;
        }
        if (rule.statistics) {
          stats = batchFeatures(t.name, t.shape); // allocated once the size is accepted
          addedBytes += statsBytes(stats);
        }
      }
      observed.push(t.name);
      if (watched) planned.push([t, watched]);
      if (stats !== undefined) gathered.push([t, stats]);
    }
    // every refusal that needs no computing comes before any computing starts
    if (observed.length === 0) {
      throw new QuantdError('NO_TENSOR_SELECTED', {
        detail: `no tensor of the batch matches a rule of calibration ${this.id} (${ignored.length} tensors: ${ignored.slice(0, 3).join(', ')}${ignored.length > 3 ? ', …' : ''})`,
      });
    }
    if (this.observers.size + added > MAX_OBSERVERS) {
      throw new QuantdError('CALIBRATION_FULL', {
        detail: `calibration ${this.id} would watch ${this.observers.size + added} tensors; a session watches at most ${MAX_OBSERVERS}`,
      });
    }
    const heldBytes = [...this.stats.values()].reduce((n, s) => n + statsBytes(s.inFeatures), 0);
    if (heldBytes + addedBytes > MAX_STATISTICS_BYTES) {
      throw new QuantdError('CALIBRATION_FULL', {
        detail: `calibration ${this.id} would hold ${heldBytes + addedBytes} bytes of layer statistics; a session holds at most ${MAX_STATISTICS_BYTES} (statistics of in_features k take 8·k² bytes)`,
      });
    }
    // Promise.all handles every rejection (the first one is the batch's error)
    const gathering = Promise.all(
      gathered.map(([t, held]) => {
        const stats = typeof held === 'number' ? emptyLinearStats(held) : held;
        const call = { tensor: t.name, stats, x: t.x, shape: t.shape };
        const next = compute.accumulateStats
          ? compute.accumulateStats(call, signal)
          : Promise.resolve().then(() => accumulateLinearStats(t.name, stats, t.x, t.shape));
        return next.then((s): [string, LinearStats] => [t.name, s]);
      }),
    );
    const work = planned.map(([t, w]) => {
      const call = { config: w.config, state: w.state, x: t.x, shape: t.shape };
      const next = compute.observe
        ? compute.observe(call, signal)
        : Promise.resolve().then(() => observeBatch(w.config, w.state, t.x, t.shape));
      return next.then(
        (state): [string, Watched, ObserverState] => [t.name, w, state],
        (err: unknown) => {
          throw named(t.name, err);
        },
      );
    });
    const [results, statsResults] = await Promise.all([Promise.all(work), gathering]);
    const next = new Map(this.observers);
    for (const [name, w, state] of results) next.set(name, { config: w.config, state });
    const nextStats = new Map(this.stats);
    for (const [name, s] of statsResults) nextStats.set(name, s);
    const updated = new Date();
    await persist(
      this.exportWith(next, this.batches + 1, updated, nextStats),
      statsResults.length > 0 ? nextStats : null,
    );
    this.observers.clear();
    for (const [name, w] of next) this.observers.set(name, w);
    this.stats.clear();
    for (const [name, s] of nextStats) this.stats.set(name, s);
    this.batches++;
    this.updated = updated;
    return { batches: this.batches, observed, ignored };
  }

  /** Every observer's qparams as one safetensors: NAME.scale (F32) and NAME.zero_point (I32, or F32). */
  qparamsFile(): Uint8Array {
    const tensors = [];
    for (const name of [...this.observers.keys()].sort()) {
      const w = this.observers.get(name)!;
      let qp;
      try {
        qp = observerQParams(w.config, w.state);
      } catch (err) {
        throw named(name, err);
      }
      const n = qp.scale.length;
      const bytes = (a: ArrayBufferView): Uint8Array => new Uint8Array(a.buffer, a.byteOffset, a.byteLength);
      tensors.push({ name: `${name}.scale`, dtype: 'F32' as const, shape: [n], data: bytes(qp.scale) });
      tensors.push({
        name: `${name}.zero_point`,
        dtype: qp.zeroPoint instanceof Float32Array ? ('F32' as const) : ('I32' as const),
        shape: [n],
        data: bytes(qp.zeroPoint),
      });
    }
    return serializeSafetensors(tensors, { 'quantd.calibration': this.id });
  }

  summary(): Record<string, unknown> {
    const observers = [...this.observers].map(([name, w]) => ({
      name,
      kind: w.config.kind,
      observed: w.state.observed,
    }));
    return {
      id: this.id,
      created: this.created.toISOString(),
      updated: this.updated.toISOString(),
      expires: this.expires.toISOString(),
      ttl_seconds: this.ttlSeconds,
      batches: this.batches,
      observed: observers.reduce((n, o) => n + o.observed, 0),
      observers,
      statistics: [...this.stats].map(([name, s]) => ({
        name,
        in_features: s.inFeatures,
        tokens: s.tokens,
      })),
    };
  }

  exported(): CalibrationExport {
    return this.exportWith(this.observers, this.batches, this.updated, this.stats);
  }

  private exportWith(
    observers: Map<string, Watched>,
    batches: number,
    updated: Date,
    stats: ReadonlyMap<string, LinearStats>,
  ): CalibrationExport {
    const out: Record<string, ExportedObserver> = {};
    for (const [name, w] of observers) out[name] = exportObserver(w.config, w.state);
    const statistics: Record<string, { in_features: number; tokens: number }> = {};
    for (const [name, s] of stats) statistics[name] = { in_features: s.inFeatures, tokens: s.tokens };
    return {
      format: CALIBRATION_FORMAT,
      id: this.id,
      created: this.created.toISOString(),
      updated: updated.toISOString(),
      ttl_seconds: this.ttlSeconds,
      batches,
      recipe: this.recipe.json,
      observers: out,
      ...(stats.size > 0 && { statistics }),
    };
  }

  /** A session from its export form (a persisted file, or an import under a new id). */
  static restore(value: unknown, id?: string, ttlSeconds?: number): CalibrationSession {
    const bad = (detail: string): QuantdError =>
      new QuantdError('OBSERVER_INVALID', { observer: 'calibration state', detail });
    if (value === null || typeof value !== 'object') throw bad('must be a JSON object');
    const e = value as Partial<CalibrationExport>;
    if (e.format !== CALIBRATION_FORMAT) {
      throw bad(`format must be ${CALIBRATION_FORMAT} (got ${JSON.stringify(e.format)})`);
    }
    const recipe = parseCalibrationRecipe(e.recipe);
    const created = new Date(String(e.created));
    const updated = new Date(String(e.updated));
    if (Number.isNaN(created.getTime()) || Number.isNaN(updated.getTime())) {
      throw bad('created and updated must be dates');
    }
    const ttl = ttlSeconds ?? e.ttl_seconds;
    if (typeof ttl !== 'number' || !(ttl > 0)) throw bad('ttl_seconds must be a positive number');
    const session = new CalibrationSession(id ?? String(e.id), recipe, ttl, id ? new Date() : created);
    if (!id) session.updated = updated;
    session.batches = typeof e.batches === 'number' && e.batches >= 0 ? e.batches : 0;
    const observers = e.observers ?? {};
    if (typeof observers !== 'object' || observers === null) throw bad('observers must be an object');
    for (const [name, exported] of Object.entries(observers)) {
      const { config, state } = importObserver(exported);
      session.observers.set(name, { config, state });
    }
    if (session.observers.size > MAX_OBSERVERS) throw bad(`holds more than ${MAX_OBSERVERS} observers`);
    return session;
  }
}

/** An observer's error, saying which tensor it watches. */
function named(name: string, err: unknown): unknown {
  if (!isQuantdError(err)) return err;
  if (err.code === 'OBSERVER_INVALID' || err.code === 'OBSERVED_RANGE_INVALID') {
    return new QuantdError(err.code, {
      observer: `${JSON.stringify(name)} (${String(err.params['observer'])})`,
      detail: String(err.params['detail']),
    });
  }
  if (err.code === 'INPUT_NOT_FINITE') return new QuantdError(err.code, { ...err.params, tensor: name });
  return err;
}
