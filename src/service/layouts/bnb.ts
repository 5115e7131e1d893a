/**
 * The "nf4" and "fp4" layouts: bitsandbytes 4-bit checkpoints as transformers saves a model
 * loaded with `load_in_4bit` (a Linear4bit's state dict: the packed weight plus its QuantState
 * `as_dict(packed=True)`), for transformers + bitsandbytes — src/core/interop/bnb.ts has the
 * numerics.
 *
 * write: each linear projection weight `X.weight` [out, in] (n values) becomes
 * - `X.weight` U8 [ceil(n/2), 1]: the packed codes (quant_storage uint8);
 * - `X.weight.absmax` F32 [ceil(n/blocksize)];
 * - `X.weight.quant_map` F32 [16]: the code book (get_4bit_type);
 * - `X.weight.quant_state.bitsandbytes__nf4` (or `__fp4`) U8: the UTF-8 bytes of Python's
 *   json.dumps({"quant_type", "blocksize", "dtype", "shape"}) (pack_dict_to_tensor).
 * Everything else (biases included: Linear4bit keeps its bias in the model dtype) passes through.
 * The config (the fields of transformers' BitsAndBytesConfig.to_dict()) goes into config.json's
 * `quantization_config` in a model folder, and as `{"quantization_config": {...}}` into
 * `quantization_config.json` (folder) or `OUT.quantization_config.json` (beside a single file
 * `OUT.safetensors`), to merge into the model's config.json.
 * Double quantization (compress_statistics / bnb_4bit_use_double_quant) is not written.
 *
 * read (either layout reads both types, the quant state names its type): `X.weight` back to
 * F32 of the quant state's shape; double-quantized states (nested_absmax, nested_quant_map,
 * nested_offset) are read too.
 */
import { BNB_BLOCKSIZES, bnbQuantStateJson, type BnbQuantType } from '../../core/interop/bnb.js';
import type { FloatDType } from '../../core/dtypes.js';
import { QuantdError, shapeText } from '../../errors/index.js';
import { entryByName, type TensorEntry } from '../../format/safetensors.js';
import {
  boolOption,
  checkOptions,
  commonDType,
  expectTensor,
  floatDType,
  headerTensors,
  inLayout,
  intOption,
  isLinearWeight,
  layoutInvalid,
  noLinear,
  passThrough,
  ptMetadata,
  runJobs,
  storedBytes,
  withReader,
  type Job,
} from './linear-common.js';
import {
  jsonText,
  sideFileCompanion,
  withQuantizationConfig,
  type QuantizationConfig,
} from './quantization-config.js';
import type { LayoutHooks } from './run-jobs.js';
import { factsOf, layoutFile, singleFileWrite } from './safetensors-parts.js';
import type { SafetensorsFileReader } from '../../format/safetensors-file.js';
import type {
  InteropLayout,
  LayoutFacts,
  LayoutFile,
  LayoutOptions,
  QuantizedWeight,
  SafetensorsLayoutParts,
} from './types.js';

/** The side file it writes with the model (a folder's, or named after a single file). */
const SIDE_FILE = 'quantization_config.json';

const OPTIONS = {
  blocksize: `values per absmax block: ${BNB_BLOCKSIZES.join(', ')} (default 64)`,
  compress_statistics: 'double quantization of the absmax values: false only (true is not implemented)',
} as const;

export interface BnbParams {
  readonly blocksize: number;
}

export const bnbParams = (layout: string, options: LayoutOptions): BnbParams =>
  inLayout(layout, () => parseParams(layout, options));

function parseParams(layout: string, options: LayoutOptions): BnbParams {
  const o = checkOptions(layout, OPTIONS, options);
  const blocksize = intOption(
    'blocksize',
    o['blocksize'],
    64,
    (n) => BNB_BLOCKSIZES.includes(n),
    BNB_BLOCKSIZES.join(', '),
  );
  if (boolOption('compress_statistics', o['compress_statistics'], false)) {
    throw new QuantdError('FEATURE_UNSUPPORTED', {
      detail:
        'compress_statistics (bitsandbytes double quantization) is not implemented; omit it or pass false',
    });
  }
  return { blocksize };
}

const STATE_PREFIX = '.quant_state.bitsandbytes__';

/** The quantization_config transformers writes for a 4-bit bitsandbytes model (BitsAndBytesConfig.to_dict), as text. */
export function bnbQuantizationConfigText(
  type: BnbQuantType,
  computeDType: FloatDType,
  skipModules: readonly string[],
): string {
  const config = {
    quant_method: 'bitsandbytes',
    _load_in_4bit: true,
    _load_in_8bit: false,
    load_in_4bit: true,
    load_in_8bit: false,
    bnb_4bit_quant_type: type,
    bnb_4bit_use_double_quant: false,
    bnb_4bit_compute_dtype: computeDType,
    bnb_4bit_quant_storage: 'uint8',
    llm_int8_enable_fp32_cpu_offload: false,
    llm_int8_has_fp16_weight: false,
    llm_int8_skip_modules: skipModules.length > 0 ? skipModules : null,
    llm_int8_threshold: 6,
  };
  // BitsAndBytesConfig.post_init requires a float threshold: JSON 6.0, which JSON.stringify writes as 6.
  return jsonText(config).replace('"llm_int8_threshold": 6\n', '"llm_int8_threshold": 6.0\n');
}

function makeParts(type: BnbQuantType): SafetensorsLayoutParts {
  const quantizationConfig = (options: LayoutOptions, facts: LayoutFacts): QuantizationConfig => {
    bnbParams(type, options); // the options are checked here too: the config stands for them
    const text = bnbQuantizationConfigText(
      type,
      commonDType(new Set(facts.weightDTypes)),
      facts.notConverted,
    );
    return {
      sideFile: SIDE_FILE,
      sideText: withQuantizationConfig('{}', text),
      configText: text,
    };
  };
  const writeTensors = async (
    input: string,
    output: string,
    options: LayoutOptions,
    hooks: LayoutHooks,
    model: readonly string[] | null,
  ): Promise<LayoutFile> => {
    const { blocksize } = bnbParams(type, options);
    return withReader(input, async (reader) => {
      const entries = reader.header.entries;
      const quantized = new Set(entries.filter(isLinearWeight).map((e) => e.name));
      if (quantized.size === 0 && model === null) throw noLinear();
      const tensors: Array<{ name: string; type: string; note?: string }> = [];
      const jobs: Job[] = entries.map((entry): Job => {
        if (!quantized.has(entry.name)) {
          tensors.push({ name: entry.name, type: entry.dtype, note: 'passed through' });
          return passThrough(entry);
        }
        const dtype = floatDType(entry);
        const n = entry.shape.reduce((a, b) => a * b, 1);
        if (n === 0) {
          throw new QuantdError('SHAPE_UNSUPPORTED', {
            tensor: entry.name,
            shape: shapeText(entry.shape),
            detail: 'bitsandbytes cannot quantize an empty weight',
          });
        }
        const stateBytes = Buffer.byteLength(bnbQuantStateJson(type, blocksize, dtype, entry.shape));
        tensors.push({ name: entry.name, type: `bitsandbytes ${type} blocksize ${blocksize}` });
        const w = entry.name;
        return {
          inputs: [entry],
          outputs: [
            { name: w, dtype: 'U8', shape: [Math.ceil(n / 2), 1] },
            { name: `${w}.absmax`, dtype: 'F32', shape: [Math.ceil(n / blocksize)] },
            { name: `${w}.quant_map`, dtype: 'F32', shape: [16] },
            { name: `${w}${STATE_PREFIX}${type}`, dtype: 'U8', shape: [stateBytes] },
          ],
          call: { kind: 'bnb', tensor: w, shape: entry.shape, dtype, type, blocksize },
        };
      });
      await runJobs(reader, output, jobs, ptMetadata({ 'quantd.layout': type }), hooks);
      return layoutFile(jobs, tensors, factsOf(entries, quantized));
    });
  };
  return { writeTensors, quantizationConfig };
}

interface QuantState {
  readonly quant_type: BnbQuantType;
  readonly blocksize: number;
  readonly shape: readonly number[];
  readonly nested_blocksize?: number;
  readonly nested_offset?: number;
}

function parseState(source: string, name: string, bytes: Uint8Array): QuantState {
  let state: Record<string, unknown>;
  try {
    state = JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(bytes)) as Record<string, unknown>;
  } catch (err) {
    throw layoutInvalid(source, name, `does not hold a JSON quant state (${(err as Error).message})`);
  }
  const isCount = (v: unknown): v is number => typeof v === 'number' && Number.isSafeInteger(v) && v >= 0;
  const { quant_type, blocksize, shape } = state ?? {};
  if (quant_type !== 'nf4' && quant_type !== 'fp4') {
    throw layoutInvalid(source, name, `quant_type ${JSON.stringify(quant_type)} is not nf4 or fp4`);
  }
  if (!isCount(blocksize) || blocksize === 0)
    throw layoutInvalid(source, name, `blocksize ${JSON.stringify(blocksize)} is invalid`);
  if (!Array.isArray(shape) || !shape.every(isCount)) {
    throw layoutInvalid(source, name, `shape ${JSON.stringify(shape)} is not a list of sizes`);
  }
  const nested = state['nested_blocksize'] !== undefined || state['nested_offset'] !== undefined;
  if (nested && (!isCount(state['nested_blocksize']) || typeof state['nested_offset'] !== 'number')) {
    throw layoutInvalid(source, name, 'nested_blocksize / nested_offset are invalid');
  }
  return nested
    ? {
        quant_type,
        blocksize,
        shape,
        nested_blocksize: state['nested_blocksize'] as number,
        nested_offset: state['nested_offset'] as number,
      }
    : { quant_type, blocksize, shape };
}

/** A file's quantized weights by name: each one's quant state and the member tensors' names. */
async function bnbStates(reader: SafetensorsFileReader): Promise<{
  parsed: Map<string, { state: QuantState; stateEntry: TensorEntry }>;
  member: Map<string, string>;
}> {
  const { header } = reader;
  const source = reader.path;
  const states = header.entries.filter((e) => /\.quant_state\.bitsandbytes__(?:nf4|fp4)$/.test(e.name));
  const member = new Map<string, string>();
  const parsed = new Map<string, { state: QuantState; stateEntry: TensorEntry }>();
  for (const stateEntry of states) {
    const w = stateEntry.name.slice(0, stateEntry.name.lastIndexOf(STATE_PREFIX));
    if (parsed.has(w)) throw layoutInvalid(source, stateEntry.name, `is the second quant state of ${w}`);
    expectTensor(source, stateEntry, stateEntry.name, ['U8'], 1);
    parsed.set(w, {
      state: parseState(source, stateEntry.name, await reader.read(stateEntry)),
      stateEntry,
    });
    for (const s of ['', '.absmax', '.quant_map', '.nested_absmax', '.nested_quant_map'])
      member.set(`${w}${s}`, w);
    member.set(stateEntry.name, w);
  }
  return { parsed, member };
}

/** The tensors that hold weight `w` (packed codes first), checked against its quant state. */
function bnbInputs(
  source: string,
  header: SafetensorsFileReader['header'],
  w: string,
  state: QuantState,
): TensorEntry[] {
  const n = state.shape.reduce((a, b) => a * b, 1);
  const blocks = Math.ceil(n / state.blocksize);
  const nested = state.nested_blocksize !== undefined;
  const get = (suffix: string, dtypes: Parameters<typeof expectTensor>[3], numel: number): TensorEntry => {
    const e = expectTensor(source, entryByName(header, `${w}${suffix}`), `${w}${suffix}`, dtypes, null);
    const count = e.shape.reduce((a, b) => a * b, 1);
    if (count !== numel) {
      throw layoutInvalid(
        source,
        e.name,
        `has shape ${shapeText(e.shape)} (${count} values), expected ${numel}`,
      );
    }
    return e;
  };
  const inputs = [
    get('', ['U8'], Math.ceil(n / 2)),
    get('.absmax', [nested ? 'U8' : 'F32'], blocks),
    get('.quant_map', ['F32'], 16),
  ];
  if (nested) {
    inputs.push(get('.nested_absmax', ['F32'], Math.ceil(blocks / state.nested_blocksize!)));
    inputs.push(get('.nested_quant_map', ['F32'], 256));
  }
  return inputs;
}

/** The file's bitsandbytes weights (inspect), found and checked as read() finds them. */
async function quantizedWeights(reader: SafetensorsFileReader): Promise<QuantizedWeight[]> {
  const { parsed } = await bnbStates(reader);
  return [...parsed].map(([w, { state, stateEntry }]) => {
    const stored = [...bnbInputs(reader.path, reader.header, w, state), stateEntry];
    return {
      name: w,
      stored: stored.map((t) => t.name),
      shape: state.shape,
      bits: 4,
      group_size: state.blocksize,
      scale_dtype: stored[1]!.dtype,
      bytes: storedBytes(stored),
      details: { quant_type: state.quant_type, double_quant: state.nested_blocksize !== undefined },
    };
  });
}

async function read(
  input: string,
  output: string,
  hooks: LayoutHooks = {},
): Promise<{ readonly tensors: number }> {
  return withReader(input, async (reader) => {
    const { header } = reader;
    const source = reader.path;
    const { parsed, member } = await bnbStates(reader);
    const done = new Set<string>();
    const jobs: Job[] = [];
    for (const entry of header.entries) {
      const w = member.get(entry.name);
      if (w === undefined) {
        jobs.push(passThrough(entry));
        continue;
      }
      if (done.has(w)) continue;
      done.add(w);
      const { state } = parsed.get(w)!;
      const n = state.shape.reduce((a, b) => a * b, 1);
      const nested = state.nested_blocksize !== undefined;
      const inputs = bnbInputs(source, header, w, state);
      jobs.push({
        inputs,
        outputs: [{ name: w, dtype: 'F32', shape: state.shape }],
        call: {
          kind: 'bnb-decode',
          blocksize: state.blocksize,
          n,
          ...(nested && {
            nested: { blocksize: state.nested_blocksize!, offset: state.nested_offset! },
          }),
        },
      });
    }
    const tensors = await runJobs(reader, output, jobs, ptMetadata(), hooks);
    return { tensors };
  });
}

function makeDetect(type: BnbQuantType) {
  return function detect(path: string, head: Uint8Array): boolean {
    const tensors = headerTensors(path, head);
    if (!tensors) return false;
    for (const name of tensors.keys()) if (name.endsWith(`${STATE_PREFIX}${type}`)) return true;
    return false;
  };
}

function makeLayout(type: BnbQuantType): InteropLayout {
  const parts = makeParts(type);
  return {
    name: type,
    summary: `bitsandbytes ${type.toUpperCase()} 4-bit checkpoint (packed weight + absmax/quant_map/quant_state + quantization_config.json), as transformers saves load_in_4bit models`,
    options: OPTIONS,
    extension: '.safetensors',
    companions: sideFileCompanion(SIDE_FILE),
    checkOptions: (options) => void bnbParams(type, options),
    write: singleFileWrite(parts),
    parts,
    read,
    quantizedWeights,
    detect: makeDetect(type),
  };
}

export const nf4Layout: InteropLayout = makeLayout('nf4');
export const fp4Layout: InteropLayout = makeLayout('fp4');
