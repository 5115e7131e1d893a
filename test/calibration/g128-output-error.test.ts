/**
 * What the calibrated algorithms buy at the usual setting, 4-bit g128, measured by the
 * quantized-linear evaluation (linear-eval.ts, what /v1/linear-error serves): a 512 → 256 layer
 * whose inputs are correlated and outlier-heavy (../gptq/calibrated.helpers.ts's generator: 8
 * latent factors per token plus noise, every 17th input channel ×20; 1024 tokens), its weight
 * quantized by each format's round-to-nearest and by its algorithm from the tokens' statistics,
 * each checkpoint's weight read back as the runtime computes with it (AWQ's divided by its
 * scales), and the layer's output error on the tokens compared. The README publishes the figures.
 */
import { describe, expect, it } from 'vitest';

import { awqDequantize, awqQuantize } from '../../src/core/interop/awq.js';
import { awqPlannedWeight, awqScalesFromStats } from '../../src/core/interop/awq-stats.js';
import { float32FromFloat16Bits } from '../../src/core/float16.js';
import {
  gptqDequantize,
  gptqPackSolution,
  gptqQuantize,
  type GptqPacked,
} from '../../src/core/interop/gptq.js';
import { gptqSolve } from '../../src/core/interop/gptq-solve.js';
import { linearOutput, outputError } from '../../src/core/linear-eval.js';
import { accumulateLinearStats, emptyLinearStats } from '../../src/core/linear-stats.js';
import { activations } from '../gptq/calibrated.helpers.js';

const IN = 512;
const OUT = 256;
const TOKENS = 1024;
const x = activations(IN, TOKENS, 9, 900);
const w = (() => {
  let s = 77;
  const next = () => (s = (Math.imul(s, 1664525) + 1013904223) >>> 0) / 2 ** 32;
  return Float32Array.from({ length: OUT * IN }, () => (next() + next() + next() + next() - 2) * 0.085);
})();
const layer = { x, n: TOKENS, inFeatures: IN, w, outFeatures: OUT };
const stats = accumulateLinearStats('x', emptyLinearStats(IN), x, [TOKENS, IN]);
const reference = linearOutput(layer);
const error = (effective: Float32Array | Float64Array): number =>
  outputError(reference, linearOutput(layer, effective)).rel_mse;
const halves = (h: Uint16Array): Float32Array => Float32Array.from(h, float32FromFloat16Bits);

describe('4-bit g128 on outlier-heavy inputs: the output error of each algorithm against round-to-nearest', () => {
  const lines: string[] = [];

  it('GPTQ (sym, the gptq layout default)', () => {
    const params = { bits: 4 as const, groupSize: 128, sym: true };
    const unpack = (p: GptqPacked): Float32Array =>
      gptqDequantize(p.qweight, p.qzeros, halves(p.scales), p.gIdx, OUT, IN, IN / 128, 4);
    const rtn = error(unpack(gptqQuantize('w', w, [OUT, IN], 'float32', params)));
    const solution = gptqSolve('w', w, OUT, IN, stats.hessian, {
      ...params,
      damp: 0.01,
      blockSize: 128,
      actOrder: false,
    });
    const gptq = error(unpack(gptqPackSolution('w', solution, OUT, IN, 4)));
    lines.push(`GPTQ 4-bit g128 sym: RTN ${rtn.toExponential(2)}, GPTQ ${gptq.toExponential(2)}`);
    expect(gptq).toBeLessThan(0.7 * rtn);
  });

  it('AWQ (zero point, the awq layout)', () => {
    const params = { groupSize: 128 };
    const unpack = (q: Float32Array): Float32Array => {
      const p = awqQuantize('w', q, [OUT, IN], params);
      return awqDequantize(p.qweight, p.qzeros, halves(p.scales), OUT, IN, IN / 128);
    };
    const rtn = error(unpack(w));
    const o = { bits: 4, groupSize: 128, zeroPoint: true, nGrid: 20, maxShrink: 0.5 };
    const { scales } = awqScalesFromStats(stats, [w], [OUT], o);
    const planned = awqPlannedWeight(w, OUT, IN, { scales, rowDivide: null, clipStats: stats }, o);
    const awq = error(Float64Array.from(unpack(planned.weight), (v, k) => v / scales[k % IN]!));
    lines.push(`AWQ 4-bit g128 zero point: RTN ${rtn.toExponential(2)}, AWQ ${awq.toExponential(2)}`);
    expect(awq).toBeLessThan(0.7 * rtn);
    console.log(lines.join('\n'));
  });
});
