/**
 * POST /v1/linear-error?SPEC: how much quantization moves a linear layer's output on real inputs
 * (src/service/linear-error.ts). The body is a safetensors holding `x` (activations [..., in]),
 * `weight` ([out, in]) and optionally `bias` ([out]); the query is the weight spec of the
 * weight-only path (the spec options of /v1/quantize; default int8 per_tensor). The answer is
 * JSON: the relative MSE, SQNR and largest error of the weight-only output and of the int8
 * qlinear output, against the float output.
 */
import type { FastifyInstance } from 'fastify';
import { SPEC_OPTION_NAMES } from '../core/index.js';
import type { Compute } from '../core/compute.js';
import { QuantdError } from '../errors/index.js';
import { runLinearError } from '../service/linear-error.js';
import { requestSignal } from './op-routes.js';

export interface LinearErrorDeps {
  readonly compute: Compute;
  /** QUANTD_REQUEST_TIMEOUT_MS: the evaluation is abandoned after it (504), or when the client goes */
  readonly requestTimeoutMs: number;
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
      if (!(request.body instanceof Uint8Array)) {
        throw new QuantdError('UNSUPPORTED_MEDIA_TYPE', {
          type: String(request.headers['content-type'] ?? '(none)'),
        });
      }
      const report = await runLinearError(
        deps.compute,
        request.body,
        (request.query ?? {}) as Record<string, string>,
        requestSignal(reply, deps.requestTimeoutMs),
      );
      // JSON has no Infinity: an exact output's SQNR is sent as the string "Infinity"
      const text = JSON.stringify(report, (_k, v: unknown) => (v === Infinity ? 'Infinity' : v));
      return reply.code(200).type('application/json').send(text);
    },
  );
}
