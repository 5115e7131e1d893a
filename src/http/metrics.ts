/**
 * Prometheus metrics (prom-client, /metrics): requests by route and status, their durations,
 * bytes in and out, the worker pool's in-flight operations, queued tasks and task wait/run times,
 * and the kernel backend in use. One registry per server instance, so tests can run several.
 */
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import type { ComputeHandle } from '../pool/index.js';

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
}

export function createMetrics(handle: ComputeHandle): HttpMetrics {
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
    buckets: [0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 120],
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
  return {
    registry,
    observe(route, method, status, seconds, inBytes, outBytes) {
      const l = { route, method, status: String(status) };
      requests.inc(l);
      duration.observe(l, seconds);
      if (inBytes > 0) bytesIn.inc({ route }, inBytes);
      if (outBytes > 0) bytesOut.inc({ route }, outBytes);
    },
  };
}
