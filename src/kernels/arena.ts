import { GarbageQuota } from './gc.js';

/**
 * Recycled output buffers. A fresh multi-megabyte ArrayBuffer costs a page fault per 4 KiB the
 * first time it is written — for a kernel running near memory bandwidth that is most of the time
 * (64 MiB → int8: 12 ms fresh, 3 ms into a warm buffer). Buffers that callers hand back once
 * their bytes are written out are reused for later outputs of the same size.
 */
/** Bytes kept for reuse by default: a few tensors' worth; the CLI keeps less (bounded-memory model runs). */
export const DEFAULT_ARENA_BYTES = 128 * 1024 * 1024;

export class BufferArena {
  private readonly free = new Map<string, ArrayBufferLike[]>();
  private readonly ours = new WeakSet<ArrayBufferLike>();
  private cached = 0;
  /** Fresh large buffers mean earlier ones became garbage: collect it before it piles up (gc.ts). */
  private readonly pressure = new GarbageQuota(64 * 1024 * 1024);

  /**
   * @param limitBytes most bytes kept for reuse (beyond it, returned buffers are left to the GC)
   * @param minBytes smaller buffers are not worth recycling
   */
  constructor(
    private readonly limitBytes = DEFAULT_ARENA_BYTES,
    private readonly minBytes = 1024 * 1024,
  ) {}

  take(bytes: number, shared: boolean): ArrayBufferLike {
    if (bytes >= this.minBytes) {
      const reused = this.free.get(key(bytes, shared))?.pop();
      if (reused) {
        this.cached -= bytes;
        return reused;
      }
    }
    if (bytes >= this.minBytes) this.pressure.add(bytes);
    const buffer = shared ? new SharedArrayBuffer(bytes) : new ArrayBuffer(bytes);
    if (bytes >= this.minBytes) this.ours.add(buffer);
    return buffer;
  }

  /** Hands back the buffer under `view` (only whole buffers this arena gave out are kept). */
  give(view: ArrayBufferView): void {
    const buffer = view.buffer;
    if (!this.ours.has(buffer) || this.cached + buffer.byteLength > this.limitBytes) return;
    const k = key(buffer.byteLength, buffer instanceof SharedArrayBuffer);
    const list = this.free.get(k) ?? [];
    if (list.includes(buffer)) return;
    list.push(buffer);
    this.free.set(k, list);
    this.cached += buffer.byteLength;
  }

  get cachedBytes(): number {
    return this.cached;
  }
}

function key(bytes: number, shared: boolean): string {
  return `${shared ? 's' : 'a'}${bytes}`;
}
