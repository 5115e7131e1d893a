/**
 * The job store and manager without HTTP:
 *  - storage errors map onto the catalogue: a full disk (ENOSPC, EDQUOT) is STORAGE_FULL, other
 *    write failures OUTPUT_UNWRITABLE, both naming the path — for an upload whose write or fsync
 *    fails (a stand-in file that fails like a full disk), and for a job whose run fails so;
 *  - an upload that ends early, is cut off or breaks is BODY_INCOMPLETE and leaves no file;
 *  - a job's error is {code, message}; anything that is not a catalogue error is INTERNAL;
 *  - job ids are checked before they reach a path;
 *  - options become the request the CLI would make (recipe parameters included);
 *  - stopping the manager (server shutdown) leaves a running job running on disk, and the next
 *    start runs it again (attempts 2).
 */
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { afterAll, describe, expect, it } from 'vitest';

import { QuantdError } from '../../src/errors/index.js';
import { JobManager } from '../../src/jobs/manager.js';
import { DataDir, checkJobId, isJobId, newJobId } from '../../src/jobs/paths.js';
import { jobRequest, submissionFromQuery } from '../../src/jobs/request.js';
import { writeError } from '../../src/format/file-io.js';
import { jobError, receiveUpload, type Job, type UploadSink } from '../../src/jobs/store.js';
import { referenceCompute, type Compute } from '../../src/service/index.js';
import { manyTensors, modelBytes, tempDir } from './helpers.js';

const root = tempDir('store');
afterAll(() => rmSync(root, { recursive: true, force: true }));

const errno = (code: string): NodeJS.ErrnoException => Object.assign(new Error(`${code}: failed`), { code });

function code(fn: () => unknown): string {
  try {
    fn();
  } catch (err) {
    return (err as QuantdError).code;
  }
  return 'none';
}

async function rejection(promise: Promise<unknown>): Promise<QuantdError> {
  try {
    await promise;
  } catch (err) {
    return err as QuantdError;
  }
  throw new Error('expected a rejection');
}

describe('storage errors', () => {
  it.each([
    ['ENOSPC', 'STORAGE_FULL'],
    ['EDQUOT', 'STORAGE_FULL'],
    ['EACCES', 'OUTPUT_UNWRITABLE'],
    ['EROFS', 'OUTPUT_UNWRITABLE'],
    ['ENOTDIR', 'OUTPUT_UNWRITABLE'],
  ])('%s → %s, naming the path', (errCode, expected) => {
    const err = writeError('/data/jobs/x/input.safetensors', errno(errCode));
    expect(err.code).toBe(expected);
    expect(err.message).toContain('/data/jobs/x/input.safetensors');
  });

  it('a catalogue error stays what it is', () => {
    const original = new QuantdError('BODY_INCOMPLETE', { received: 1, expected: 2 });
    expect(writeError('/x', original)).toBe(original);
  });

  const chunks = (n: number, size = 1000): Readable =>
    Readable.from(Array.from({ length: n }, (_, i) => new Uint8Array(size).fill(i)));

  function sink(
    fail: { writev?: string; sync?: string } = {},
  ): UploadSink & { written: number; closed: boolean } {
    const s = {
      written: 0,
      closed: false,
      async writev(buffers: Uint8Array[]): Promise<void> {
        if (fail.writev) throw errno(fail.writev);
        s.written += buffers.reduce((n, b) => n + b.byteLength, 0);
      },
      async sync(): Promise<void> {
        if (fail.sync) throw errno(fail.sync);
      },
      async close(): Promise<void> {
        s.closed = true;
      },
    };
    return s;
  }

  it('an upload whose write fails with ENOSPC is STORAGE_FULL, and its file is removed', async () => {
    const path = join(root, 'full.safetensors');
    writeFileSync(path, 'partial');
    const s = sink({ writev: 'ENOSPC' });
    const err = await rejection(
      receiveUpload(chunks(3), path, { expected: 3000, limit: 1e9, open: async () => s }),
    );
    expect(err.code).toBe('STORAGE_FULL');
    expect(err.message).toContain(path);
    expect(s.closed).toBe(true);
    expect(existsSync(path)).toBe(false);
  });

  it('an fsync that fails with ENOSPC is STORAGE_FULL; with EIO, OUTPUT_UNWRITABLE', async () => {
    const path = join(root, 'sync.safetensors');
    for (const [failure, expected] of [
      ['ENOSPC', 'STORAGE_FULL'],
      ['EIO', 'OUTPUT_UNWRITABLE'],
    ] as const) {
      const err = await rejection(
        receiveUpload(chunks(2), path, {
          expected: 2000,
          limit: 1e9,
          open: async () => sink({ sync: failure }),
        }),
      );
      expect(err.code).toBe(expected);
    }
  });

  it('a file that cannot be created is OUTPUT_UNWRITABLE naming it', async () => {
    const path = join(root, 'no-such-dir', 'input.safetensors');
    const err = await rejection(receiveUpload(chunks(1), path, { expected: 1000, limit: 1e9 }));
    expect(err.code).toBe('OUTPUT_UNWRITABLE');
    expect(err.message).toContain(path);
  });

  it('writes the whole body, in batches, and fsyncs it', async () => {
    const path = join(root, 'whole.safetensors');
    const bytes = await receiveUpload(chunks(3000, 1000), path, { expected: 3_000_000, limit: 1e9 });
    expect(bytes).toBe(3_000_000);
    const written = readFileSync(path);
    expect(written.byteLength).toBe(3_000_000);
    expect(written[2_999_999]).toBe(2999 & 0xff);
  });

  it.each([
    ['ends early', () => chunks(2), undefined],
    ['is cut off', () => new Readable({ read() {} }), Promise.resolve()],
    [
      'breaks',
      () =>
        new Readable({
          read() {
            this.destroy(errno('ECONNRESET'));
          },
        }),
      undefined,
    ],
  ] as const)('an upload that %s is BODY_INCOMPLETE, and leaves no file', async (_what, source, cut) => {
    const path = join(root, 'short.safetensors');
    const err = await rejection(
      receiveUpload(source(), path, { expected: 5000, limit: 1e9, ...(cut ? { cut } : {}) }),
    );
    expect(err.code).toBe('BODY_INCOMPLETE');
    expect(err.message).toMatch(/of 5000 bytes/);
    expect(existsSync(path)).toBe(false);
  });

  it('past the limit is PAYLOAD_TOO_LARGE, and leaves no file', async () => {
    const path = join(root, 'large.safetensors');
    const err = await rejection(receiveUpload(chunks(5), path, { expected: null, limit: 4500 }));
    expect(err.code).toBe('PAYLOAD_TOO_LARGE');
    expect(existsSync(path)).toBe(false);
  });
});

describe('job errors and ids', () => {
  it('a catalogue error is stored as {code, message}; anything else is INTERNAL', () => {
    expect(jobError(new QuantdError('STORAGE_FULL', { path: '/d' }))).toEqual({
      code: 'STORAGE_FULL',
      message: 'no space left on the device writing /d; free space or point the output elsewhere',
    });
    expect(jobError(new TypeError('boom'))).toEqual({ code: 'INTERNAL', message: 'internal error: boom' });
  });

  it('only random UUIDs are job ids; anything else is JOB_NOT_FOUND before it is a path', () => {
    const id = newJobId();
    expect(isJobId(id)).toBe(true);
    expect(checkJobId(id)).toBe(id);
    for (const bad of ['../../etc', '', 'x', `${id}/..`, id.toUpperCase(), `${id}\0`]) {
      expect(
        code(() => checkJobId(bad)),
        bad,
      ).toBe('JOB_NOT_FOUND');
      expect(
        code(() => new DataDir('/data').jobDir(bad)),
        bad,
      ).toBe('JOB_NOT_FOUND');
    }
  });
});

describe('job options', () => {
  it('spec options alone: the request of /v1/quantize', () => {
    const r = jobRequest(submissionFromQuery({ qdtype: 'int4', scheme: 'per_group', group_size: '32' }));
    expect(r.op).toBe('quantize');
    expect(r.recipe).toBeUndefined();
    expect(r.spec).toMatchObject({ qdtype: 'int4', scheme: 'per_group', groupSize: 32 });
  });

  it('recipe parameters: the spec options become the default, rules and skips come first', () => {
    const r = jobRequest(
      submissionFromQuery({
        qdtype: 'int8',
        scheme: 'per_channel',
        rule: ['*.mlp.*:qdtype=int4,scheme=per_group,group_size=16'],
        skip: '*.norm.*',
        min_size: '64',
        keep_1d: 'true',
        recipe: JSON.stringify({ rules: [{ regex: 'attn', qdtype: 'int8', scheme: 'per_tensor' }] }),
      }),
    );
    expect(r.recipe!.rules.map((x) => x.label)).toEqual([
      'rule 1 (*.norm.*)',
      'rule 2 (*.mlp.*)',
      'rule 3 (re:attn)',
    ]);
    expect(r.recipe!.defaultSpec).toMatchObject({ qdtype: 'int8', scheme: 'per_channel' });
    expect(r.recipe!.minSize).toBe(64);
    expect(r.recipe!.skip1d).toBe(false);
    expect(r.spec).toBe(r.recipe!.defaultSpec);
  });

  it.each([
    [{ op: 'transmogrify' }, 'OPTION_INVALID'],
    [{ op: ['quantize', 'qparams'] }, 'OPTION_INVALID'],
    [{ keep_1d: 'maybe' }, 'OPTION_INVALID'],
    [{ recipe: '[1]' }, 'RECIPE_INVALID'],
    [{ rule: 'nocolon' }, 'RECIPE_INVALID'],
  ])('%j: %s', (query, expected) => {
    expect(code(() => jobRequest(submissionFromQuery(query)))).toBe(expected);
  });
});

describe('the manager', () => {
  /** The reference kernels, with quantize replaced. */
  const computeWith = (quantize: Compute['quantize']): Compute => ({ ...referenceCompute, quantize });

  function setup(name: string): { data: string; model: string } {
    const data = join(root, name);
    mkdirSync(join(data, 'models'), { recursive: true });
    writeFileSync(join(data, 'models', 'm.safetensors'), modelBytes(manyTensors(6)));
    return { data, model: 'models/m.safetensors' };
  }

  async function until(manager: JobManager, id: string, check: (job: Job) => boolean): Promise<Job> {
    const deadline = Date.now() + 10_000;
    while (!check(await manager.get(id))) {
      if (Date.now() > deadline) throw new Error(`job ${id}: ${JSON.stringify(await manager.get(id))}`);
      await new Promise((r) => setTimeout(r, 5));
    }
    return manager.get(id);
  }

  it.each([
    [
      'STORAGE_FULL (the disk filled during the job)',
      new QuantdError('STORAGE_FULL', { path: '/data/x' }),
      'STORAGE_FULL',
    ],
    ['a plain Error', new RangeError('out of range'), 'INTERNAL'],
  ])(
    'a run that fails with %s: the job is failed with %s, its partial result removed',
    async (_what, thrown, expected) => {
      const { data, model } = setup(`fail-${expected}`);
      let calls = 0;
      const manager = new JobManager({
        dataDir: data,
        compute: computeWith(async (...args) => {
          if (++calls === 3) throw thrown;
          return referenceCompute.quantize(...args);
        }),
        concurrency: 1,
        threads: 1,
      });
      await manager.start();
      const { id } = await manager.submitPath({ op: 'quantize', params: {} }, model);
      const job = await until(manager, id, (j) => j.state === 'failed');
      expect(job.error!.code).toBe(expected);
      expect(job.result).toBeNull();
      expect(existsSync(join(data, 'jobs', id, 'result', 'm.safetensors'))).toBe(false);
      await manager.stop(); // and its job.json writes
      const onDisk = JSON.parse(readFileSync(join(data, 'jobs', id, 'job.json'), 'utf8')) as { job: Job };
      expect(onDisk.job).toEqual(job);
    },
  );

  it('a full pool (OVERLOADED) makes a job wait, not fail', async () => {
    const { data, model } = setup('overloaded');
    let refusals = 0;
    const manager = new JobManager({
      dataDir: data,
      compute: computeWith(async (...args) => {
        if (refusals < 5) {
          refusals++;
          throw new QuantdError('OVERLOADED', { queued: 66, limit: 66 });
        }
        return referenceCompute.quantize(...args);
      }),
      concurrency: 1,
      threads: 2,
    });
    await manager.start();
    const { id } = await manager.submitPath({ op: 'quantize', params: {} }, model);
    const job = await until(manager, id, (j) => j.state === 'succeeded' || j.state === 'failed');
    expect(job.state, JSON.stringify(job.error)).toBe('succeeded');
    expect(refusals).toBe(5);
    await manager.stop();
  });

  it('stopping leaves a running job running on disk; the next start runs it again (attempts 2)', async () => {
    const { data, model } = setup('stop');
    let release: () => void = () => {};
    const held = new Promise<void>((resolve) => (release = resolve));
    const slow = new JobManager({
      dataDir: data,
      compute: computeWith(async (input, spec, given, signal, options) => {
        await Promise.race([
          held,
          new Promise((_, reject) => signal?.addEventListener('abort', () => reject(signal.reason))),
        ]);
        return referenceCompute.quantize(input, spec, given, signal, options);
      }),
      concurrency: 1,
      threads: 1,
    });
    await slow.start();
    const { id } = await slow.submitPath({ op: 'quantize', params: { qdtype: 'int8' } }, model);
    await until(slow, id, (j) => j.state === 'running');
    await slow.stop();
    release();
    const onDisk = JSON.parse(readFileSync(join(data, 'jobs', id, 'job.json'), 'utf8')) as { job: Job };
    expect(onDisk.job).toMatchObject({ state: 'running', attempts: 1 });

    const next = new JobManager({ dataDir: data, compute: referenceCompute, concurrency: 1, threads: 1 });
    await next.start();
    const job = await until(next, id, (j) => j.state === 'succeeded');
    expect(job.attempts).toBe(2);
    await next.stop();
  });
});
