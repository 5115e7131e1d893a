/**
 * How well codes represent the values they quantize: sums a tensor's ranges add up (see
 * quality.ts for how they are taken and summarized). Its own module so that the op types
 * (ops.ts) and the measurements (quality.ts) both use it without importing each other.
 */
export interface QualityStats {
  sumSqError: number;
  sumSqValue: number;
  maxAbsError: number;
  clipped: number;
  count: number;
}
