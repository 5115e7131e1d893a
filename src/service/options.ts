/**
 * The options of an operation beyond the spec (src/core/spec-options.ts): which tensors it
 * transforms, the float type it writes, and the recipe parameters of whole-model runs
 * (docs/models.md). Rows of the same shape as the spec options', so that the CLI, the HTTP query
 * and OpenAPI, gRPC and the jobs API derive their option lists from the two tables together.
 */
import { FLOAT_DTYPES, SPEC_OPTION_ROWS, type OptionRow } from '../core/index.js';
import type { Operation } from './plan.js';

/** Which tensors an operation transforms; the others pass through. */
export const SELECTION_OPTION_ROWS = [
  {
    name: 'include',
    kind: 'strings',
    defaultText: 'all float tensors',
    flag: '--include',
    placeholder: 'GLOB',
    help: 'transform only these tensors (repeatable); others pass through',
    doc: 'tensor name globs to transform (repeatable); the others pass through',
    example: '*.weight',
  },
  {
    name: 'exclude',
    kind: 'strings',
    flag: '--exclude',
    placeholder: 'GLOB',
    help: 'pass tensors whose names match through (repeatable)',
    doc: 'tensor name globs to pass through (repeatable)',
    example: '*.bias',
  },
] as const satisfies readonly OptionRow[];

/** The float type dequantize and fake-quantize write. */
export const OUTPUT_DTYPE_ROW = {
  name: 'dtype',
  kind: 'enum',
  values: FLOAT_DTYPES,
  unknownCode: 'UNKNOWN_DTYPE',
  default: 'float32',
  flag: '--dtype',
  placeholder: 'D',
  help: 'the float type dequantize and fake-quantize write',
  doc: 'the float type of the output (dequantize, fake-quantize)',
  example: 'bfloat16',
} as const satisfies OptionRow;

/**
 * A recipe instead of one spec for all tensors; with any of these, the spec options become the
 * recipe's default. On the command line `--recipe` names a file; everywhere else it is JSON text.
 */
export const RECIPE_OPTION_ROWS = [
  {
    name: 'recipe',
    kind: 'string',
    flag: '--recipe',
    placeholder: 'FILE',
    help:
      'a recipe, JSON: {"default": {spec}, "rules": [rule, ...], "min_size", "skip_1d"}\n' +
      'with rules {"glob"|"regex": PATTERN, "skip": true | spec options}',
    doc: 'a recipe as JSON text: {"default": {spec}, "rules": [{"glob"|"regex": ..., "skip": true | spec}], "min_size", "skip_1d"}',
    example: '{"default":{"qdtype":"int8","scheme":"per_channel"}}',
  },
  {
    name: 'rule',
    kind: 'strings',
    flag: '--rule',
    placeholder: 'PAT:SPEC',
    help:
      "a rule, before the recipe's (repeatable): '*.mlp.*:qdtype=int4,scheme=per_group,group_size=128'\n" +
      "or '*.embed_tokens.*:skip'; PAT starting with re: is a regex",
    doc: "rules in command-line form, PATTERN:key=value,... or PATTERN:skip (re: starts a regex); they come before the recipe's rules",
    example: '*.mlp.*:qdtype=int4,scheme=per_group,group_size=128',
  },
  {
    name: 'skip',
    kind: 'strings',
    flag: '--skip',
    placeholder: 'GLOB',
    help: 'pass these tensors through (repeatable)',
    doc: 'globs of tensors to pass through (repeatable); they come before all rules',
    example: '*.embed_tokens.*',
  },
  {
    name: 'min_size',
    kind: 'integer',
    default: 0,
    flag: '--min-size',
    placeholder: 'N',
    help: 'pass tensors of fewer than N elements through',
    doc: 'tensors of fewer elements pass through (a whole number)',
    example: 4096,
  },
  {
    name: 'keep_1d',
    kind: 'boolean',
    default: false,
    flag: '--keep-1d',
    help: 'quantize 1-D tensors too (norms and biases pass through by default)',
    doc: 'quantize 1-D tensors too (norms and biases pass through by default)',
    example: true,
  },
] as const satisfies readonly OptionRow[];

export const RECIPE_OPTION_NAMES: readonly string[] = RECIPE_OPTION_ROWS.map((row) => row.name);

const TRANSFORM_ROWS: readonly OptionRow[] = [...SPEC_OPTION_ROWS, ...SELECTION_OPTION_ROWS];

/** The options each operation takes, in the order messages list them. */
export const OPERATION_OPTION_ROWS: Readonly<Record<Operation, readonly OptionRow[]>> = {
  quantize: [...TRANSFORM_ROWS, ...RECIPE_OPTION_ROWS],
  qparams: [...TRANSFORM_ROWS, ...RECIPE_OPTION_ROWS],
  'fake-quantize': [...TRANSFORM_ROWS, OUTPUT_DTYPE_ROW, ...RECIPE_OPTION_ROWS],
  dequantize: [OUTPUT_DTYPE_ROW],
};

/** Every option of every operation (what a job may set besides op and layout). */
export const ALL_OPTION_ROWS: readonly OptionRow[] = OPERATION_OPTION_ROWS['fake-quantize'];
