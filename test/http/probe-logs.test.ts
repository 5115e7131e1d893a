/**
 * Health probes arrive every few seconds from an orchestrator: at the default log level (info)
 * they write nothing, while API requests are logged as before; at debug they are logged too.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';

import { BIN } from '../cli/run-cli.js';

/** Starts `quantd serve` at `level`, sends the requests, stops it; returns what it logged. */
async function logsOf(level: string, paths: readonly string[]): Promise<string> {
  const data = mkdtempSync(join(tmpdir(), 'quantd-probe-logs-'));
  const child = spawn(process.execPath, [BIN, 'serve'], {
    env: {
      ...process.env,
      QUANTD_HOST: '127.0.0.1',
      QUANTD_HTTP_PORT: '0',
      QUANTD_GRPC_PORT: '0',
      QUANTD_LOG_LEVEL: level,
      QUANTD_DATA_DIR: data,
    },
  });
  let out = '';
  child.stdout.on('data', (d: Buffer) => (out += d.toString()));
  try {
    const port = await new Promise<number>((resolve, reject) => {
      const timer = setInterval(() => {
        const m = /listening: http:\/\/[\d.]+:(\d+)/.exec(out);
        if (m) {
          clearInterval(timer);
          resolve(Number(m[1]));
        }
      }, 20);
      child.once('exit', (code) => reject(new Error(`server exited with ${code}: ${out}`)));
    });
    const before = out.length;
    for (const path of paths) expect((await fetch(`http://127.0.0.1:${port}${path}`)).status).toBe(200);
    await new Promise((r) => setTimeout(r, 200));
    return out.slice(before);
  } finally {
    child.kill('SIGTERM');
    await new Promise((r) => child.once('exit', r));
    rmSync(data, { recursive: true, force: true });
  }
}

describe('health probes in the log', () => {
  it('at info: probes write nothing, an API request is logged', async () => {
    const logs = await logsOf('info', ['/healthz', '/readyz', '/healthz', '/v1/jobs']);
    expect(logs).not.toMatch(/healthz|readyz/);
    expect(logs).toMatch(/\/v1\/jobs/);
  });

  it('at debug: probes are logged', async () => {
    const logs = await logsOf('debug', ['/healthz']);
    expect(logs).toMatch(/healthz/);
  });
});
