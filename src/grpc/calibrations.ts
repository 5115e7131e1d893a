/**
 * quantd.v1.Calibrations (proto/quantd/v1/calibration.proto): the HTTP calibration API
 * (src/http/calibration-routes.ts) over gRPC, on the server's one CalibrationStore. Observe is a
 * client stream: each message is one batch, folded in before the next is read (the stream is
 * paused meanwhile, so a fast client cannot pile batches up in memory).
 *
 * Every call is admitted like a Quantizer call (token, readiness, an admission slot), Observe
 * holding its slot until the stream has ended.
 */
import * as grpc from '@grpc/grpc-js';
import { QuantdError } from '../errors/index.js';
import type { CalibrationStore, CreateRequest } from '../service/calibration/store.js';
import type { Compute } from '../core/compute.js';
import { runLinearError } from '../service/linear-error.js';
import { requestDeadline } from '../service/envelope.js';
import { admittedUnary, type AdmissionDeps } from './admitted.js';
import { admittedStreaming } from './file-stream.js';

export const CALIBRATION_PROTO_FILE = 'quantd/v1/calibration.proto';
export const CALIBRATIONS_SERVICE_NAME = 'quantd.v1.Calibrations';

export interface CalibrationsServiceDeps extends AdmissionDeps {
  readonly calibrations: CalibrationStore;
  /** LinearError runs on it (the server's pool) */
  readonly compute: Compute;
  /** QUANTD_REQUEST_TIMEOUT_MS: LinearError and QParams are abandoned after it, or when the call ends */
  readonly requestTimeoutMs: number;
  /** QUANTD_CALIBRATION_IMPORT_LIMIT: Create's recipe_json and state_json, parsed on the event loop */
  readonly importLimit: number;
}

interface CreateMessage {
  readonly recipe_json?: string;
  readonly state_json?: string;
  readonly ttl_seconds?: number;
}
interface IdMessage {
  readonly id?: string;
}
interface LinearErrorMessage {
  readonly safetensors?: Buffer;
  readonly weight_spec?: Record<string, string>;
}
interface BatchMessage {
  readonly id?: string;
  readonly safetensors?: Buffer;
}

function parseJsonField(field: string, text: string): unknown {
  try {
    return JSON.parse(text) as unknown;
  } catch (err) {
    throw new QuantdError('RECIPE_INVALID', { where: field, detail: `not JSON: ${(err as Error).message}` });
  }
}

function createRequestOf(message: CreateMessage, importLimit: number): CreateRequest {
  // the JSON is parsed on the event loop (about 3 ms a MiB): refused unread past the limit, as HTTP's body
  for (const text of [message.recipe_json, message.state_json]) {
    const size = text === undefined ? 0 : Buffer.byteLength(text);
    if (size > importLimit) {
      throw new QuantdError('PAYLOAD_TOO_LARGE', {
        size,
        limit: importLimit,
        setting: 'QUANTD_CALIBRATION_IMPORT_LIMIT',
      });
    }
  }
  const recipe = message.recipe_json ? parseJsonField('recipe_json', message.recipe_json) : undefined;
  const state = message.state_json ? parseJsonField('state_json', message.state_json) : undefined;
  return {
    ...(recipe !== undefined && { recipe }),
    ...(state !== undefined && { state }),
    ...(message.ttl_seconds ? { ttl_seconds: message.ttl_seconds } : {}),
  };
}

export function addCalibrationsService(
  server: grpc.Server,
  service: grpc.ServiceDefinition,
  deps: CalibrationsServiceDeps,
): void {
  const { calibrations: store, admit, identify, report } = deps;

  const unary = admittedUnary(deps);
  const streaming = admittedStreaming(deps);

  const observe = (
    call: grpc.ServerReadableStream<BatchMessage, unknown>,
    callback: grpc.sendUnaryData<unknown>,
  ): Promise<void> => {
    let release: (() => void) | undefined;
    let answered = false;
    const answer = (err: unknown, response?: unknown): void => {
      if (answered) return;
      answered = true;
      release?.();
      call.removeAllListeners('data');
      if (err) callback(report(err, 'Observe'));
      else callback(null, response);
    };
    return new Promise<void>((resolve) => {
      try {
        release = admit(call.metadata);
      } catch (err) {
        answer(err);
        return resolve();
      }
      const caller = identify(call.metadata);
      const controller = new AbortController();
      call.once('cancelled', () => {
        const gone = new QuantdError('CANCELLED', {
          detail: ': the call ended (cancelled, or past its deadline)',
        });
        controller.abort(gone);
        answer(gone);
        resolve();
      });
      let id: string | undefined;
      let batches = 0;
      let folded = 0;
      const observed = new Set<string>();
      const ignored = new Set<string>();
      let chain = Promise.resolve();
      call.on('data', (message: BatchMessage) => {
        call.pause(); // one batch at a time: the next is read once this one is on disk
        chain = chain
          .then(async () => {
            if (answered) return;
            if (message.id && id !== undefined && message.id !== id) {
              throw new QuantdError('USAGE', {
                detail: `Observe: batch ${folded} names session ${message.id}; the stream's first named ${id}`,
              });
            }
            id ??= message.id;
            if (!id)
              throw new QuantdError('USAGE', { detail: 'Observe: the first CalibrationBatch needs id' });
            const body = message.safetensors ?? Buffer.alloc(0);
            const result = await store.fold(
              id,
              new Uint8Array(body.buffer, body.byteOffset, body.byteLength),
              caller,
              controller.signal,
            );
            batches = result.batches;
            folded++;
            for (const name of result.observed) observed.add(name);
            for (const name of result.ignored) ignored.add(name);
            call.resume();
          })
          .catch((err: unknown) => {
            answer(err);
            resolve();
          });
      });
      call.once('end', () => {
        void chain.then(() => {
          if (folded === 0 && !answered) {
            answer(new QuantdError('USAGE', { detail: 'Observe needs at least one CalibrationBatch' }));
          } else {
            answer(null, { batches, folded, observed: [...observed], ignored: [...ignored] });
          }
          resolve();
        });
      });
      call.once('error', (err) => {
        answer(err);
        resolve();
      });
    });
  };

  server.addService(service, {
    Create: unary<CreateMessage>('Create', async (m, caller) =>
      (await store.create(createRequestOf(m, deps.importLimit), caller)).summary(),
    ),
    Get: unary<IdMessage>('Get', (m, caller) => store.get(m.id ?? '', caller).summary()),
    List: unary<unknown>('List', (_m, caller) => ({
      calibrations: store.list(caller).map((s) => s.summary(false)),
    })),
    Observe: observe,
    QParams: unary<IdMessage>('QParams', async (m, caller, call) => {
      // the range searches run on the pool: abandoned, as LinearError, when the call ends
      const deadline = requestDeadline(deps.requestTimeoutMs);
      call.once('cancelled', () => deadline.gone('the call ended (cancelled, or past its deadline)'));
      try {
        const file = await store.qparams(m.id ?? '', caller, deadline.signal);
        return { safetensors: Buffer.from(file.buffer, file.byteOffset, file.byteLength) };
      } finally {
        deadline.stop();
      }
    }),
    Statistics: streaming<IdMessage>('Statistics', async (m, caller) => [
      {
        name: 'statistics.stats',
        data_sha256: null,
        open: () => store.openStatistics(m.id ?? '', caller),
      },
    ]),
    Export: unary<IdMessage>('Export', async (m, caller) => {
      // one message holds it all: its pieces are made a turn of the event loop apart, then joined
      const pieces: string[] = [];
      for (const piece of await store.exportText(m.id ?? '', caller)) {
        pieces.push(piece);
        await new Promise<void>((resolve) => setImmediate(resolve));
      }
      return { json: pieces.join('') };
    }),
    Delete: unary<IdMessage>('Delete', async (m, caller) => {
      await store.remove(m.id ?? '', caller);
      return {};
    }),
    LinearError: unary<LinearErrorMessage>('LinearError', async (m, _caller, call) => {
      const body = m.safetensors ?? Buffer.alloc(0);
      const bytes = new Uint8Array(body.buffer, body.byteOffset, body.byteLength);
      // abandoned after QUANTD_REQUEST_TIMEOUT_MS, or when the call ends, as HTTP's
      const deadline = requestDeadline(deps.requestTimeoutMs);
      call.once('cancelled', () => deadline.gone('the call ended (cancelled, or past its deadline)'));
      try {
        const { weight_spec: _spec, ...report } = await runLinearError(
          deps.compute,
          bytes,
          m.weight_spec ?? {},
          deadline.signal,
        );
        return report;
      } finally {
        deadline.stop();
      }
    }),
  });
}
