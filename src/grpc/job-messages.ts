/**
 * quantd.v1.Jobs messages (proto/quantd/v1/jobs.proto) to and from the job manager's types. A
 * SubmitJobRequest becomes the same Submission the JSON form of POST /v1/jobs makes — options as
 * the HTTP query names them — so that src/jobs/request.ts validates both, once; a Job becomes the
 * message that mirrors its HTTP JSON field by field (JSON null: the field left unset).
 */
import { QuantdError } from '../errors/index.js';
import { operationOf, recipeFromText } from '../jobs/request.js';
import type { Job, JobParams, Submission } from '../jobs/store.js';
import { specValues, type SpecMessage } from './unary.js';

/** A SubmitJobRequest as @grpc/proto-loader gives it (keepCase, longs as numbers, oneofs named). */
export interface SubmitJobMessage {
  readonly path?: string;
  readonly op?: string;
  readonly spec?: SpecMessage;
  readonly dtype?: string;
  readonly recipe_json?: string;
  readonly rule?: string[];
  readonly skip?: string[];
  readonly min_size?: number;
  readonly keep_1d?: boolean;
  readonly layout?: string;
}

/** The model path and the submission of a request; a bad option throws its catalogue error. */
export function submissionOf(request: SubmitJobMessage): { path: string; submission: Submission } {
  const path = request.path ?? '';
  if (path === '') {
    // as HTTP's JSON form refuses a missing "input": the path is the transport's, not an option
    throw new QuantdError('OPTION_INVALID', {
      option: 'path',
      detail: 'must be the path of a model in the data directory (a file, an index or a directory)',
      value: '(missing)',
    });
  }
  const params: Record<string, JobParams[string]> = { ...specValues(request.spec) };
  if (request.dtype) params['dtype'] = request.dtype;
  if (request.rule?.length) params['rule'] = request.rule;
  if (request.skip?.length) params['skip'] = request.skip;
  // proto3 `optional`: undefined when unset, so that an explicit 0 / false is still an option
  if (request.min_size !== undefined && request.min_size !== null) params['min_size'] = request.min_size;
  if (request.keep_1d !== undefined && request.keep_1d !== null) params['keep_1d'] = request.keep_1d;
  if (request.layout) params['layout'] = request.layout;
  const op = operationOf(request.op || undefined);
  const recipe = request.recipe_json ? recipeFromText(request.recipe_json) : undefined;
  return { path, submission: recipe === undefined ? { op, params } : { op, params, recipe } };
}

/** Drops null fields: proto3 has no null, an unset field stands for it (jobs.proto). */
function present<T extends object>(value: T): { [K in keyof T]: Exclude<T[K], null> } {
  return Object.fromEntries(Object.entries(value).filter(([, v]) => v !== null)) as {
    [K in keyof T]: Exclude<T[K], null>;
  };
}

/** The Job message of a job. */
export function jobMessage(job: Job): Record<string, unknown> {
  const { progress, error, result, input } = job;
  return present({
    id: job.id,
    state: job.state,
    op: job.op,
    input: input.kind === 'path' ? { ...input } : { kind: input.kind, bytes: input.bytes },
    created_at: job.created_at,
    started_at: job.started_at,
    finished_at: job.finished_at,
    progress: progress && present({ ...progress }),
    attempts: job.attempts,
    error: error && { ...error },
    result: result && { sharded: result.sharded, files: result.files.map((f) => present({ ...f })) },
    runs: job.runs?.map((r) => ({ ...r })) ?? null,
  });
}
