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
import { DEFAULT_PAGE, MAX_PAGE } from '../jobs/manager.js';
import type { Stats } from 'node:fs';
import { open, stat, type FileHandle } from 'node:fs/promises';
import { basename, join } from 'node:path';
import * as grpc from '@grpc/grpc-js';
import { QuantdError } from '../errors/index.js';
import type { JobManager } from '../jobs/manager.js';
import type { ResultFile } from '../jobs/store.js';
import { jobMessage, submissionOf, type SubmitJobMessage } from './job-messages.js';
import { sendCheck } from '../jobs/verify.js';
import { admittedUnary, type AdmissionDeps } from './admitted.js';
import { admittedStreaming, type OutgoingFile } from './file-stream.js';

export const JOBS_PROTO_FILE = 'quantd/v1/jobs.proto';
export const JOBS_SERVICE_NAME = 'quantd.v1.Jobs';

export interface JobsServiceDeps extends AdmissionDeps {
  readonly jobs: JobManager;
}

export function addJobsService(
  server: grpc.Server,
  service: grpc.ServiceDefinition,
  deps: JobsServiceDeps,
): void {
  const { jobs } = deps;
  const unary = admittedUnary(deps);
  const streaming = admittedStreaming(deps);

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
      const onCorrupt = (problem: QuantdError): Promise<void> => jobs.resultCorrupt(id, problem);
      return chosen.map((file) => resultFile(join(dir, file.name), file, onCorrupt));
    }),
    Report: streaming<{ id?: string }>('Report', async (request, caller) => {
      const path = await jobs.reportPath(request.id ?? '', caller);
      const bytes = (await fileStat(path, jobs.data.shown(path))).size;
      return [resultFile(path, { name: basename(path), bytes, data_sha256: null })];
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

/**
 * A file as streamed: its size as recorded, and, given `onCorrupt` (a job's result file), its
 * bytes hashed as they are sent and checked before the last chunk goes out (src/jobs/verify.ts).
 */
function resultFile(
  path: string,
  file: ResultFile,
  onCorrupt?: (problem: QuantdError) => Promise<void>,
): OutgoingFile {
  return {
    name: file.name,
    data_sha256: file.data_sha256,
    open: async () => {
      const handle = await openFile(path, file.name);
      try {
        const size = (await handle.stat()).size;
        if (size !== file.bytes) {
          throw new QuantdError('INTERNAL', {
            detail: `result file ${file.name} changed while being opened`,
          });
        }
        const sent = onCorrupt === undefined ? null : await sendCheck(path, file, onCorrupt);
        return { handle, size, sent };
      } catch (err) {
        await handle.close();
        throw err;
      }
    },
  };
}
