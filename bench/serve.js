// `quantd serve` as a child process for the benchmarks that need a server: on 127.0.0.1 and free
// ports, with `env` over this process's environment.
import { spawn } from 'node:child_process';
import { join } from 'node:path';

const BIN = join(new URL('..', import.meta.url).pathname, 'bin', 'quantd.js');

/** Starts the server; resolves with the child process and its HTTP port once it listens. */
export function startServe(env = {}) {
  const child = spawn(process.execPath, [BIN, 'serve'], {
    env: {
      ...process.env,
      QUANTD_HOST: '127.0.0.1',
      QUANTD_HTTP_PORT: '0',
      QUANTD_GRPC_PORT: '0',
      QUANTD_LOG_LEVEL: 'warn',
      ...env,
    },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  return new Promise((resolve, reject) => {
    let out = '';
    child.once('exit', (code) => reject(new Error(`quantd serve exited (${code}): ${out}`)));
    child.stdout.setEncoding('utf8').on('data', (c) => {
      out += c;
      const m = /listening: http:\/\/[^\s]+:(\d+) /.exec(out);
      if (m) resolve({ child, port: Number(m[1]) });
    });
  });
}
