/**
 * llama.cpp (node-llama-cpp's prebuilt CPU binaries), the engine quantd runs GGUF files on. An
 * optional dependency, loaded only by the commands that run a model; where it is missing they
 * fail with ENGINE_UNAVAILABLE saying how to install it. It never builds or downloads anything.
 */
import { QuantdError } from '../../errors/index.js';

type NodeLlamaCpp = typeof import('node-llama-cpp');
type Llama = import('node-llama-cpp').Llama;
type LlamaModel = import('node-llama-cpp').LlamaModel;
type LlamaContext = import('node-llama-cpp').LlamaContext;

let llama: Promise<{ lib: NodeLlamaCpp; llama: Llama }> | undefined;

function unavailable(purpose: string, detail: string): QuantdError {
  return new QuantdError('ENGINE_UNAVAILABLE', {
    engine: 'llama.cpp (node-llama-cpp)',
    purpose,
    detail,
    remedy:
      'install it with `npm install node-llama-cpp` (an optional dependency of quantd; its prebuilt CPU binaries are used, nothing is built)',
  });
}

async function load(purpose: string): Promise<{ lib: NodeLlamaCpp; llama: Llama }> {
  if (process.env['QUANTD_TEST_HOOKS'] === '1' && process.env['QUANTD_TEST_NO_ENGINES'] === '1') {
    throw unavailable(purpose, 'hidden by QUANTD_TEST_NO_ENGINES');
  }
  llama ??= (async () => {
    const lib = await import('node-llama-cpp');
    const instance = await lib.getLlama({
      gpu: false,
      build: 'never',
      progressLogs: false,
      logLevel: lib.LlamaLogLevel.error,
    });
    return { lib, llama: instance };
  })().catch((err: unknown) => {
    llama = undefined;
    throw err;
  });
  try {
    return await llama;
  } catch (err) {
    throw unavailable(purpose, err instanceof Error ? err.message.split('\n')[0]! : String(err));
  }
}

/** A GGUF model in llama.cpp: the logits at every position of a window of token ids. */
export class GgufSession {
  /** The one sequence every window is evaluated in, its history cleared before each. */
  private sequence: import('node-llama-cpp').LlamaContextSequence | undefined;

  private constructor(
    private readonly model: LlamaModel,
    private readonly context: LlamaContext,
    readonly vocab: number,
  ) {}

  /**
   * `window`: the longest window evaluated; `vocab`: the logits' width (the GGUF's vocabulary,
   * tokenizer.ggml.tokens). Float32 kv cache and no flash attention, so that an
   * F32 model computes in float32 throughout, as the reference does.
   */
  static async open(
    path: string,
    purpose: string,
    window: number,
    vocab: number,
    threads?: number,
  ): Promise<GgufSession> {
    const { llama: instance } = await load(purpose);
    let model: LlamaModel;
    try {
      model = await instance.loadModel({ modelPath: path, gpuLayers: 0 });
    } catch (err) {
      throw new QuantdError('MODEL_UNRUNNABLE', {
        engine: 'llama.cpp',
        detail: err instanceof Error ? err.message.split('\n')[0]!.slice(0, 500) : String(err),
      });
    }
    const context = await model.createContext({
      contextSize: window,
      batchSize: window,
      ...(threads !== undefined && { threads }),
      flashAttention: false,
      experimentalKvCacheKeyType: 'F32',
      experimentalKvCacheValueType: 'F32',
    });
    return new GgufSession(model, context, vocab);
  }

  /**
   * Logits [ids.length, vocab] of one window, evaluated from an empty context; rows before
   * `from` are left zero (not asked of llama.cpp: each row asked costs a call of its own).
   */
  async logits(ids: ArrayLike<number>, from = 0): Promise<Float32Array> {
    const sequence = (this.sequence ??= this.context.getSequence());
    await sequence.clearHistory();
    {
      const items = Array.from(ids, (t, i) =>
        i < from ? t : ([t, { generateNext: { logits: true } }] as const),
      );
      const out = await sequence.controlledEvaluate(
        items as unknown as Parameters<typeof sequence.controlledEvaluate>[0],
      );
      const rows = new Float32Array(ids.length * this.vocab);
      out.forEach((o, i) => {
        if (i < from) return;
        const logits = o?.next?.logits;
        if (!logits)
          throw new QuantdError('INTERNAL', { detail: `llama.cpp gave no logits after token ${i}` });
        for (const [token, value] of logits) if (token < this.vocab) rows[i * this.vocab + token] = value;
      });
      return rows;
    }
  }

  async close(): Promise<void> {
    await this.context.dispose();
    await this.model.dispose();
  }
}
