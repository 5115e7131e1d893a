/**
 * The minimum pace of a request body. A client that sends its body slower than the server can
 * afford holds an admission slot (and memory) for as long as it likes: a few trickling
 * connections would refuse every other request. So every body must make progress: no silence
 * longer than `idleMs`, and, once that grace has passed, an average of at least `minBytesPerSecond`
 * over the time the server was reading. Time the server itself paused the stream (backpressure
 * while it writes an upload to disk) does not count against the client.
 *
 * Progress is read from the socket's byte counter, never from the body stream, so watching does
 * not take data from the stream's reader.
 */
import type { IncomingMessage } from 'node:http';
import { QuantdError } from '../errors/index.js';

export interface BodyPace {
  /** Longest silence while the server is reading (QUANTD_BODY_IDLE_MS). */
  readonly idleMs: number;
  /** Least average rate after the first idleMs (QUANTD_BODY_MIN_RATE); 0: no rate check. */
  readonly minBytesPerSecond: number;
}

const CHECK_EVERY_MS = 250;

/**
 * Watches `request`'s body until it has arrived (or `dispose` is called); calls `tooSlow` once
 * with BODY_TOO_SLOW when the client falls below the pace.
 */
export function watchBodyPace(
  request: IncomingMessage,
  pace: BodyPace,
  tooSlow: (error: QuantdError) => void,
): () => void {
  const socket = request.socket;
  const base = socket.bytesRead;
  let lastBytes = 0;
  let lastTick = Date.now();
  let lastProgress = lastTick;
  let reading = 0; // ms the server was reading (the stream not paused by it)
  const timer = setInterval(() => {
    if (request.complete || socket.destroyed) return dispose();
    const now = Date.now();
    const bytes = socket.bytesRead - base;
    const paused = request.readableFlowing === false || socket.isPaused();
    if (paused || bytes > lastBytes) lastProgress = now;
    if (!paused) reading += now - lastTick;
    lastTick = now;
    lastBytes = bytes;
    const silent = now - lastProgress;
    const slow =
      reading > pace.idleMs &&
      pace.minBytesPerSecond > 0 &&
      (bytes * 1000) / reading < pace.minBytesPerSecond;
    if (silent > pace.idleMs || slow) {
      dispose();
      tooSlow(
        new QuantdError('BODY_TOO_SLOW', {
          received: bytes,
          seconds: Math.round(reading / 100) / 10,
          idle: pace.idleMs / 1000,
          rate: pace.minBytesPerSecond,
        }),
      );
    }
  }, CHECK_EVERY_MS);
  timer.unref();
  function dispose(): void {
    clearInterval(timer);
  }
  return dispose;
}
