/**
 * A port another process holds is a configuration error that names the setting and the port —
 * not INTERNAL with Node's EADDRINUSE — and the server exits (1) without hanging on its workers.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { BIN } from '../cli/run-cli.js';

let holder: Server;
let port: number;
const data = mkdtempSync(join(tmpdir(), 'quantd-port-'));

beforeAll(async () => {
  holder = createServer();
  await new Promise<void>((resolve) => holder.listen(0, '127.0.0.1', resolve));
  port = (holder.address() as { port: number }).port;
});
afterAll(async () => {
  await new Promise((resolve) => holder.close(resolve));
  rmSync(data, { recursive: true, force: true });
});

describe('quantd serve on a port in use', () => {
  it.each([
    ['QUANTD_HTTP_PORT', 'QUANTD_GRPC_PORT'],
    ['QUANTD_GRPC_PORT', 'QUANTD_HTTP_PORT'],
  ])('%s taken: CONFIG_INVALID naming it, exit 1', (taken, free) => {
    const r = spawnSync(process.execPath, [BIN, 'serve'], {
      env: {
        ...process.env,
        QUANTD_HOST: '127.0.0.1',
        [taken]: String(port),
        [free]: '0',
        QUANTD_DATA_DIR: data,
      },
      encoding: 'utf8',
      timeout: 30_000,
    });
    expect(r.status, r.stderr).toBe(1);
    expect(r.stderr).toContain(`error CONFIG_INVALID: configuration ${taken} names a port another process`);
    expect(r.stderr).toContain(`127.0.0.1:${port}`);
    expect(r.stderr).not.toMatch(/INTERNAL|EADDRINUSE/);
  });
});
