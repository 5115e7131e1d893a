/**
 * The server's calibration sessions, persisted under DATA_DIR/calibrations: one file per
 * session (`ID.json`, the session's export form), rewritten atomically after each batch before
 * the batch is acknowledged, so a restart resumes every session where its last acknowledged
 * batch left it. A session's linear-layer statistics live beside it in `ID.N.stats` (a layer
 * statistics file, N its batch count): a batch that changes them writes the next one, then the
 * JSON naming it, then removes the previous one, so a crash at any point leaves the JSON naming a
 * complete file of the same batches. A session expires `ttl_seconds` after its last batch
 * (default a day); expired sessions are removed, on access and by a sweep every minute.
 *
 * Every session's state together stays within the server's budget (QUANTD_CALIBRATION_BYTES):
 * what each session holds is counted, and a batch reserves the copies it makes before it starts
 * (limits.ts). Deleting a session gives its bytes back, and the memory with them: its arrays are
 * collected then rather than whenever the heap next fills (shared ones never count as pressure).
 */
import { randomBytes } from 'node:crypto';
import { mkdir, open, readdir, readFile, rename, rm, type FileHandle } from 'node:fs/promises';
import { join } from 'node:path';
import type { Compute } from '../../core/compute.js';
import { toFloat32 } from '../../core/index.js';
import { QuantdError } from '../../errors/index.js';
import { collectGarbage } from '../../kernels/gc.js';
import { EVERYONE, type Caller } from '../auth.js';
import { errorCode, writeError, writeFileAtomic } from '../../format/file-io.js';
import { parseSafetensors } from '../../format/safetensors.js';
import { indexLayerStats, readLayerStats, writeLayerStats } from '../../format/layer-stats.js';
import type { LinearStats } from '../../core/linear-stats.js';
import { floatDType } from '../layouts/linear-common.js';
import { OFFLINE_LIMITS, StateBudget, type CalibrationLimits } from './limits.js';
import { parseCalibrationRecipe } from './recipe.js';
import {
  CalibrationSession,
  DEFAULT_TTL_SECONDS,
  MAX_TTL_SECONDS,
  type BatchTensor,
  type FoldResult,
  type SessionSnapshot,
} from './session.js';

export { DEFAULT_TTL_SECONDS, MAX_TTL_SECONDS };
export const MAX_SESSIONS = 1000;
const SWEEP_MS = 60_000;
const ID = /^[0-9a-f]{24}$/;
const STATS_FILE = /^([0-9a-f]{24})\.\d+\.stats$/;
/** Statistics replaced by folds past which the heap is collected (see freed). */
const FREED_QUOTA = 256 * 1024 ** 2;
/** State freed, a deletion's included, past which a deletion collects the heap. */
const DELETED_QUOTA = 16 * 1024 ** 2;
/** Explicit collections come at most this often (see freed). */
const COLLECT_EVERY_MS = 10_000;

export interface CalibrationLog {
  warn(obj: object, msg: string): void;
}

export interface CalibrationStoreOptions {
  readonly dataDir: string;
  readonly compute: Compute;
  /** default MAX_SESSIONS */
  readonly maxSessions?: number;
  /** What one session may hold (QUANTD_CALIBRATION_*); default: the hard limits alone. */
  readonly limits?: CalibrationLimits;
  /** Bytes every session's state may take together, copies in flight included (default: no budget). */
  readonly budgetBytes?: number;
}

export interface CreateRequest {
  readonly recipe?: unknown;
  /** an export (GET …/state) to continue from, under a new id */
  readonly state?: unknown;
  readonly ttl_seconds?: unknown;
}

export class CalibrationStore {
  private readonly dir: string;
  private readonly sessions = new Map<string, CalibrationSession>();
  /** Each session's current statistics file name (in dir), if it has statistics. */
  private readonly statsFiles = new Map<string, string>();
  private sweeper: NodeJS.Timeout | undefined;
  private readonly limits: CalibrationLimits;
  /** Every session's bytes and the reservations of folds in flight. */
  readonly budget: StateBudget;
  /** The bytes each session is counted for in the budget. */
  private readonly charged = new Map<string, number>();
  private freedBytes = 0;
  /** The collection to come, and when the last one ran (freed). */
  private collection: NodeJS.Timeout | undefined;
  private collected = -Infinity;
  /** Where set-aside files are reported (the server's logger, once it has one). */
  log: CalibrationLog | undefined;

  constructor(private readonly options: CalibrationStoreOptions) {
    this.dir = join(options.dataDir, 'calibrations');
    this.limits = options.limits ?? OFFLINE_LIMITS;
    this.budget = new StateBudget(options.budgetBytes ?? Number.POSITIVE_INFINITY);
  }

  /**
   * Loads the sessions a previous process left; a damaged file is set aside as ID.json.damaged.
   * A data directory that cannot be read does not stop the server (as for jobs): creating a
   * session then fails with the catalogued write error.
   */
  async start(): Promise<void> {
    let files: string[] = [];
    try {
      files = await readdir(this.dir);
    } catch (err) {
      if (errorCode(err) !== 'ENOENT')
        this.log?.warn({ err, dir: this.dir }, 'calibration sessions unreadable');
    }
    for (const file of files) {
      const id = file.endsWith('.json') ? file.slice(0, -5) : '';
      if (!ID.test(id)) continue;
      const path = join(this.dir, file);
      try {
        const saved = JSON.parse(await readFile(path, 'utf8')) as {
          owner?: unknown;
          statistics_file?: unknown;
        };
        const session = CalibrationSession.restore(saved, { limits: this.limits });
        if (session.id !== id) throw new Error(`it records id ${session.id}`);
        session.owner = typeof saved.owner === 'string' ? saved.owner : null;
        const statsFile = saved.statistics_file;
        if (statsFile !== undefined) {
          if (typeof statsFile !== 'string' || STATS_FILE.exec(statsFile)?.[1] !== id) {
            throw new Error(`it names the statistics file ${JSON.stringify(statsFile)}`);
          }
          const layers = await indexLayerStats(join(this.dir, statsFile));
          for (const [name, ref] of layers) {
            session.stats.set(name, this.shareable(await readLayerStats(ref, name)));
          }
          this.statsFiles.set(id, statsFile);
        }
        this.sessions.set(id, session);
        // accepted when they were made: counted whatever the budget is now (new batches wait for room)
        this.charge(id, session.bytes);
      } catch (err) {
        this.log?.warn({ err, path }, 'calibration session unreadable: set aside');
        await rename(path, `${path}.damaged`).catch(() => {});
      }
    }
    // statistics files no session names: a batch that did not finish, or a removed session's
    for (const file of files) {
      const owner = STATS_FILE.exec(file)?.[1];
      if (owner !== undefined && this.statsFiles.get(owner) !== file) {
        await rm(join(this.dir, file), { force: true });
      }
    }
    await this.sweep();
    this.sweeper = setInterval(() => void this.sweep().catch(() => {}), SWEEP_MS);
    this.sweeper.unref();
  }

  async stop(): Promise<void> {
    clearInterval(this.sweeper);
    clearTimeout(this.collection);
    // let every batch in flight reach the disk
    await Promise.all([...this.sessions.values()].map((s) => s.serialized(async () => {})));
  }

  async create(request: CreateRequest, caller: Caller = EVERYONE): Promise<CalibrationSession> {
    if (request === null || typeof request !== 'object') {
      throw new QuantdError('RECIPE_INVALID', {
        where: '(request)',
        detail: 'send {"recipe": …} or {"state": …}',
      });
    }
    const ttl = ttlOf(request.ttl_seconds);
    if ((request.recipe === undefined) === (request.state === undefined)) {
      throw new QuantdError('RECIPE_INVALID', {
        where: '(request)',
        detail: 'send exactly one of "recipe" (a new session) and "state" (an exported one, continued)',
      });
    }
    await this.sweep();
    const limit = this.options.maxSessions ?? MAX_SESSIONS;
    const held = [...this.sessions.values()].filter((s) => s.owner === caller.owner).length;
    if (held >= limit) {
      throw new QuantdError('CALIBRATION_FULL', {
        detail: `${caller.owner === null ? 'the server holds' : 'this API key holds'} ${limit} calibration sessions; delete one or let it expire`,
      });
    }
    const id = randomBytes(12).toString('hex');
    const session =
      request.state !== undefined
        ? CalibrationSession.restore(request.state, {
            id,
            ...(ttl !== null && { ttlSeconds: ttl }),
            limits: this.limits,
          })
        : new CalibrationSession(
            id,
            parseCalibrationRecipe(request.recipe, this.limits),
            ttl ?? DEFAULT_TTL_SECONDS,
            new Date(),
            this.limits,
          );
    session.owner = caller.owner;
    const release = this.budget.take(session.bytes, 'the imported calibration state');
    try {
      await this.persist(session, session.snapshot(), null);
    } catch (err) {
      release();
      throw err;
    }
    release();
    this.sessions.set(id, session);
    this.charge(id, session.bytes);
    return session;
  }

  /** Session `id` as `caller` may see it: another key's session is not found, like a missing one. */
  get(id: string, caller: Caller = EVERYONE): CalibrationSession {
    const session = ID.test(id) ? this.sessions.get(id) : undefined;
    const visible = session !== undefined && (caller.admin || session.owner === caller.owner);
    if (!visible || session.expires.getTime() <= Date.now()) {
      throw new QuantdError('CALIBRATION_NOT_FOUND', { id: id.slice(0, 100) });
    }
    return session;
  }

  list(caller: Caller = EVERYONE): CalibrationSession[] {
    const now = Date.now();
    return [...this.sessions.values()]
      .filter((s) => s.expires.getTime() > now && (caller.admin || s.owner === caller.owner))
      .sort((a, b) => b.created.getTime() - a.created.getTime());
  }

  async remove(id: string, caller: Caller = EVERYONE): Promise<void> {
    const session = this.get(id, caller);
    await session.serialized(async () => {
      this.forget(id);
      await this.removeFiles(id);
    });
  }

  /**
   * The session's layer statistics file, opened, with its size (a batch may replace the file
   * afterwards: the handle still reads the one of the batches acknowledged when it was opened).
   * The caller closes it.
   */
  async openStatistics(
    id: string,
    caller: Caller = EVERYONE,
  ): Promise<{ readonly handle: FileHandle; readonly size: number }> {
    const session = this.get(id, caller);
    return session.serialized(async () => {
      const file = this.statsFiles.get(id);
      if (this.sessions.get(id) !== session || file === undefined) {
        throw new QuantdError('NO_TENSOR_SELECTED', {
          detail: `calibration ${id} holds no layer statistics (its recipe gathers them with a rule {"match": …, "statistics": "linear"})`,
        });
      }
      const handle = await open(join(this.dir, file), 'r');
      try {
        return { handle, size: (await handle.stat()).size };
      } catch (err) {
        await handle.close();
        throw err;
      }
    });
  }

  /** Folds a safetensors batch into session `id`; acknowledged once it is on disk. */
  fold(id: string, body: Uint8Array, caller: Caller = EVERYONE, signal?: AbortSignal): Promise<FoldResult> {
    const session = this.get(id, caller);
    const tensors = batchTensors(body);
    return session.serialized(async () => {
      if (this.sessions.get(id) !== session) throw new QuantdError('CALIBRATION_NOT_FOUND', { id });
      return session.fold(
        tensors,
        this.options.compute,
        (next, stats) => this.persist(session, next, stats),
        signal,
        ({ growth, transient, replaced }) => {
          const release = this.budget.take(growth + transient, `a batch of calibration ${id}`);
          return () => {
            release();
            // the session as the fold left it (grown, or as it was); the old states are garbage
            if (this.sessions.get(id) === session) this.charge(id, session.bytes);
            this.freed(replaced, FREED_QUOTA);
          };
        },
      );
    });
  }

  /** The qparams file of session `id` (its range searches on the store's compute). */
  qparams(id: string, caller: Caller = EVERYONE, signal?: AbortSignal): Promise<Uint8Array> {
    const session = this.get(id, caller);
    return session.serialized(() => session.qparamsFile(this.options.compute, signal));
  }

  /**
   * Session `id`'s export form as JSON text in pieces (CalibrationSession.exportText), of the
   * state its acknowledged batches left: later ones do not change what this gives.
   */
  async exportText(id: string, caller: Caller = EVERYONE): Promise<Iterable<string>> {
    const session = this.get(id, caller);
    const snapshot = await session.serialized(async () => session.snapshot());
    return session.exportText(snapshot);
  }

  /** Counts `bytes` for session `id` in the budget (what it held before is given back). */
  private charge(id: string, bytes: number): void {
    this.budget.adjust(bytes - (this.charged.get(id) ?? 0));
    this.charged.set(id, bytes);
  }

  /** Drops session `id`: its bytes leave the budget, and its memory the process. */
  private forget(id: string): void {
    const session = this.sessions.get(id);
    this.sessions.delete(id);
    this.charge(id, 0);
    this.charged.delete(id);
    if (!session) return;
    this.freed(session.bytes, DELETED_QUOTA);
    // whoever still holds the object (a summary being sent) does not hold its arrays
    session.observers.clear();
    session.stats.clear();
  }

  /**
   * `bytes` of state became garbage. Past `quota` of it the heap is collected once the current
   * work is done: a session's statistics are shared arrays, which V8 does not count as memory
   * to collect for, and a deleted session's histograms would otherwise wait for the next full
   * collection, however long that is. A collection holds the event loop for the time it takes
   * (10–115 ms here, mostly returning the pages: the heap itself is ~30 MB), so folds, which free
   * statistics all the time, collect past a larger quota than deletions, and collections come at
   * most one per COLLECT_EVERY_MS: a client deleting session after session does not turn them
   * into a stall every few hundred milliseconds.
   */
  private freed(bytes: number, quota: number): void {
    this.freedBytes += bytes;
    if (this.freedBytes < quota || this.collection !== undefined) return;
    const wait = Math.max(0, this.collected + COLLECT_EVERY_MS - Date.now());
    this.collection = setTimeout(() => {
      this.collection = undefined;
      this.freedBytes = 0;
      this.collected = Date.now();
      collectGarbage();
    }, wait);
    this.collection.unref();
  }

  /** Statistics read from a file, in shared memory when the compute's workers read them in place. */
  private shareable(stats: LinearStats): LinearStats {
    if (!this.options.compute.sharedInputs) return stats;
    const copy = (a: Float64Array): Float64Array => {
      const shared = new Float64Array(new SharedArrayBuffer(a.byteLength));
      shared.set(a);
      return shared;
    };
    return { ...stats, hessian: copy(stats.hessian), absSum: copy(stats.absSum) };
  }

  private fileOf(id: string): string {
    return join(this.dir, `${id}.json`);
  }

  /**
   * The session file: its export form, the owner (never part of an export) and its statistics
   * file, written first when `stats` changed (see the file comment).
   */
  private async persist(
    session: CalibrationSession,
    snapshot: SessionSnapshot,
    stats: ReadonlyMap<string, LinearStats> | null,
  ): Promise<void> {
    try {
      await mkdir(this.dir, { recursive: true });
    } catch (err) {
      throw writeError(this.dir, err);
    }
    const id = session.id;
    const previous = this.statsFiles.get(id);
    let statsFile = previous;
    if (stats !== null) {
      statsFile = `${id}.${snapshot.batches}.stats`;
      await writeLayerStats(join(this.dir, statsFile), stats, { 'quantd.calibration': id });
    }
    try {
      // in pieces, each written before the next is made: the loop is never held by the whole text
      await writeFileAtomic(
        this.fileOf(id),
        session.exportText(snapshot, { owner: session.owner, statistics_file: statsFile }),
      );
    } catch (err) {
      if (statsFile !== previous) await rm(join(this.dir, statsFile!), { force: true });
      throw err;
    }
    if (statsFile === undefined) return;
    this.statsFiles.set(id, statsFile);
    if (previous !== undefined && previous !== statsFile) await rm(join(this.dir, previous), { force: true });
  }

  private async removeFiles(id: string): Promise<void> {
    await rm(this.fileOf(id), { force: true });
    const stats = this.statsFiles.get(id);
    this.statsFiles.delete(id);
    if (stats !== undefined) await rm(join(this.dir, stats), { force: true });
  }

  private async sweep(): Promise<void> {
    const now = Date.now();
    for (const [id, session] of this.sessions) {
      if (session.expires.getTime() > now) continue;
      this.forget(id);
      await this.removeFiles(id);
    }
  }
}

function ttlOf(value: unknown): number | null {
  if (value === undefined) return null;
  if (typeof value !== 'number' || !Number.isFinite(value) || value <= 0 || value > MAX_TTL_SECONDS) {
    throw new QuantdError('OPTION_INVALID', {
      option: 'ttl_seconds',
      detail: `must be a number of seconds in (0, ${MAX_TTL_SECONDS}]`,
      value: String(value),
    });
  }
  return value;
}

/** A batch's float tensors (F32 in place, F16 / BF16 widened; others INPUT_DTYPE_UNSUPPORTED). */
export function batchTensors(body: Uint8Array): BatchTensor[] {
  const { header, tensorBytes } = parseSafetensors(body, 'calibration batch');
  return header.entries.map((entry) => ({
    name: entry.name,
    shape: entry.shape,
    x: toFloat32(tensorBytes(entry), floatDType(entry)),
  }));
}
