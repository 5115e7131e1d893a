/**
 * quantd.v1.Jobs (proto/quantd/v1/jobs.proto): the HTTP jobs API (src/http/job-routes.ts) over
 * gRPC, on the server's one JobManager — a job is the same job whichever API made or reads it.
 * Validation, paths, state and result checks are the manager's; this file only maps messages and
 * streams files.
 *
 * Every call is admitted like a Quantizer call (token, readiness, an admission slot) — as HTTP
 * admits every /v1 request — and Result / Report hold their slot until the stream has ended, as an
 * HTTP download holds its until the response is closed.
 */
import type { Caller } from '../service/auth.js';
import { DEFAULT_PAGE, MAX_PAGE } from '../jobs/manager.js';
import { once } from 'node:events';
import type { Stats } from 'node:fs';
import { open, stat, type FileHandle } from 'node:fs/promises';
import { basename, join } from 'node:path';
import * as grpc from '@grpc/grpc-js';
import { QuantdError } from '../errors/index.js';
import type { JobManager } from '../jobs/manager.js';
import type { ResultFile } from '../jobs/store.js';
import { jobMessage, submissionOf, type SubmitJobMessage } from './job-messages.js';
import { verifyResultFile } from '../jobs/verify.js';
import { admittedUnary, type AdmissionDeps } from './admitted.js';

export const JOBS_PROTO_FILE = 'quantd/v1/jobs.proto';
export const JOBS_SERVICE_NAME = 'quantd.v1.Jobs';

/** Data bytes per ResultChunk: under every gRPC client's default 4 MiB receive limit. */
export const RESULT_CHUNK_BYTES = 1024 * 1024;

export interface JobsServiceDeps extends AdmissionDeps {
  readonly jobs: JobManager;
}

type Streaming<Req> = (call: grpc.ServerWritableStream<Req, unknown>) => void;

/** A file to stream: where it is, the name it is sent under, its size and data hash. */
interface Outgoing {
  readonly path: string;
  readonly file: ResultFile;
}

export function addJobsService(
  server: grpc.Server,
  service: grpc.ServiceDefinition,
  deps: JobsServiceDeps,
): void {
  const { jobs, admit, identify, report } = deps;

  const unary = admittedUnary(deps);

  const streaming =
    <Req>(rpc: string, files: (request: Req, caller: Caller) => Promise<Outgoing[]>): Streaming<Req> =>
    (call) => {
      let release: (() => void) | undefined;
      // the slot is held until the call has ended: its status sent, or the client gone
      const done = (): void => {
        release?.();
        release = undefined;
      };
      const gone = new AbortController();
      call.once('cancelled', () => {
        gone.abort(
          new QuantdError('CANCELLED', { detail: ': the call ended (cancelled, or past its deadline)' }),
        );
        done();
      });
      call.once('close', done);
      return Promise.resolve()
        .then(async () => {
          release = admit(call.metadata);
          await sendFiles(call, await files(call.request, identify(call.metadata)), gone.signal);
        })
        .catch((err: unknown) => {
          // a call that has ended (cancelled, past its deadline) has had its status
          if (!call.cancelled) call.emit('error', report(err, rpc));
        })
        .finally(done);
    };

  const implementation: grpc.UntypedServiceImplementation = {
    Submit: unary<SubmitJobMessage>('Submit', async (request, caller) => {
      const { path, submission } = submissionOf(request);
      return jobMessage(await jobs.submitPath(submission, path, caller));
    }),
    Get: unary<{ id?: string }>('Get', async (request, caller) =>
      jobMessage(await jobs.get(request.id ?? '', caller)),
    ),
    List: unary<{ page_size?: number; page_token?: string }>('List', (request, caller) => {
      const size = request.page_size ?? 0;
      if (!Number.isInteger(size) || size < 0 || size > MAX_PAGE) {
        throw new QuantdError('OPTION_INVALID', {
          option: 'page_size',
          detail: `must be from 1 to ${MAX_PAGE} (0: ${DEFAULT_PAGE})`,
          value: String(size),
        });
      }
      const token = request.page_token ?? '';
      const page = jobs.page(caller, {
        ...(size > 0 && { limit: size }),
        ...(token !== '' && { cursor: token }),
      });
      return { jobs: page.jobs.map(jobMessage), ...(page.next !== null && { next_page_token: page.next }) };
    }),
    Cancel: unary<{ id?: string }>('Cancel', async (request, caller) => {
      const id = request.id ?? '';
      // HTTP's DELETE answers 204 for a finished job it removed; here the job is returned as it was
      const before = await jobs.get(id, caller);
      return jobMessage((await jobs.delete(id, caller)) ?? before);
    }),
    Result: streaming<{ id?: string; file?: string }>('Result', async (request, caller) => {
      const id = request.id ?? '';
      const { result, dir } = await jobs.result(id, caller);
      const wanted = request.file ?? '';
      const chosen = wanted === '' ? result.files : result.files.filter((f) => f.name === wanted);
      if (chosen.length === 0) {
        throw new QuantdError('NOT_FOUND', {
          detail: `job ${id} has no result file ${JSON.stringify(wanted)} (files: ${result.files.map((f) => f.name).join(', ')})`,
        });
      }
      return chosen.map((file) => ({ path: join(dir, file.name), file }));
    }),
    Report: streaming<{ id?: string }>('Report', async (request, caller) => {
      const path = await jobs.reportPath(request.id ?? '', caller);
      const bytes = (await fileStat(path, jobs.data.shown(path))).size;
      return [{ path, file: { name: basename(path), bytes, data_sha256: null } }];
    }),
  };
  server.addService(service, implementation);
}

/** A file that is gone is FILE_NOT_FOUND (named by `shown`), as over HTTP. */
function missing(err: unknown, shown: string): unknown {
  return (err as NodeJS.ErrnoException).code === 'ENOENT'
    ? new QuantdError('FILE_NOT_FOUND', { path: shown })
    : err;
}

async function openFile(path: string, shown: string): Promise<FileHandle> {
  return open(path, 'r').catch((err: unknown) => {
    throw missing(err, shown);
  });
}

async function fileStat(path: string, shown: string): Promise<Stats> {
  return stat(path).catch((err: unknown) => {
    throw missing(err, shown);
  });
}

/** Streams each file in chunks (ResultChunk), at the client's pace, then ends the call. */
async function sendFiles(
  call: grpc.ServerWritableStream<unknown, unknown>,
  files: Outgoing[],
  signal: AbortSignal,
): Promise<void> {
  for (const { path, file } of files) {
    const handle = await openFile(path, file.name);
    try {
      const size = (await handle.stat()).size;
      if (size !== file.bytes) {
        throw new QuantdError('INTERNAL', { detail: `result file ${file.name} changed while being opened` });
      }
      await verifyResultFile(path, handle, file);
      let offset = 0;
      do {
        if (signal.aborted) return;
        // a fresh buffer per chunk: grpc-js serializes a message only when it leaves the queue
        const data = Buffer.allocUnsafe(Math.min(RESULT_CHUNK_BYTES, size - offset));
        const { bytesRead } = await handle.read(data, 0, data.byteLength, offset);
        if (bytesRead !== data.byteLength) {
          throw new QuantdError('INTERNAL', { detail: `result file ${file.name} changed while being read` });
        }
        const first = offset === 0;
        const chunk = {
          file: file.name,
          offset,
          data,
          ...(first && { total_bytes: size }),
          ...(first && file.data_sha256 !== null && { data_sha256: file.data_sha256 }),
        };
        offset += data.byteLength;
        if (!call.write(chunk)) {
          try {
            await once(call, 'drain', { signal });
          } catch (err) {
            if (signal.aborted) return; // the client is gone: nothing more to send
            throw err;
          }
        }
      } while (offset < size);
    } finally {
      await handle.close();
    }
  }
  if (!signal.aborted) call.end();
}
