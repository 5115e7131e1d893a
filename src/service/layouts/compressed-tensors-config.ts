/**
 * The schemes the "compressed-tensors" layout writes — compressed-tensors' preset schemes of the
 * same names (quant_scheme.py) — and the `quantization_config` that goes into config.json: what
 * compressed-tensors' ModelCompressor.update_config writes (QuantizationConfig.model_dump, keys
 * sorted, indent 2) for one config group of that preset targeting "Linear", checked against the
 * reference's own output (test/interop/golden/compressed_tensors_vectors.json).
 *
 * One departure: the `scale_dtype` and `zp_dtype` keys that compressed-tensors 0.13+ writes in
 * each QuantizationArgs are left out. Releases before them (0.12.2, which vLLM pinned in late 2025) forbid
 * unknown keys and refuse the config; the newer ones read the same config without them (they
 * default to exactly what would have been written), which the golden generator checks.
 */
import type { CtFormat, CtWeightArgs } from '../../core/interop/compressed-tensors.js';
import { jsonText } from './quantization-config.js';

export type { CtFormat } from '../../core/interop/compressed-tensors.js';

export interface CtScheme {
  readonly name: string;
  readonly weights: CtWeightArgs;
  /** Dynamic per-token activations (W8A8, FP8_DYNAMIC): nothing stored, vLLM computes them. */
  readonly activations: 'int8' | 'float8' | null;
  /** As compressors/format.py infers it: int-quantized before pack-quantized before float-quantized. */
  readonly format: CtFormat;
}

/** The release whose numerics and config quantd reproduces (the golden vectors' `version`). */
export const CT_VERSION = '0.18.0';

/** The schemes written, by preset name; the weights' group size can be changed (group_size=). */
export const CT_SCHEMES: Readonly<Record<string, CtScheme>> = {
  W4A16: {
    name: 'W4A16',
    weights: { numBits: 4, type: 'int', symmetric: true, groupSize: 128 },
    activations: null,
    format: 'pack-quantized',
  },
  W4A16_ASYM: {
    name: 'W4A16_ASYM',
    weights: { numBits: 4, type: 'int', symmetric: false, groupSize: 128 },
    activations: null,
    format: 'pack-quantized',
  },
  W8A16: {
    name: 'W8A16',
    weights: { numBits: 8, type: 'int', symmetric: true, groupSize: 128 },
    activations: null,
    format: 'pack-quantized',
  },
  W8A8: {
    name: 'W8A8',
    weights: { numBits: 8, type: 'int', symmetric: true, groupSize: null },
    activations: 'int8',
    format: 'int-quantized',
  },
  FP8_DYNAMIC: {
    name: 'FP8_DYNAMIC',
    weights: { numBits: 8, type: 'float', symmetric: true, groupSize: null },
    activations: 'float8',
    format: 'float-quantized',
  },
};

/** compressed-tensors' presets quantd does not write, and why (FEATURE_UNSUPPORTED). */
export const CT_UNSUPPORTED: Readonly<Record<string, string>> = {
  FP8: 'needs static input_scale values from calibration; use FP8_DYNAMIC (per-token scales computed at run time)',
  FP8_BLOCK: 'block-wise FP8 weights are not written (quantd reads them); use FP8_DYNAMIC',
  NVFP4: 'NVFP4 (global and fp8 group scales) is not written',
  NVFP4A16: 'NVFP4 (global and fp8 group scales) is not written',
  W4A8: 'int4 weights with int8 activations are not written; use W4A16 or W8A8',
  W4AFP8: 'int4 weights with fp8 activations are not written; use W4A16 or FP8_DYNAMIC',
};

/** compressed-tensors' aliases of presets (PRESET_SCHEMES: "INT8" is W8A8). */
export const CT_ALIASES: Readonly<Record<string, string>> = { INT8: 'W8A8' };

/** QuantizationArgs.model_dump() of weights or dynamic activations (without scale_dtype / zp_dtype). */
function argsDump(a: {
  numBits: number;
  type: 'int' | 'float';
  symmetric: boolean;
  strategy: 'channel' | 'group' | 'token';
  groupSize: number | null;
  dynamic: boolean;
}): Record<string, unknown> {
  return {
    actorder: null,
    block_structure: null,
    dynamic: a.dynamic,
    group_size: a.groupSize,
    num_bits: a.numBits,
    // QuantizationArgs' default for a static (weight) observer; a dynamic one has none
    observer: a.dynamic ? null : 'memoryless_minmax',
    observer_kwargs: {},
    strategy: a.strategy,
    symmetric: a.symmetric,
    type: a.type,
  };
}

/** The scheme's weight args with the layout's group size (null: per channel). */
export function schemeWeights(scheme: CtScheme, groupSize: number | null | undefined): CtWeightArgs {
  return groupSize === undefined ? scheme.weights : { ...scheme.weights, groupSize };
}

/**
 * config.json's `quantization_config` for a model written in `scheme` (weights `weights`), as
 * JSON text; `ignore`: the modules of the Linear weights left in float (lm_head at least).
 */
export function ctQuantizationConfigText(
  scheme: CtScheme,
  weights: CtWeightArgs,
  ignore: readonly string[],
): string {
  const activations =
    scheme.activations === null
      ? null
      : argsDump({
          numBits: 8,
          type: scheme.activations === 'int8' ? 'int' : 'float',
          symmetric: true,
          strategy: 'token',
          groupSize: null,
          dynamic: true,
        });
  const group = {
    format: scheme.format,
    input_activations: activations,
    output_activations: null,
    targets: ['Linear'],
    weights: argsDump({
      ...weights,
      strategy: weights.groupSize === null ? 'channel' : 'group',
      dynamic: false,
    }),
  };
  return jsonText({
    config_groups: { group_0: group },
    format: scheme.format,
    global_compression_ratio: null,
    ignore: [...ignore],
    kv_cache_scheme: null,
    quant_method: 'compressed-tensors',
    quantization_status: 'compressed',
    sparsity_config: {},
    transform_config: {},
    version: CT_VERSION,
  });
}
