/**
 * Explicit garbage collection, for one reason: SharedArrayBuffers. A tensor's buffers are shared
 * with the worker threads that ran its tasks, and a backing store is freed only once every
 * isolate that saw it has collected its handle. Worker heaps are tiny and almost never collect on
 * their own, and V8 does not count shared backing stores as pressure, so without this a model run
 * keeps every tensor it ever read alive (measured: 1.3 GB RSS for a 1 GiB model at 125 MiB per
 * tensor, 0.3 GB with it). Callers collect after a quota of large buffers has gone by.
 */
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';

let gc: (() => void) | null | undefined;

/** Runs a full collection in this isolate (a no-op where the runtime refuses to expose gc). */
export function collectGarbage(): void {
  if (gc === undefined) {
    try {
      setFlagsFromString('--expose-gc');
      gc = runInNewContext('gc') as () => void;
    } catch {
      gc = null;
    }
  }
  gc?.();
}

/** Counts bytes of large buffers going by and collects once `quota` of them have. */
export class GarbageQuota {
  private seen = 0;

  constructor(private readonly quota = 256 * 1024 * 1024) {}

  add(bytes: number): void {
    this.seen += bytes;
    if (this.seen >= this.quota) {
      this.seen = 0;
      collectGarbage();
    }
  }
}

/**
 * Collects once requests that held large buffers have ended and array buffers have piled up.
 * A server thread that has just dropped a request's buffers allocates nothing more while it
 * waits for the next request, so V8, which collects on allocation, may keep them for minutes:
 * after eight 64 MiB gRPC calls had finished, the process held 1.5 GB more than before them,
 * and the memory budget counts what requests hold, not what the heap has not yet freed. Every
 * `checkEvery` bytes of ended requests, on the next turn of the loop (the last references are
 * dropped when the call's own events have run), the array-buffer memory is looked at, and past
 * `watermark` a full collection runs: a few milliseconds with the server's small heap.
 */
export class ReleaseCollector {
  private released = 0;
  private scheduled = false;

  constructor(
    private readonly checkEvery = 64 * 1024 * 1024,
    private readonly watermark = 256 * 1024 * 1024,
  ) {}

  /** A request that held `bytes` has ended. */
  ended(bytes: number): void {
    this.released += bytes;
    if (this.released < this.checkEvery || this.scheduled) return;
    this.released = 0;
    this.scheduled = true;
    setImmediate(() => {
      this.scheduled = false;
      if (process.memoryUsage().arrayBuffers > this.watermark) collectGarbage();
    }).unref();
  }
}
