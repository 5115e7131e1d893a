/**
 * Shared by the kernel parity and pool tests: the kernel variants under test, the outcome of an op
 * (its value, or the error it threw, as "CODE: message"), and byte-exact comparisons that say
 * where two results first differ.
 */
import { QuantdError } from '../../src/errors/index.js';
import {
  loadNative,
  loadWasm,
  runKernelTask,
  type Executor,
  type KernelModule,
  type KernelTask,
  type TaskResult,
} from '../../src/kernels/index.js';
import type { QParams } from '../../src/core/index.js';

export const NATIVE_ISAS = ['avx512', 'avx2', 'scalar'] as const;

/**
 * Every kernel variant available here: native AVX-512 / AVX2 / scalar (those this CPU has), wasm
 * SIMD128 and scalar. The same list as golden-parity.test.ts's kernelVariants() (importing that
 * file would register its tests a second time), each native variant bound to its own ISA.
 */
export function parityVariants(): Array<[string, KernelModule]> {
  const variants: Array<[string, KernelModule]> = [];
  for (const isa of NATIVE_ISAS) {
    try {
      variants.push([`native ${isa}`, loadNative(isa)]);
    } catch {
      // an ISA this CPU lacks (parity.test.ts checks that every ISA the CPU has is here)
    }
  }
  variants.push(['wasm simd128', loadWasm('simd128')], ['wasm scalar', loadWasm('scalar')]);
  return variants;
}

/** Runs tasks inline, last range first, but reports 3 threads: tensors are split into 3 ranges. */
export class SplittingExecutor implements Executor {
  readonly parallelism = 3;
  readonly shared = false;
  /** The ops that were given more than one range. */
  readonly split = new Set<string>();
  /**
   * The ops given the ranges of a window after the first (KernelCompute's windowElements): a
   * batch of tasks none of which starts at the tensor's first element.
   */
  readonly windowed = new Set<string>();

  constructor(private readonly module: KernelModule) {}

  async run(tasks: readonly KernelTask[]): Promise<TaskResult[]> {
    if (tasks.length > 1) this.split.add(tasks[0]!.op);
    if (tasks.length > 0 && tasks.every(pastFirstWindow)) this.windowed.add(tasks[0]!.op);
    const results: TaskResult[] = new Array<TaskResult>(tasks.length);
    for (let i = tasks.length - 1; i >= 0; i--) results[i] = runKernelTask(this.module, tasks[i]!);
    return results;
  }
}

function pastFirstWindow(task: KernelTask): boolean {
  if (!('x' in task) || task.op === 'histc' || task.op === 'linearStats') return false;
  return (task.op === 'chooseQuantize' ? task.first * task.unitSize : task.start) > 0;
}

/** float16 holds only |x| <= 65504: scale such tensors down by a power of two (exact). */
export function fitFloat16(x: Float32Array): Float32Array {
  let amax = 0;
  for (const v of x) if (Number.isFinite(v)) amax = Math.max(amax, Math.abs(v));
  if (amax <= 32768) return x;
  const k = 2 ** (15 - Math.ceil(Math.log2(amax)));
  return Float32Array.from(x, (v) => v * k);
}

export type Outcome<T> =
  { readonly ok: true; readonly value: T } | { readonly ok: false; readonly error: string };

export function fail(message: string): never {
  throw new Error(message);
}

/** "CODE: message" for a QuantdError; anything else is marked as such (it never matches one). */
export function describeError(err: unknown): string {
  if (err instanceof QuantdError) return `${err.code}: ${err.message}`;
  if (err instanceof Error) return `${err.name} (not a QuantdError): ${err.message}`;
  return `non-Error thrown: ${String(err)}`;
}

export async function settle<T>(run: () => T | Promise<T>): Promise<Outcome<T>> {
  try {
    return { ok: true, value: await run() };
  } catch (err) {
    return { ok: false, error: describeError(err) };
  }
}

/** The kernels' outcome must be the reference's: the same error, or results `compare` accepts. */
export function expectSameOutcome<T>(
  what: string,
  kernels: Outcome<T>,
  reference: Outcome<T>,
  compare: (k: T, r: T) => void,
): void {
  if (!reference.ok) {
    if (kernels.ok) fail(`${what}: the reference throws ${reference.error}; the kernels returned a result`);
    if (kernels.error !== reference.error) {
      fail(`${what}: the kernels throw\n  ${kernels.error}\nthe reference throws\n  ${reference.error}`);
    }
    return;
  }
  if (!kernels.ok) fail(`${what}: the reference succeeds; the kernels throw ${kernels.error}`);
  compare(kernels.value, reference.value);
}

export function bytesOf(view: ArrayBufferView): Uint8Array {
  return new Uint8Array(view.buffer, view.byteOffset, view.byteLength);
}

function hexOf(bytes: Uint8Array, start: number, count: number): string {
  const parts: string[] = [];
  for (let i = start + count - 1; i >= start; i--) parts.push((bytes[i] ?? 0).toString(16).padStart(2, '0'));
  return `0x${parts.join('')}`;
}

/** Byte-for-byte equality; a difference is reported by element (of `elementBytes` bytes). */
export function expectSameBytes(
  what: string,
  kernels: ArrayBufferView,
  reference: ArrayBufferView,
  elementBytes = 1,
): void {
  const k = bytesOf(kernels);
  const r = bytesOf(reference);
  if (k.length !== r.length)
    fail(`${what}: ${k.length} bytes from the kernels, ${r.length} from the reference`);
  if (Buffer.compare(k, r) === 0) return;
  let first = -1;
  let differing = 0;
  for (let i = 0; i < k.length; i += elementBytes) {
    let same = true;
    for (let b = i; b < i + elementBytes; b++) same &&= k[b] === r[b];
    if (!same) {
      differing++;
      if (first < 0) first = i;
    }
  }
  const e = first / elementBytes;
  fail(
    `${what}: ${differing} of ${k.length / elementBytes} elements differ; first, element ${e}: kernels ` +
      `${hexOf(k, first, elementBytes)}, reference ${hexOf(r, first, elementBytes)}`,
  );
}

/** Same typed-array type and the same bits. */
export function expectSameTyped(what: string, kernels: ArrayBufferView, reference: ArrayBufferView): void {
  if (kernels.constructor !== reference.constructor) {
    fail(
      `${what}: a ${kernels.constructor.name} from the kernels, a ${reference.constructor.name} from the reference`,
    );
  }
  const size = (reference as unknown as { BYTES_PER_ELEMENT?: number }).BYTES_PER_ELEMENT ?? 1;
  expectSameBytes(what, kernels, reference, size);
}

export function expectSameQParams(what: string, kernels: QParams, reference: QParams): void {
  expectSameTyped(`${what}: scale`, kernels.scale, reference.scale);
  expectSameTyped(`${what}: zero_point`, kernels.zeroPoint, reference.zeroPoint);
}

/** A seeded stream of uniforms in [0, 1) (a 32-bit LCG): the same values on every run. */
export function seededUniform(seed: number): () => number {
  let s = seed >>> 0;
  return () => ((s = (Math.imul(s, 1664525) + 1013904223) >>> 0), s / 2 ** 32);
}

/** The float32 whose bits are `bits`. */
export function floatOfBits(bits: number): number {
  return new Float32Array(new Uint32Array([bits >>> 0]).buffer)[0]!;
}

/** The bytes of a view as hex, for byte-for-byte comparisons that print where they differ. */
export function hexBytes(b: ArrayBufferView): string {
  return Buffer.from(b.buffer, b.byteOffset, b.byteLength).toString('hex');
}
