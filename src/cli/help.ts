/**
 * The help text: `quantd --help` for every command, `quantd COMMAND --help` for one, with only
 * the options that command takes (COMMAND_OPTIONS decides, so help and parsing cannot differ).
 */
import { SPEC_OPTION_ROWS, defaultTextOf, flagKey, type OptionRow } from '../core/index.js';
import { OUTPUT_DTYPE_ROW, RECIPE_OPTION_ROWS, SELECTION_OPTION_ROWS } from '../service/index.js';
import { COMMAND_OPTIONS } from './args.js';
import { layoutHelp } from './layout-command.js';

/** The column where help text starts: after the longest `--flag PLACEHOLDER`. */
const HELP_COLUMN = 24;

/** One option's help: the key it has in COMMAND_OPTIONS, and its lines. */
interface OptionHelp {
  readonly key: string;
  readonly lines: readonly string[];
}

/** A row's lines: flag, help and default, then the values an enum takes. */
function rowHelp(row: OptionRow): OptionHelp {
  const head = `  ${row.flag}${row.placeholder ? ` ${row.placeholder}` : ''}`.padEnd(HELP_COLUMN);
  const indent = ' '.repeat(HELP_COLUMN);
  // a flag is off unless given: its default goes without saying
  const defaultText = row.kind === 'boolean' ? undefined : defaultTextOf(row);
  const [first, ...more] = row.help.split('\n');
  const lines = [`${head}${first}${defaultText === undefined ? '' : ` (default ${defaultText})`}`];
  lines.push(...more.map((line) => `${indent}${line}`));
  if (row.values) lines.push(`${indent}${row.placeholder}: ${row.values.join(' | ')}`);
  return { key: flagKey(row), lines };
}

const line = (key: string, text: string): OptionHelp => ({ key, lines: [text] });

const DTYPES = OUTPUT_DTYPE_ROW.values.join('|');

/** Each command's usage lines. */
const USAGE_LINES: ReadonlyArray<readonly [string, string]> = [
  ['quantize', 'IN.safetensors -o OUT.safetensors [spec options] [--include GLOB] [--exclude GLOB]'],
  [
    'quantize',
    'MODEL -o OUT --recipe recipe.json [recipe options]   (MODEL: a file, a shard index or a directory)',
  ],
  [
    'quantize',
    'MODEL -o OUT --layout NAME[:key=value,...]   (GGUF, GPTQ, AWQ, NF4/FP4, compressed-tensors; see below)',
  ],
  [
    'quantize',
    "HF_FOLDER -o OUT.gguf --layout gguf:ftype=Q4_K_M|type=Q4_K [--imatrix FILE]   (llama-quantize's file types, or one type)",
  ],
  ['quantize', 'MODEL -o OUT --layout gptq|awq --calibration STATS   (GPTQ or AWQ, from layer statistics)'],
  ['dequantize', `IN -o OUT.safetensors [--dtype ${DTYPES}]   (IN: a qtensor file, or a layout's file)`],
  [
    'fake-quantize',
    'IN.safetensors -o OUT.safetensors [spec options] [--dtype ...]   (writes NAME, NAME.mask)',
  ],
  [
    'qparams',
    'IN.safetensors -o OUT.safetensors [spec options]               (writes NAME.scale, NAME.zero_point)',
  ],
  [
    'inspect',
    'FILE|FOLDER [--json] [--verify]   (safetensors, GGUF, ONNX, GPTQ/AWQ/NF4; --verify: the recorded data SHA-256)',
  ],
  [
    'calibrate',
    'BATCH... --observers recipe.json -o QPARAMS.safetensors   (BATCH: activations, a file or a folder)',
  ],
  [
    'calibrate',
    'BATCH... --observers recipe.json --statistics STATS   (layer statistics for gptq/awq --calibration)',
  ],
  ['serve', '(HTTP + gRPC server)'],
];

const SECTIONS: ReadonlyArray<readonly [string, readonly OptionHelp[]]> = [
  ['spec options:', [...SPEC_OPTION_ROWS, ...SELECTION_OPTION_ROWS, OUTPUT_DTYPE_ROW].map(rowHelp)],
  [
    "recipe options (whole models; the spec options above become the recipe's default):",
    [
      ...RECIPE_OPTION_ROWS.map(rowHelp),
      line(
        'report',
        '  --report FILE         the quality report: JSON, or a self-contained page when FILE ends in .html (recipe runs write OUT.report.json by default)',
      ),
    ],
  ],
  [
    'run options:',
    [
      line(
        'concurrency',
        '  --concurrency N       tensors (or 16 MiB slices of large ones) processed at once (default: CPU cores)',
      ),
      line(
        'memory',
        '  --memory SIZE         bytes tensors in flight may hold together, e.g. 2G (default: max(32M, twice what the largest tensor or slice needs))',
      ),
      line('no-progress', '  --no-progress         no progress bar / progress lines on stderr'),
      line('force', '  --force               replace an output file that already exists (never an input)'),
      line(
        'remote',
        '  --remote URL          run on a quantd server (its jobs API) instead of in this process',
      ),
      line(
        'keep-job',
        '  --keep-job            with --remote: keep the job on the server (default: deleted once downloaded)',
      ),
      line('quiet', '  -q, --quiet           no summary line'),
    ],
  ],
  [
    'calibrate options (observers of torch.ao.quantization; writes NAME.scale, NAME.zero_point):',
    [
      line(
        'observers',
        '  --observers FILE      the calibration recipe: {"observers": [{"match": GLOB, "observer": {…}}]}',
      ),
      line(
        'resume',
        "  --resume FILE         continue from a saved state instead (--save-state, or a server's /state)",
      ),
      line(
        'save-state',
        "  --save-state FILE     also write the session's state (quantd.calibration/1), to resume later",
      ),
      line(
        'statistics',
        '  --statistics FILE     write the linear-layer statistics of rules {"statistics": "linear"} (GPTQ\'s Hessians)',
      ),
    ],
  ],
  [
    'inspect options:',
    [
      line('json', '  --json                the summary as JSON'),
      line('verify', '  --verify              check the data SHA-256 the file records'),
    ],
  ],
];

const FOOTER = `A model folder in gives a model folder out (its other files copied). 1-D tensors of a file of
several pass through unless --include names them. Qparams already in the input (NAME.scale,
NAME.zero_point) are used instead of being chosen.
On bad input quantd prints "error CODE: message" and exits 2.`;

const LAYOUTS_TITLE = 'layouts (quantize --layout NAME:key=value,...; dequantize reads them back):';

/** The help of `commands` (all of them for `quantd --help`), options filtered to what they take. */
function helpFor(commands: readonly string[]): string {
  const width = Math.max(...commands.map((c) => c.length));
  const usage = USAGE_LINES.filter(([c]) => commands.includes(c)).map(
    ([c, text]) => `  quantd ${c.padEnd(width)} ${text}`,
  );
  const takes = new Set(commands.flatMap((c) => Object.keys(COMMAND_OPTIONS[c] ?? {})));
  const sections = SECTIONS.map(([title, options]) => {
    const shown = options.filter((o) => takes.has(o.key));
    return shown.length === 0 ? [] : ['', title, ...shown.flatMap((o) => o.lines)];
  }).flat();
  const layouts =
    takes.has('layout') || commands.includes('dequantize') ? ['', LAYOUTS_TITLE, layoutHelp()] : [];
  return [
    'quantd — quantize float tensors and safetensors models, bit-exact with PyTorch',
    '',
    'usage:',
    ...usage,
    ...sections,
    ...(takes.has('qdtype') ? ['', FOOTER] : []),
    ...layouts,
  ].join('\n');
}

/** `quantd --help`: every command and option. */
export const usage = (): string => helpFor(Object.keys(COMMAND_OPTIONS));

/** `quantd COMMAND --help`: that command's usage and the options it takes. */
export const commandHelp = (command: string): string => helpFor([command]);
