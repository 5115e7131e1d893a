// Timing helpers for the benchmarks: best-of-N wall time, and memcpy bandwidth as the roofline.

/** Best (smallest) wall time in seconds of `fn` over `reps` runs, after one warm-up run. */
export function timeBest(fn, reps) {
  fn();
  let best = Infinity;
  for (let i = 0; i < reps; i++) {
    const t0 = process.hrtime.bigint();
    fn();
    const t1 = process.hrtime.bigint();
    best = Math.min(best, Number(t1 - t0) / 1e9);
  }
  return best;
}

/** memcpy bandwidth in GB/s (bytes copied per second) for a buffer of `bytes`, one thread. */
export function measureMemcpy(bytes, reps) {
  const src = new Uint8Array(bytes);
  for (let i = 0; i < bytes; i += 4096) src[i] = i & 0xff;
  const dst = new Uint8Array(bytes);
  dst.set(src); // fault the pages in
  const seconds = timeBest(() => dst.set(src), reps);
  return bytes / seconds / 1e9;
}
