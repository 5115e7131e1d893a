/**
 * `--remote URL`: the same command run by a quantd server through its jobs API (docs/models.md):
 * upload the model (streamed from disk: a file, or a model folder as one tar archive), follow the job's progress, download the result (written
 * to a temporary file and renamed, like local runs) and the report. Ctrl-C cancels the job.
 * QUANTD_API_KEY, when set, is sent as the bearer token.
 */
import { createReadStream } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { mkdir, open, readdir, rename, rm, stat } from 'node:fs/promises';
import { request as httpRequest, type IncomingMessage } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { basename, dirname, join, resolve } from 'node:path';
import { Readable } from 'node:stream';
import { catalogue, QuantdError, type ErrorCode } from '../errors/index.js';
import { flagKey } from '../core/index.js';
import { ALL_OPTION_ROWS, writeFileAtomic } from '../service/index.js';
import {
  forgetTemp,
  removeTemp,
  renameTemp,
  syncDirectory,
  tempPathFor,
  writeError,
} from '../format/file-io.js';
import { memberBytes, memberPathProblem, shownName, TAR_BLOCK, TAR_END, tarHeader } from '../format/tar.js';
import type { Io } from './io.js';
import type { ParsedCommand } from './args.js';
import { defaultReportPath, readRecipeFile, usesRecipe } from './model-options.js';
import { humanBytes } from './output.js';
import { isHtmlReport, reportFormatter } from './report-file.js';
import { ProgressReporter } from './progress.js';

type Values = ParsedCommand['values'];

/** CLI flags → the jobs API's query parameters: each table row's flag to its wire name. */
export function remoteQuery(command: string, values: Values): URLSearchParams {
  const q = new URLSearchParams({ op: command });
  if (typeof values['layout'] === 'string') q.set('layout', values['layout']);
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
    forgetTemp(temp); // not ours: a signal must not remove it
    throw writeError(path, err);
  });
  try {
    for await (const chunk of reply.body) {
      await fh.write(chunk as Buffer);
      onBytes((chunk as Buffer).length);
    }
    await fh.sync();
    await fh.close();
    await renameTemp(temp, path);
  } catch (err) {
    await fh.close().catch(() => undefined);
    await removeTemp(temp);
    throw writeError(path, err);
  }
  await syncDirectory(dirname(path));
}

/**
 * A model folder's result (its files, side files and config) into the folder `output`, as the
 * CLI writes it offline: staged in a hidden folder and moved into place once all are down, so a
 * failed download leaves none of them.
 */
async function downloadAll(
  files: ReadonlyArray<{ readonly name: string }>,
  output: string,
  fetchTo: (name: string, path: string) => Promise<void>,
): Promise<void> {
  await mkdir(output, { recursive: true });
  const staging = join(output, `.quantd-staging-${randomBytes(6).toString('hex')}`);
  await mkdir(staging);
  try {
    for (const f of files) await fetchTo(f.name, join(staging, f.name));
    for (const f of files) await rename(join(staging, f.name), join(output, f.name));
  } finally {
    await rm(staging, { recursive: true, force: true });
  }
}

/**
 * The server's base URL from --remote: `host:port` (no scheme) means http://host:port, as curl
 * reads it; a scheme other than http or https is refused.
 */
export function serverUrl(text: string): URL {
  const withScheme = /^[a-z][a-z\d+.-]*:\/\//i.test(text) ? text : `http://${text}`;
  const refuse = (detail: string): QuantdError =>
    new QuantdError('OPTION_INVALID', { option: 'remote', detail, value: text });
  let url: URL;
  try {
    url = new URL(withScheme.endsWith('/') ? withScheme : `${withScheme}/`);
  } catch {
    throw refuse('must be a URL such as http://host:8080 or host:8080');
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:')
    throw refuse('must be an http:// or https:// URL');
  return url;
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/**
 * A model folder as the tar archive the server unpacks (src/format/tar.ts): its regular files
 * (symlinks followed, as in a Hugging Face cache), hidden files and subfolders left out, with
 * the archive's exact length for Content-Length.
 */
async function folderArchive(dir: string): Promise<{ stream: Readable; bytes: number }> {
  const folder = basename(resolve(dir));
  const files: Array<{ name: string; path: string; size: number }> = [];
  for (const name of (await readdir(dir)).sort()) {
    if (name.startsWith('.')) continue;
    const path = join(dir, name);
    const s = await stat(path).catch(() => null);
    if (!s?.isFile()) continue;
    const problem = memberPathProblem(folder, name);
    if (problem !== null) {
      throw new QuantdError('FEATURE_UNSUPPORTED', {
        detail: `--remote cannot upload ${shownName(path)}: ${shownName(`${folder}/${name}`)} is ${problem}`,
      });
    }
    files.push({ name, path, size: s.size });
  }
  if (files.length === 0) {
    throw new QuantdError('FEATURE_UNSUPPORTED', { detail: `--remote found no file to upload in ${dir}` });
  }
  const bytes = files.reduce((n, f) => n + memberBytes(f.size), TAR_END.length);
  async function* archive(): AsyncGenerator<Uint8Array> {
    for (const f of files) {
      yield tarHeader(folder, f.name, f.size);
      let read = 0;
      for await (const chunk of createReadStream(f.path)) {
        read += (chunk as Buffer).length;
        yield chunk as Buffer;
      }
      if (read !== f.size) {
        throw new QuantdError('FILE_UNREADABLE', {
          path: f.path,
          detail: 'it changed size while being sent',
        });
      }
      yield new Uint8Array(memberBytes(f.size) - TAR_BLOCK - f.size);
    }
    yield TAR_END;
  }
  return { stream: Readable.from(archive(), { objectMode: false }), bytes };
}

export async function runRemote(
  base: string,
  input: string,
  output: string,
  parsed: ParsedCommand,
  io: Io,
): Promise<void> {
  const root = serverUrl(base);
  const info = await stat(input).catch(() => {
    throw new QuantdError('FILE_NOT_FOUND', { path: input });
  });
  if (!info.isFile() && !info.isDirectory()) {
    throw new QuantdError('FEATURE_UNSUPPORTED', {
      detail: `--remote uploads a .safetensors file or a model folder; ${input} is neither`,
    });
  }
  const upload = info.isDirectory() ? await folderArchive(input) : null;
  const size = upload?.bytes ?? info.size;
  const quiet = parsed.values['quiet'] === true;
  const show = io.progress && !quiet && !parsed.values['no-progress'] ? io.progress : null;
  const query = remoteQuery(parsed.command, parsed.values);
  // an HTML report needs the console's build: known before the upload, not after the run
  const explicitReport = parsed.values['report'] as string | undefined;
  const formatReport = await reportFormatter(explicitReport ?? 'report.json');

  // 1. upload: the file, or the folder as one tar archive the server unpacks as it arrives
  const up = show ? new ProgressReporter(show, 'upload') : null;
  let sent = 0;
  const body = upload?.stream ?? createReadStream(input);
  body.on('data', (chunk: Buffer) => {
    sent += chunk.length;
    up?.update({ tensorsDone: 0, tensorsTotal: 1, bytesDone: sent, bytesTotal: size });
  });
  const created = await json<Job>(
    await send(
      new URL(`v1/jobs?${query}`, root),
      'POST',
      {
        'content-type': upload ? 'application/x-tar' : 'application/x-safetensors',
        'content-length': size,
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
  const files = job.result.files;
  const resultBytes = files.reduce((n, f) => n + f.bytes, 0);
  const down = show ? new ProgressReporter(show, 'download') : null;
  let got = 0;
  const onBytes = (n: number): void => {
    got += n;
    down?.update({ tensorsDone: 0, tensorsTotal: 1, bytesDone: got, bytesTotal: resultBytes });
  };
  if (files.length === 1) {
    await download(await send(new URL(`v1/jobs/${job.id}/result`, root), 'GET', {}), output, onBytes);
  } else if (!info.isDirectory()) {
    throw new QuantdError('FEATURE_UNSUPPORTED', {
      detail: `job ${job.id} made ${files.length} files (${files[0]?.name} …); --remote downloads one for a single file in: fetch them from ${new URL(`v1/jobs/${job.id}/result`, root).href}`,
    });
  } else {
    await downloadAll(files, output, (name, path) =>
      send(new URL(`v1/jobs/${job.id}/result/${encodeURIComponent(name)}`, root), 'GET', {}).then((r) =>
        download(r, path, onBytes),
      ),
    );
  }
  down?.done();
  const reportPath =
    explicitReport ?? (usesRecipe(parsed.values) ? defaultReportPath(output, false) : undefined);
  if (reportPath !== undefined) {
    const report = await text((await send(new URL(`v1/jobs/${job.id}/report`, root), 'GET', {})).body);
    // the server's JSON as it sent it, or the page drawing it
    await writeFileAtomic(reportPath, isHtmlReport(reportPath) ? formatReport(JSON.parse(report)) : report);
  }
  // downloaded: the server need not keep it (its key's QUANTD_JOB_LIMIT counts kept jobs)
  const keep = parsed.values['keep-job'] === true;
  if (!keep) await send(jobUrl, 'DELETE', {}).then((r) => r.body.resume());
  if (!quiet) {
    io.stderr(
      `${parsed.command}: job ${job.id}${keep ? '' : ' (deleted)'} on ${root.origin}: ${humanBytes(size)} -> ${humanBytes(resultBytes)}; ` +
        `wrote ${output}${reportPath ? ` and ${reportPath}` : ''}`,
    );
  }
}
