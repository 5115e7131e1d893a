/**
 * Jobs survive the server: `quantd serve` as a real child process, killed with SIGKILL in the
 * middle of things, then started again on the same data directory.
 *  - a job that was running is run again from the start: succeeded, attempts 2, and its result is
 *    the CLI's output;
 *  - an upload that was still being received is failed, saying so;
 *  - a succeeded job whose result file was truncated by hand is failed, and its result is not
 *    served (409 JOB_NOT_READY).
 */
import { existsSync, readdirSync, rmSync, truncateSync } from 'node:fs';
import net from 'node:net';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';

import { expectProblem, send } from '../http/helpers.js';
import {
  SAFETENSORS,
  cliFile,
  expectSameTensors,
  finished,
  getJob,
  json,
  manyTensors,
  modelBytes,
  smallModel,
  startChildServer,
  submitUpload,
  tempDir,
  waitJob,
  writeModel,
  type ChildServer,
  type Job,
} from './helpers.js';

const root = tempDir('restart');
const data = join(root, 'data');
const servers: ChildServer[] = [];

afterAll(async () => {
  await Promise.all(servers.map((s) => s.kill()));
  rmSync(root, { recursive: true, force: true });
});

async function start(env: Readonly<Record<string, string>> = {}): Promise<ChildServer> {
  const server = await startChildServer({ QUANTD_DATA_DIR: data, ...env });
  servers.push(server);
  return server;
}

const jobIds = (): string[] => (existsSync(join(data, 'jobs')) ? readdirSync(join(data, 'jobs')) : []);

describe('a server killed mid-job, started again on the same data directory', () => {
  it('re-runs the running job, fails the interrupted upload and the damaged result', async () => {
    const OPTIONS = [
      ['qdtype', 'int8'],
      ['scheme', 'per_channel'],
    ] as const;
    const query = '?qdtype=int8&scheme=per_channel';
    const slowModel = manyTensors(40, 50);
    const slowInput = writeModel(join(root, 'slow.safetensors'), slowModel);
    const expected = await cliFile(slowInput, join(root, 'slow.cli.safetensors'), OPTIONS);

    // --- the first server: slow kernels, so that the big job is caught running ---------------
    const first = await start({
      QUANTD_TEST_HOOKS: '1',
      QUANTD_TEST_TASK_DELAY_MS: '40',
      QUANTD_INLINE_LIMIT: '0',
    });
    const small = await submitUpload(first.port, modelBytes(smallModel(9)), query);
    const done = await waitJob(first.port, small.id, finished);
    expect(done.state).toBe('succeeded');

    const slow = await submitUpload(first.port, modelBytes(slowModel), query);
    await waitJob(
      first.port,
      slow.id,
      (j) => j.state === 'running' && j.progress!.tensors_done >= 1,
      20_000,
      5,
    );

    // an upload in flight: half its body sent, its job directory (and input) there
    const body = modelBytes(smallModel(10));
    const before = new Set(jobIds());
    const socket = net.connect({ port: first.port, host: '127.0.0.1' });
    socket.on('error', () => {});
    socket.write(
      `POST /v1/jobs${query} HTTP/1.1\r\nHost: x\r\nContent-Type: ${SAFETENSORS}\r\nContent-Length: ${body.byteLength}\r\n\r\n`,
    );
    socket.write(body.subarray(0, 1500));
    let uploading: string | undefined;
    const deadline = Date.now() + 10_000;
    while (uploading === undefined && Date.now() < deadline) {
      uploading = jobIds().find(
        (id) => !before.has(id) && existsSync(join(data, 'jobs', id, 'input.safetensors')),
      );
      await new Promise((r) => setTimeout(r, 5));
    }
    expect(uploading, 'the upload has a job directory').toBeDefined();
    // hidden from the API while it is received
    expect(json<{ jobs: Job[] }>(await send(first.port, '/v1/jobs')).jobs.map((j) => j.id)).not.toContain(
      uploading,
    );

    await first.kill();
    socket.destroy();

    // damage the small job's result by hand
    truncateSync(join(data, 'jobs', small.id, 'result', 'model.safetensors'), 100);

    // --- the second server: normal speed ------------------------------------------------------
    const second = await start();
    const rerun = await waitJob(second.port, slow.id, finished);
    expect(rerun.state, JSON.stringify(rerun.error)).toBe('succeeded');
    expect(rerun.attempts).toBe(2);
    const result = await send(second.port, `/v1/jobs/${slow.id}/result`);
    expect(result.status).toBe(200);
    expectSameTensors(result.body, expected, 're-run result');

    const interrupted = await getJob(second.port, uploading!);
    expect(interrupted.state).toBe('failed');
    expect(interrupted.error!.code).toBe('BODY_INCOMPLETE');
    expect(interrupted.error!.message).toMatch(/server stopped while receiving this upload/);
    expect(interrupted.error!.message).toContain(`of ${body.byteLength} bytes`);
    expect(existsSync(join(data, 'jobs', uploading!, 'input.safetensors'))).toBe(false);

    const damaged = await getJob(second.port, small.id);
    expect(damaged.state).toBe('failed');
    expect(damaged.result).toBeNull();
    expect(damaged.error!.code).toBe('SAFETENSORS_TRUNCATED');
    expect(damaged.error!.message).toContain(`jobs/${small.id}/result/model.safetensors`);
    expectProblem(await send(second.port, `/v1/jobs/${small.id}/result`), 'JOB_NOT_READY', ['failed']);

    // newest first: the interrupted upload, the re-run job, the damaged one
    const ids = json<{ jobs: Job[] }>(await send(second.port, '/v1/jobs')).jobs.map((j) => j.id);
    expect(ids).toEqual([uploading, slow.id, small.id]);
    await second.stop();
    expect(second.child.exitCode).toBe(0);
  });
});
