/**
 * ONNX Runtime (onnxruntime-node), the engine quantd runs non-GGUF models on. It is an optional
 * dependency, loaded only by the commands that run a model (calibration from text, evaluation):
 * quantizing never loads it, and where it is missing those commands fail with
 * ENGINE_UNAVAILABLE saying how to install it.
 */
import { QuantdError } from '../../errors/index.js';

type Ort = typeof import('onnxruntime-node');

let loaded: Promise<Ort> | undefined;

/** A test hook: QUANTD_TEST_HOOKS=1 QUANTD_TEST_NO_ENGINES=1 makes every engine "missing". */
function hidden(): boolean {
  return process.env['QUANTD_TEST_HOOKS'] === '1' && process.env['QUANTD_TEST_NO_ENGINES'] === '1';
}

export function loadOnnxRuntime(purpose: string): Promise<Ort> {
  if (hidden()) return Promise.reject(unavailable(purpose, 'hidden by QUANTD_TEST_NO_ENGINES'));
  loaded ??= import('onnxruntime-node').catch((err: unknown) => {
    loaded = undefined;
    throw err;
  });
  return loaded.catch((err: unknown) => {
    throw unavailable(purpose, err instanceof Error ? err.message.split('\n')[0]! : String(err));
  });
}

function unavailable(purpose: string, detail: string): QuantdError {
  return new QuantdError('ENGINE_UNAVAILABLE', {
    engine: 'ONNX Runtime (onnxruntime-node)',
    purpose,
    detail,
    remedy:
      'install it with `npm install onnxruntime-node` (an optional dependency of quantd; its CPU binaries ship in the package)',
  });
}

export interface OrtSessionOptions {
  /** Threads ONNX Runtime computes with (default: its own choice, one per core). */
  readonly threads?: number;
}

/** A decoder graph in ONNX Runtime: logits (and any other outputs) of a window of token ids. */
export class DecoderSession {
  private constructor(
    private readonly ort: Ort,
    private readonly session: import('onnxruntime-node').InferenceSession,
    /** Past key/value inputs, fed empty: every window is evaluated from scratch. */
    private readonly empties: Readonly<Record<string, import('onnxruntime-node').Tensor>>,
    readonly vocab: number,
  ) {}

  static async open(
    model: string | Uint8Array,
    purpose: string,
    options: OrtSessionOptions = {},
  ): Promise<DecoderSession> {
    const ort = await loadOnnxRuntime(purpose);
    const session = await createSession(ort, model, options);
    const empties: Record<string, import('onnxruntime-node').Tensor> = {};
    let vocab = 0;
    for (const meta of session.inputMetadata) {
      if (!meta.name.startsWith('past_key_values.') || !meta.isTensor) continue;
      const dims = meta.shape;
      empties[meta.name] = new ort.Tensor('float32', new Float32Array(0), [
        1,
        dims[1] as number,
        0,
        dims[3] as number,
      ]);
    }
    for (const meta of session.outputMetadata) {
      if (meta.name === 'logits' && meta.isTensor) vocab = meta.shape[2] as number;
    }
    return new DecoderSession(ort, session, empties, vocab);
  }

  /** Runs one window (batch 1) and returns the requested outputs (default: logits [S, vocab]). */
  async run(
    ids: ArrayLike<number>,
    outputs: readonly string[] = ['logits'],
  ): Promise<Record<string, Float32Array>> {
    const n = ids.length;
    const idTensor = new BigInt64Array(n);
    for (let i = 0; i < n; i++) idTensor[i] = BigInt(ids[i]!);
    const feeds = {
      input_ids: new this.ort.Tensor('int64', idTensor, [1, n]),
      attention_mask: new this.ort.Tensor('int64', new BigInt64Array(n).fill(1n), [1, n]),
      ...this.empties,
    };
    const result = await this.session.run(feeds, [...outputs]);
    const out: Record<string, Float32Array> = {};
    for (const name of outputs) out[name] = result[name]!.data as Float32Array;
    return out;
  }

  get outputNames(): readonly string[] {
    return this.session.outputNames;
  }

  async close(): Promise<void> {
    await this.session.release();
  }
}

async function createSession(
  ort: Ort,
  model: string | Uint8Array,
  options: OrtSessionOptions,
): Promise<import('onnxruntime-node').InferenceSession> {
  const sessionOptions = {
    graphOptimizationLevel: 'all' as const,
    logSeverityLevel: 3 as const,
    ...(options.threads !== undefined && { intraOpNumThreads: options.threads, interOpNumThreads: 1 }),
  };
  try {
    return typeof model === 'string'
      ? await ort.InferenceSession.create(model, sessionOptions)
      : await ort.InferenceSession.create(model, sessionOptions);
  } catch (err) {
    throw new QuantdError('MODEL_UNRUNNABLE', {
      engine: 'ONNX Runtime',
      detail: err instanceof Error ? err.message.split('\n')[0]!.slice(0, 500) : String(err),
    });
  }
}

/** A float32 tensor to feed: its values and dims. */
export interface FloatFeed {
  readonly data: Float32Array;
  readonly dims: readonly number[];
}

/**
 * Any graph in ONNX Runtime fed float32 tensors by name (the calibration block graphs, whose
 * weights are inputs) plus an all-ones attention mask for the sequence: each run returns the
 * requested outputs. Inputs the graph does not declare are not fed, so one set of feeds serves
 * graphs that use different parts of it.
 */
export class GraphSession {
  private readonly inputs: ReadonlySet<string>;

  private constructor(
    private readonly ort: Ort,
    private readonly session: import('onnxruntime-node').InferenceSession,
  ) {
    this.inputs = new Set(session.inputNames);
  }

  static async open(
    model: Uint8Array,
    purpose: string,
    options: OrtSessionOptions = {},
  ): Promise<GraphSession> {
    const ort = await loadOnnxRuntime(purpose);
    return new GraphSession(ort, await createSession(ort, model, options));
  }

  /** Runs with `feeds` (and `attention_mask` of batch × sequence ones when the graph takes one). */
  async run(
    feeds: ReadonlyMap<string, FloatFeed>,
    mask: { readonly batch: number; readonly sequence: number },
    outputs: readonly string[],
  ): Promise<Record<string, Float32Array>> {
    const tensors: Record<string, import('onnxruntime-node').Tensor> = {};
    for (const [name, f] of feeds) {
      if (this.inputs.has(name)) tensors[name] = new this.ort.Tensor('float32', f.data, [...f.dims]);
    }
    if (this.inputs.has('attention_mask')) {
      tensors['attention_mask'] = new this.ort.Tensor(
        'int64',
        new BigInt64Array(mask.batch * mask.sequence).fill(1n),
        [mask.batch, mask.sequence],
      );
    }
    const result = await this.session.run(tensors, [...outputs]);
    const out: Record<string, Float32Array> = {};
    for (const name of outputs) out[name] = result[name]!.data as Float32Array;
    return out;
  }

  async close(): Promise<void> {
    await this.session.release();
  }
}
