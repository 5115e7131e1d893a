/**
 * Server configuration from the environment, validated once at start-up: every variable has a
 * type, a default and a range, and a bad value stops the server with CONFIG_INVALID naming it.
 */
import { readFileSync } from 'node:fs';
import { BlockList, isIPv4, isIPv6 } from 'node:net';
import { availableParallelism, totalmem } from 'node:os';
import { QuantdError } from './errors/index.js';

export interface Config {
  /** QUANTD_HOST: loopback by default; any other address needs API keys or allowUnauthenticated. */
  readonly host: string;
  /** QUANTD_ALLOW_UNAUTHENTICATED: serve a non-loopback address without API keys, on purpose. */
  readonly allowUnauthenticated: boolean;
  readonly httpPort: number;
  readonly grpcPort: number;
  /** Largest request body and largest unary gRPC message, in bytes. */
  readonly bodyLimit: number;
  /**
   * QUANTD_JSON_LIMIT: largest JSON body (job requests, and any route's but the two below);
   * JSON is parsed on the event loop, so it is kept small.
   */
  readonly jsonLimit: number;
  /** QUANTD_OIP_JSON_LIMIT: largest JSON part of a /v2 inference request (tensors as JSON data). */
  readonly oipJsonLimit: number;
  /** Largest input of a gRPC QuantizeStream (its chunks together), in bytes. */
  readonly streamLimit: number;
  readonly poolSize: number;
  /** Tensors below this many elements are computed in the server thread (pool round trip costs more). */
  readonly inlineLimit: number;
  /** Tensor operations that may wait beyond the running ones before requests get 503. */
  readonly queueLimit: number;
  readonly requestTimeoutMs: number;
  /**
   * QUANTD_MEMORY_BUDGET: bytes the admitted requests may hold at once — their bodies or messages,
   * the copies a transport makes of them, their results — counted at admission (503 OVERLOADED past
   * it). Default: a quarter of the memory the process may have (hostMemoryBytes).
   */
  readonly memoryBudget: number;
  /** QUANTD_DOWNLOAD_LIMIT: result downloads sent at once (their own pool, not compute slots). */
  readonly downloadLimit: number;
  /**
   * QUANTD_STREAM_IDLE_MS: how long a response or a gRPC stream may wait on its client — to read
   * what the server sends, or to send the message the server waits for — before it is cut.
   */
  readonly streamIdleMs: number;
  /** QUANTD_LIVE_STREAMS: live streams (job events, gRPC health Watch, reflection) open at once. */
  readonly liveStreams: number;
  /** QUANTD_LIVE_STREAMS_PER_CLIENT: of those, what one key (or, without one, one address) may hold. */
  readonly liveStreamsPerClient: number;
  /** The least pace of a request body (src/http/pace.ts). */
  readonly bodyIdleMs: number;
  /** How long a connection may take to send a request's line and headers (slowloris on heads). */
  readonly headersTimeoutMs: number;
  readonly bodyMinRate: number;
  readonly shutdownTimeoutMs: number;
  /** Bearer tokens; empty: authentication off. */
  readonly apiKeys: readonly string[];
  /** QUANTD_ADMIN_KEYS: keys that also see and manage every key's jobs. */
  readonly adminKeys: readonly string[];
  /** QUANTD_JOB_QUOTA: queued + running jobs one key may have. */
  readonly jobQuota: number;
  /** QUANTD_JOB_LIMIT: jobs one key may keep (finished ones count until deleted). */
  readonly jobLimit: number;
  /** QUANTD_JOB_RETENTION: finished jobs are deleted this long after finishing (0: kept). */
  readonly jobRetentionMs: number;
  /** QUANTD_JOB_STORE_LIMIT: bytes finished jobs' results may hold together (null: no limit). */
  readonly jobStoreLimit: number | null;
  readonly logLevel: 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace' | 'silent';
  readonly backend: string;
  readonly isa: string;
  readonly dataDir: string;
  /** Jobs (/v1/jobs) run at once. */
  readonly jobConcurrency: number;
  /** Largest model upload to /v1/jobs, in bytes (streamed to disk, never held in memory). */
  readonly uploadLimit: number;
  readonly tlsCert: string | null;
  readonly tlsKey: string | null;
  /** QUANTD_REDIS_URL: cluster mode (jobs in Redis, any replica runs them); null: a single node. */
  readonly redisUrl: string | null;
  /** QUANTD_REDIS_PREFIX: the prefix of every Redis key; the replicas of one service share it. */
  readonly redisPrefix: string;
  /** QUANTD_REPLICA_ID: this replica's name in each job's runs (null: host name and process id). */
  readonly replicaId: string | null;
  /** QUANTD_CLUSTER_LOCK_MS: how long a replica that stopped answering keeps the job it ran. */
  readonly clusterLockMs: number;
  /** QUANTD_CALIBRATION_MAX_BINS: the most bins a histogram observer of a session may have. */
  readonly calibrationMaxBins: number;
  /** QUANTD_CALIBRATION_MAX_CHANNELS: the most channels a per-channel observer may track. */
  readonly calibrationMaxChannels: number;
  /** QUANTD_CALIBRATION_MAX_FEATURES: the widest layer whose linear statistics a session gathers. */
  readonly calibrationMaxFeatures: number;
  /** QUANTD_CALIBRATION_SESSION_BYTES: the state one calibration session may hold. */
  readonly calibrationSessionBytes: number;
  /** QUANTD_CALIBRATION_BYTES: the state every session may hold together (null: a quarter of the host's memory). */
  readonly calibrationBytes: number | null;
  /** QUANTD_CALIBRATION_IMPORT_LIMIT: the largest session JSON (a recipe, or an import) in bytes. */
  readonly calibrationImportLimit: number;
}

type Env = Readonly<Record<string, string | undefined>>;

const MiB = 1024 ** 2;
const GiB = 1024 ** 3;
/** The largest byte array V8 allocates (2^32 bytes). */
const MAX_BUFFER = 4 * GiB;
/**
 * The most a JSON limit may be set to: a body is decoded into one string before it is parsed,
 * and V8's strings end at 2^29 - 24 characters (a larger body made Node throw
 * ERR_STRING_TOO_LONG); half of that keeps every decoded body well inside.
 */
const MAX_JSON = 256 * MiB;
const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;

function integer(env: Env, key: string, fallback: number, min: number, max: number): number {
  const raw = env[key];
  if (raw === undefined || raw.trim() === '') return fallback;
  const value = /^\d+$/.test(raw.trim()) ? Number(raw) : NaN;
  if (!Number.isSafeInteger(value) || value < min || value > max) {
    throw new QuantdError('CONFIG_INVALID', {
      key,
      detail: `must be an integer in [${min}, ${max}]`,
      value: raw,
    });
  }
  return value;
}

/** Sizes accept a plain byte count or a suffix: 512k, 64m, 2g (binary multiples). */
function size(env: Env, key: string, fallback: number): number {
  const raw = env[key];
  if (raw === undefined || raw.trim() === '') return fallback;
  const m = /^(\d+)\s*([kmg]?)i?b?$/i.exec(raw.trim());
  const value = m ? Number(m[1]) * 1024 ** ' kmg'.indexOf((m[2] || ' ').toLowerCase()) : NaN;
  if (!Number.isSafeInteger(value) || value < 1024) {
    throw new QuantdError('CONFIG_INVALID', {
      key,
      detail: 'must be a size of at least 1024 bytes (e.g. 2g, 512m)',
      value: raw,
    });
  }
  return value;
}

/** A size within [1024, max] bytes. */
function sizeAtMost(env: Env, key: string, fallback: number, max: number): number {
  const value = size(env, key, fallback);
  if (value > max) {
    throw new QuantdError('CONFIG_INVALID', {
      key,
      detail: `must be at most ${max} bytes (${max / MiB}m)`,
      value: env[key] ?? '',
    });
  }
  return value;
}

/** A switch: 1, true, yes (on) or 0, false, no, empty (off). */
function flag(env: Env, key: string): boolean {
  const raw = env[key]?.trim().toLowerCase() ?? '';
  if (raw === '' || raw === '0' || raw === 'false' || raw === 'no') return false;
  if (raw === '1' || raw === 'true' || raw === 'yes') return true;
  throw new QuantdError('CONFIG_INVALID', {
    key,
    detail: 'must be 1, true, yes, 0, false or no',
    value: raw,
  });
}

const LOOPBACK = new BlockList();
LOOPBACK.addSubnet('127.0.0.0', 8, 'ipv4');
LOOPBACK.addAddress('::1', 'ipv6');

/**
 * Whether `host` names this machine's loopback only: 127.0.0.0/8, ::1 (also IPv4-mapped), or
 * localhost. Anything else — a wildcard (0.0.0.0, ::), an interface's address, a host name that
 * DNS resolves — may be reached from other machines.
 */
export function isLoopbackHost(host: string): boolean {
  const h = host
    .trim()
    .toLowerCase()
    .replace(/^\[(.*)\]$/, '$1');
  if (h === 'localhost') return true;
  if (isIPv4(h)) return LOOPBACK.check(h, 'ipv4');
  return isIPv6(h) && LOOPBACK.check(h, 'ipv6'); // ::1 in any spelling, and ::ffff:127.x.y.z
}

/** The default of QUANTD_HOST: only this machine can connect until told otherwise. */
export const DEFAULT_HOST = '127.0.0.1';

/**
 * QUANTD_HOST, refused when it may be reached from other machines while no key is set, unless
 * QUANTD_ALLOW_UNAUTHENTICATED says so: with authentication off every client is the one tenant,
 * who runs jobs, reads and deletes every result and fills the disk.
 */
function host(env: Env, keys: number, allowUnauthenticated: boolean): string {
  const value = env['QUANTD_HOST']?.trim() || DEFAULT_HOST;
  if (keys === 0 && !allowUnauthenticated && !isLoopbackHost(value)) {
    throw new QuantdError('CONFIG_INVALID', {
      key: 'QUANTD_HOST',
      detail:
        'is not a loopback address and no API key is set, so anyone who reaches it could run jobs and read every result; set QUANTD_API_KEYS (bearer tokens), or QUANTD_ALLOW_UNAUTHENTICATED=1 to serve it without authentication on purpose',
      value,
    });
  }
  return value;
}

function choice<T extends string>(env: Env, key: string, fallback: T, allowed: readonly T[]): T {
  const raw = env[key]?.trim();
  if (!raw) return fallback;
  if (!(allowed as readonly string[]).includes(raw)) {
    throw new QuantdError('CONFIG_INVALID', {
      key,
      detail: `must be one of ${allowed.join(', ')}`,
      value: raw,
    });
  }
  return raw as T;
}

const DURATION_UNITS: Readonly<Record<string, number>> = {
  ms: 1,
  s: 1000,
  m: 60_000,
  h: 3_600_000,
  d: 86_400_000,
};

/** A duration: 7d, 12h, 30m, 45s, 500ms, or 0 (none). */
function duration(env: Env, key: string, fallback: number): number {
  const raw = env[key]?.trim();
  if (!raw) return fallback;
  const m = /^(\d+)\s*(ms|s|m|h|d)?$/.exec(raw);
  const value = m ? Number(m[1]) * DURATION_UNITS[m[2] ?? (m[1] === '0' ? 'ms' : '')]! : NaN;
  if (!Number.isSafeInteger(value)) {
    throw new QuantdError('CONFIG_INVALID', {
      key,
      detail: 'must be a duration such as 7d, 12h, 30m, 45s, 500ms, or 0',
      value: raw,
    });
  }
  return value;
}

/** A comma-separated list of bearer keys, each of 16 characters or more. */
function keyList(env: Env, name: string): string[] {
  const keys = (env[name] ?? '')
    .split(',')
    .map((k) => k.trim())
    .filter((k) => k.length > 0);
  for (const key of keys) {
    if (key.length < 16) {
      throw new QuantdError('CONFIG_INVALID', {
        key: name,
        detail: 'keys must be at least 16 characters',
        value: `${key.slice(0, 2)}…`,
      });
    }
  }
  return keys;
}

/** A cgroup memory limit file's value in bytes, or null (absent, unreadable, or "max": none). */
function cgroupLimit(path: string): number | null {
  try {
    const text = readFileSync(path, 'utf8').trim();
    const value = /^\d+$/.test(text) ? Number(text) : NaN;
    // cgroup v1 writes "no limit" as a number near 2^63
    return Number.isSafeInteger(value) && value > 0 ? value : null;
  } catch {
    return null;
  }
}

/**
 * The memory this process may use: the machine's, or its cgroup's limit when that is lower (a
 * container's memory limit is what the kernel enforces; os.totalmem() reports the host's).
 * cgroup v2 first (the process's own group, then the root's), then v1.
 */
export function hostMemoryBytes(): number {
  const candidates = [totalmem()];
  let group = '';
  try {
    group = /^0::(\/.*)$/m.exec(readFileSync('/proc/self/cgroup', 'utf8'))?.[1] ?? '';
  } catch {
    // not Linux: the machine's memory
  }
  for (const path of [
    `/sys/fs/cgroup${group === '/' ? '' : group}/memory.max`,
    '/sys/fs/cgroup/memory.max',
    '/sys/fs/cgroup/memory/memory.limit_in_bytes',
  ]) {
    const limit = cgroupLimit(path);
    if (limit !== null) candidates.push(limit);
  }
  return Math.min(...candidates);
}

/**
 * QUANTD_MEMORY_BUDGET's default: a quarter of the memory the process may have, at least 256 MiB.
 * The rest is the runtime's, the worker pool's, model jobs' (which budget their own buffers),
 * calibration sessions', and what V8 keeps between collections.
 */
export function defaultMemoryBudget(memory = hostMemoryBytes()): number {
  return Math.max(256 * MiB, Math.floor(memory / 4));
}

export function loadConfig(env: Env = process.env): Config {
  const apiKeys = keyList(env, 'QUANTD_API_KEYS');
  const adminKeys = keyList(env, 'QUANTD_ADMIN_KEYS');
  const tlsCert = env['QUANTD_TLS_CERT']?.trim() || null;
  const tlsKey = env['QUANTD_TLS_KEY']?.trim() || null;
  if ((tlsCert === null) !== (tlsKey === null)) {
    throw new QuantdError('CONFIG_INVALID', {
      key: 'QUANTD_TLS_CERT/QUANTD_TLS_KEY',
      detail: 'must be set together',
      value: tlsCert ?? tlsKey ?? '',
    });
  }
  const allowUnauthenticated = flag(env, 'QUANTD_ALLOW_UNAUTHENTICATED');
  return {
    host: host(env, apiKeys.length + adminKeys.length, allowUnauthenticated),
    allowUnauthenticated,
    httpPort: integer(env, 'QUANTD_HTTP_PORT', 8080, 0, 65535),
    grpcPort: integer(env, 'QUANTD_GRPC_PORT', 50051, 0, 65535),
    bodyLimit: size(env, 'QUANTD_BODY_LIMIT', 2 * GiB),
    // JSON is parsed on the event loop, and its cost is in what it allocates, not its bytes:
    // JSON.parse took 29 ms for 1 MiB of empty arrays, 363 ms for 4 MiB, 1.25 s for 8 MiB (GC).
    // A job request or a recipe (at most 256 rules) is a few kilobytes.
    jsonLimit: sizeAtMost(env, 'QUANTD_JSON_LIMIT', MiB, MAX_JSON),
    // 4 MiB is ~200 000 float32 values as JSON text (62 ms for a whole request); larger tensors
    // go as binary data (binary_data_size), which every stock client supports
    oipJsonLimit: sizeAtMost(env, 'QUANTD_OIP_JSON_LIMIT', 4 * MiB, MAX_JSON),
    streamLimit: Math.min(size(env, 'QUANTD_STREAM_LIMIT', 4 * GiB), MAX_BUFFER),
    poolSize: integer(env, 'QUANTD_POOL_SIZE', availableParallelism(), 1, 1024),
    inlineLimit: integer(env, 'QUANTD_INLINE_LIMIT', 1 << 18, 0, Number.MAX_SAFE_INTEGER),
    queueLimit: integer(env, 'QUANTD_QUEUE_LIMIT', 64, 0, 1_000_000),
    requestTimeoutMs: integer(env, 'QUANTD_REQUEST_TIMEOUT_MS', 300_000, 100, 86_400_000),
    memoryBudget: env['QUANTD_MEMORY_BUDGET']?.trim()
      ? size(env, 'QUANTD_MEMORY_BUDGET', 0)
      : defaultMemoryBudget(),
    downloadLimit: integer(env, 'QUANTD_DOWNLOAD_LIMIT', 64, 1, 1_000_000),
    streamIdleMs: integer(env, 'QUANTD_STREAM_IDLE_MS', 30_000, 100, 3_600_000),
    liveStreams: integer(env, 'QUANTD_LIVE_STREAMS', 256, 1, 1_000_000),
    liveStreamsPerClient: integer(env, 'QUANTD_LIVE_STREAMS_PER_CLIENT', 32, 1, 1_000_000),
    bodyIdleMs: integer(env, 'QUANTD_BODY_IDLE_MS', 15_000, 100, 3_600_000),
    headersTimeoutMs: integer(env, 'QUANTD_HEADERS_TIMEOUT_MS', 15_000, 100, 3_600_000),
    bodyMinRate: integer(env, 'QUANTD_BODY_MIN_RATE', 16 * 1024, 0, Number.MAX_SAFE_INTEGER),
    shutdownTimeoutMs: integer(env, 'QUANTD_SHUTDOWN_TIMEOUT_MS', 30_000, 0, 3_600_000),
    apiKeys,
    adminKeys,
    jobQuota: integer(env, 'QUANTD_JOB_QUOTA', 16, 1, 1_000_000),
    jobLimit: integer(env, 'QUANTD_JOB_LIMIT', 1000, 1, 10_000_000),
    jobRetentionMs: duration(env, 'QUANTD_JOB_RETENTION', 7 * 86_400_000),
    jobStoreLimit: env['QUANTD_JOB_STORE_LIMIT']?.trim() ? size(env, 'QUANTD_JOB_STORE_LIMIT', 0) : null,
    logLevel: choice(env, 'QUANTD_LOG_LEVEL', 'info', LOG_LEVELS),
    backend: choice(env, 'QUANTD_BACKEND', 'auto', ['auto', 'native', 'wasm', 'js']),
    isa: env['QUANTD_ISA']?.trim() ?? '',
    dataDir: env['QUANTD_DATA_DIR']?.trim() || './data',
    jobConcurrency: integer(env, 'QUANTD_JOB_CONCURRENCY', 1, 1, 1024),
    // a 32B-parameter model in bfloat16 in one body; larger models are better placed in the data
    // directory and named by a JSON job than sent as one HTTP body
    uploadLimit: size(env, 'QUANTD_UPLOAD_LIMIT', 64 * GiB),
    tlsCert,
    tlsKey,
    redisUrl: redisUrl(env),
    redisPrefix: name(env, 'QUANTD_REDIS_PREFIX', 'quantd'),
    replicaId: env['QUANTD_REPLICA_ID']?.trim() ? name(env, 'QUANTD_REPLICA_ID', '') : null,
    clusterLockMs: integer(env, 'QUANTD_CLUSTER_LOCK_MS', 30_000, 1000, 3_600_000),
    // calibration state (src/service/calibration/limits.ts): sized by options, not by batches
    calibrationMaxBins: integer(env, 'QUANTD_CALIBRATION_MAX_BINS', 16_384, 1, 1 << 20),
    calibrationMaxChannels: integer(env, 'QUANTD_CALIBRATION_MAX_CHANNELS', 65_536, 1, 1 << 24),
    calibrationMaxFeatures: integer(env, 'QUANTD_CALIBRATION_MAX_FEATURES', 8192, 1, 16_384),
    calibrationSessionBytes: size(env, 'QUANTD_CALIBRATION_SESSION_BYTES', 2 * GiB),
    calibrationBytes: env['QUANTD_CALIBRATION_BYTES']?.trim()
      ? size(env, 'QUANTD_CALIBRATION_BYTES', 0)
      : null,
    // a session's recipe or import (POST /v1/calibrations, gRPC Create): an export holds about
    // 11 KB per 2048-bin histogram observer, so 8 MiB is ~700 of them (a 70B-parameter model's 560
    // linear inputs); numbers parse at about 11 ms per MiB, a 14 MiB import held the loop 52-180 ms
    calibrationImportLimit: sizeAtMost(env, 'QUANTD_CALIBRATION_IMPORT_LIMIT', 8 * MiB, MAX_JSON),
  };
}

/** A redis:// or rediss:// URL, or null (unset: a single node). */
function redisUrl(env: Env): string | null {
  const raw = env['QUANTD_REDIS_URL']?.trim();
  if (!raw) return null;
  let protocol = '';
  try {
    protocol = new URL(raw).protocol;
  } catch {
    // reported below
  }
  if (protocol !== 'redis:' && protocol !== 'rediss:') {
    throw new QuantdError('CONFIG_INVALID', {
      key: 'QUANTD_REDIS_URL',
      detail: 'must be a redis:// or rediss:// URL (redis://host:6379)',
      value: raw.replace(/\/\/[^@/]*@/, '//***@'),
    });
  }
  return raw;
}

/** A name for keys and logs: letters, digits and . _ : - (at most 64). */
function name(env: Env, key: string, fallback: string): string {
  const raw = env[key]?.trim() || fallback;
  if (!/^[A-Za-z0-9._:-]{1,64}$/.test(raw)) {
    throw new QuantdError('CONFIG_INVALID', {
      key,
      detail: 'must be 1 to 64 letters, digits, dots, underscores, colons or hyphens',
      value: raw.slice(0, 80),
    });
  }
  return raw;
}
