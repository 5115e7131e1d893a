/**
 * The WebAssembly kernels (native/wasm/quantd.wasm: the same C sources, clang --target=wasm32
 * -msimd128). The module has its own linear memory, so data streams through it in chunks that
 * stay in cache: copy a chunk in, run the kernel on it, copy its output out. Main memory then
 * sees about the traffic the native kernels cause. One instance per thread.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { KernelLoadError } from './native.js';
import {
  GGML_KERNEL_TYPES,
  inputKind,
  measuredChunkUnits,
  unitsPerCall,
  type ChooseArgs,
  type KernelModule,
  type LayoutArgs,
  type QuantArgs,
} from './module.js';
import { packageRoot } from '../package-info.js';

export const WASM_PATH = join(packageRoot(), 'native', 'wasm', 'quantd.wasm');

/** Elements per chunk: 256 KiB of float32, a multiple of every codes-per-byte. */
const CHUNK = 65536;
const PAGE = 65536;

interface Exports {
  memory: WebAssembly.Memory;
  heap_base(): number;
  select(simd: number): number;
  last_bad(): number;
  minmax(...args: number[]): number;
  quantize(...args: number[]): number;
  dequantize(...args: number[]): number;
  fake_quantize(...args: number[]): number;
  choose_quantize(...args: number[]): number;
  determine(...args: number[]): number;
  histc(...args: number[]): number;
  convert(...args: number[]): void;
  quality(...args: number[]): number;
  ggml_quantize(type: number, x: number, blocks: number, out: number): number;
  ggml_quantize_weighted(type: number, x: number, rows: number, ne0: number, qw: number, out: number): number;
  bnb_quantize(type: number, x: number, n: number, blocksize: number, packed: number, absmax: number): number;
  nbits_quantize(
    w: number,
    nCols: number,
    kLen: number,
    blockSize: number,
    sym: number,
    f16: number,
    b: number,
    scales: number,
    zeroPoints: number,
  ): number;
  gptq_quantize(
    w: number,
    out: number,
    inF: number,
    bits: number,
    groupSize: number,
    sym: number,
    store: number,
    qweight: number,
    qzeros: number,
    scales: number,
    counts: number,
  ): number;
  awq_quantize(
    w: number,
    out: number,
    inF: number,
    groupSize: number,
    qweight: number,
    qzeros: number,
    scales: number,
  ): number;
}

const CODE_BITS = [8, 8, 16, 32, 4, 4, 2, 2, 8, 8];
const codeBytes = (kind: number, n: number): number => Math.ceil((n * CODE_BITS[kind]!) / 8);

let compiled: WebAssembly.Module | undefined;

class WasmKernels implements KernelModule {
  readonly backend = 'wasm' as const;
  readonly isa: string;
  private readonly e: Exports;
  private readonly base: number;
  private top = 0;
  private bad = -1;

  constructor(simd: boolean) {
    compiled ??= new WebAssembly.Module(readFileSync(WASM_PATH));
    this.e = new WebAssembly.Instance(compiled, {}).exports as unknown as Exports;
    if (!this.e.select(simd ? 1 : 0)) throw new KernelLoadError('wasm SIMD128 kernels not available');
    this.isa = simd ? 'simd128' : 'scalar';
    this.base = (this.e.heap_base() + 15) & ~15;
  }

  lastBad(): number {
    return this.bad;
  }

  /** Arena of the current call: reset, then carve aligned regions, growing the memory. */
  private reset(): void {
    this.top = this.base;
  }
  private alloc(bytes: number): number {
    const ptr = this.top;
    this.top = (ptr + bytes + 15) & ~15;
    const need = this.top - this.e.memory.buffer.byteLength;
    if (need > 0) this.e.memory.grow(Math.ceil(need / PAGE));
    return ptr;
  }
  private put(ptr: number, src: ArrayBufferView): void {
    new Uint8Array(this.e.memory.buffer, ptr, src.byteLength).set(
      new Uint8Array(src.buffer, src.byteOffset, src.byteLength),
    );
  }
  private take(ptr: number, dst: ArrayBufferView, dstByteOffset = 0, bytes = dst.byteLength): void {
    new Uint8Array(dst.buffer, dst.byteOffset + dstByteOffset, bytes).set(
      new Uint8Array(this.e.memory.buffer, ptr, bytes),
    );
  }
  /** `offset`: where the call's input starts, in the units of the index the kernel reports. */
  private status(s: number, offset = 0): number {
    this.bad = s === 0 ? -1 : this.e.last_bad() + offset;
    return s;
  }
  private copyIn(src: ArrayBufferView): number {
    const ptr = this.alloc(src.byteLength);
    this.put(ptr, src);
    return ptr;
  }

  histc(x: Float32Array, left: number, right: number, hist: Float32Array): number {
    this.reset();
    const pHist = this.copyIn(hist);
    const pX = this.alloc(Math.min(CHUNK, x.length) * 4);
    let s = 0;
    for (let off = 0; off < x.length && s === 0; off += CHUNK) {
      const part = x.subarray(off, off + CHUNK);
      this.put(pX, part);
      s = this.e.histc(pX, part.length, left, right, hist.length, pHist);
    }
    this.take(pHist, hist, 0, hist.length * 4);
    return s;
  }

  minmax(x: Float32Array, start: number, l: LayoutArgs, mins: Float32Array, maxs: Float32Array): number {
    this.reset();
    const pMin = this.copyIn(mins.subarray(0, l.channels));
    const pMax = this.copyIn(maxs.subarray(0, l.channels));
    const pX = this.alloc(Math.min(CHUNK, x.length) * 4);
    let s = 0;
    for (let off = 0; off < x.length && s === 0; off += CHUNK) {
      const part = x.subarray(off, off + CHUNK);
      this.put(pX, part);
      s = this.e.minmax(pX, start + off, part.length, l.outer, l.channels, l.inner, pMin, pMax);
    }
    this.take(pMin, mins, 0, l.channels * 4);
    this.take(pMax, maxs, 0, l.channels * 4);
    return this.status(s);
  }

  quantize(
    x: Float32Array,
    start: number,
    l: LayoutArgs,
    scale: Float32Array,
    zp: Float32Array,
    q: QuantArgs,
    out: Uint8Array,
    stats?: Float64Array,
  ): number {
    this.reset();
    const pScale = this.copyIn(scale.subarray(0, l.channels));
    const pZp = this.copyIn(zp.subarray(0, l.channels));
    const pStats = stats ? this.copyIn(stats.subarray(0, 5)) : 0;
    const n = Math.min(CHUNK, x.length);
    const pX = this.alloc(n * 4);
    const pOut = this.alloc(codeBytes(q.codes, n));
    let s = 0;
    for (let off = 0; off < x.length && s === 0; off += CHUNK) {
      const part = x.subarray(off, off + CHUNK);
      this.put(pX, part);
      s = this.e.quantize(
        pX,
        start + off,
        part.length,
        l.outer,
        l.channels,
        l.inner,
        pScale,
        pZp,
        q.codes,
        q.qmin,
        q.qmax,
        +q.addFirst,
        +q.rejectInf,
        pOut,
        pStats,
      );
      if (s === 0) this.take(pOut, out, codeBytes(q.codes, off), codeBytes(q.codes, part.length));
    }
    if (stats) this.take(pStats, stats, 0, 40);
    return this.status(s);
  }

  dequantize(
    codes: Uint8Array,
    kind: number,
    start: number,
    count: number,
    l: LayoutArgs,
    scale: Float32Array,
    zp: Float32Array,
    out: Float32Array,
  ): number {
    this.reset();
    const pScale = this.copyIn(scale.subarray(0, l.channels));
    const pZp = this.copyIn(zp.subarray(0, l.channels));
    const n = Math.min(CHUNK, count);
    const pCodes = this.alloc(codeBytes(kind, n));
    const pOut = this.alloc(n * 4);
    let s = 0;
    for (let off = 0; off < count && s === 0; off += CHUNK) {
      const m = Math.min(CHUNK, count - off);
      this.put(pCodes, codes.subarray(codeBytes(kind, off), codeBytes(kind, off + m)));
      s = this.e.dequantize(pCodes, kind, start + off, m, l.outer, l.channels, l.inner, pScale, pZp, pOut);
      this.take(pOut, out, off * 4, m * 4);
    }
    return this.status(s);
  }

  fakeQuantize(
    x: Float32Array,
    start: number,
    l: LayoutArgs,
    scale: Float32Array,
    zp: Float32Array,
    qmin: number,
    qmax: number,
    floatZp: boolean,
    out: Float32Array,
    mask: Uint8Array,
  ): number {
    this.reset();
    const pScale = this.copyIn(scale.subarray(0, l.channels));
    const pZp = this.copyIn(zp.subarray(0, l.channels));
    const n = Math.min(CHUNK, x.length);
    const pX = this.alloc(n * 4);
    const pOut = this.alloc(n * 4);
    const pMask = this.alloc(n);
    let s = 0;
    for (let off = 0; off < x.length && s === 0; off += CHUNK) {
      const part = x.subarray(off, off + CHUNK);
      this.put(pX, part);
      s = this.e.fake_quantize(
        pX,
        start + off,
        part.length,
        l.outer,
        l.channels,
        l.inner,
        pScale,
        pZp,
        qmin,
        qmax,
        +floatZp,
        pOut,
        pMask,
      );
      this.take(pOut, out, off * 4, part.length * 4);
      this.take(pMask, mask, off, part.length);
    }
    return this.status(s);
  }

  chooseQuantize(
    x: Float32Array | Uint16Array,
    first: number,
    unitSize: number,
    c: ChooseArgs,
    q: QuantArgs,
    scale: Float32Array,
    zp: Float64Array,
    out: Uint8Array,
    stats?: Float64Array,
    half?: number,
  ): number {
    this.reset();
    const pStats = stats ? this.copyIn(stats.subarray(0, 5)) : 0;
    const units = Math.floor(x.length / unitSize);
    // whole units per chunk, in measured.c's own steps (statistics summed as by one native call)
    const per = unitsPerCall(unitSize, CHUNK);
    const pX = this.alloc(per * unitSize * x.BYTES_PER_ELEMENT);
    const pScale = this.alloc(per * 4);
    const pZp = this.alloc(per * 8);
    const pOut = this.alloc(codeBytes(q.codes, per * unitSize));
    const pScratch = half === undefined ? 0 : this.alloc(measuredChunkUnits(unitSize) * unitSize * 4);
    let s = 0;
    for (let u = 0; u < units && s === 0; u += per) {
      const m = Math.min(per, units - u);
      this.put(pX, x.subarray(u * unitSize, (u + m) * unitSize));
      s = this.e.choose_quantize(
        pX,
        inputKind(half),
        first + u,
        m,
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
        pScale,
        pZp,
        pOut,
        pStats,
        pScratch,
      );
      if (s !== 0) break;
      this.take(pScale, scale, u * 4, m * 4);
      this.take(pZp, zp, u * 8, m * 8);
      this.take(pOut, out, codeBytes(q.codes, u * unitSize), codeBytes(q.codes, m * unitSize));
    }
    if (stats) this.take(pStats, stats, 0, 40);
    return this.status(s); // the kernel reports absolute indices: it was given first + u
  }

  determine(
    mins: Float32Array,
    maxs: Float32Array,
    c: ChooseArgs,
    scale: Float32Array,
    zp: Float64Array,
  ): number {
    this.reset();
    const pMin = this.copyIn(mins);
    const pMax = this.copyIn(maxs);
    const pScale = this.alloc(mins.length * 4);
    const pZp = this.alloc(mins.length * 8);
    const s = this.e.determine(
      pMin,
      pMax,
      mins.length,
      c.mode,
      c.qmin,
      c.qmax,
      c.eps,
      c.symmetricZeroPoint,
      pScale,
      pZp,
    );
    this.take(pScale, scale, 0, mins.length * 4);
    this.take(pZp, zp, 0, mins.length * 8);
    return this.status(s);
  }

  quality(
    x: Float32Array,
    codes: Uint8Array,
    start: number,
    l: LayoutArgs,
    scale: Float32Array,
    zp: Float32Array,
    q: QuantArgs,
    stats: Float64Array,
  ): number {
    this.reset();
    const pScale = this.copyIn(scale.subarray(0, l.channels));
    const pZp = this.copyIn(zp.subarray(0, l.channels));
    const pStats = this.copyIn(stats.subarray(0, 5));
    const n = Math.min(CHUNK, x.length);
    const pX = this.alloc(n * 4);
    const pCodes = this.alloc(codeBytes(q.codes, n));
    let s = 0;
    for (let off = 0; off < x.length && s === 0; off += CHUNK) {
      const part = x.subarray(off, off + CHUNK);
      this.put(pX, part);
      this.put(pCodes, codes.subarray(codeBytes(q.codes, off), codeBytes(q.codes, off + part.length)));
      s = this.e.quality(
        pX,
        pCodes,
        start + off,
        part.length,
        l.outer,
        l.channels,
        l.inner,
        pScale,
        pZp,
        q.codes,
        q.qmin,
        q.qmax,
        +q.addFirst,
        +q.rejectInf,
        pStats,
      );
    }
    this.take(pStats, stats, 0, 40);
    return this.status(s);
  }

  ggmlQuantize(type: number, x: Float32Array, out: Uint8Array): number {
    this.reset();
    const row = Object.values(GGML_KERNEL_TYPES).find((t) => t.id === type);
    if (row === undefined) return this.status(this.e.ggml_quantize(type, 0, 0, 0)); // the kernel's own answer
    const { blockSize, blockBytes } = row; // CHUNK is a multiple of every block size
    const n = Math.min(CHUNK, x.length);
    const pX = this.alloc(n * 4);
    const pOut = this.alloc((n / blockSize) * blockBytes);
    let s = 0;
    for (let off = 0; off < x.length && s === 0; off += CHUNK) {
      const part = x.subarray(off, off + CHUNK);
      this.put(pX, part);
      s = this.e.ggml_quantize(type, pX, part.length / blockSize, pOut);
      if (s === 0)
        this.take(pOut, out, (off / blockSize) * blockBytes, (part.length / blockSize) * blockBytes);
    }
    return this.status(s);
  }

  ggmlQuantizeWeighted(
    type: number,
    x: Float32Array,
    ne0: number,
    qw: Float32Array,
    out: Uint8Array,
  ): number {
    this.reset();
    const row = Object.values(GGML_KERNEL_TYPES).find((t) => t.id === type);
    if (row === undefined || ne0 <= 0 || ne0 % row.blockSize !== 0 || x.length % ne0 !== 0)
      return this.status(this.e.ggml_quantize_weighted(type, 0, 0, ne0, 0, 0)); // the kernel's own answer
    const rowBytes = (ne0 / row.blockSize) * row.blockBytes;
    const rowsPerChunk = Math.max(1, Math.floor(CHUNK / ne0));
    const n = Math.min(rowsPerChunk * ne0, x.length);
    const pQw = this.alloc(ne0 * 4);
    const pX = this.alloc(n * 4);
    const pOut = this.alloc((n / ne0) * rowBytes);
    this.put(pQw, qw.subarray(0, ne0));
    let s = 0;
    for (let off = 0; off < x.length && s === 0; off += n) {
      const part = x.subarray(off, off + n);
      this.put(pX, part);
      s = this.e.ggml_quantize_weighted(type, pX, part.length / ne0, ne0, pQw, pOut);
      if (s === 0) this.take(pOut, out, (off / ne0) * rowBytes, (part.length / ne0) * rowBytes);
    }
    return this.status(s);
  }

  bnbQuantize(
    type: number,
    x: Float32Array,
    blocksize: number,
    packed: Uint8Array,
    absmax: Float32Array,
  ): number {
    this.reset();
    // whole blocks per call, an even count of values (each call's codes start on a byte)
    const unit = blocksize % 2 === 0 ? blocksize : 2 * blocksize;
    const span = blocksize > 0 ? Math.max(1, Math.floor(CHUNK / unit)) * unit : CHUNK;
    const n = Math.min(span, x.length);
    const pX = this.alloc(n * 4);
    const pPacked = this.alloc(Math.ceil(n / 2));
    const pAbsmax = this.alloc(blocksize > 0 ? Math.ceil(n / blocksize) * 4 : 4);
    let s = 0;
    let off = 0;
    do {
      const part = x.subarray(off, off + span);
      this.put(pX, part);
      s = this.e.bnb_quantize(type, pX, part.length, blocksize, pPacked, pAbsmax);
      if (s !== 0) return this.status(s, off);
      this.take(pPacked, packed, off / 2, Math.ceil(part.length / 2));
      this.take(pAbsmax, absmax, (off / blocksize) * 4, Math.ceil(part.length / blocksize) * 4);
      off += span;
    } while (off < x.length);
    return this.status(0);
  }

  nbitsQuantize(
    w: Float32Array,
    nCols: number,
    kLen: number,
    blockSize: number,
    sym: boolean,
    f16: boolean,
    b: Uint8Array,
    scales: Float32Array,
    zeroPoints: Uint8Array,
  ): number {
    this.reset();
    const kBlocks = blockSize > 0 ? Math.ceil(kLen / blockSize) : 0;
    const rowBytes = kBlocks * (blockSize / 2);
    const zpBytes = sym ? 0 : Math.ceil(kBlocks / 2);
    const rows = Math.max(1, Math.floor(CHUNK / Math.max(1, kLen))); // whole rows per call
    const most = Math.min(rows, nCols);
    const pW = this.alloc(most * kLen * 4);
    const pB = this.alloc(most * rowBytes);
    const pScales = this.alloc(most * kBlocks * 4);
    const pZp = this.alloc(most * zpBytes);
    let row = 0;
    do {
      const n = Math.min(rows, nCols - row);
      this.put(pW, w.subarray(row * kLen, (row + n) * kLen));
      const s = this.e.nbits_quantize(pW, n, kLen, blockSize, +sym, +f16, pB, pScales, pZp);
      // the index is of an element (not finite), or of a block (its scale)
      if (s !== 0) return this.status(s, row * (s === 1 ? kLen : kBlocks));
      this.take(pB, b, row * rowBytes, n * rowBytes);
      this.take(pScales, scales, row * kBlocks * 4, n * kBlocks * 4);
      if (!sym) this.take(pZp, zeroPoints, row * zpBytes, n * zpBytes);
      row += rows;
    } while (row < nCols);
    return this.status(0);
  }

  /**
   * One call over a whole weight: `w` copied in, a region for each of `outputs` carved beside it,
   * `call` given their addresses, and the outputs copied back when it succeeds.
   */
  private wholeWeight(
    w: Float32Array,
    outputs: readonly ArrayBufferView[],
    call: (pW: number, pOutputs: readonly number[]) => number,
  ): number {
    this.reset();
    const pW = this.copyIn(w);
    const pOutputs = outputs.map((o) => this.alloc(o.byteLength));
    const s = call(pW, pOutputs);
    if (s === 0) outputs.forEach((o, k) => this.take(pOutputs[k]!, o));
    return this.status(s);
  }

  /** Its packed words interleave rows eight at a time: one call over the whole weight. */
  awqQuantize(
    w: Float32Array,
    out: number,
    inF: number,
    groupSize: number,
    qweight: Int32Array,
    qzeros: Int32Array,
    scales: Uint16Array,
  ): number {
    return this.wholeWeight(w, [qweight, qzeros, scales], (pW, [q, z, sc]) =>
      this.e.awq_quantize(pW, out, inF, groupSize, q!, z!, sc!),
    );
  }

  /** A row's codes fill a column of qweight: one call over the whole weight. */
  gptqQuantize(
    w: Float32Array,
    out: number,
    inF: number,
    bits: number,
    groupSize: number,
    sym: boolean,
    store: number,
    qweight: Int32Array,
    qzeros: Int32Array,
    scales: Uint16Array,
    counts: Float64Array,
  ): number {
    return this.wholeWeight(w, [qweight, qzeros, scales, counts], (pW, [q, z, sc, c]) =>
      this.e.gptq_quantize(pW, out, inF, bits, groupSize, +sym, store, q!, z!, sc!, c!),
    );
  }

  convert(kind: number, input: Uint16Array | Float32Array, out: Float32Array | Uint16Array): void {
    this.reset();
    const inSize = kind < 2 ? 2 : 4;
    const outSize = kind < 2 ? 4 : 2;
    const n = Math.min(CHUNK, input.length);
    const pIn = this.alloc(n * inSize);
    const pOut = this.alloc(n * outSize);
    for (let off = 0; off < input.length; off += CHUNK) {
      const part = input.subarray(off, off + CHUNK);
      this.put(pIn, part);
      this.e.convert(kind, pIn, part.length, pOut);
      this.take(pOut, out, off * outSize, part.length * outSize);
    }
  }
}

/** WebAssembly kernels: SIMD128 by default, or the scalar reference build ("scalar"). */
export function loadWasm(isa = ''): KernelModule {
  if (isa !== '' && isa !== 'simd128' && isa !== 'scalar') {
    throw new KernelLoadError(`wasm kernels have no ISA ${isa} (simd128 or scalar)`);
  }
  try {
    return new WasmKernels(isa !== 'scalar');
  } catch (err) {
    if (err instanceof KernelLoadError) throw err;
    throw new KernelLoadError(`wasm kernels failed to load: ${(err as Error).message.split('\n')[0]}`);
  }
}
