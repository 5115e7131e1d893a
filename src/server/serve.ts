/**
 * `quantd serve` / `npm start`: the HTTP server (and the gRPC server beside it) on one worker
 * pool. SIGTERM or SIGINT drains: /readyz turns 503, new requests are refused, in-flight ones
 * finish (up to QUANTD_SHUTDOWN_TIMEOUT_MS), then the pool closes and the process exits.
 */
import { readFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import type { FastifyInstance } from 'fastify';
import { loadConfig, type Config } from '../config.js';
import { buildApp } from '../http/app.js';
import { describeKernels } from '../kernels/index.js';
import { startGrpc, type RunningGrpc } from '../grpc/server.js';
import { createCompute, type ComputeHandle } from '../pool/index.js';
import { Admission } from '../service/index.js';

export interface RunningServer {
  readonly config: Config;
  readonly handle: ComputeHandle;
  readonly http: FastifyInstance;
  readonly httpPort: number;
  readonly grpc: RunningGrpc;
  readonly grpcPort: number;
  /** Drains and stops everything; resolves when done. */
  shutdown(reason: string): Promise<void>;
}

export function packageVersion(): string {
  const pkg = new URL('../../../package.json', import.meta.url);
  return (JSON.parse(readFileSync(pkg, 'utf8')) as { version: string }).version;
}

export async function startServer(env: NodeJS.ProcessEnv = process.env): Promise<RunningServer> {
  const config = loadConfig(env);
  const handle = createCompute({
    backend: config.backend,
    isa: config.isa,
    threads: config.poolSize,
    maxQueue: config.queueLimit,
    inlineLimit: config.inlineLimit,
  });
  handle.pool?.workers(); // start the workers now, so that ready means warm
  let draining = false;
  const isReady = (): boolean => !draining;
  const admission = new Admission(config.poolSize + config.queueLimit);
  const http = await buildApp({ config, handle, version: packageVersion(), isReady, admission });
  let grpc: RunningGrpc;
  try {
    await http.listen({ host: config.host, port: config.httpPort });
    grpc = await startGrpc({ config, handle, admission, isReady, log: http.log });
  } catch (err) {
    await http.close();
    await handle.close();
    throw err;
  }
  const httpPort = (http.server.address() as AddressInfo).port;
  http.log.info(
    { backend: handle.kernels.backend, isa: handle.kernels.isa },
    describeKernels(handle.kernels),
  );

  let stopping: Promise<void> | undefined;
  const shutdown = (reason: string): Promise<void> => {
    stopping ??= (async () => {
      draining = true;
      http.log.info({ reason }, 'shutting down: draining in-flight requests');
      const timeout = new Promise<void>((resolve) => setTimeout(resolve, config.shutdownTimeoutMs).unref());
      await Promise.race([Promise.all([http.close(), grpc.shutdown(config.shutdownTimeoutMs)]), timeout]);
      await handle.close();
      http.log.info('shut down');
    })();
    return stopping;
  };
  return { config, handle, http, httpPort, grpc, grpcPort: grpc.port, shutdown };
}
