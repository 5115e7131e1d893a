/**
 * Interop layouts (issue 7): files other tools load directly — GGUF for llama.cpp, GPTQ and AWQ
 * checkpoints for vLLM / transformers, ONNX MatMulNBits for ONNX Runtime, bitsandbytes NF4/FP4.
 * Each layout is one module implementing this interface; the CLI (`--layout NAME`), HTTP and
 * jobs reach them through the registry in ./index.ts. Block math lives in src/core/interop/,
 * container formats in src/format/; a layout module only streams a model through them.
 */
import type { Progress } from '../model.js';

/** A layout's options as the command line / query string give them (strings), validated by it. */
export type LayoutOptions = Readonly<Record<string, string | undefined>>;

export interface LayoutWriteResult {
  /** Every file written (the model file(s) and side files such as quantize_config.json). */
  readonly files: readonly string[];
  /** Per-tensor decisions, e.g. "Q4_K", "F16 (row of 100 is not a multiple of 256)". */
  readonly tensors: ReadonlyArray<{ readonly name: string; readonly type: string; readonly note?: string }>;
}

export interface InteropLayout {
  /** The --layout value: gguf, gptq, awq, onnx, nf4, fp4. */
  readonly name: string;
  /** One line for --help: what it writes and for which tool. */
  readonly summary: string;
  /** The options it takes (name → description), for --help and for rejecting unknown ones. */
  readonly options: Readonly<Record<string, string>>;
  /**
   * Quantizes the float tensors of the safetensors model at `input` (a file) into `output`,
   * streaming tensor by tensor (memory bounded by the largest tensor), atomically (temporary
   * files renamed into place). Throws QuantdError for bad options or tensors.
   */
  write(
    input: string,
    output: string,
    options: LayoutOptions,
    hooks?: { readonly onProgress?: (p: Progress) => void; readonly signal?: AbortSignal },
  ): Promise<LayoutWriteResult>;
  /** Reads a file of this layout and writes its tensors dequantized to float32 safetensors. */
  read(input: string, output: string): Promise<{ readonly tensors: number }>;
  /** Whether `path` (first bytes given) is a file of this layout, for dequantize auto-detection. */
  detect(path: string, head: Uint8Array): boolean;
}
