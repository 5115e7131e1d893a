/**
 * `quantd serve` as a real child process (the built bin/quantd.js), for the tests that must
 * treat the server from outside: kill it, signal it, watch its memory, check it is still alive.
 * It listens on 127.0.0.1, ephemeral ports; both ports are read from its listening line.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';

import { BIN } from '../cli/run-cli.js';

export interface ChildServer {
  readonly child: ChildProcess;
  readonly pid: number;
  /** HTTP port */
  readonly port: number;
  /** http://127.0.0.1:PORT */
  readonly base: string;
  readonly grpcPort: number;
  /** 127.0.0.1:PORT of the gRPC server */
  readonly target: string;
  /** Everything the process wrote on stderr so far. */
  stderr(): string;
  /** Everything the process wrote on stdout so far (its log, at QUANTD_LOG_LEVEL). */
  stdout(): string;
  /** Whether the process has not exited. */
  alive(): boolean;
  /** Its resident set size now, in bytes (Linux /proc). */
  rssBytes(): number;
  /** SIGKILL, and wait for the exit. */
  kill(): Promise<void>;
  /** SIGTERM, and wait for the exit. */
  stop(): Promise<void>;
  /** Resolves when the process has exited, with its code or signal. */
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

const LISTENING = /listening: http:\/\/[^\s]+:(\d+) grpc [^\s]+:(\d+) /;

/**
 * Starts `quantd serve` with `env` over the test's environment; resolves once it prints its
 * listening line.
 */
export function startChildServer(env: Readonly<Record<string, string>>): Promise<ChildServer> {
  const child = spawn(process.execPath, [BIN, 'serve'], {
    env: {
      ...process.env,
      QUANTD_HOST: '127.0.0.1',
      QUANTD_HTTP_PORT: '0',
      QUANTD_GRPC_PORT: '0',
      QUANTD_LOG_LEVEL: 'warn',
      QUANTD_POOL_SIZE: '2',
      ...env,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stderr!.setEncoding('utf8').on('data', (c: string) => (stderr += c));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.once('exit', (code, signal) => resolve({ code, signal })),
  );
  const alive = (): boolean => child.exitCode === null && child.signalCode === null;
  const stopWith = async (signal: NodeJS.Signals): Promise<void> => {
    if (alive()) child.kill(signal);
    await exited;
  };
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`quantd serve did not start: ${stdout} ${stderr}`));
    }, 20_000);
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`quantd serve exited (${code}) before listening: ${stdout} ${stderr}`));
    });
    child.stdout!.setEncoding('utf8').on('data', (c: string) => {
      stdout += c;
      const m = LISTENING.exec(stdout);
      if (m) {
        clearTimeout(timer);
        const port = Number(m[1]);
        const grpcPort = Number(m[2]);
        resolve({
          child,
          pid: child.pid!,
          port,
          base: `http://127.0.0.1:${port}`,
          grpcPort,
          target: `127.0.0.1:${grpcPort}`,
          stderr: () => stderr,
          stdout: () => stdout,
          alive,
          rssBytes: () => rssOf(child.pid!),
          kill: () => stopWith('SIGKILL'),
          stop: () => stopWith('SIGTERM'),
          exited,
        });
      }
    });
  });
}

function rssOf(pid: number): number {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const kib = /^VmRSS:\s+(\d+) kB/m.exec(status);
  return kib ? Number(kib[1]) * 1024 : NaN;
}
