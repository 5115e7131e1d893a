/**
 * What a quantization does to a language model's predictions, from the logits of the reference
 * and of the quantized model on the same tokens (llama-perplexity's --kl-divergence statistics):
 * each model's negative log-likelihood of the next token (perplexity), the Kullback-Leibler
 * divergence KL(P_ref || P_q) of the quantized distribution from the reference one, and whether
 * both put the same token first. Probabilities are computed in float64 from float32 logits.
 *
 * Standard errors treat windows as the independent samples (tokens of one window are
 * correlated), and the comparison between the models is paired: the standard error of the
 * difference of their mean NLLs is taken over the per-window differences, which cancels the
 * variation both models share (a hard window is hard for both).
 */

/** log-softmax of one row of logits, into `out` (float64). */
export function logSoftmax(logits: Float32Array, offset: number, vocab: number, out: Float64Array): void {
  let max = -Infinity;
  for (let v = 0; v < vocab; v++) max = Math.max(max, logits[offset + v]!);
  let sum = 0;
  for (let v = 0; v < vocab; v++) sum += Math.exp(logits[offset + v]! - max);
  const log = max + Math.log(sum);
  for (let v = 0; v < vocab; v++) out[v] = logits[offset + v]! - log;
}

function argmax(row: Float64Array, vocab: number): number {
  let best = 0;
  for (let v = 1; v < vocab; v++) if (row[v]! > row[best]!) best = v;
  return best;
}

/** One window's sums: tokens scored, NLL of each model, and its tokens' KL divergences. */
export interface WindowScore {
  readonly tokens: number;
  readonly nllReference: number;
  readonly nllQuantized: number | null;
  readonly kld: Float64Array | null;
  readonly top1: number;
}

/**
 * Scores positions [from, rows - 1) of a window: row t predicts token ids[t + 1]. `quantized`
 * may be null (perplexity of the reference alone). `vocab`: the columns compared (the smaller of
 * the two models' vocabularies, which a converter may have padded).
 */
export function scoreWindow(
  ids: ArrayLike<number>,
  reference: Float32Array,
  referenceVocab: number,
  quantized: Float32Array | null,
  quantizedVocab: number,
  from: number,
): WindowScore {
  const rows = ids.length;
  const vocab = Math.min(referenceVocab, quantized === null ? referenceVocab : quantizedVocab);
  const p = new Float64Array(vocab);
  const q = new Float64Array(vocab);
  const kld = quantized === null ? null : new Float64Array(rows - 1 - from);
  let nllRef = 0;
  let nllQ = 0;
  let top1 = 0;
  for (let t = from; t < rows - 1; t++) {
    const target = ids[t + 1]!;
    logSoftmax(reference, t * referenceVocab, vocab, p);
    nllRef -= p[target]!;
    if (quantized === null) continue;
    logSoftmax(quantized, t * quantizedVocab, vocab, q);
    nllQ -= q[target]!;
    let kl = 0;
    for (let v = 0; v < vocab; v++) {
      const lp = p[v]!;
      if (lp > -Infinity) kl += Math.exp(lp) * (lp - q[v]!);
    }
    kld![t - from] = Math.max(0, kl);
    if (argmax(p, vocab) === argmax(q, vocab)) top1++;
  }
  return {
    tokens: rows - 1 - from,
    nllReference: nllRef,
    nllQuantized: quantized === null ? null : nllQ,
    kld,
    top1,
  };
}

export interface Estimate {
  readonly mean: number;
  /** Standard error of the mean over windows. */
  readonly se: number;
}

/** One window's sums, for comparing two evaluations window by window (paired). */
export interface WindowSums {
  readonly tokens: number;
  readonly nll_reference: number;
  readonly nll_quantized: number | null;
  readonly kld: number | null;
}

export interface EvalSummary {
  readonly windows: number;
  readonly tokens: number;
  /** Each window's sums, in text order. */
  readonly perWindow: readonly WindowSums[];
  /** exp(mean NLL), with the mean NLL's standard error. */
  readonly reference: { readonly perplexity: number; readonly nll: Estimate };
  readonly quantized?: {
    readonly perplexity: number;
    readonly nll: Estimate;
    /** mean NLL(quantized) − mean NLL(reference), paired over windows; z = mean / se. */
    readonly nllDifference: Estimate & { readonly z: number };
    /** PPL(quantized) / PPL(reference) = exp of the NLL difference. */
    readonly perplexityRatio: number;
    readonly kld: Estimate & {
      readonly median: number;
      readonly p90: number;
      readonly p99: number;
      readonly max: number;
    };
    /** Fraction of tokens where both models rank the same token first. */
    readonly top1Agreement: number;
    /** Histogram of per-token KL divergence on log10 bins (edges given). */
    readonly kldHistogram: { readonly edges: readonly number[]; readonly counts: readonly number[] };
  };
}

/**
 * The mean per token of per-window sums (`values`, over `weights` tokens each), and its standard
 * error from the spread of the windows' own means.
 */
function estimate(values: readonly number[], weights: readonly number[]): Estimate {
  const total = weights.reduce((a, b) => a + b, 0);
  const mean = values.reduce((a, v) => a + v, 0) / total;
  const n = values.length;
  if (n < 2) return { mean, se: 0 };
  const perWindow = values.map((v, i) => v / weights[i]!);
  const m = perWindow.reduce((a, b) => a + b, 0) / n;
  const variance = perWindow.reduce((a, v) => a + (v - m) ** 2, 0) / (n - 1);
  return { mean, se: Math.sqrt(variance / n) };
}

function quantile(sorted: Float64Array, q: number): number {
  if (sorted.length === 0) return 0;
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1));
  return sorted[i]!;
}

/** log10 edges of the KLD histogram: 1e-6 … 10, plus the bins below and above. */
const KLD_EDGES = [1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 0.03, 0.1, 0.3, 1, 3, 10];

export function summarize(scores: readonly WindowScore[]): EvalSummary {
  const tokens = scores.map((s) => s.tokens);
  const total = tokens.reduce((a, b) => a + b, 0);
  const ref = estimate(
    scores.map((s) => s.nllReference),
    tokens,
  );
  const summary: EvalSummary = {
    windows: scores.length,
    tokens: total,
    perWindow: scores.map((s) => ({
      tokens: s.tokens,
      nll_reference: s.nllReference,
      nll_quantized: s.nllQuantized,
      kld: s.kld === null ? null : s.kld.reduce((a, b) => a + b, 0),
    })),
    reference: { perplexity: Math.exp(ref.mean), nll: ref },
  };
  if (scores.length === 0 || scores[0]!.nllQuantized === null) return summary;
  const q = estimate(
    scores.map((s) => s.nllQuantized!),
    tokens,
  );
  const diff = estimate(
    scores.map((s) => s.nllQuantized! - s.nllReference),
    tokens,
  );
  const all = new Float64Array(total);
  let at = 0;
  for (const s of scores) {
    all.set(s.kld!, at);
    at += s.kld!.length;
  }
  const kldMean = estimate(
    scores.map((s) => s.kld!.reduce((a, b) => a + b, 0)),
    tokens,
  );
  const sorted = all.slice().sort();
  const counts = new Array<number>(KLD_EDGES.length + 1).fill(0);
  for (const v of all) {
    let b = 0;
    while (b < KLD_EDGES.length && v >= KLD_EDGES[b]!) b++;
    counts[b]!++;
  }
  return {
    ...summary,
    quantized: {
      perplexity: Math.exp(q.mean),
      nll: q,
      nllDifference: { ...diff, z: diff.se > 0 ? diff.mean / diff.se : 0 },
      perplexityRatio: Math.exp(diff.mean),
      kld: {
        ...kldMean,
        median: quantile(sorted, 0.5),
        p90: quantile(sorted, 0.9),
        p99: quantile(sorted, 0.99),
        max: sorted.length > 0 ? sorted[sorted.length - 1]! : 0,
      },
      top1Agreement: scores.reduce((a, s) => a + s.top1, 0) / total,
      kldHistogram: { edges: KLD_EDGES, counts },
    },
  };
}
