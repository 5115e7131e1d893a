/**
 * `--remote URL`: the same command run by a quantd server through its jobs API (docs/models.md):
 * upload the model (streamed from disk), follow the job's progress, download the result (written
 * to a temporary file and renamed, like local runs) and the report. Ctrl-C cancels the job.
 * QUANTD_API_KEY, when set, is sent as the bearer token.
 */
import { createReadStream } from 'node:fs';
import { open, rename, rm, stat } from 'node:fs/promises';
import { request as httpRequest, type IncomingMessage } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { dirname } from 'node:path';
import { catalogue, QuantdError, type ErrorCode } from '../errors/index.js';
import { flagKey } from '../core/index.js';
import { ALL_OPTION_ROWS, writeFileAtomic } from '../service/index.js';
import { syncDirectory, tempPathFor, writeError } from '../format/file-io.js';
import type { Io } from './io.js';
import type { ParsedCommand } from './args.js';
import { defaultReportPath, readRecipeFile, usesRecipe } from './model-options.js';
import { humanBytes } from './output.js';
import { ProgressReporter } from './progress.js';

type Values = ParsedCommand['values'];

/** CLI flags → the jobs API's query parameters: each table row's flag to its wire name. */
export function remoteQuery(command: string, values: Values): URLSearchParams {
  const q = new URLSearchParams({ op: command });
  for (const row of ALL_OPTION_ROWS) {
    const v = values[flagKey(row)];
    if (row.name === 'recipe') {
      // the recipe file is read here and travels as JSON
      if (typeof v === 'string') q.set(row.name, JSON.stringify(readRecipeFile(v)));
    } else if (row.kind === 'strings') {
      for (const item of (v as string[] | undefined) ?? []) q.append(row.name, item);
    } else if (row.kind === 'boolean') {
      if (v === true) q.set(row.name, 'true');
    } else if (typeof v === 'string') {
      q.set(row.name, v);
    }
  }
  return q;
}

interface Reply {
  readonly status: number;
  readonly headers: IncomingMessage['headers'];
  readonly body: IncomingMessage;
}

function send(
  url: URL,
  method: string,
  headers: Record<string, string | number>,
  body?: NodeJS.ReadableStream,
): Promise<Reply> {
  const key = process.env['QUANTD_API_KEY'];
  const all = { ...headers, ...(key ? { authorization: `Bearer ${key}` } : {}) };
  const make = url.protocol === 'https:' ? httpsRequest : httpRequest;
  return new Promise((resolve, reject) => {
    const req = make(url, { method, headers: all }, (res) =>
      resolve({ status: res.statusCode ?? 0, headers: res.headers, body: res }),
    );
    req.on('error', (err) =>
      reject(new QuantdError('SERVER_UNREACHABLE', { url: url.origin, detail: err.message })),
    );
    if (body) body.pipe(req);
    else req.end();
  });
}

async function text(body: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of body) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString('utf8');
}

/** The server's error as the CLI reports errors: its catalogue code and message. */
async function failure(reply: Reply): Promise<QuantdError> {
  const raw = await text(reply.body);
  try {
    const problem = JSON.parse(raw) as { code?: string; params?: Record<string, string | number> };
    if (problem.code && problem.code in catalogue) {
      return new QuantdError(problem.code as ErrorCode, problem.params ?? {});
    }
  } catch {
    // not a problem document: reported below as it came
  }
  return new QuantdError('INTERNAL', { detail: `the server answered ${reply.status}: ${raw.slice(0, 200)}` });
}

async function json<T>(reply: Reply, ok: number[]): Promise<T> {
  if (!ok.includes(reply.status)) throw await failure(reply);
  return JSON.parse(await text(reply.body)) as T;
}

interface Job {
  readonly id: string;
  readonly state: string;
  readonly progress: {
    tensors_done: number;
    tensors_total: number;
    bytes_done: number;
    bytes_total: number;
  } | null;
  readonly error: { code: string; message: string; params?: Record<string, string | number> } | null;
  readonly result: { sharded: boolean; files: Array<{ name: string; bytes: number }> } | null;
}

/** Streams a download into `path` atomically, counting bytes for the progress line. */
async function download(reply: Reply, path: string, onBytes: (n: number) => void): Promise<void> {
  if (reply.status !== 200) throw await failure(reply);
  const temp = tempPathFor(path);
  const fh = await open(temp, 'wx').catch((err: unknown) => {
    throw writeError(path, err);
  });
  try {
    for await (const chunk of reply.body) {
      await fh.write(chunk as Buffer);
      onBytes((chunk as Buffer).length);
    }
    await fh.sync();
    await fh.close();
    await rename(temp, path);
  } catch (err) {
    await fh.close().catch(() => undefined);
    await rm(temp, { force: true });
    throw writeError(path, err);
  }
  await syncDirectory(dirname(path));
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

export async function runRemote(
  base: string,
  input: string,
  output: string,
  parsed: ParsedCommand,
  io: Io,
): Promise<void> {
  let root: URL;
  try {
    root = new URL(base.endsWith('/') ? base : `${base}/`);
  } catch {
    throw new QuantdError('OPTION_INVALID', {
      option: 'remote',
      detail: 'must be a URL such as http://host:8080',
      value: base,
    });
  }
  const info = await stat(input).catch(() => {
    throw new QuantdError('FILE_NOT_FOUND', { path: input });
  });
  if (!info.isFile()) {
    throw new QuantdError('FEATURE_UNSUPPORTED', {
      detail: `--remote uploads one .safetensors file; ${input} is not one (put sharded models in the server's data directory and submit a path job)`,
    });
  }
  const quiet = parsed.values['quiet'] === true;
  const show = io.progress && !quiet && !parsed.values['no-progress'] ? io.progress : null;
  const query = remoteQuery(parsed.command, parsed.values);

  // 1. upload
  const up = show ? new ProgressReporter(show, 'upload') : null;
  let sent = 0;
  const body = createReadStream(input);
  body.on('data', (chunk) => {
    sent += chunk.length;
    up?.update({ tensorsDone: 0, tensorsTotal: 1, bytesDone: sent, bytesTotal: info.size });
  });
  const created = await json<Job>(
    await send(
      new URL(`v1/jobs?${query}`, root),
      'POST',
      {
        'content-type': 'application/x-safetensors',
        'content-length': info.size,
      },
      body,
    ),
    [202],
  );
  up?.done();

  // 2. follow the job; Ctrl-C cancels it on the server
  const jobUrl = new URL(`v1/jobs/${created.id}`, root);
  let interrupted = false;
  const onSigint = (): void => {
    interrupted = true;
  };
  process.once('SIGINT', onSigint);
  const run = show ? new ProgressReporter(show, parsed.command) : null;
  let job = created;
  try {
    while (job.state === 'queued' || job.state === 'running') {
      if (interrupted) {
        await send(jobUrl, 'DELETE', {}).then((r) => r.body.resume());
        throw new QuantdError('CANCELLED', { detail: ` (job ${job.id} cancelled on the server)` });
      }
      await sleep(250);
      job = await json<Job>(await send(jobUrl, 'GET', {}), [200]);
      if (job.progress && run) {
        const p = job.progress;
        run.update({
          tensorsDone: p.tensors_done,
          tensorsTotal: p.tensors_total,
          bytesDone: p.bytes_done,
          bytesTotal: p.bytes_total,
        });
      }
    }
  } finally {
    process.removeListener('SIGINT', onSigint);
    run?.done();
  }
  if (job.state !== 'succeeded' || !job.result) {
    const e = job.error;
    if (e && e.code in catalogue)
      throw new QuantdError(e.code as ErrorCode, e.params ?? { detail: e.message });
    throw new QuantdError('INTERNAL', {
      detail: `job ${job.id} ended ${job.state}${e ? `: ${e.message}` : ''}`,
    });
  }

  // 3. download the result and the report
  const file = job.result.files[0]!;
  const down = show ? new ProgressReporter(show, 'download') : null;
  let got = 0;
  await download(await send(new URL(`v1/jobs/${job.id}/result`, root), 'GET', {}), output, (n) => {
    got += n;
    down?.update({ tensorsDone: 0, tensorsTotal: 1, bytesDone: got, bytesTotal: file.bytes });
  });
  down?.done();
  const reportPath =
    (parsed.values['report'] as string | undefined) ??
    (usesRecipe(parsed.values) ? defaultReportPath(output, false) : undefined);
  if (reportPath !== undefined) {
    const report = await text((await send(new URL(`v1/jobs/${job.id}/report`, root), 'GET', {})).body);
    await writeFileAtomic(reportPath, report);
  }
  if (!quiet) {
    io.stderr(
      `${parsed.command}: job ${job.id} on ${root.origin}: ${humanBytes(info.size)} -> ${humanBytes(file.bytes)}; ` +
        `wrote ${output}${reportPath ? ` and ${reportPath}` : ''}`,
    );
  }
}
