/**
 * A server's errors never show its clients an absolute path of its file system: the files of the
 * data directory are named relative to it (src/service/client-errors.ts, applied by the HTTP and
 * gRPC transports). FILE_UNREADABLE here; STORAGE_FULL on a real full disk in
 * test/reliability/disk-full.test.ts. The CLI keeps full paths (test/cli).
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import * as grpc from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { QuantdError } from '../../src/errors/index.js';
import { errorsForClients } from '../../src/service/index.js';
import { expectProblem } from '../http/helpers.js';
import { call, jobsClient, type JobsClient } from '../grpc/jobs-helpers.js';
import { startJobServer, submitPath, tempDir } from './helpers.js';
import type { TestServer } from '../http/helpers.js';

const root = tempDir('error-paths');
const data = join(root, 'data');
let server: TestServer;
let client: JobsClient;

beforeAll(async () => {
  mkdirSync(join(data, 'models'), { recursive: true });
  // a FIFO: not a regular file, so FILE_UNREADABLE (opening it would block)
  execFileSync('mkfifo', [join(data, 'models', 'pipe.safetensors')]);
  server = await startJobServer(data);
  client = await jobsClient(`127.0.0.1:${server.server.grpcPort}`);
});

afterAll(async () => {
  client?.close();
  await server?.server.shutdown('test');
  rmSync(root, { recursive: true, force: true });
});

describe('FILE_UNREADABLE names the file relative to the data directory', () => {
  it('over HTTP', async () => {
    const reply = await submitPath(server.port, { input: 'models/pipe.safetensors' });
    const problem = expectProblem(reply, 'FILE_UNREADABLE', ['models/pipe.safetensors']);
    expect(JSON.stringify(problem)).not.toContain(root);
  });

  it('over gRPC', async () => {
    const err = (await call(client, 'Submit', { path: 'models/pipe.safetensors' }).catch(
      (e: grpc.ServiceError) => e,
    )) as grpc.ServiceError;
    expect(err.metadata.get('quantd-code')).toEqual(['FILE_UNREADABLE']);
    expect(err.details).toContain('models/pipe.safetensors');
    expect(err.details).not.toContain(root);
    expect(String(err.metadata.get('quantd-params')[0])).not.toContain(root);
  });
});

describe('errorsForClients', () => {
  const forClients = errorsForClients('/srv/quantd/data');

  it('makes paths in the data directory relative, the directory itself "."', () => {
    const full = new QuantdError('STORAGE_FULL', { path: '/srv/quantd/data/jobs/x/input.safetensors' });
    expect(forClients(full).message).toBe(
      'no space left on the device writing jobs/x/input.safetensors; free space or point the output elsewhere',
    );
    expect(forClients(new QuantdError('STORAGE_FULL', { path: '/srv/quantd/data' })).params['path']).toBe(
      '.',
    );
  });

  it('names a server file elsewhere by its name, and hides paths quoted in system messages', () => {
    const error = new QuantdError('FILE_UNREADABLE', {
      path: '/var/lib/other/model.safetensors',
      detail: "EACCES: permission denied, open '/var/lib/other/model.safetensors'",
    });
    expect(forClients(error).message).toBe(
      "cannot read model.safetensors: EACCES: permission denied, open 'model.safetensors'",
    );
  });

  it('leaves what holds no server path as it is (the same error)', () => {
    const error = new QuantdError('PATH_FORBIDDEN', { path: '../../etc/passwd', detail: 'escapes' });
    expect(forClients(error)).toBe(error);
    const prefix = new QuantdError('FILE_NOT_FOUND', { path: 'models/srv/quantd/data-x' });
    expect(forClients(prefix)).toBe(prefix);
  });
});
