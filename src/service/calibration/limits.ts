/**
 * What calibration state may cost. An observer's state is sized by its options and by what it
 * watches, not by the batch that feeds it — a histogram of 2^20 bins grows from a 7 KB batch,
 * a layer's Σ xᵀx of in² float64 values from one token — so each size is bounded before
 * anything is allocated: histogram bins (checked when a recipe or an import is read), channels
 * and in_features (checked against the batch's shape before any work), and the bytes of state a
 * session holds and that every session holds together (the server's budget, which the copies a
 * fold makes while it runs count against too).
 */
import { MAX_HISTOGRAM_BINS, type ObserverConfig } from '../../core/observers/index.js';
import { MAX_STATS_FEATURES } from '../../core/linear-stats.js';
import { QuantdError } from '../../errors/index.js';

export interface CalibrationLimits {
  /** Largest histogram `bins`; its merge grid, bins · upsample_rate, at most MERGE_CELLS_PER_BIN times that. */
  readonly maxBins: number;
  /** Most channels one per-channel observer tracks. */
  readonly maxChannels: number;
  /** Widest layer (in_features) whose linear statistics a session gathers. */
  readonly maxFeatures: number;
  /** Bytes of state (observers and statistics) one session may hold. */
  readonly sessionBytes: number;
}

/**
 * torch's default upsample_rate: a histogram's merge walks bins · upsample_rate cells (5 ns
 * each here), so the grid is bounded as a multiple of the bins allowed.
 */
export const MERGE_CELLS_PER_BIN = 128;

/**
 * The server's default budget for every session together (QUANTD_CALIBRATION_BYTES unset): this
 * share of the memory the host gives the process (host-memory.ts). A server's other limits are
 * in src/config.ts.
 */
export const SERVER_SHARE_OF_MEMORY = 0.25;

/** The server's calibration budget: `configured`, or SERVER_SHARE_OF_MEMORY of `hostBytes`. */
export function serverBudget(configured: number | null, hostBytes: number): number {
  return configured ?? Math.floor(SERVER_SHARE_OF_MEMORY * hostBytes);
}

/** The command line's limits: only the hard ones (its memory is the user's own). */
export const OFFLINE_LIMITS: CalibrationLimits = {
  maxBins: MAX_HISTOGRAM_BINS,
  maxChannels: 2 ** 31 - 1,
  maxFeatures: MAX_STATS_FEATURES,
  sessionBytes: Number.POSITIVE_INFINITY,
};

/** Bytes of a histogram's or min/max observer's state once it has seen `channels` channels. */
export function observerBytes(config: ObserverConfig, channels: number): number {
  const range = config.qscheme.startsWith('per_tensor') ? 8 : 8 * channels;
  return range + (config.kind === 'histogram' ? 4 * config.bins : 0);
}

/** Bytes of a layer's linear statistics: Σ xᵀx (in² float64) and Σ |x| (in float64). */
export const statisticsBytes = (inFeatures: number): number => 8 * inFeatures * (inFeatures + 1);

/** The refusal of a histogram option past the limits (null where they hold). */
export function binsProblem(config: ObserverConfig, limits: CalibrationLimits): string | null {
  if (config.kind !== 'histogram') return null;
  if (config.bins > limits.maxBins) {
    return `bins ${config.bins} is more than this server's ${limits.maxBins} (QUANTD_CALIBRATION_MAX_BINS)`;
  }
  const grid = config.bins * config.upsampleRate;
  if (grid > limits.maxBins * MERGE_CELLS_PER_BIN) {
    return `bins · upsample_rate = ${grid} is more than ${limits.maxBins * MERGE_CELLS_PER_BIN} (${MERGE_CELLS_PER_BIN} · QUANTD_CALIBRATION_MAX_BINS): each merge walks that many cells`;
  }
  return null;
}

/**
 * The server's budget of calibration state in bytes: what the sessions hold, plus what folds in
 * flight reserve for the copies they make, never more than `limit`.
 */
export class StateBudget {
  private used = 0;

  constructor(readonly limit: number) {}

  /** Bytes held or reserved now. */
  get bytes(): number {
    return this.used;
  }

  /** Takes `bytes` (what: the refusal's wording), or throws CALIBRATION_MEMORY; release gives them back once. */
  take(bytes: number, what: string): () => void {
    if (bytes > 0 && this.used + bytes > this.limit) {
      throw new QuantdError('CALIBRATION_MEMORY', {
        detail: `${what} needs ${bytes} bytes of calibration state; the server's sessions hold ${this.used} of its ${this.limit} (QUANTD_CALIBRATION_BYTES): delete sessions or let them expire`,
      });
    }
    this.used += bytes;
    let given = false;
    return () => {
      if (given) return;
      given = true;
      this.used -= bytes;
    };
  }

  /**
   * Counts `delta` more bytes (fewer when negative) without refusing: state already made, under
   * a reservation that covered it, or restored from disk.
   */
  adjust(delta: number): void {
    this.used += delta;
  }
}
