/**
 * The native addon (build/Release/quantd.node, built by `npm ci` through node-gyp). Loading
 * fails with one line that says why: not built (and where the build log is), or not loadable.
 */
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { inputKind, measuredChunkUnits, type KernelModule } from './module.js';
import { packageRoot } from '../package-info.js';

/** The package root whether running from src/ (tests) or dist/src/ (built). */

export const ADDON_PATH = join(packageRoot(), 'build', 'Release', 'quantd.node');
const BUILD_LOG = join(packageRoot(), 'build', 'native-build.log');

/** Kernel functions bound to one ISA's dispatch table (addon.c js_bind). */
interface BoundKernels {
  readonly isa: string;
  minmax(...args: unknown[]): number;
  quantize(...args: unknown[]): number;
  dequantize(...args: unknown[]): number;
  fakeQuantize(...args: unknown[]): number;
  chooseQuantize(...args: unknown[]): number;
  determine(...args: unknown[]): number;
  histc(...args: unknown[]): number;
  convert(...args: unknown[]): number;
  quality(...args: unknown[]): number;
  quantizeMeasured(...args: unknown[]): number;
  ggmlQuantize(...args: unknown[]): number;
  ggmlQuantizeWeighted(...args: unknown[]): number;
  bnbQuantize(...args: unknown[]): number;
  nbitsQuantize(...args: unknown[]): number;
  awqQuantize(...args: unknown[]): number;
  gptqQuantize(...args: unknown[]): number;
  gptqInverseCholesky(...args: unknown[]): number;
  gptqColumns(...args: unknown[]): void;
  linearStatsAdd(...args: unknown[]): number;
  linearStatsScratch(k: number): number;
  quadraticForms(...args: unknown[]): void;
  linearOutputs(...args: unknown[]): void;
}

interface Addon {
  bind(isa: string): BoundKernels | null;
  lastBad(): number;
  /** Linux only (sockets.c). */
  discardReceived?: (fd: number) => number;
  duplicateDescriptor?: (fd: number) => number;
}

export class KernelLoadError extends Error {}

/**
 * This thread's room for one measured chunk of half-precision units, widened, for units the
 * kernels' one-pass loop does not take (choose_quantize_from's scratch).
 */
let scratch = new Float32Array(0);
function widenScratch(floats: number): Float32Array {
  if (scratch.length < floats) scratch = new Float32Array(floats);
  return scratch;
}

/**
 * Room for linearStatsAdd's packed token block (128 tokens of float64: 1 KiB per input). Up to
 * 1 MiB it is this thread's, kept between calls (a small layer's batch costs less than zeroing a
 * fresh one); a wider layer's is made per call, so that no thread keeps megabytes after one.
 */
const KEPT_STATS_SCRATCH = 128 * 1024;
let stats = new Float64Array(0);
function statsScratch(doubles: number): Float64Array {
  if (doubles > KEPT_STATS_SCRATCH) return new Float64Array(doubles);
  if (stats.length < doubles) stats = new Float64Array(doubles);
  return stats;
}

/** The native kernels with the requested ISA (default: the best this CPU supports). */
export function loadNative(isa = ''): KernelModule {
  if (!existsSync(ADDON_PATH)) {
    const hint = existsSync(BUILD_LOG) ? `the build failed, see ${BUILD_LOG}` : 'run `npm run build:native`';
    throw new KernelLoadError(`native addon not built (${hint})`);
  }
  let addon: Addon;
  try {
    addon = createRequire(import.meta.url)(ADDON_PATH) as Addon;
  } catch (err) {
    throw new KernelLoadError(`native addon failed to load: ${(err as Error).message.split('\n')[0]}`);
  }
  const k = addon.bind(isa);
  if (k === null) throw new KernelLoadError(`native kernels for ${isa} are not supported on this CPU`);
  return {
    backend: 'native',
    isa: k.isa,
    lastBad: () => addon.lastBad(),
    minmax: (x, start, l, mins, maxs) => k.minmax(x, start, l.outer, l.channels, l.inner, mins, maxs),
    quantize: (x, start, l, scale, zp, q, out, stats) =>
      (stats ? k.quantizeMeasured : k.quantize)(
        x,
        start,
        l.outer,
        l.channels,
        l.inner,
        scale,
        zp,
        q.codes,
        q.qmin,
        q.qmax,
        +q.addFirst,
        +q.rejectInf,
        out,
        ...(stats ? [stats] : []),
      ),
    dequantize: (codes, kind, start, count, l, scale, zp, out) =>
      k.dequantize(codes, kind, start, count, l.outer, l.channels, l.inner, scale, zp, out),
    ggmlQuantize: (type, x, out) => k.ggmlQuantize(type, x, out),
    ggmlQuantizeWeighted: (type, x, ne0, qw, out) => k.ggmlQuantizeWeighted(type, x, ne0, qw, out),
    bnbQuantize: (type, x, blocksize, packed, absmax) => k.bnbQuantize(type, x, blocksize, packed, absmax),
    nbitsQuantize: (w, nCols, kLen, blockSize, sym, f16, b, scales, zeroPoints) =>
      k.nbitsQuantize(w, nCols, kLen, blockSize, +sym, +f16, b, scales, zeroPoints),
    awqQuantize: (w, out, inF, groupSize, qweight, qzeros, scales) =>
      k.awqQuantize(w, out, inF, groupSize, qweight, qzeros, scales),
    gptqQuantize: (w, out, inF, bits, groupSize, sym, store, qweight, qzeros, scales, counts) =>
      k.gptqQuantize(w, out, inF, bits, groupSize, +sym, store, qweight, qzeros, scales, counts),
    linearStatsAdd: (hessian, absSum, n, x) =>
      k.linearStatsAdd(hessian, absSum, n, x, statsScratch(k.linearStatsScratch(n))),
    linearOutputs: (x, w, bias, n, kIn, out, y) =>
      k.linearOutputs(x, w, bias, n, kIn, out, y, new Float64Array(32 * kIn)),
    quadraticForms: (h, d, rows, n, out) => k.quadraticForms(h, d, rows, n, out, new Float64Array(32 * n)),
    gptqSolve: {
      inverseCholesky: (h, n, u) => k.gptqInverseCholesky(h, n, u, new Float64Array(n * n)),
      columns: (wp, out, n, u, p, codes, scale, zero) =>
        k.gptqColumns(
          wp,
          out,
          n,
          u,
          p.maxq,
          p.groupSize,
          +p.grouped,
          +p.sym,
          p.blockSize,
          codes,
          scale,
          zero,
          new Float64Array(2 * out * (p.blockSize + 1)),
        ),
    },
    fakeQuantize: (x, start, l, scale, zp, qmin, qmax, floatZp, out, mask) =>
      k.fakeQuantize(x, start, l.outer, l.channels, l.inner, scale, zp, qmin, qmax, +floatZp, out, mask),
    chooseQuantize: (x, first, unitSize, c, q, scale, zp, out, stats, half) =>
      k.chooseQuantize(
        x,
        inputKind(half),
        first,
        unitSize,
        c.mode,
        c.qmin,
        c.qmax,
        c.eps,
        c.symmetricZeroPoint,
        q.codes,
        q.qmin,
        q.qmax,
        +q.addFirst,
        +q.rejectInf,
        scale,
        zp,
        out,
        stats ?? null,
        half === undefined ? null : widenScratch(measuredChunkUnits(unitSize) * unitSize),
      ),
    determine: (mins, maxs, c, scale, zp) =>
      k.determine(mins, maxs, c.mode, c.qmin, c.qmax, c.eps, c.symmetricZeroPoint, scale, zp),
    convert: (kind, input, out) => void k.convert(kind, input, out),
    histc: (x, left, right, hist) => k.histc(x, left, right, hist),
    quality: (x, codes, start, l, scale, zp, q, stats) =>
      k.quality(
        x,
        codes,
        start,
        l.outer,
        l.channels,
        l.inner,
        scale,
        zp,
        q.codes,
        q.qmin,
        q.qmax,
        +q.addFirst,
        +q.rejectInf,
        stats,
      ),
  };
}

/** The addon's socket helpers (native/addon/sockets.c); Linux only. */
export interface SocketHelpers {
  /** Drops what a TCP socket has received, uncopied: bytes dropped, -1 at the peer's FIN, -2 on an error. */
  readonly discardReceived: (fd: number) => number;
  /** A new descriptor for the same socket, or -errno. */
  readonly duplicateDescriptor: (fd: number) => number;
}

/**
 * The socket helpers, or undefined where the addon is not built or the platform has none (not
 * Linux): callers then do without (read and discard in JavaScript, one listening handle).
 */
export function loadSocketHelpers(): SocketHelpers | undefined {
  if (!existsSync(ADDON_PATH)) return undefined;
  try {
    const addon = createRequire(import.meta.url)(ADDON_PATH) as Addon;
    const { discardReceived, duplicateDescriptor } = addon;
    return discardReceived && duplicateDescriptor ? { discardReceived, duplicateDescriptor } : undefined;
  } catch {
    return undefined;
  }
}
