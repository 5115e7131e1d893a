/**
 * Debian's HAProxy in front of the replicas, as a child process: HTTP round-robin on one port and
 * gRPC (HTTP/2 to the replicas' gRPC ports) on another, each replica checked on /readyz twice a
 * second, so that a replica killed or stopping is left out within a second and taken back once it
 * is ready again. A request a replica refuses before its answer starts (connection refused) is
 * sent to another.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { Socket, createServer } from 'node:net';
import { join } from 'node:path';

export interface Backend {
  readonly name: string;
  readonly httpPort: number;
  readonly grpcPort: number;
}

export interface Balancer {
  readonly httpPort: number;
  readonly grpcPort: number;
  stop(): Promise<void>;
}

/** A port free on 127.0.0.1 now (a replica restarted on it keeps its place behind HAProxy). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}

export function haproxyConfig(httpPort: number, grpcPort: number, backends: readonly Backend[]): string {
  const servers = (port: (b: Backend) => number, extra: string): string =>
    backends
      .map(
        (b) =>
          `  server ${b.name} 127.0.0.1:${port(b)} check port ${b.httpPort} inter 500ms fall 1 rise 1${extra}`,
      )
      .join('\n');
  return `global
  maxconn 2000

defaults
  timeout connect 2s
  timeout client 120s
  timeout server 120s
  retries 3
  option redispatch

frontend http
  mode http
  bind 127.0.0.1:${httpPort}
  default_backend replicas_http

backend replicas_http
  mode http
  balance roundrobin
  option httpchk GET /readyz
  retry-on conn-failure empty-response
${servers((b) => b.httpPort, '')}

frontend grpc
  mode http
  bind 127.0.0.1:${grpcPort} proto h2
  default_backend replicas_grpc

backend replicas_grpc
  mode http
  balance roundrobin
  option httpchk GET /readyz
${servers((b) => b.grpcPort, ' proto h2 check-proto h1')}
`;
}

/** Starts `haproxy` in the foreground with the configuration above, written under `dir`. */
export async function startHaproxy(dir: string, backends: readonly Backend[]): Promise<Balancer> {
  const httpPort = await freePort();
  const grpcPort = await freePort();
  const config = join(dir, 'haproxy.cfg');
  writeFileSync(config, haproxyConfig(httpPort, grpcPort, backends));
  const child: ChildProcess = spawn('haproxy', ['-db', '-f', config], {
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let stderr = '';
  child.stderr!.setEncoding('utf8').on('data', (c: string) => (stderr += c));
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  // listening once a connection to its HTTP port is accepted
  const deadline = Date.now() + 10_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`haproxy exited: ${stderr}`);
    if (await accepts(httpPort)) break;
    if (Date.now() > deadline) throw new Error(`haproxy did not listen: ${stderr}`);
    await new Promise((r) => setTimeout(r, 50));
  }
  return {
    httpPort,
    grpcPort,
    async stop() {
      if (child.exitCode === null) child.kill('SIGTERM');
      await exited;
    },
  };
}

function accepts(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = new Socket();
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
    socket.connect(port, '127.0.0.1');
  });
}
