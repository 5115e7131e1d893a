/**
 * POST /v1/quantize, /v1/dequantize, /v1/fake-quantize, /v1/qparams (DESIGN §5). The body is a
 * safetensors file, or one raw tensor (application/octet-stream + X-Tensor-Dtype / X-Tensor-Shape,
 * named "tensor"); query parameters are the CLI options in snake_case. Every output is computed
 * before the response starts, so a rejected input always gets a clean problem response; the
 * result then streams out tensor by tensor (no concatenated copy), as the qtensor container or,
 * with Accept: application/json, as JSON with base64 data.
 */
import { Readable } from 'node:stream';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { QuantdError } from '../errors/index.js';
import { encodeHeader, parseSafetensors } from '../format/index.js';
import {
  OPERATIONS,
  floatStDType,
  singleTensorFile,
  type InMemoryFile,
  operationRequest,
  runBufferOperation,
  type BufferResult,
  type Compute,
  type Operation,
  type RequestParams,
} from '../service/index.js';
import { opRouteSchema } from './openapi.js';

export const SAFETENSORS_TYPE = 'application/x-safetensors';
export const OCTET_TYPE = 'application/octet-stream';
/** Bodies from this size on get a cancellation signal (client gone, timeout). */
const SIGNAL_THRESHOLD = 256 * 1024;
/** Results up to this size are sent as one buffer. */
const SMALL_RESPONSE = 1024 * 1024;
/** Largest result sent as JSON (base64 inflates it by a third; big results want the container). */
export const JSON_LIMIT = 64 * 1024 * 1024;

export interface OpRouteDeps {
  readonly compute: Compute;
  readonly requestTimeoutMs: number;
}

/** The body as the file it stands for: a safetensors file, or one raw tensor named "tensor". */
function bodyFile(request: FastifyRequest, body: Uint8Array): InMemoryFile {
  const type = (request.headers['content-type'] ?? '').split(';')[0]!.trim().toLowerCase();
  if (type === SAFETENSORS_TYPE) return parseSafetensors(body, 'request body');
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

function asJson(result: BufferResult): string {
  const tensors: Record<string, { dtype: string; shape: readonly number[]; data: string }> = {};
  result.plan.tensors.forEach((t, i) => {
    tensors[t.name] = {
      dtype: t.dtype,
      shape: t.shape,
      data: asBuffer(result.outputs[i]!).toString('base64'),
    };
  });
  return JSON.stringify({ metadata: result.plan.metadata, tensors });
}

/** Aborts on client disconnect or timeout; the reason says which. */
function requestSignal(request: FastifyRequest, reply: FastifyReply, timeoutMs: number): AbortSignal {
  const controller = new AbortController();
  const timer = setTimeout(
    () => controller.abort(new QuantdError('REQUEST_TIMEOUT', { ms: timeoutMs })),
    timeoutMs,
  );
  timer.unref();
  reply.raw.on('close', () => {
    clearTimeout(timer);
    if (!reply.raw.writableFinished) {
      controller.abort(new QuantdError('CANCELLED', { detail: ': the client closed the connection' }));
    }
  });
  return controller.signal;
}

async function handle(
  op: Operation,
  deps: OpRouteDeps,
  request: FastifyRequest,
  reply: FastifyReply,
): Promise<FastifyReply> {
  const format = responseFormat(request);
  if (!(request.body instanceof Uint8Array)) {
    throw new QuantdError('UNSUPPORTED_MEDIA_TYPE', { type: request.headers['content-type'] ?? '(none)' });
  }
  const params = request.query as RequestParams;
  const opRequest = operationRequest(op, params);
  // Small bodies are computed in this thread in one go: nothing could be aborted part-way.
  const signal =
    request.body.byteLength >= SIGNAL_THRESHOLD
      ? requestSignal(request, reply, deps.requestTimeoutMs)
      : undefined;
  const result = await runBufferOperation(
    bodyFile(request, request.body),
    'request body',
    opRequest,
    deps.compute,
    signal,
  );
  const release = (): void => result.outputs.forEach((o) => deps.compute.release?.(o));
  reply.raw.once('close', release);
  if (format === 'json') {
    const bytes = result.outputs.reduce((n, o) => n + o.byteLength, 0);
    if (bytes > JSON_LIMIT) {
      throw new QuantdError('NOT_ACCEPTABLE', {
        type: `application/json for a ${bytes}-byte result (JSON is for results up to ${JSON_LIMIT} bytes)`,
      });
    }
    return reply.type('application/json').send(asJson(result));
  }
  const header = encodeHeader(result.plan.tensors, result.plan.metadata).bytes;
  const length = result.outputs.reduce((n, o) => n + o.byteLength, header.byteLength);
  reply.header('Content-Length', String(length)).type(SAFETENSORS_TYPE);
  const parts = [asBuffer(header), ...result.outputs.map(asBuffer)];
  // Small results go out in one write (a stream costs more than the copy); large ones stream,
  // tensor by tensor, without being concatenated.
  if (length <= SMALL_RESPONSE) return reply.send(Buffer.concat(parts, length));
  return reply.send(Readable.from(parts, { objectMode: false }));
}

export function registerOpRoutes(app: FastifyInstance, deps: OpRouteDeps): void {
  for (const op of OPERATIONS) {
    app.post(`/v1/${op}`, { schema: opRouteSchema(op) }, (request, reply) =>
      handle(op, deps, request, reply),
    );
  }
}
