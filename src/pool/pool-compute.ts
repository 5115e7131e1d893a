/**
 * The Compute the CLI and the servers use: kernel ops in this thread for small tensors (a pool
 * round trip costs more than the work), on the worker pool, split across its threads, for large
 * ones. The pool starts on first use. Either way the bytes are the same (test/pool).
 */
import type {
  FakeQuantizeOutput,
  FloatDType,
  FloatInput,
  QParams,
  QuantSpec,
  QuantizeOutput,
  QuantizedInput,
} from '../core/index.js';
import { BufferArena } from '../kernels/arena.js';
import type { Encoding } from '../kernels/encoders.js';
import { InlineExecutor } from '../kernels/executors.js';
import type { LoadedKernels } from '../kernels/loader.js';
import type { KernelModule } from '../kernels/module.js';
import { KernelCompute, type KernelComputeOptions } from '../kernels/tensor-ops.js';
import type { Compute, LinearStatsCall, ObserveCall, QParamsCall, QuantizeOptions } from '../core/compute.js';
import {
  observeCost,
  qparamsCost,
  type ObserverQParams,
  type ObserverState,
} from '../core/observers/index.js';
import type { QuantdError } from '../errors/index.js';
import type { LinearErrorReport, LinearLayer } from '../core/linear-eval.js';
import type { LinearStats } from '../core/linear-stats.js';
import { KernelPool, type PoolOptions } from './pool.js';

/** Below this many elements an op runs in the calling thread (see `npm run bench`: pool overhead). */
export const INLINE_LIMIT = 1 << 18;

export interface PoolComputeOptions extends Omit<PoolOptions, 'backend' | 'isa'>, KernelComputeOptions {
  readonly inlineLimit?: number;
  /**
   * Large ops run in the calling thread too until the pool's threads have loaded the kernels:
   * for the CLI, whose thread would only wait for them (never for a server's event loop).
   */
  readonly inlineUntilReady?: boolean;
}

export class PoolCompute implements Compute {
  readonly backend: string;
  readonly sharedInputs = true;
  private readonly inline: KernelCompute;
  private pool: KernelPool | undefined;
  private pooled: KernelCompute | undefined;
  private readonly inlineLimit: number;
  /** One arena for both paths: outputs of either are recycled for either. */
  private readonly arena: BufferArena;

  constructor(
    private readonly kernels: LoadedKernels & { module: KernelModule },
    private readonly options: PoolComputeOptions = {},
  ) {
    this.backend = kernels.backend;
    this.arena = options.arena ?? new BufferArena();
    this.inline = new KernelCompute(new InlineExecutor(kernels.module), kernels.backend, {
      ...options,
      arena: this.arena,
    });
    this.inlineLimit = options.inlineLimit ?? INLINE_LIMIT;
  }

  release(data: ArrayBufferView): void {
    this.arena.give(data);
  }

  allocate(bytes: number, shared: boolean): Uint8Array {
    return new Uint8Array(this.arena.take(bytes, shared), 0, bytes);
  }

  /** The pool, started on first use. */
  workers(): KernelPool {
    if (!this.pool) {
      this.pool = new KernelPool({ ...this.options, backend: this.kernels.backend, isa: this.kernels.isa });
      this.pooled = new KernelCompute(this.pool, this.kernels.backend, {
        ...this.options,
        arena: this.arena,
      });
    }
    return this.pool;
  }

  get started(): boolean {
    return this.pool !== undefined;
  }

  private async on<T>(numel: number, op: (c: KernelCompute) => Promise<T>): Promise<T> {
    if (numel < this.inlineLimit) return op(this.inline);
    if (this.options.inlineUntilReady && !this.workers().ready) return op(this.inline);
    const release = this.workers().admit();
    try {
      return await op(this.pooled!);
    } finally {
      release();
    }
  }

  quantize(
    input: FloatInput,
    spec: QuantSpec,
    given?: QParams,
    signal?: AbortSignal,
    options?: QuantizeOptions,
  ): Promise<QuantizeOutput> {
    return this.on(input.layout.numel, (c) => c.quantize(input, spec, given, signal, options));
  }

  chooseQParams(input: FloatInput, spec: QuantSpec, given?: QParams, signal?: AbortSignal): Promise<QParams> {
    return this.on(input.layout.numel, (c) => c.chooseQParams(input, spec, given, signal));
  }

  fakeQuantize(
    input: FloatInput,
    spec: QuantSpec,
    outDType: FloatDType,
    given?: QParams,
    signal?: AbortSignal,
  ): Promise<FakeQuantizeOutput> {
    return this.on(input.layout.numel, (c) => c.fakeQuantize(input, spec, outDType, given, signal));
  }

  dequantize(input: QuantizedInput, outDType: FloatDType, signal?: AbortSignal): Promise<Uint8Array> {
    return this.on(input.layout.numel, (c) => c.dequantize(input, outDType, signal));
  }

  /**
   * An observer's batch: on a worker when it costs much, which for a histogram is its merge
   * (bins · upsample_rate cells) as much as the batch's size (observeCost).
   */
  observe(call: ObserveCall, signal?: AbortSignal): Promise<ObserverState> {
    return this.on(observeCost(call.config, call.x.length), (c) => c.observe(call, signal));
  }

  /** Observers' qparams: on the workers unless they are a few min/max observers (qparamsCost). */
  observerQParams(
    calls: readonly QParamsCall[],
    signal?: AbortSignal,
  ): Promise<(ObserverQParams | QuantdError)[]> {
    const cost = calls.reduce((n, c) => n + qparamsCost(c.config, c.state), 0);
    return this.on(cost, (c) => c.observerQParams(calls, signal));
  }

  /**
   * A layer's input statistics with one more batch: on a worker unless the batch and the layer
   * are tiny (the copy of the in² sums costs as much as a token).
   */
  accumulateStats(call: LinearStatsCall, signal?: AbortSignal): Promise<LinearStats> {
    const k = call.stats.inFeatures;
    return this.on((call.x.length + k) * k, (c) => c.accumulateStats(call, signal));
  }

  /** A linear layer's output error: on a worker unless the layer is tiny. */
  linearError(layer: LinearLayer, spec: QuantSpec, signal?: AbortSignal): Promise<LinearErrorReport> {
    return this.on(layer.n * layer.inFeatures * layer.outFeatures, (c) => c.linearError(layer, spec, signal));
  }

  /** Layout encode tasks, on the pool whatever the tensor's size (see KernelPool.encoding). */
  encoding(): Encoding {
    return this.workers().encoding();
  }

  async close(): Promise<void> {
    await this.pool?.close();
  }
}
