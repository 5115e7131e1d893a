// Timing helpers for the benchmarks: best-of-N wall time, and memcpy bandwidth as the roofline.

/** Best (smallest) wall time in seconds of async `fn` over `reps` runs, after one warm-up run. */
export async function timeBestAsync(fn, reps) {
  await fn();
  let best = Infinity;
  for (let i = 0; i < reps; i++) {
    const t0 = process.hrtime.bigint();
    await fn();
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
  let best = Infinity;
  for (let i = 0; i < reps; i++) {
    const t0 = process.hrtime.bigint();
    dst.set(src);
    best = Math.min(best, Number(process.hrtime.bigint() - t0) / 1e9);
  }
  return bytes / best / 1e9;
}
