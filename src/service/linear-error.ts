/**
 * The linear-error operation (src/core/linear-eval.ts) for the transports: a body holding `x`
 * ([..., in]), `weight` ([out, in]) and optionally `bias` ([out]), checked; the weight-only
 * path's spec from the /v1/quantize spec options; the report, computed where the Compute runs
 * it (a worker of the pool).
 */
import { SPEC_OPTION_NAMES, parseSpec, toFloat32, type SpecOptions } from '../core/index.js';
import type { Compute } from '../core/compute.js';
import { linearErrorReport, type LinearErrorReport, type LinearLayer } from '../core/linear-eval.js';
import { QuantdError } from '../errors/index.js';
import { parseSafetensors } from '../format/safetensors.js';
import { floatDType } from './layouts/linear-common.js';

/** The largest layer evaluated: n · in · out multiply-adds (a few seconds of one thread). */
export const MAX_LINEAR_MACS = 2 ** 32;

const usage = (detail: string): QuantdError =>
  new QuantdError('USAGE', { detail: `linear-error: ${detail}` });

/** The layer a body holds, its shapes checked against each other. */
export function linearLayerOf(body: Uint8Array): LinearLayer {
  const { header, tensorBytes } = parseSafetensors(body, 'linear-error body');
  const byName = new Map(header.entries.map((e) => [e.name, e]));
  const x = byName.get('x');
  const w = byName.get('weight');
  if (!x || !w)
    throw usage('the body needs tensors x [..., in_features] and weight [out_features, in_features]');
  if (w.shape.length !== 2 || x.shape.length < 1) {
    throw usage(
      `weight must be [out, in] and x [..., in]; got weight [${w.shape.join(', ')}], x [${x.shape.join(', ')}]`,
    );
  }
  const [out, inF] = w.shape as [number, number];
  if (x.shape[x.shape.length - 1] !== inF) {
    throw usage(`x [${x.shape.join(', ')}] must end in in_features ${inF} (weight [${out}, ${inF}])`);
  }
  const n = x.shape.slice(0, -1).reduce((a, b) => a * b, 1);
  if (n * inF * out > MAX_LINEAR_MACS) {
    throw usage(
      `${n} × ${inF} × ${out} multiply-adds is more than the ${MAX_LINEAR_MACS} evaluated at once; send fewer rows of x`,
    );
  }
  const b = byName.get('bias');
  if (b && (b.shape.length !== 1 || b.shape[0] !== out)) {
    throw usage(`bias must be [${out}]; got [${b.shape.join(', ')}]`);
  }
  const extra = header.entries.find((e) => !['x', 'weight', 'bias'].includes(e.name));
  if (extra) throw usage(`unexpected tensor ${extra.name} (the body holds x, weight and bias)`);
  return {
    x: toFloat32(tensorBytes(x), floatDType(x)),
    n,
    inFeatures: inF,
    w: toFloat32(tensorBytes(w), floatDType(w)),
    outFeatures: out,
    ...(b && { bias: toFloat32(tensorBytes(b), floatDType(b)) }),
  };
}

/** Runs linear-error for `body` with the weight spec `options` (option name → text). */
export async function runLinearError(
  compute: Compute,
  body: Uint8Array,
  options: Readonly<Record<string, string>>,
  signal?: AbortSignal,
): Promise<LinearErrorReport & { weight_spec: Record<string, string> }> {
  for (const [key, value] of Object.entries(options)) {
    if (!(SPEC_OPTION_NAMES as readonly string[]).includes(key)) {
      throw new QuantdError('OPTION_INVALID', {
        option: key,
        detail: `is not an option of linear-error (options: ${SPEC_OPTION_NAMES.join(', ')})`,
        value: String(value),
      });
    }
  }
  const spec = parseSpec({ ...options } as SpecOptions);
  const layer = linearLayerOf(body);
  const report = compute.linearError
    ? await compute.linearError(layer, spec, signal)
    : linearErrorReport(layer, spec);
  return { ...report, weight_spec: { ...options } };
}
