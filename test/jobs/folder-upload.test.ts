/**
 * A model folder uploaded as one application/x-tar body, as `quantd … --remote URL` sends it: a
 * Hugging Face folder → GGUF on a real server gives the same bytes as the local conversion; the
 * archive is checked as it is unpacked (ARCHIVE_INVALID, nothing left behind); tar's own
 * `tar -cf - FOLDER` output is accepted too.
 */
import { execFile, spawnSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { memberBytes, TAR_BLOCK, TAR_END, tarHeader } from '../../src/format/tar.js';
import { ggufLayout } from '../../src/service/layouts/gguf.js';
import { BIN } from '../cli/run-cli.js';
import { FIXTURES, fixtureDir } from '../gguf-hf/llama-cpp.js';
import { writeSynthetic } from '../gguf-mix/synthetic.mjs';
import { expectProblem, send, type TestServer } from '../http/helpers.js';
import type { LayoutReport } from '../../src/service/layouts/report.js';
import { finished, json, startJobServer, tempDir, waitJob, type Job } from './helpers.js';

const run = promisify(execFile);
const root = tempDir('folder-upload');
const data = join(root, 'data');
let t: TestServer;

beforeAll(async () => {
  mkdirSync(data, { recursive: true });
  t = await startJobServer(data);
});
afterAll(async () => {
  await t?.server.shutdown('test done');
  rmSync(root, { recursive: true, force: true });
});

/** A tar archive of `files` in `folder`, as the CLI writes it. */
function archive(folder: string, files: Record<string, Uint8Array>): Buffer {
  const parts: Uint8Array[] = [];
  for (const [name, bytes] of Object.entries(files)) {
    parts.push(tarHeader(folder, name, bytes.length), bytes);
    parts.push(new Uint8Array(memberBytes(bytes.length) - TAR_BLOCK - bytes.length));
  }
  parts.push(TAR_END);
  return Buffer.concat(parts);
}

const postTar = (body: Buffer, query = 'layout=gguf:type=Q8_0') =>
  send(t.port, `/v1/jobs?${query}`, {
    method: 'POST',
    headers: { 'content-type': 'application/x-tar' },
    body,
  });

/** No job directory holds anything but what finished jobs keep. */
function leftovers(): string[] {
  const jobs = join(data, 'jobs');
  if (!existsSync(jobs)) return [];
  return readdirSync(jobs).flatMap((id) =>
    readdirSync(join(jobs, id)).includes('input') ? [join(id, 'input')] : [],
  );
}

describe('--remote with a model folder', () => {
  it('a Hugging Face folder → GGUF on the server: byte-identical to the local conversion', async () => {
    const expected = join(root, 'local.gguf');
    await ggufLayout.write(fixtureDir('llama-spm'), expected, { type: 'Q8_0' });
    const out = join(root, 'remote.gguf');
    const { stderr } = await run(process.execPath, [
      BIN,
      'quantize',
      fixtureDir('llama-spm'),
      '-o',
      out,
      '--layout',
      'gguf:type=Q8_0',
      '--remote',
      t.base,
      '--no-progress',
    ]);
    expect(stderr).toMatch(/quantize: job \S+ \(deleted\) on http:\/\/127\.0\.0\.1/);
    expect(readFileSync(out).equals(readFileSync(expected))).toBe(true);
    // downloaded, so deleted on the server; --keep-job keeps it
    const id = /job (\S+) \(deleted\)/.exec(stderr)![1]!;
    expect((await send(t.port, `/v1/jobs/${id}`)).status).toBe(404);
    const kept = await run(process.execPath, [
      BIN,
      'quantize',
      fixtureDir('llama-spm'),
      '-o',
      join(root, 'kept.gguf'),
      '--layout',
      'gguf:type=Q8_0',
      '--remote',
      t.base,
      '--keep-job',
      '--no-progress',
    ]);
    const keptId = /job (\S+) on /.exec(kept.stderr)![1]!;
    expect((await send(t.port, `/v1/jobs/${keptId}`)).status).toBe(200);
  });

  it('a llama-quantize file type with an importance matrix in the folder: the local file, byte for byte', async () => {
    const folder = join(root, 'with-imatrix');
    writeSynthetic('llama', folder);
    copyFileSync(
      fileURLToPath(new URL('../gguf-mix/llama.imatrix.dat', import.meta.url)),
      join(folder, 'imatrix.dat'),
    );
    const expected = join(root, 'imatrix-local.gguf');
    await ggufLayout.write(folder, expected, { ftype: 'Q4_K_M', imatrix: 'imatrix.dat' });
    const out = join(root, 'imatrix-remote.gguf');
    const args = ['quantize', folder, '-o', out, '--layout', 'gguf:ftype=Q4_K_M', '--no-progress'];
    const { stderr } = await run(process.execPath, [
      BIN,
      ...args,
      '--imatrix',
      join(folder, 'imatrix.dat'),
      '--remote',
      t.base,
      '--keep-job',
    ]);
    expect(readFileSync(out).equals(readFileSync(expected))).toBe(true);
    // the job's report is the mixture's: each tensor's type, bits per weight and error, the file's bits
    const id = /job (\S+) on /.exec(stderr)![1]!;
    const reply = await send(t.port, `/v1/jobs/${id}/report`);
    expect(reply.status).toBe(200);
    const report = JSON.parse(reply.body.toString()) as LayoutReport;
    expect(report).toMatchObject({ format: 'quantd.layout-report/1', options: { ftype: 'Q4_K_M' } });
    expect(report.bits_per_weight).toBeGreaterThan(4.5);
    const quantized = report.tensors.filter((x) => x.type === 'Q4_K' || x.type === 'Q6_K');
    expect(quantized.length).toBeGreaterThan(0);
    for (const x of quantized) {
      expect(x.bits_per_weight, x.name).toBe(x.type === 'Q4_K' ? 4.5 : 6.5625);
      expect(x.quality?.sqnr_db, x.name).toBeGreaterThan(0);
    }
    // a matrix outside the folder cannot travel with it: refused before anything is sent
    const outside = await run(process.execPath, [
      BIN,
      ...args,
      '--imatrix',
      fileURLToPath(new URL('../gguf-mix/llama.imatrix.dat', import.meta.url)),
      '--remote',
      t.base,
      '--force',
    ]).catch((e: { code: number; stderr: string }) => e);
    expect(outside).toMatchObject({
      code: 2,
      stderr: expect.stringMatching(/--imatrix must be a file of the model folder/),
    });
  }, 60_000);

  it("accepts tar's own archive of the folder (tar -cf - FOLDER)", async () => {
    const tar = spawnSync('tar', ['--format=ustar', '-cf', '-', 'llama-spm'], { cwd: FIXTURES });
    expect(tar.status).toBe(0);
    const reply = await postTar(tar.stdout);
    expect(reply.status, reply.body.toString()).toBe(202);
    const job = await waitJob(t.port, json<Job>(reply).id, finished);
    expect(job.state, JSON.stringify(job.error)).toBe('succeeded');
    expect(job.result!.files.map((f) => f.name)).toEqual(['model.gguf']);
  });
});

describe('a folder archive is checked as it is unpacked', () => {
  const config = new TextEncoder().encode('{}');

  it.each([
    ['a member outside the folder', () => archiveWithName('../escape.json')],
    [
      'a second folder',
      () =>
        Buffer.concat([
          archive('a', { 'x.json': config }).subarray(0, 1024),
          archive('b', { 'y.json': config }),
        ]),
    ],
    ['a corrupt header', () => corrupt(archive('m', { 'config.json': config }))],
    ['a truncated archive', () => archive('m', { 'config.json': config }).subarray(0, 1024)],
    ['no file at all', () => Buffer.from(TAR_END)],
  ])('%s: 400 ARCHIVE_INVALID, nothing left behind', async (_what, make) => {
    expectProblem(await postTar(make()), 'ARCHIVE_INVALID');
    expect(leftovers()).toEqual([]);
  });

  // A member's name becomes a result file's name (logs, terminals, the console, downloads).
  it.each([
    ['a newline', 'm/config\n.json', '\\n'],
    ['an ANSI escape sequence', 'm/\u001b[31mred.json', '\\u001b'],
    ['DEL', 'm/a\u007f.json', '\\u007f'],
    ['a C1 control (CSI)', 'm/a\u009b2J.json', '\\u009b'],
    ['a right-to-left override', 'm/model\u202enosj.txt', '\\u202e'],
    ['a left-to-right embedding', 'm/a\u202ab.json', '\\u202a'],
    ['a first-strong isolate', 'm/a\u2068b.json', '\\u2068'],
    ['a pop directional isolate', 'm/a\u2069b.json', '\\u2069'],
    ['a right-to-left mark', 'm/a\u200fb.json', '\\u200f'],
    ['an Arabic letter mark', 'm/a\u061cb.json', '\\u061c'],
    ['a bidi override in the folder name', 'm\u202e/config.json', '\\u202e'],
  ])(
    'a member name with %s: 400 ARCHIVE_INVALID, the name escaped, nothing left',
    async (_what, name, shown) => {
      const reply = await postTar(archiveWithName(name));
      expectProblem(reply, 'ARCHIVE_INVALID', [
        'control character, an escape sequence or a bidirectional-text override',
      ]);
      const detail = (JSON.parse(reply.body.toString()) as { detail: string }).detail;
      expect(detail).toContain(shown);
      expect(
        [...detail].some(
          (c) => c.charCodeAt(0) < 0x20 || (c.charCodeAt(0) >= 0x7f && c.charCodeAt(0) <= 0x9f),
        ),
      ).toBe(false);
      expect(/[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/.test(detail)).toBe(false);
      expect(leftovers()).toEqual([]);
    },
  );

  it('a folder that is not a model: the model check refuses it, nothing left behind', async () => {
    const reply = await postTar(archive('m', { 'notes.txt': new TextEncoder().encode('hello') }));
    expect(reply.status).toBe(400);
    expect(leftovers()).toEqual([]);
  });
});

/** An archive with one member whose name field is `name`, in UTF-8 (a checksum that matches). */
function archiveWithName(name: string): Buffer {
  const body = archive('m', { 'x.json': new TextEncoder().encode('{}') });
  body.fill(0, 0, 100);
  body.write(name, 0, 'utf8');
  body.fill(0x20, 148, 156);
  let sum = 0;
  for (let i = 0; i < TAR_BLOCK; i++) sum += body[i]!;
  body.write(`${sum.toString(8).padStart(6, '0')}\0 `, 148, 'ascii');
  return body;
}

function corrupt(body: Buffer): Buffer {
  body[10] = body[10]! ^ 0xff;
  return body;
}
