/**
 * POST /v1/quantize, /v1/dequantize, /v1/fake-quantize, /v1/qparams (README.md). The body is a
 * safetensors file, or one raw tensor (application/octet-stream + X-Tensor-Dtype / X-Tensor-Shape,
 * named "tensor"); query parameters are the CLI options in snake_case. Every output is computed
 * before the response starts, so a rejected input always gets a clean problem response; the
 * result then streams out tensor by tensor (no concatenated copy), as the qtensor container or,
 * with Accept: application/json, as JSON with base64 data.
 */
import { Readable } from 'node:stream';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { completeYielding, type Resumable } from '../core/index.js';
import { QuantdError } from '../errors/index.js';
import {
  OPERATIONS,
  floatStDType,
  singleTensorFile,
  type InMemoryFile,
  operationRequest,
  parseBody,
  planBuffer,
  runBufferPlan,
  planOutputBytes,
  PlanCache,
  type BufferResult,
  type Compute,
  type Operation,
  type RequestParams,
} from '../service/index.js';
import { OCTET_TYPE, SAFETENSORS_TYPE, binaryBodyParser } from './body.js';
import { opRouteSchema } from './openapi.js';
import { requestDeadline } from '../service/envelope.js';
import { JSON_RESULT_FACTOR, RESULT_FACTOR, slotOf } from './budget.js';

export { SAFETENSORS_TYPE, OCTET_TYPE };
/** Results up to this size are sent as one buffer. */
const SMALL_RESPONSE = 1024 * 1024;
/** Largest result sent as JSON (base64 inflates it by a third; big results want the container). */
export const JSON_LIMIT = 64 * 1024 * 1024;

export interface OpRouteDeps {
  readonly compute: Compute;
  readonly requestTimeoutMs: number;
  /** QUANTD_BODY_LIMIT, for the body parser of these routes. */
  readonly bodyLimit: number;
  /** QUANTD_INLINE_LIMIT: tensors of fewer elements are computed in this thread. */
  readonly inlineLimit: number;
}

/** The most tensor elements a body byte can stand for (2-bit codes in a container to dequantize). */
const MAX_ELEMENTS_PER_BYTE = 4;

/**
 * Whether a request needs a cancellation signal: whether any of its work can run on the worker
 * pool. A body too small to hold a tensor of `inlineLimit` elements is computed in this thread
 * from start to end without the event loop turning (no I/O, no timer), so neither a disconnect
 * nor the timeout could act on it; a signal would only cost (the controller, the timer, and
 * AbortSignal.any in executePlan: about 8 % of a 4 KiB request's CPU time). Any other body gets
 * one, whatever its size: with QUANTD_INLINE_LIMIT=0 the smallest tensor runs on the pool.
 */
function needsSignal(body: Uint8Array, inlineLimit: number): boolean {
  return body.byteLength * MAX_ELEMENTS_PER_BYTE >= inlineLimit;
}

/** Whether the body is a safetensors file (else one raw tensor). */
const isSafetensors = (request: FastifyRequest): boolean =>
  (request.headers['content-type'] ?? '').split(';')[0]!.trim().toLowerCase() === SAFETENSORS_TYPE;

/**
 * What a one-raw-tensor request's plan is made from (PlanCache): the URL (operation and
 * options) and the tensor's dtype and shape headers. A safetensors body has no key: its header
 * is parsed from the body.
 */
function planKey(request: FastifyRequest, safetensors: boolean): string | undefined {
  if (safetensors) return undefined;
  const { 'x-tensor-dtype': dtype, 'x-tensor-shape': shape } = request.headers;
  if (typeof dtype !== 'string' || typeof shape !== 'string') return undefined;
  return `${request.url}\n${dtype}\n${shape}`;
}

/** The body as the file it stands for: a safetensors file, or one raw tensor named "tensor". */
async function bodyFile(
  request: FastifyRequest,
  body: Uint8Array,
  safetensors: boolean,
  signal: AbortSignal | undefined,
): Promise<InMemoryFile> {
  if (safetensors) return parseBody(body, 'request body', signal);
  const dtypeHeader = String(request.headers['x-tensor-dtype'] ?? '');
  const dtype = floatStDType(dtypeHeader);
  if (!dtype) {
    throw new QuantdError('HEADER_INVALID', {
      header: 'X-Tensor-Dtype',
      detail: 'must be float32, float16 or bfloat16',
      value: dtypeHeader || '(missing)',
    });
  }
  const shapeHeader = String(request.headers['x-tensor-shape'] ?? '').trim();
  const dims = shapeHeader === '' ? [] : shapeHeader.split(',').map((d) => d.trim());
  const shape = dims.map((d) => (/^\d+$/.test(d) ? Number(d) : NaN));
  if (request.headers['x-tensor-shape'] === undefined || shape.some((d) => !Number.isSafeInteger(d))) {
    throw new QuantdError('HEADER_INVALID', {
      header: 'X-Tensor-Shape',
      detail: 'must be comma-separated dimensions, e.g. 4096,4096 (empty for a scalar)',
      value: shapeHeader || '(missing)',
    });
  }
  return singleTensorFile('tensor', dtype, shape, body, 'request body');
}

/** How the client wants the result: the container (default) or JSON. */
function responseFormat(request: FastifyRequest): 'safetensors' | 'json' {
  const accept = String(request.headers.accept ?? '').toLowerCase();
  if (accept === '') return 'safetensors';
  const types = accept.split(',').map((t) => t.split(';')[0]!.trim());
  if (types.includes(SAFETENSORS_TYPE) || types.includes(OCTET_TYPE)) return 'safetensors';
  if (types.includes('application/json')) return 'json';
  if (types.includes('*/*') || types.includes('application/*')) return 'safetensors';
  throw new QuantdError('NOT_ACCEPTABLE', { type: accept });
}

const asBuffer = (v: Uint8Array): Buffer => Buffer.from(v.buffer, v.byteOffset, v.byteLength);

/**
 * The result as JSON: `{"metadata", "tensors": {NAME: {dtype, shape, data}}}`. The tensors object
 * is written member by member, in the container's order: built as a JavaScript object, a tensor
 * named "__proto__" would set its prototype (and vanish) and integer-like names would move first.
 */
function* asJson(result: BufferResult): Resumable<string> {
  const members: string[] = [];
  for (const [i, t] of result.plan.tensors.entries()) {
    const value = { dtype: t.dtype, shape: t.shape, data: asBuffer(result.outputs[i]!).toString('base64') };
    members.push(`${JSON.stringify(t.name)}:${JSON.stringify(value)}`);
    yield; // in units of one tensor (../core/time-slice.ts): a result may hold 200,000
  }
  return `{"metadata":${JSON.stringify(result.plan.metadata)},"tensors":{${members.join(',')}}}`;
}

/** Aborts on client disconnect or timeout (the envelope's deadline); the reason says which. */
export function requestSignal(reply: FastifyReply, timeoutMs: number): AbortSignal {
  const deadline = requestDeadline(timeoutMs);
  reply.raw.once('close', () => {
    deadline.stop();
    if (!reply.raw.writableFinished) deadline.gone('the client closed the connection');
  });
  return deadline.signal;
}

async function handle(
  op: Operation,
  deps: OpRouteDeps,
  plans: PlanCache,
  request: FastifyRequest,
  reply: FastifyReply,
): Promise<FastifyReply> {
  const format = responseFormat(request);
  if (!(request.body instanceof Uint8Array)) {
    throw new QuantdError('UNSUPPORTED_MEDIA_TYPE', { type: request.headers['content-type'] ?? '(none)' });
  }
  const safetensors = isSafetensors(request);
  const key = planKey(request, safetensors);
  const cached = plans.find(key);
  // options are checked before the body (a bad option is reported first), unless known good
  const opRequest = cached ? undefined : operationRequest(op, request.query as RequestParams);
  // Every request whose work can reach the pool can be cancelled (client gone) and timed out,
  // however small its body (QUANTD_INLINE_LIMIT); so can its parsing and planning.
  const signal = needsSignal(request.body, deps.inlineLimit)
    ? requestSignal(reply, deps.requestTimeoutMs)
    : undefined;
  const file = await bodyFile(request, request.body, safetensors, signal);
  // A body of tens of thousands of tensors is parsed, planned and its answer's header encoded
  // in slices of time, so that the event loop answers other requests meanwhile.
  const prepared =
    cached ?? plans.prepare(key, await planBuffer(file.header, opRequest!, 'request body', signal));
  // the result's memory, charged before it is computed (503 when the budget cannot hold it now)
  const resultBytes = planOutputBytes(prepared.plan);
  slotOf(request.raw)?.charge(
    resultBytes * (format === 'json' ? JSON_RESULT_FACTOR : RESULT_FACTOR),
    `a result of ${resultBytes} bytes`,
  );
  const result = await runBufferPlan(prepared.plan, file, deps.compute, signal);
  const release = (): void => result.outputs.forEach((o) => deps.compute.release?.(o));
  reply.raw.once('close', release);
  if (format === 'json') {
    const bytes = result.outputs.reduce((n, o) => n + o.byteLength, 0);
    if (bytes > JSON_LIMIT) {
      throw new QuantdError('NOT_ACCEPTABLE', {
        type: `application/json for a ${bytes}-byte result (JSON is for results up to ${JSON_LIMIT} bytes)`,
      });
    }
    return reply.type('application/json').send(await completeYielding(asJson(result), signal));
  }
  const header = await prepared.encodedHeader(signal);
  const length = result.outputs.reduce((n, o) => n + o.byteLength, header.byteLength);
  reply.header('Content-Length', String(length)).type(SAFETENSORS_TYPE);
  const parts = [asBuffer(header), ...result.outputs.map(asBuffer)];
  // Small results go out in one write (a stream costs more than the copy); large ones stream,
  // tensor by tensor, without being concatenated.
  if (length <= SMALL_RESPONSE) return reply.send(Buffer.concat(parts, length));
  return reply.send(Readable.from(parts, { objectMode: false }));
}

/**
 * The four operations, in a scope of their own whose only body parsers are the two binary types:
 * a JSON or text body is refused as 415 UNSUPPORTED_MEDIA_TYPE, never parsed (Fastify's default
 * parsers would answer 400 for malformed JSON and hand the handler a string or an object).
 * Routes registered outside this scope (/v1/jobs, which takes JSON too) keep their own parsers.
 */
export function registerOpRoutes(app: FastifyInstance, deps: OpRouteDeps): PromiseLike<unknown> {
  const plans = new PlanCache();
  return app.register(async (scope) => {
    scope.removeAllContentTypeParsers();
    scope.addContentTypeParser([SAFETENSORS_TYPE, OCTET_TYPE], binaryBodyParser(deps.bodyLimit));
    for (const op of OPERATIONS) {
      scope.post(`/v1/${op}`, { schema: opRouteSchema(op) }, (request, reply) =>
        handle(op, deps, plans, request, reply),
      );
    }
  });
}
