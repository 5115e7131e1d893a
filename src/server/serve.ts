/**
 * `quantd serve` / `npm start`: the HTTP server (and the gRPC server beside it) on one worker
 * pool. SIGTERM or SIGINT drains: /readyz turns 503, new requests are refused, in-flight ones
 * finish (up to QUANTD_SHUTDOWN_TIMEOUT_MS), then the pool closes and the process exits.
 */
import type { AddressInfo } from 'node:net';
import type { FastifyInstance } from 'fastify';
import { isLoopbackHost, loadConfig, type Config } from '../config.js';
import { packageVersion } from '../package-info.js';
import { QuantdError } from '../errors/index.js';
import { buildApp } from '../http/app.js';
import { acceptMore } from '../http/multi-accept.js';
import { createMetrics } from '../http/metrics.js';
import { describeKernels } from '../kernels/index.js';
import { startGrpc, type RunningGrpc } from '../grpc/server.js';
import { createCompute, type ComputeHandle } from '../pool/index.js';
import { Admission, LiveStreams } from '../service/index.js';

export { packageVersion };
import { JobManager } from '../jobs/manager.js';
import { connectCluster, type Cluster } from '../jobs/cluster.js';
import { DataDir } from '../jobs/paths.js';
import { JobStore } from '../jobs/store.js';
import { CalibrationStore } from '../service/calibration/store.js';
import { serverBudget } from '../service/calibration/limits.js';
import { hostMemoryBytes } from '../service/host-memory.js';

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

/** A port that cannot be had (taken, or not ours to bind) is a configuration error naming it. */
function listenError(err: unknown, key: string, host: string, port: number): unknown {
  const code = (err as NodeJS.ErrnoException).code ?? '';
  const message = (err as Error).message ?? '';
  if (code === 'EADDRINUSE' || /EADDRINUSE|address already in use/i.test(message)) {
    return new QuantdError('CONFIG_INVALID', {
      key,
      detail: `names a port another process already listens on (${host}:${port}); stop it or choose another port`,
      value: String(port),
    });
  }
  if (code === 'EACCES' || code === 'EADDRNOTAVAIL' || /EACCES|EADDRNOTAVAIL/.test(message)) {
    return new QuantdError('CONFIG_INVALID', {
      key,
      detail: `cannot be listened on at ${host} (${code || message.split('\n')[0]})`,
      value: String(port),
    });
  }
  return err;
}

/**
 * Who can reach the server, said once at start: on loopback, how to listen wider; on another
 * address without keys (QUANTD_ALLOW_UNAUTHENTICATED), that anyone who reaches it is the one
 * tenant. Nothing on another address with keys.
 */
export function reachNotice(config: Config): string | null {
  if (isLoopbackHost(config.host)) {
    return (
      `only this machine can connect (QUANTD_HOST=${config.host}); to serve others, set ` +
      'QUANTD_HOST=0.0.0.0 (or one of its addresses) with QUANTD_API_KEYS'
    );
  }
  if (config.apiKeys.length + config.adminKeys.length > 0) return null;
  return (
    `warning: authentication is off on ${config.host} (QUANTD_ALLOW_UNAUTHENTICATED): anyone who ` +
    'reaches it can run jobs and read, replace or delete every result; set QUANTD_API_KEYS'
  );
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
  let draining = false;
  const isReady = (): boolean => !draining;
  // what both transports admit against: compute slots and the memory budget, the download pool,
  // the live streams' cap
  const admission = new Admission(config.poolSize + config.queueLimit, config.memoryBudget);
  const downloads = new Admission(config.downloadLimit);
  const liveStreams = new LiveStreams(config.liveStreams, config.liveStreamsPerClient);
  let http: FastifyInstance | undefined;
  let grpc: RunningGrpc;
  // Cluster mode: the jobs of every replica in one Redis (QUANTD_REDIS_URL)
  let cluster: Cluster | undefined;
  if (config.redisUrl !== null) {
    try {
      cluster = await connectCluster(
        {
          url: config.redisUrl,
          prefix: config.redisPrefix,
          lockMs: config.clusterLockMs,
          ...(config.replicaId !== null && { replica: config.replicaId }),
        },
        new JobStore(new DataDir(config.dataDir)),
      );
    } catch (err) {
      await handle.close().catch(() => {});
      throw err;
    }
  }
  // Jobs (/v1/jobs, and quantd.v1.Jobs over gRPC: one manager, so one set of jobs) run in the
  // background on the same pool; each uses all its threads.
  const jobs = new JobManager({
    dataDir: config.dataDir,
    compute: handle.compute,
    encoding: handle.encoding,
    concurrency: config.jobConcurrency,
    threads: config.poolSize,
    quota: config.jobQuota,
    limit: config.jobLimit,
    retentionMs: config.jobRetentionMs,
    ...(config.jobStoreLimit !== null && { storeLimit: config.jobStoreLimit }),
    ...(cluster && { cluster }),
  });
  // Calibration sessions (/v1/calibrations): persisted beside the jobs, resumed on start
  const calibrations = new CalibrationStore({
    dataDir: config.dataDir,
    compute: handle.compute,
    limits: {
      maxBins: config.calibrationMaxBins,
      maxChannels: config.calibrationMaxChannels,
      maxFeatures: config.calibrationMaxFeatures,
      sessionBytes: config.calibrationSessionBytes,
    },
    budgetBytes: serverBudget(config.calibrationBytes, hostMemoryBytes()),
  });
  try {
    handle.pool?.workers(); // start the workers now, so that ready means warm
    // one registry for both transports: /metrics counts HTTP requests, gRPC calls and jobs
    const metrics = createMetrics(handle, jobs, { admission, downloads, liveStreams });
    http = await buildApp({
      config,
      handle,
      version: packageVersion(),
      isReady,
      admission,
      downloads,
      liveStreams,
      jobs,
      calibrations,
      metrics,
    });
    jobs.log = http.log;
    calibrations.log = http.log;
    await jobs.start(); // resumes what the previous process left
    await calibrations.start();
    try {
      await http.listen({ host: config.host, port: config.httpPort });
      await acceptMore(http.server);
    } catch (err) {
      throw listenError(err, 'QUANTD_HTTP_PORT', config.host, config.httpPort);
    }
    try {
      grpc = await startGrpc({
        config,
        handle,
        admission,
        downloads,
        liveStreams,
        isReady,
        jobs,
        calibrations,
        log: http.log,
        observe: metrics.observeGrpc,
      });
    } catch (err) {
      throw listenError(err, 'QUANTD_GRPC_PORT', config.host, config.grpcPort);
    }
  } catch (err) {
    // whatever started goes down again: the listener, and the pool's worker threads
    await http?.close().catch(() => {});
    await jobs.stop().catch(() => {});
    await calibrations.stop().catch(() => {});
    await handle.close().catch(() => {});
    throw err;
  }
  const app = http;
  const httpPort = (app.server.address() as AddressInfo).port;
  app.log.info({ backend: handle.kernels.backend, isa: handle.kernels.isa }, describeKernels(handle.kernels));
  app.log.info(
    { budget_bytes: calibrations.budget.limit, session_bytes: config.calibrationSessionBytes },
    `calibration state: at most ${calibrations.budget.limit} bytes for every session together (${config.calibrationBytes === null ? 'a quarter of the host memory' : 'QUANTD_CALIBRATION_BYTES'})`,
  );

  let stopping: Promise<void> | undefined;
  const shutdown = (reason: string): Promise<void> => {
    stopping ??= (async () => {
      // From here API requests are refused and every response closes its connection (app.ts).
      draining = true;
      app.log.info({ reason }, 'shutting down: draining in-flight requests');
      // running jobs stop now, left as they are on disk: the next start runs them again
      const jobsStopped = jobs.stop();
      let timer: NodeJS.Timeout | undefined;
      const timeout = new Promise<'timeout'>((resolve) => {
        timer = setTimeout(() => resolve('timeout'), config.shutdownTimeoutMs);
        timer.unref();
      });
      const closed = Promise.all([app.close(), grpc.shutdown(config.shutdownTimeoutMs)]);
      // Keep-alive connections with no request in flight would hold close() until they time out.
      app.server.closeIdleConnections();
      const outcome = await Promise.race([closed, timeout]);
      clearTimeout(timer);
      if (outcome === 'timeout') {
        app.log.warn('shutdown timeout: closing the connections still open');
        app.server.closeAllConnections();
      }
      await jobsStopped;
      await calibrations.stop();
      await handle.close();
      app.log.info('shut down');
    })();
    return stopping;
  };
  return { config, handle, http: app, httpPort, grpc, grpcPort: grpc.port, shutdown };
}
