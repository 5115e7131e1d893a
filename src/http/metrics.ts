/**
 * Prometheus metrics (prom-client, /metrics): HTTP requests by route and status, their durations,
 * bytes in and out; gRPC calls by method and status code, and their durations; jobs by state,
 * jobs finished by final state, and the bytes their results hold on disk; the worker pool's
 * in-flight operations, queued tasks and task wait/run times, and the kernel backend in use;
 * admission: requests and bytes held against the memory budget, downloads and live streams open. One
 * registry per server instance, so tests can run several. No label holds a tensor, job id, path
 * or key.
 */
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import type { JobManager } from '../jobs/manager.js';
import { FINISHED, type JobState } from '../jobs/store.js';
import type { ComputeHandle } from '../pool/index.js';
import type { Admission, LiveStreams } from '../service/index.js';

const JOB_STATES: readonly JobState[] = ['queued', 'running', ...FINISHED];
const DURATION_BUCKETS = [0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 120];

export interface HttpMetrics {
  readonly registry: Registry;
  observe(
    route: string,
    method: string,
    status: number,
    seconds: number,
    bytesIn: number,
    bytesOut: number,
  ): void;
  /** One finished gRPC call (src/grpc/observe.ts): `quantd.v1.Quantizer/Quantize`, `OK`. */
  readonly observeGrpc: (method: string, code: string, seconds: number) => void;
}

/** The server's admission gates, shared by both transports (src/server/serve.ts). */
export interface Gates {
  readonly admission: Admission;
  readonly downloads: Admission;
  readonly liveStreams: LiveStreams;
}

export function createMetrics(handle: ComputeHandle, jobs?: JobManager, gates?: Gates): HttpMetrics {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry, prefix: 'quantd_' });
  const labels = ['route', 'method', 'status'] as const;
  const requests = new Counter({
    name: 'quantd_http_requests_total',
    help: 'HTTP requests by route, method and status',
    labelNames: labels,
    registers: [registry],
  });
  const duration = new Histogram({
    name: 'quantd_http_request_duration_seconds',
    help: 'HTTP request duration by route, method and status',
    labelNames: labels,
    buckets: DURATION_BUCKETS,
    registers: [registry],
  });
  const bytesIn = new Counter({
    name: 'quantd_http_request_bytes_total',
    help: 'request body bytes by route',
    labelNames: ['route'],
    registers: [registry],
  });
  const bytesOut = new Counter({
    name: 'quantd_http_response_bytes_total',
    help: 'response body bytes by route',
    labelNames: ['route'],
    registers: [registry],
  });
  new Gauge({
    name: 'quantd_kernel_backend_info',
    help: 'the kernel backend in use (value 1)',
    labelNames: ['backend', 'isa'],
    registers: [registry],
    collect() {
      this.set({ backend: handle.kernels.backend, isa: handle.kernels.isa }, 1);
    },
  });
  new Gauge({
    name: 'quantd_pool_operations_in_flight',
    help: 'tensor operations admitted to the worker pool and not finished',
    registers: [registry],
    collect() {
      this.set(handle.pool?.started ? handle.pool.workers().pending : 0);
    },
  });
  new Gauge({
    name: 'quantd_pool_queue_depth',
    help: 'kernel tasks waiting for a worker',
    registers: [registry],
    collect() {
      this.set(handle.pool?.started ? handle.pool.workers().queueSize : 0);
    },
  });
  for (const kind of ['wait', 'run'] as const) {
    new Gauge({
      name: `quantd_pool_task_${kind}_milliseconds`,
      help: `kernel task ${kind} time in the worker pool (quantiles since start)`,
      labelNames: ['quantile'],
      registers: [registry],
      collect() {
        const summary = handle.pool?.started ? handle.pool.workers().timings()[kind] : null;
        for (const [q, key] of [
          ['0.5', 'p50'],
          ['0.9', 'p90'],
          ['0.99', 'p99'],
        ] as const) {
          this.set({ quantile: q }, summary ? summary[key] : 0);
        }
      },
    });
  }
  const grpcCalls = new Counter({
    name: 'quantd_grpc_calls_total',
    help: 'gRPC calls by method and status code',
    labelNames: ['method', 'code'],
    registers: [registry],
  });
  const grpcDuration = new Histogram({
    name: 'quantd_grpc_call_duration_seconds',
    help: 'gRPC call duration by method and status code',
    labelNames: ['method', 'code'],
    buckets: DURATION_BUCKETS,
    registers: [registry],
  });
  if (gates) registerGateMetrics(registry, gates);
  if (jobs) registerJobMetrics(registry, jobs);
  if (jobs && jobs.replica !== null) registerClusterMetrics(registry, jobs);
  return {
    registry,
    observeGrpc(method, code, seconds) {
      grpcCalls.inc({ method, code });
      grpcDuration.observe({ method, code }, seconds);
    },
    observe(route, method, status, seconds, inBytes, outBytes) {
      const l = { route, method, status: String(status) };
      requests.inc(l);
      duration.observe(l, seconds);
      if (inBytes > 0) bytesIn.inc({ route }, inBytes);
      if (outBytes > 0) bytesOut.inc({ route }, outBytes);
    },
  };
}

/** What admission holds, read when scraped. */
function registerGateMetrics(registry: Registry, gates: Gates): void {
  const gauges: [string, string, () => number][] = [
    [
      'quantd_admission_requests_in_flight',
      'requests holding a compute admission slot (HTTP and gRPC)',
      () => gates.admission.inFlight,
    ],
    [
      'quantd_admission_memory_bytes',
      'bytes the admitted requests hold against the memory budget (QUANTD_MEMORY_BUDGET)',
      () => gates.admission.bytesInFlight,
    ],
    ['quantd_admission_memory_budget_bytes', 'QUANTD_MEMORY_BUDGET', () => gates.admission.budget],
    [
      'quantd_downloads_in_flight',
      'result downloads being sent (QUANTD_DOWNLOAD_LIMIT)',
      () => gates.downloads.inFlight,
    ],
    [
      'quantd_live_streams_open',
      'job event streams, health Watch and reflection streams open (QUANTD_LIVE_STREAMS)',
      () => gates.liveStreams.open,
    ],
  ];
  for (const [name, help, read] of gauges) {
    new Gauge({
      name,
      help,
      registers: [registry],
      collect() {
        this.set(read());
      },
    });
  }
}

/** Jobs by state and result bytes (read from the manager when scraped), jobs finished (counted). */
function registerJobMetrics(registry: Registry, jobs: JobManager): void {
  new Gauge({
    name: 'quantd_jobs',
    help: 'jobs by state',
    labelNames: ['state'],
    registers: [registry],
    collect() {
      const counts = new Map(JOB_STATES.map((state) => [state, 0]));
      for (const job of jobs.list()) counts.set(job.state, (counts.get(job.state) ?? 0) + 1);
      for (const [state, n] of counts) this.set({ state }, n);
    },
  });
  new Gauge({
    name: 'quantd_job_result_bytes',
    help: 'bytes of the result files of the succeeded jobs in the data directory',
    registers: [registry],
    collect() {
      let bytes = 0;
      for (const job of jobs.list()) for (const file of job.result?.files ?? []) bytes += file.bytes;
      this.set(bytes);
    },
  });
  const finished = new Counter({
    name: 'quantd_jobs_finished_total',
    help: 'jobs that reached a final state (succeeded, failed, cancelled) since the server started',
    labelNames: ['state'],
    registers: [registry],
  });
  for (const state of FINISHED) finished.inc({ state }, 0);
  jobs.onFinished((state) => finished.inc({ state }));
}

/**
 * Cluster mode: the shared queue's depth and running jobs (the same on every replica), the jobs
 * running on this one, and this replica's stall, hand-back and takeover counters (sum them across
 * replicas). Read when scraped; a Redis that does not answer leaves the queue's gauges unset.
 */
function registerClusterMetrics(registry: Registry, jobs: JobManager): void {
  let stats: Awaited<ReturnType<JobManager['clusterStats']>> = null;
  // one read of Redis per scrape, shared by the metrics below (a registry collects them at once)
  let reading: Promise<void> | undefined;
  const read = (): Promise<void> =>
    (reading ??= jobs
      .clusterStats()
      .then((s) => void (stats = s))
      .catch(() => {})
      .finally(() => (reading = undefined)));
  new Gauge({
    name: 'quantd_cluster_queue_jobs',
    help: "jobs in the cluster's queue: waiting for a replica, or active (running on one)",
    labelNames: ['state'],
    registers: [registry],
    async collect() {
      await read();
      if (!stats) return;
      this.set({ state: 'waiting' }, stats.queue.waiting);
      this.set({ state: 'active' }, stats.queue.active);
    },
  });
  new Gauge({
    name: 'quantd_cluster_replica_running_jobs',
    help: 'jobs running on this replica',
    registers: [registry],
    async collect() {
      await read();
      if (stats) this.set(stats.runningHere);
    },
  });
  const counters: [string, string, (s: NonNullable<typeof stats>) => number][] = [
    [
      'quantd_cluster_stalled_total',
      'jobs this replica found stalled (their replica stopped renewing the lock), since it started',
      (s) => s.counters.stalled,
    ],
    [
      'quantd_cluster_requeued_total',
      'running jobs this replica put back in the queue as it stopped',
      (s) => s.counters.requeued,
    ],
    [
      'quantd_cluster_taken_over_total',
      'jobs this replica took over from a replica that had stopped (retried runs), since it started',
      (s) => s.counters.takenOver,
    ],
    [
      'quantd_cluster_stalled_out_total',
      'jobs failed here for stalling too often (each run stopped its replica), since it started',
      (s) => s.counters.stalledOut,
    ],
  ];
  // the replica counts these itself (cluster-queue.ts); a scrape shows its totals
  for (const [name, help, of] of counters) {
    new Counter({
      name,
      help,
      registers: [registry],
      async collect() {
        await read();
        if (!stats) return;
        this.reset();
        this.inc(of(stats));
      },
    });
  }
}
