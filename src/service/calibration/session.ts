/**
 * A calibration session: a recipe's observers and what they have seen. Batches fold in one at
 * a time (a chain of promises), so concurrent uploads lose no update; a batch is all or
 * nothing (every tensor's new state is computed before any is kept), so a refused tensor
 * leaves the session as it was. Its export form `quantd.calibration/1` is what the store
 * persists and what an import restores; it is written a piece at a time (exportText), never as
 * one string. Linear-layer statistics (Hessians: in² float64 values each) are not part of that
 * JSON: the store keeps them in a layer statistics file beside it.
 *
 * What a session may hold is bounded before a batch does any work (limits.ts): histogram bins
 * when the recipe is read, channels and in_features by the batch's shape, and the bytes of
 * state the batch would leave the session with.
 */
import {
  isPerChannelKind,
  newObserverState,
  channelUnits,
  type ObserverConfig,
  type ObserverState,
} from '../../core/observers/index.js';
import { qparamsOrError, type Compute } from '../../core/compute.js';
import { observeBatch } from '../../core/observers/index.js';
import {
  accumulateLinearStats,
  batchFeatures,
  unallocatedLinearStats,
  type LinearStats,
} from '../../core/linear-stats.js';
import { QuantdError, isQuantdError } from '../../errors/index.js';
import { exportObserver, importObserver, type ExportedObserver } from '../../format/observer-state.js';
import { serializeSafetensors } from '../../format/safetensors.js';
import {
  binsProblem,
  observerBytes,
  OFFLINE_LIMITS,
  statisticsBytes,
  type CalibrationLimits,
} from './limits.js';
import { parseCalibrationRecipe, ruleFor, type CalibrationRecipe } from './recipe.js';

export const CALIBRATION_FORMAT = 'quantd.calibration/1';
/** Observers (distinct tensor names) one session may hold. */
export const MAX_OBSERVERS = 10_000;
/** Bytes of linear-layer statistics one session may hold (a 4096-input layer takes 128 MiB). */
export const MAX_STATISTICS_BYTES = 2 * 1024 ** 3;
/**
 * Bytes of observer state one session may hold: its export carries them in base64 (4/3 as many
 * characters), and a restart reads that file back as one string, which V8 caps at 2^29.
 */
export const MAX_OBSERVER_BYTES = 256 * 1024 ** 2;
export const DEFAULT_TTL_SECONDS = 24 * 3600;
export const MAX_TTL_SECONDS = 30 * 24 * 3600;
/** The export is written in pieces of about this many characters (a few ms of the loop each). */
const EXPORT_PIECE = 1 << 20;

export interface CalibrationExport {
  readonly format: typeof CALIBRATION_FORMAT;
  readonly id: string;
  readonly created: string;
  readonly updated: string;
  readonly ttl_seconds: number;
  readonly batches: number;
  readonly recipe: unknown;
  /** A null-prototype map: a tensor may be called __proto__. */
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

/** A session as of one moment (what an export writes): its maps are not changed afterwards. */
export interface SessionSnapshot {
  readonly batches: number;
  readonly updated: Date;
  readonly observers: ReadonlyMap<string, Watched>;
  readonly stats: ReadonlyMap<string, LinearStats>;
}

/** What a batch asks of the server before any work: the bytes it adds to the session, and its copies. */
export interface FoldCost {
  /** Bytes the session holds more once the batch is in (new observers, channels and statistics). */
  readonly growth: number;
  /** Bytes of the new states computed beside the old ones while the batch folds. */
  readonly transient: number;
  /**
   * Bytes of statistics it replaces: garbage once the batch is kept, in shared memory, which
   * the heap does not count as its own (only an explicit collection frees it).
   */
  readonly replaced: number;
}

/** Bytes an observer's state holds. */
const stateBytes = (s: ObserverState): number =>
  s.lo.byteLength + s.hi.byteLength + (s.histogram?.byteLength ?? 0);

/** The channels a per-channel observer would track for a batch of `shape` (0: not per channel, or no such axis). */
function batchChannels(config: ObserverConfig, shape: readonly number[]): number {
  if (!isPerChannelKind(config.kind)) return 0;
  return channelUnits(shape, config.chAxis)?.channels ?? 0;
}

function full(detail: string): QuantdError {
  return new QuantdError('CALIBRATION_FULL', { detail });
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
    /** What a batch may make it hold (a server's; the command line's hard limits by default). */
    readonly limits: CalibrationLimits = OFFLINE_LIMITS,
  ) {
    this.updated = created;
  }

  get expires(): Date {
    return new Date(this.updated.getTime() + this.ttlSeconds * 1000);
  }

  /** Bytes of state it holds: its observers' and its statistics'. */
  get bytes(): number {
    return this.observerBytes() + this.statisticsBytes();
  }

  /** The tensors it watches: by an observer, by statistics, or both. */
  private watched(): number {
    let n = this.observers.size;
    for (const name of this.stats.keys()) if (!this.observers.has(name)) n++;
    return n;
  }

  private observerBytes(): number {
    let n = 0;
    for (const w of this.observers.values()) n += stateBytes(w.state);
    return n;
  }

  private statisticsBytes(): number {
    let n = 0;
    for (const s of this.stats.values()) n += statisticsBytes(s.inFeatures);
    return n;
  }

  /** Runs `work` after every earlier one of this session has finished (one at a time). */
  serialized<T>(work: () => Promise<T>): Promise<T> {
    const run = this.tail.then(work, work);
    // the chain keeps no result alive (a fold's, or an export's)
    this.tail = run.then(
      () => undefined,
      () => undefined,
    );
    return run;
  }

  /**
   * Folds one batch in (call inside `serialized`): all of it, or none of it. `admit` is asked
   * for the batch's cost once every check that needs no computing has passed, before any
   * computing (the server's budget: it throws to refuse, and its release is called when the fold
   * ends, however it ends). `persist` runs before the new states are kept, so a batch is
   * acknowledged only once it is on disk.
   */
  async fold(
    tensors: readonly BatchTensor[],
    compute: Compute,
    persist: (next: SessionSnapshot, stats: ReadonlyMap<string, LinearStats> | null) => Promise<void>,
    signal?: AbortSignal,
    admit: (cost: FoldCost) => () => void = () => () => {},
  ): Promise<FoldResult> {
    const observed: string[] = [];
    const ignored: string[] = [];
    const planned: [BatchTensor, ObserverConfig, ObserverState | null][] = [];
    const gathered: [BatchTensor, LinearStats | number][] = [];
    let added = 0;
    let growth = 0;
    let transient = 0;
    let replaced = 0;
    let addedStats = 0;
    let addedObservers = 0;
    for (const t of tensors) {
      const watched = this.observers.get(t.name);
      let stats: LinearStats | number | undefined = this.stats.get(t.name);
      let config = watched?.config;
      if (!watched && !stats) {
        const rule = ruleFor(this.recipe, t.name);
        if (!rule) {
          ignored.push(t.name);
          continue;
        }
        added++; // a tensor it watches anew, by an observer, statistics or both
        if (rule.config) {
          config = rule.config;
          // a recipe read under other limits (a session restored after they were lowered)
          const tooLarge = binsProblem(config, this.limits);
          if (tooLarge)
            throw new QuantdError('OBSERVER_INVALID', { observer: JSON.stringify(t.name), detail: tooLarge });
        }
        if (rule.statistics) {
          const k = batchFeatures(t.name, t.shape); // allocated once the size is accepted
          if (k > this.limits.maxFeatures) {
            throw full(
              `tensor ${JSON.stringify(t.name)}: linear statistics of in_features ${k} would take ${statisticsBytes(k)} bytes; this server gathers them for at most ${this.limits.maxFeatures} (QUANTD_CALIBRATION_MAX_FEATURES)`,
            );
          }
          stats = k;
          growth += statisticsBytes(k);
          addedStats += statisticsBytes(k);
        }
      } else if (stats !== undefined && typeof stats !== 'number') {
        transient += statisticsBytes(stats.inFeatures); // the new sums, beside the old ones
        replaced += statisticsBytes(stats.inFeatures);
      }
      observed.push(t.name);
      if (config) {
        const channels = batchChannels(config, t.shape);
        if (channels > this.limits.maxChannels) {
          throw full(
            `tensor ${JSON.stringify(t.name)}: a ${config.kind} observer would track ${channels} channels; this server tracks at most ${this.limits.maxChannels} (QUANTD_CALIBRATION_MAX_CHANNELS)`,
          );
        }
        const before = watched ? stateBytes(watched.state) : 0;
        const after = Math.max(before, observerBytes(config, channels));
        growth += after - before;
        addedObservers += after - before;
        // the new state on this thread, and its copy on a worker
        transient += 2 * after;
        planned.push([t, config, watched?.state ?? null]);
      }
      if (stats !== undefined) gathered.push([t, stats]);
    }
    // every refusal that needs no computing comes before any computing starts
    if (observed.length === 0) {
      throw new QuantdError('NO_TENSOR_SELECTED', {
        detail: `no tensor of the batch matches a rule of calibration ${this.id} (${ignored.length} tensors: ${ignored.slice(0, 3).join(', ')}${ignored.length > 3 ? ', …' : ''})`,
      });
    }
    const watching = this.watched();
    if (watching + added > MAX_OBSERVERS) {
      throw full(
        `calibration ${this.id} would watch ${watching + added} tensors; a session watches at most ${MAX_OBSERVERS}`,
      );
    }
    const heldStats = this.statisticsBytes();
    if (heldStats + addedStats > MAX_STATISTICS_BYTES) {
      throw full(
        `calibration ${this.id} would hold ${heldStats + addedStats} bytes of layer statistics; a session holds at most ${MAX_STATISTICS_BYTES} (statistics of in_features k take 8·k·(k+1) bytes)`,
      );
    }
    const heldObservers = this.observerBytes();
    if (heldObservers + addedObservers > MAX_OBSERVER_BYTES) {
      throw full(
        `calibration ${this.id} would hold ${heldObservers + addedObservers} bytes of observer state; a session holds at most ${MAX_OBSERVER_BYTES} (its export must stay one readable file)`,
      );
    }
    const held = heldStats + heldObservers;
    if (held + growth > this.limits.sessionBytes) {
      throw full(
        `calibration ${this.id} would hold ${held + growth} bytes of state; a session holds at most ${this.limits.sessionBytes} (QUANTD_CALIBRATION_SESSION_BYTES)`,
      );
    }
    const release = admit({ growth, transient, replaced });
    try {
      return await this.compute(planned, gathered, compute, persist, signal, observed, ignored);
    } finally {
      release();
    }
  }

  private async compute(
    planned: readonly [BatchTensor, ObserverConfig, ObserverState | null][],
    gathered: readonly [BatchTensor, LinearStats | number][],
    compute: Compute,
    persist: (next: SessionSnapshot, stats: ReadonlyMap<string, LinearStats> | null) => Promise<void>,
    signal: AbortSignal | undefined,
    observed: string[],
    ignored: string[],
  ): Promise<FoldResult> {
    // One tensor at a time: a batch may hold thousands, and each one's work on the pool is one
    // admitted operation (a batch running them all at once was refused OVERLOADED past the pool's
    // queue); a large tensor is still split across the pool's threads.
    const results: [string, Watched][] = [];
    const abandoned = (): void => {
      if (signal?.aborted) throw signal.reason;
    };
    for (const [t, config, held] of planned) {
      abandoned(); // the client gone, or past its time: the rest is not started
      // a new observer's state is made only now, once its size has been accepted
      const call = { config, state: held ?? newObserverState(config), x: t.x, shape: t.shape };
      try {
        const state = compute.observe
          ? await compute.observe(call, signal)
          : observeBatch(config, call.state, t.x, t.shape);
        results.push([t.name, { config, state }]);
      } catch (err) {
        throw named(t.name, err);
      }
    }
    const statsResults: [string, LinearStats][] = [];
    for (const [t, held] of gathered) {
      abandoned();
      const stats = typeof held === 'number' ? unallocatedLinearStats(held) : held;
      const call = { tensor: t.name, stats, x: t.x, shape: t.shape };
      statsResults.push([
        t.name,
        compute.accumulateStats
          ? await compute.accumulateStats(call, signal)
          : accumulateLinearStats(t.name, stats, t.x, t.shape),
      ]);
    }
    const next = new Map(this.observers);
    for (const [name, w] of results) next.set(name, w);
    const nextStats = new Map(this.stats);
    for (const [name, s] of statsResults) nextStats.set(name, s);
    const updated = new Date();
    await persist(
      { batches: this.batches + 1, updated, observers: next, stats: nextStats },
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

  /**
   * Every observer's qparams as one safetensors: NAME.scale (F32) and NAME.zero_point (I32, or
   * F32). The range searches run on `compute` (the pool's workers: a histogram's costs about
   * 15 ms); the first observer in name order that refuses names the error.
   */
  async qparamsFile(compute: Compute, signal?: AbortSignal): Promise<Uint8Array> {
    const names = [...this.observers.keys()].sort();
    const calls = names.map((name) => this.observers.get(name)!);
    const results = compute.observerQParams
      ? await compute.observerQParams(calls, signal)
      : calls.map((c) => qparamsOrError(c));
    const tensors = [];
    for (const [i, name] of names.entries()) {
      const qp = results[i]!;
      if (isQuantdError(qp)) throw named(name, qp);
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

  /**
   * What the API shows of it. `detail` false (a list of sessions): its counts alone, without an
   * entry per observer and per layer — a key's 1000 sessions of 10 000 tensors each would make
   * a list of ten million entries, hundreds of megabytes of JSON built on the event loop.
   */
  summary(detail = true): Record<string, unknown> {
    let observed = 0;
    for (const w of this.observers.values()) observed += w.state.observed;
    return {
      id: this.id,
      created: this.created.toISOString(),
      updated: this.updated.toISOString(),
      expires: this.expires.toISOString(),
      ttl_seconds: this.ttlSeconds,
      batches: this.batches,
      observed,
      observer_count: this.observers.size,
      statistics_count: this.stats.size,
      observers: detail
        ? [...this.observers].map(([name, w]) => ({ name, kind: w.config.kind, observed: w.state.observed }))
        : [],
      statistics: detail
        ? [...this.stats].map(([name, s]) => ({ name, in_features: s.inFeatures, tokens: s.tokens }))
        : [],
    };
  }

  /** The session as it is now, for an export that outlives this call (later batches do not change it). */
  snapshot(): SessionSnapshot {
    return {
      batches: this.batches,
      updated: this.updated,
      observers: new Map(this.observers),
      stats: new Map(this.stats),
    };
  }

  /** The export form as an object (its observers a null-prototype map). */
  exported(): CalibrationExport {
    const observers: Record<string, ExportedObserver> = Object.create(null) as Record<
      string,
      ExportedObserver
    >;
    for (const [name, w] of this.observers) observers[name] = exportObserver(w.config, w.state);
    return {
      ...this.head(this.snapshot()),
      observers,
      ...this.statisticsOf(this.stats),
    } as CalibrationExport;
  }

  /**
   * The export form of `snapshot` as JSON text, in pieces of about a mebibyte: each observer's
   * base64 is made as the piece that holds it is asked for, so neither a file write nor a
   * response builds the whole text at once (a session's observers may hold 256 MiB). `extra`:
   * fields after the export's own (the store's owner and statistics file).
   */
  *exportText(snapshot: SessionSnapshot, extra: Readonly<Record<string, unknown>> = {}): Generator<string> {
    const head = JSON.stringify(this.head(snapshot));
    let piece = `${head.slice(0, -1)},"observers":{`;
    let first = true;
    for (const [name, w] of snapshot.observers) {
      piece += `${first ? '' : ','}${JSON.stringify(name)}:${JSON.stringify(exportObserver(w.config, w.state))}`;
      first = false;
      if (piece.length >= EXPORT_PIECE) {
        yield piece;
        piece = '';
      }
    }
    const rest = { ...this.statisticsOf(snapshot.stats), ...extra };
    const tail = JSON.stringify(rest);
    yield `${piece}}${tail === '{}' ? '' : `,${tail.slice(1, -1)}`}}`;
  }

  private head(snapshot: SessionSnapshot): Omit<CalibrationExport, 'observers' | 'statistics'> {
    return {
      format: CALIBRATION_FORMAT,
      id: this.id,
      created: this.created.toISOString(),
      updated: snapshot.updated.toISOString(),
      ttl_seconds: this.ttlSeconds,
      batches: snapshot.batches,
      recipe: this.recipe.json,
    };
  }

  private statisticsOf(stats: ReadonlyMap<string, LinearStats>): Pick<CalibrationExport, 'statistics'> {
    if (stats.size === 0) return {};
    const statistics = Object.create(null) as Record<string, { in_features: number; tokens: number }>;
    for (const [name, s] of stats) statistics[name] = { in_features: s.inFeatures, tokens: s.tokens };
    return { statistics };
  }

  /**
   * A session from its export form: an import under a new id (`id`, and `ttlSeconds` when the
   * request gives one), checked against `limits`; or a file this server wrote (no `id`), whose
   * observers were accepted when they were made and are kept whatever the limits are now.
   */
  static restore(
    value: unknown,
    options: { readonly id?: string; readonly ttlSeconds?: number; readonly limits?: CalibrationLimits } = {},
  ): CalibrationSession {
    const { id, ttlSeconds } = options;
    const limits = options.limits ?? OFFLINE_LIMITS;
    const bad = (detail: string): QuantdError =>
      new QuantdError('OBSERVER_INVALID', { observer: 'calibration state', detail });
    if (value === null || typeof value !== 'object' || Array.isArray(value))
      throw bad('must be a JSON object');
    const e = value as Partial<CalibrationExport>;
    if (e.format !== CALIBRATION_FORMAT) {
      throw bad(`format must be ${CALIBRATION_FORMAT} (got ${JSON.stringify(e.format)?.slice(0, 100)})`);
    }
    const recipe = parseCalibrationRecipe(e.recipe, id === undefined ? OFFLINE_LIMITS : limits);
    const created = new Date(typeof e.created === 'string' ? e.created : NaN);
    const updated = new Date(typeof e.updated === 'string' ? e.updated : NaN);
    if (Number.isNaN(created.getTime()) || Number.isNaN(updated.getTime())) {
      throw bad('created and updated must be dates');
    }
    // a file an earlier version wrote from an unchecked import is taken back within the limits
    // (kept, not set aside); an import is refused
    const trusted = id === undefined;
    let ttl = ttlSeconds ?? e.ttl_seconds;
    if (trusted && typeof ttl === 'number' && ttl > MAX_TTL_SECONDS) ttl = MAX_TTL_SECONDS;
    if (typeof ttl !== 'number' || !Number.isFinite(ttl) || !(ttl > 0) || ttl > MAX_TTL_SECONDS) {
      throw bad(
        `ttl_seconds must be a number of seconds in (0, ${MAX_TTL_SECONDS}] (got ${String(ttl).slice(0, 40)})`,
      );
    }
    let batches = e.batches ?? 0;
    if (trusted && typeof batches === 'number' && Number.isFinite(batches)) {
      batches = Math.max(0, Math.min(Math.floor(batches), Number.MAX_SAFE_INTEGER));
    }
    if (typeof batches !== 'number' || !Number.isSafeInteger(batches) || batches < 0) {
      throw bad(`batches must be a count: an integer of at least 0 (got ${String(batches).slice(0, 40)})`);
    }
    const session = new CalibrationSession(
      id ?? String(e.id),
      recipe,
      ttl,
      id ? new Date() : created,
      limits,
    );
    if (!id) session.updated = updated;
    if (Number.isNaN(session.expires.getTime())) throw bad('updated is too far in the future');
    session.batches = batches;
    const observers = e.observers ?? {};
    if (typeof observers !== 'object' || observers === null || Array.isArray(observers)) {
      throw bad('observers must be an object');
    }
    // own keys only (Object.entries), so a tensor called __proto__ or constructor is one too
    const entries = Object.entries(observers);
    if (entries.length > MAX_OBSERVERS) throw bad(`holds more than ${MAX_OBSERVERS} observers`);
    for (const [name, exported] of entries) {
      let config: ObserverConfig;
      let state: ObserverState;
      try {
        ({ config, state } = importObserver(exported));
      } catch (err) {
        throw named(name, err);
      }
      if (id !== undefined) {
        const tooLarge = binsProblem(config, limits);
        if (tooLarge) throw named(name, bad(tooLarge));
        if (state.lo.length > limits.maxChannels) {
          throw named(
            name,
            bad(
              `tracks ${state.lo.length} channels; this server tracks at most ${limits.maxChannels} (QUANTD_CALIBRATION_MAX_CHANNELS)`,
            ),
          );
        }
      }
      session.observers.set(name, { config, state });
    }
    if (id !== undefined) {
      const bytes = session.observerBytes();
      const most = Math.min(MAX_OBSERVER_BYTES, limits.sessionBytes);
      if (bytes > most) {
        throw full(
          `the imported state holds ${bytes} bytes of observer state; a session holds at most ${most} (QUANTD_CALIBRATION_SESSION_BYTES)`,
        );
      }
    }
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
