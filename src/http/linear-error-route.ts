/**
 * POST /v1/linear-error?SPEC: how much quantization moves a linear layer's output on real inputs
 * (src/core/linear-eval.ts). The body is a safetensors holding `x` (activations [..., in]),
 * `weight` ([out, in]) and optionally `bias` ([out]); the query is the weight spec of the
 * weight-only path (the spec options of /v1/quantize; default int8 per_tensor). The answer is
 * JSON: the relative MSE, SQNR and largest error of the weight-only output and of the int8
 * qlinear output, against the float output. Runs on the worker pool.
 */
import type { FastifyInstance } from 'fastify';
import { SPEC_OPTION_NAMES, parseSpec, toFloat32, typedView, type SpecOptions } from '../core/index.js';
import type { Compute } from '../core/compute.js';
import { linearErrorReport, type LinearLayer } from '../core/linear-eval.js';
import { QuantdError } from '../errors/index.js';
import { parseSafetensors, type TensorEntry } from '../format/safetensors.js';

/** The largest layer evaluated: n · in · out multiply-adds (a few seconds of one thread). */
export const MAX_LINEAR_MACS = 2 ** 32;

export interface LinearErrorDeps {
  readonly compute: Compute;
}

function floats(entry: TensorEntry, data: Uint8Array): Float32Array {
  if (entry.dtype === 'F32') return typedView(Float32Array, data);
  if (entry.dtype === 'F16') return toFloat32(data, 'float16');
  if (entry.dtype === 'BF16') return toFloat32(data, 'bfloat16');
  throw new QuantdError('INPUT_DTYPE_UNSUPPORTED', { tensor: entry.name, dtype: entry.dtype });
}

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
    x: floats(x, tensorBytes(x)),
    n,
    inFeatures: inF,
    w: floats(w, tensorBytes(w)),
    outFeatures: out,
    ...(b && { bias: floats(b, tensorBytes(b)) }),
  };
}

export async function registerLinearErrorRoute(app: FastifyInstance, deps: LinearErrorDeps): Promise<void> {
  app.post(
    '/v1/linear-error',
    {
      schema: {
        tags: ['operations'],
        summary: "A linear layer's output error under weight-only and int8 qlinear quantization",
        querystring: {
          type: 'object',
          properties: Object.fromEntries(SPEC_OPTION_NAMES.map((name) => [name, { type: 'string' }])),
        },
      },
    },
    async (request, reply) => {
      const query = (request.query ?? {}) as Record<string, string>;
      const options: Record<string, string> = {};
      for (const [key, value] of Object.entries(query)) {
        if (!(SPEC_OPTION_NAMES as readonly string[]).includes(key)) {
          throw new QuantdError('OPTION_INVALID', {
            option: key,
            detail: `is not an option of linear-error (options: ${SPEC_OPTION_NAMES.join(', ')})`,
            value: String(value),
          });
        }
        options[key] = value;
      }
      const spec = parseSpec(options as SpecOptions);
      if (!(request.body instanceof Uint8Array)) {
        throw new QuantdError('UNSUPPORTED_MEDIA_TYPE', {
          type: String(request.headers['content-type'] ?? '(none)'),
        });
      }
      const layer = linearLayerOf(request.body);
      const report = deps.compute.linearError
        ? await deps.compute.linearError(layer, spec)
        : linearErrorReport(layer, spec);
      return reply
        .code(200)
        .type('application/json')
        .send(
          JSON.stringify({ ...report, weight_spec: options }, (_k, v: unknown) =>
            v === Infinity ? 'Infinity' : v,
          ),
        );
    },
  );
}
