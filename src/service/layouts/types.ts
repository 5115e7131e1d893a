/**
 * Interop layouts: files other tools load directly — GGUF for llama.cpp, GPTQ and AWQ
 * checkpoints for vLLM / transformers, ONNX MatMulNBits for ONNX Runtime, bitsandbytes NF4/FP4,
 * compressed-tensors (vLLM's own format). Each layout is one module implementing this interface,
 * listed in the registry (./index.ts); the CLI (`--layout NAME`), HTTP, gRPC and jobs reach them
 * through it. A layout is a description: which tensors become which, by which encoder
 * (src/kernels/encoders.ts; block math in src/core/interop/), with which side files;
 * ./run-jobs.ts streams it on the worker pool.
 */
import type { FloatDType } from '../../core/dtypes.js';
import type { SafetensorsFileReader } from '../../format/safetensors-file.js';
import type { QualitySummary } from '../../core/quality.js';
import type { ErrorHistogram } from '../../core/error-histogram.js';
import type { StatsOutputError } from '../../core/stats-error.js';
import type { QuantizationConfig } from './quantization-config.js';
import type { LayoutHooks } from './run-jobs.js';

export type { LayoutHooks } from './run-jobs.js';
export type { QuantizationConfig } from './quantization-config.js';

/** A layout's options as the command line / query string give them (strings), validated by it. */
export type LayoutOptions = Readonly<Record<string, string | undefined>>;

export interface LayoutWriteResult {
  /** Every file written (the model file(s) and side files such as quantize_config.json). */
  readonly files: readonly string[];
  /** Per-tensor decisions, e.g. "Q4_K", "F16 (row of 100 is not a multiple of 256)". */
  readonly tensors: ReadonlyArray<{
    readonly name: string;
    readonly type: string;
    readonly note?: string;
    /** Bits per weight of its data and dequantize(quantize(x)) against x (GGUF with ftype). */
    readonly bits_per_weight?: number;
    readonly quality?: QualitySummary;
    /** With quality: the error's distribution on a sample of the tensor. */
    readonly error_histogram?: ErrorHistogram;
    /** With calibration (gptq, awq): the layer's output error on the calibration tokens. */
    readonly output_error?: StatsOutputError;
  }>;
  /** Weights written and the bits their data takes (GGUF: llama-quantize's "BPW" summary). */
  readonly size?: { readonly weights: number; readonly bits: number };
}

/** What a layout's quantization config depends on, gathered over every file of a model. */
export interface LayoutFacts {
  /** Modules of 2-D float weights left unquantized (AWQ's modules_to_not_convert, bnb's skip list). */
  readonly notConverted: readonly string[];
  /** The float dtypes of the weights quantized (bitsandbytes' compute dtype). */
  readonly weightDTypes: readonly FloatDType[];
}

/** One safetensors file a layout wrote, as a model folder's index and config need it. */
export interface LayoutFile {
  readonly tensors: LayoutWriteResult['tensors'];
  /** The output tensors' names, in file order. */
  readonly names: readonly string[];
  /** Bytes of its data section. */
  readonly dataBytes: number;
  readonly facts: LayoutFacts;
}

/**
 * The safetensors layouts (GPTQ, AWQ, NF4/FP4, compressed-tensors) in parts, so that a model folder
 * of any number of shards is written file by file with one config for the whole (./write-folder.ts).
 */
export interface SafetensorsLayoutParts {
  /**
   * The tensors of one input file into `output`, without side files. `model`: the files of the
   * model `input` is one of (it may hold no linear weight: the caller checks the model as a
   * whole); null: `input` is the whole model.
   */
  writeTensors(
    input: string,
    output: string,
    options: LayoutOptions,
    hooks: LayoutHooks,
    model: readonly string[] | null,
  ): Promise<LayoutFile>;
  /** The quantization config of a model written with `options`; `modelBaseName`: "model". */
  quantizationConfig(options: LayoutOptions, facts: LayoutFacts, modelBaseName: string): QuantizationConfig;
}

/** One weight a file of a layout holds quantized, as `quantd inspect` shows it. */
export interface QuantizedWeight {
  /** The weight as a loader names it once dequantized (`model.layers.0.mlp.up_proj.weight`). */
  readonly name: string;
  /** The file's tensors (or ONNX initializers) that hold it, in file order of the layout. */
  readonly stored: readonly string[];
  /** [out_features, in_features]. */
  readonly shape: readonly number[];
  readonly bits: number;
  /**
   * Inputs that share a scale: GPTQ's and AWQ's group size (in_features for one group a row),
   * bitsandbytes' block size (of the flattened weight), MatMulNBits' block_size.
   */
  readonly group_size: number;
  /** The scales' stored dtype (safetensors name, or the ONNX type name). */
  readonly scale_dtype: string;
  /** Bytes of its stored tensors together. */
  readonly bytes: number;
  /** What else its tensors say: g_idx (GPTQ), zero_points, quant_type and double_quant (bnb). */
  readonly details: Readonly<Record<string, string | number | boolean>>;
}

export interface InteropLayout {
  /** The --layout value: gguf, gptq, awq, onnx, nf4, fp4, compressed-tensors. */
  readonly name: string;
  /** One line for --help: what it writes and for which tool. */
  readonly summary: string;
  /** The options it takes (name → description), for --help and for rejecting unknown ones. */
  readonly options: Readonly<Record<string, string>>;
  /** The model file's extension: .gguf, .onnx, .safetensors. */
  readonly extension: string;
  /**
   * Refuses what write() would refuse about the options alone (unknown options, bad values:
   * OPTION_INVALID naming `layout:key`, FEATURE_UNSUPPORTED), so that a job is refused when it
   * is submitted rather than when it runs.
   */
  checkOptions(options: LayoutOptions): void;
  /**
   * Quantizes the float tensors of the safetensors model at `input` (a file) into `output`,
   * streaming tensor by tensor (memory bounded by the largest tensor), atomically (temporary
   * files renamed into place). Side files are named after `output` (`out.quantize_config.json`).
   * Throws QuantdError for bad options or tensors.
   */
  write(
    input: string,
    output: string,
    options: LayoutOptions,
    hooks?: LayoutHooks,
  ): Promise<LayoutWriteResult>;
  /** Reads a file of this layout and writes its tensors dequantized to float32 safetensors. */
  read(input: string, output: string, hooks?: LayoutHooks): Promise<{ readonly tensors: number }>;
  /**
   * The safetensors layouts: the weights an open file of this layout holds quantized, in file
   * order, found and checked as read() finds them (LAYOUT_INVALID for a malformed one), from its
   * header (and bitsandbytes' small quant-state tensors); for `quantd inspect`.
   */
  quantizedWeights?(reader: SafetensorsFileReader): Promise<readonly QuantizedWeight[]>;
  /** Whether `path` (first bytes given) is a file of this layout, for dequantize auto-detection. */
  detect(path: string, head: Uint8Array): boolean;
  /**
   * Whether write() takes `path` as a whole model folder (GGUF: a Hugging Face folder with its
   * config.json and tokenizer, sharded or not) rather than one .safetensors file.
   */
  readsFolder?(path: string): Promise<boolean>;
  /** For layouts that write safetensors: the parts a model folder output is written with. */
  readonly parts?: SafetensorsLayoutParts;
  /**
   * The files write() creates beside the model itself for `output`: side files named after a
   * file output (`OUT.quantize_config.json`, `OUT.onnx.data`) or inside a folder output. The CLI
   * refuses to replace them without --force, as it refuses the model file. `folder`: the output
   * is a folder; `inputFolder`: the input is a model folder (ONNX then writes a whole decoder,
   * with genai_config.json and the tokenizer beside it).
   */
  companions?(output: string, folder: boolean, inputFolder?: boolean): readonly string[];
}
