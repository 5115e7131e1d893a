/**
 * Model folders (docs/models.md#model-folders): a Hugging Face-style folder in gives a folder out,
 * one shard or several, qtensor or a safetensors layout — the quantized weights (and a consistent
 * index), every other top-level file copied byte for byte, config.json's quantization_config for
 * the layouts — and a single file's side files are named after it. All through the real CLI.
 */
import { spawnSync } from 'node:child_process';
import {
  chmodSync,
  existsSync,
  mkdirSync,
  readFileSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { failsWith, succeeds } from '../cli/cli-helpers.js';
import {
  readRaw,
  sameBytes,
  synthetic,
  tempRoot,
  tree,
  type SynthTensor,
  type SyntheticModel,
} from './helpers.js';

const tmp = tempRoot('quantd-folders-');
afterAll(() => tmp.cleanup());
const at = (name: string): string => join(tmp.dir, name);

const INDEX = 'model.safetensors.index.json';
const SHARDS = ['model-00001-of-00002.safetensors', 'model-00002-of-00002.safetensors'];
/** A config.json as transformers writes it: floats such as 1e-05 and 10000.0 must survive as written. */
const CONFIG_TEXT =
  '{\n  "architectures": ["LlamaForCausalLM"],\n  "model_type": "llama",\n  "rms_norm_eps": 1e-05,\n' +
  '  "rope_theta": 10000.0,\n  "torch_dtype": "bfloat16",\n  "name": "caf\\u00e9"\n}\n';
/** The files of a published model beside its weights, copied byte for byte. */
const COMPANIONS: Readonly<Record<string, string | Buffer>> = {
  'config.json': CONFIG_TEXT,
  'generation_config.json': '{"bos_token_id": 1, "eos_token_id": 2}\n',
  'tokenizer.json': '{"version": "1.0", "model": {"type": "BPE"}}',
  'tokenizer.model': Buffer.from([0x0a, 0x00, 0xff, 0x10, 0x80, 0x7f]),
  'tokenizer_config.json': '{"model_max_length": 2048}',
  'special_tokens_map.json': '{"bos_token": "<s>"}',
  'README.md': '# tiny llama\n',
};

let synth: SyntheticModel;

/** A model folder: the weights (one file or 2 shards), the companions, and what is not copied. */
function modelFolder(name: string, shards: 1 | 2): string {
  const dir = at(name);
  const tensors = synth.llamaTensors({ layers: 2, hidden: 64 });
  mkdirSync(dir, { recursive: true });
  if (shards === 1) synth.writeModelFile(join(dir, 'model.safetensors'), tensors);
  else synth.writeShardedModel(dir, tensors, 2);
  for (const [file, content] of Object.entries(COMPANIONS)) writeFileSync(join(dir, file), content);
  // not copied: a subfolder, and the float weights in another format
  mkdirSync(join(dir, 'original'));
  writeFileSync(join(dir, 'original', 'consolidated.00.pth'), 'float weights');
  writeFileSync(join(dir, 'pytorch_model.bin'), 'float weights');
  return dir;
}

function expectCompanionsCopied(input: string, output: string): void {
  for (const file of Object.keys(COMPANIONS)) {
    if (file === 'config.json') continue; // layouts add their quantization_config (checked apart)
    expect(sameBytes(readFileSync(join(output, file)), readFileSync(join(input, file))), file).toBeNull();
  }
  expect(existsSync(join(output, 'original')), 'subfolders are not copied').toBe(false);
  expect(existsSync(join(output, 'pytorch_model.bin')), 'float weights of other formats').toBe(false);
  expect(
    tree(output).filter((n) => /quantd-(tmp|staging)/.test(n)),
    'temporary files',
  ).toEqual([]);
}

/** Each tensor of the index maps to a shard holding it, each shard's tensors are mapped to it. */
function expectIndexConsistent(dir: string, shards: readonly string[]): void {
  const index = JSON.parse(readFileSync(join(dir, INDEX), 'utf8')) as {
    metadata: { total_size: number };
    weight_map: Record<string, string>;
  };
  const held = new Map<string, string>();
  let total = 0;
  for (const shard of shards) {
    const raw = readRaw(join(dir, shard));
    total += raw.data.length;
    for (const t of raw.tensors) held.set(t.name, shard);
  }
  expect(Object.fromEntries(held)).toEqual(index.weight_map);
  expect(index.metadata.total_size).toBe(total);
}

beforeAll(async () => {
  synth = await synthetic();
  modelFolder('one', 1);
  modelFolder('two', 2);
});

describe.concurrent('a model folder in gives a model folder out (qtensor)', () => {
  it('one model.safetensors: -o DIR (not there yet, no trailing slash) is a folder', async () => {
    await succeeds(tmp.dir, ['quantize', 'one', '-o', 'one-q', '--qdtype', 'int8', '-q']);
    expect(tree(at('one-q'))).toEqual([...Object.keys(COMPANIONS), 'model.safetensors'].sort());
    expectCompanionsCopied(at('one'), at('one-q'));
    expect(readFileSync(at('one-q/config.json'), 'utf8')).toBe(CONFIG_TEXT); // no layout: unchanged
    // the weights are what the same run over the file alone gives
    await succeeds(tmp.dir, ['quantize', 'one/model.safetensors', '-o', 'one-file.safetensors', '-q']);
    expect(
      sameBytes(readFileSync(at('one-q/model.safetensors')), readFileSync(at('one-file.safetensors'))),
    ).toBeNull();
  });

  it('two shards and an index into an existing folder: shards, a consistent index, the companions', async () => {
    mkdirSync(at('two-q'));
    await succeeds(tmp.dir, ['quantize', 'two', '-o', 'two-q/', '--qdtype', 'int8', '-q']);
    // a sharded run writes its report inside (as it always has)
    const written = [...Object.keys(COMPANIONS), ...SHARDS, INDEX, 'quantd-report.json'];
    expect(tree(at('two-q'))).toEqual(written.sort());
    expectCompanionsCopied(at('two'), at('two-q'));
    expectIndexConsistent(at('two-q'), SHARDS);
  });

  it('companions that are symlinks (a Hugging Face cache snapshot) are copied as files', async () => {
    const dir = at('linked');
    mkdirSync(dir);
    synth.writeModelFile(join(dir, 'model.safetensors'), synth.llamaTensors({ layers: 1, hidden: 64 }));
    writeFileSync(at('blob-config'), CONFIG_TEXT);
    symlinkSync(at('blob-config'), join(dir, 'config.json'));
    await succeeds(tmp.dir, ['quantize', 'linked', '-o', 'linked-q', '-q']);
    expect(readFileSync(at('linked-q/config.json'), 'utf8')).toBe(CONFIG_TEXT);
  });

  it('the input folder itself as the output is OUTPUT_UNWRITABLE, and nothing changes', async () => {
    modelFolder('self-case/m', 1);
    await failsWith(at('self-case'), ['quantize', 'm', '-o', 'm/', '-q'], 'OUTPUT_UNWRITABLE', [
      "input model's own directory",
    ]);
  });
});

interface LayoutCase {
  readonly layout: string;
  readonly sideFile: string;
  readonly quantizationConfig: Record<string, unknown>;
}

const LAYOUT_CASES: readonly LayoutCase[] = [
  {
    layout: 'gptq:group_size=32',
    sideFile: 'quantize_config.json',
    quantizationConfig: {
      quant_method: 'gptq',
      bits: 4,
      group_size: 32,
      desc_act: false,
      sym: true,
      checkpoint_format: 'gptq',
      model_file_base_name: 'model',
    },
  },
  {
    layout: 'awq:group_size=32',
    sideFile: 'quantization_config.json',
    quantizationConfig: { quant_method: 'awq', bits: 4, group_size: 32, zero_point: true, version: 'gemm' },
  },
  {
    layout: 'nf4',
    sideFile: 'quantization_config.json',
    quantizationConfig: {
      quant_method: 'bitsandbytes',
      load_in_4bit: true,
      load_in_8bit: false,
      bnb_4bit_quant_type: 'nf4',
      bnb_4bit_compute_dtype: 'bfloat16', // the dtype of every quantized weight
      bnb_4bit_quant_storage: 'uint8',
    },
  },
  {
    layout: 'compressed-tensors:group_size=32',
    sideFile: 'quantization_config.json',
    quantizationConfig: {
      quant_method: 'compressed-tensors',
      format: 'pack-quantized',
      quantization_status: 'compressed',
      ignore: ['model.embed_tokens', 'lm_head'],
      config_groups: {
        group_0: expect.objectContaining({
          targets: ['Linear'],
          weights: expect.objectContaining({
            num_bits: 4,
            group_size: 32,
            strategy: 'group',
            symmetric: true,
          }),
        }) as unknown,
      },
    },
  },
];

/** config.json of a layout's folder: the input's text with quantization_config added, parsed. */
function expectConfigWith(dir: string, expected: Record<string, unknown>): Record<string, unknown> {
  const text = readFileSync(join(dir, 'config.json'), 'utf8');
  // every other key kept exactly as written, in order
  expect(text.startsWith(CONFIG_TEXT.slice(0, CONFIG_TEXT.lastIndexOf('\n}')))).toBe(true);
  const config = JSON.parse(text) as Record<string, unknown>;
  const { quantization_config: q, ...rest } = config;
  expect(rest).toEqual(JSON.parse(CONFIG_TEXT));
  expect(q).toMatchObject(expected);
  return q as Record<string, unknown>;
}

describe.concurrent('a model folder in a safetensors layout loads with from_pretrained', () => {
  it.each(LAYOUT_CASES)('$layout, one file: config.json quantization_config, side file inside', async (c) => {
    const out = `one-${c.layout.replace(/[^a-z0-9]/g, '_')}`;
    await succeeds(tmp.dir, ['quantize', 'one', '-o', out, '--layout', c.layout, '-q']);
    expect(tree(at(out))).toEqual(
      [...new Set([...Object.keys(COMPANIONS), 'model.safetensors', c.sideFile])].sort(),
    );
    expectCompanionsCopied(at('one'), at(out));
    const q = expectConfigWith(at(out), c.quantizationConfig);
    const side = JSON.parse(readFileSync(at(`${out}/${c.sideFile}`), 'utf8')) as Record<string, unknown>;
    // AutoGPTQ's quantize_config.json is the object itself; the others wrap it to merge
    expect(c.sideFile === 'quantize_config.json' ? side : side['quantization_config']).toEqual(q);
  });

  it('gptq over two shards: shards, a consistent index naming the new tensors, one config', async () => {
    await succeeds(tmp.dir, ['quantize', 'two', '-o', 'two-gptq', '--layout', 'gptq:group_size=32', '-q']);
    expect(tree(at('two-gptq'))).toEqual(
      [...Object.keys(COMPANIONS), ...SHARDS, INDEX, 'quantize_config.json'].sort(),
    );
    expectIndexConsistent(at('two-gptq'), SHARDS);
    const index = JSON.parse(readFileSync(at(`two-gptq/${INDEX}`), 'utf8')) as {
      weight_map: Record<string, string>;
    };
    expect(index.weight_map['model.layers.1.mlp.down_proj.qweight']).toBe(SHARDS[1]);
    expect(index.weight_map['model.layers.1.mlp.down_proj.weight']).toBeUndefined();
    const q = expectConfigWith(at('two-gptq'), LAYOUT_CASES[0]!.quantizationConfig);

    // quantd inspect FOLDER: the shards, tensor count, dtypes, bytes and the quantization_config
    const shards = SHARDS.map((file) => ({ file, raw: readRaw(at(`two-gptq/${file}`)) }));
    const inspected = JSON.parse((await succeeds(tmp.dir, ['inspect', '--json', 'two-gptq'])).stdout) as {
      index: string;
      shards: Array<{ file: string; tensors: number; bytes: number }>;
      tensors: number;
      dtypes: Record<string, number>;
      bytes: number;
      quantization_config: { file: string; config: unknown };
    };
    expect(inspected.index).toBe(INDEX);
    expect(inspected.shards.map((s) => [s.file, s.tensors, s.bytes])).toEqual(
      shards.map((s) => [s.file, s.raw.tensors.length, statSync(at(`two-gptq/${s.file}`)).size]),
    );
    const count = (dtype: string): number =>
      shards.reduce((n, s) => n + s.raw.tensors.filter((t) => t.dtype === dtype).length, 0);
    expect(inspected.dtypes).toEqual({
      BF16: count('BF16'),
      F32: count('F32'),
      I32: count('I32'),
      F16: count('F16'),
      I64: 1,
    });
    expect(inspected.tensors).toBe(count('BF16') + count('F32') + count('I32') + count('F16') + 1);
    expect(inspected.bytes).toBe(inspected.shards.reduce((n, s) => n + s.bytes, 0));
    expect(inspected.quantization_config).toEqual({ file: 'config.json', config: q });
    const text = (await succeeds(tmp.dir, ['inspect', 'two-gptq'])).stdout;
    expect(text).toContain(`two-gptq: model folder, 2 shards (index ${INDEX}), ${inspected.tensors} tensors`);
    for (const file of SHARDS) expect(text).toContain(file);
    expect(text).toContain('quantization_config (config.json): {"bits":4,"group_size":32');
  });

  it('inspect of a float model folder: no quantization_config', async () => {
    const r = await succeeds(tmp.dir, ['inspect', 'one']);
    expect(r.stdout).toMatch(/^one: model folder, 1 file, 22 tensors, /);
    expect(r.stdout).toContain('\ndtypes: 16 BF16, 5 F32, 1 I64\nquantization_config: none');
  });

  it('awq over two shards: modules_to_not_convert gathers the unquantized modules of every shard', async () => {
    await succeeds(tmp.dir, ['quantize', 'two', '-o', 'two-awq', '--layout', 'awq:group_size=32', '-q']);
    const q = expectConfigWith(at('two-awq'), LAYOUT_CASES[1]!.quantizationConfig);
    expect(q['modules_to_not_convert']).toEqual(['model.embed_tokens', 'lm_head']); // first and last shard
  });

  it('compressed-tensors over two shards: one config for both, and dequantize reads each shard back', async () => {
    await succeeds(tmp.dir, [
      'quantize',
      'two',
      '-o',
      'two-ct',
      '--layout',
      'compressed-tensors:scheme=W8A8',
      '-q',
    ]);
    expect(tree(at('two-ct'))).toEqual(
      [...Object.keys(COMPANIONS), ...SHARDS, INDEX, 'quantization_config.json'].sort(),
    );
    expectIndexConsistent(at('two-ct'), SHARDS);
    const q = expectConfigWith(at('two-ct'), { quant_method: 'compressed-tensors', format: 'int-quantized' });
    expect(q['ignore']).toEqual(['model.embed_tokens', 'lm_head']); // first and last shard
    const r = await succeeds(tmp.dir, ['dequantize', `two-ct/${SHARDS[1]}`, '-o', 'two-ct-back.safetensors']);
    expect(r.stderr).toMatch(
      /^dequantize: \d+ tensors of a compressed-tensors file; wrote two-ct-back\.safetensors/,
    );
    const back = readRaw(at('two-ct-back.safetensors'));
    const down = back.tensors.find((t) => t.name === 'model.layers.1.mlp.down_proj.weight')!;
    expect([down.dtype, down.shape]).toEqual(['F32', [64, 128]]);
    expect(back.tensors.some((t) => t.name.endsWith('_scale'))).toBe(false);
  });

  it.skipIf(spawnSync('python3', ['--version']).status !== 0)(
    "Python's json reads the gptq folder's config with transformers' field names",
    async () => {
      await succeeds(tmp.dir, ['quantize', 'one', '-o', 'py-gptq', '--layout', 'gptq:group_size=32', '-q']);
      const script = [
        'import json, sys',
        'c = json.load(open(sys.argv[1]))',
        'q = c["quantization_config"]',
        'assert c["rms_norm_eps"] == 1e-05 and isinstance(c["rope_theta"], float), c',
        'assert q["quant_method"] == "gptq" and q["bits"] == 4 and q["group_size"] == 32, q',
        'assert q["desc_act"] is False and q["sym"] is True, q',
        'print("ok")',
      ].join('\n');
      const r = spawnSync('python3', ['-c', script, at('py-gptq/config.json')], { encoding: 'utf8' });
      expect(r.stderr).toBe('');
      expect(r.stdout).toBe('ok\n');
    },
  );

  it('a config.json that already has a quantization_config is HF_MODEL_INVALID before anything is written', async () => {
    const dir = modelFolder('quantized-case/m', 1);
    writeFileSync(join(dir, 'config.json'), '{"model_type": "llama", "quantization_config": {"bits": 4}}');
    const args = ['quantize', 'm', '-o', 'out', '--layout', 'gptq', '-q'];
    await failsWith(at('quantized-case'), args, 'HF_MODEL_INVALID', ['already has a quantization_config']);
  });
});

describe.concurrent('side files belong to their output', () => {
  it('two layouts into two files of one folder keep both side files', async () => {
    mkdirSync(at('both'));
    const model = at('one/model.safetensors');
    await succeeds(tmp.dir, [
      'quantize',
      model,
      '-o',
      'both/g.safetensors',
      '--layout',
      'gptq:group_size=32',
      '-q',
    ]);
    await succeeds(tmp.dir, [
      'quantize',
      model,
      '-o',
      'both/a.safetensors',
      '--layout',
      'awq:group_size=32',
      '-q',
    ]);
    await succeeds(tmp.dir, ['quantize', model, '-o', 'both/n.safetensors', '--layout', 'nf4', '-q']);
    expect(tree(at('both'))).toEqual([
      'a.quantization_config.json',
      'a.safetensors',
      'g.quantize_config.json',
      'g.safetensors',
      'n.quantization_config.json',
      'n.safetensors',
    ]);
    const g = JSON.parse(readFileSync(at('both/g.quantize_config.json'), 'utf8')) as Record<string, unknown>;
    expect(g).toMatchObject({ quant_method: 'gptq', model_file_base_name: 'g' });
    const a = JSON.parse(readFileSync(at('both/a.quantization_config.json'), 'utf8')) as {
      quantization_config: Record<string, unknown>;
    };
    expect(a.quantization_config).toMatchObject({ quant_method: 'awq' });
  });
});

describe.concurrent('1-D tensors (norms, biases) pass through unless named', () => {
  const norms = (): string[] =>
    readRaw(at('one/model.safetensors'))
      .tensors.filter((t) => t.shape.length < 2 && t.dtype !== 'I64')
      .map((t) => t.name);

  it('int4 per_group over a model with layernorms succeeds, the norms byte for byte', async () => {
    const args = ['--qdtype', 'int4', '--scheme', 'per_group', '--group-size', '32', '-q'];
    await succeeds(tmp.dir, ['quantize', 'one', '-o', 'one-int4', ...args]);
    const input = readRaw(at('one/model.safetensors'));
    const out = readRaw(at('one-int4/model.safetensors'));
    expect(norms()).toContain('model.layers.0.input_layernorm.weight');
    for (const name of norms()) {
      expect(sameBytes(out.byName.get(name)!.data, input.byName.get(name)!.data), name).toBeNull();
      expect(out.byName.has(`${name}.scale`), name).toBe(false);
    }
    expect(out.byName.has('model.layers.0.mlp.up_proj.weight.scale')).toBe(true);
  });

  it('per_channel leaves them too; --include names them, and then they are quantized', async () => {
    await succeeds(tmp.dir, ['quantize', 'one', '-o', 'one-pc', '--scheme', 'per_channel', '-q']);
    const out = readRaw(at('one-pc/model.safetensors'));
    for (const name of norms()) expect(out.byName.has(`${name}.scale`), name).toBe(false);
    const include = ['--include', '*norm*', '--scheme', 'per_channel', '-q'];
    await succeeds(tmp.dir, ['quantize', 'one', '-o', 'one-norms', ...include]);
    const named = readRaw(at('one-norms/model.safetensors'));
    for (const name of norms()) expect(named.byName.has(`${name}.scale`), name).toBe(true);
  });
});

describe.concurrent('a layout run that fails in its last shard', () => {
  it('leaves no folder, no shard and no staging directory behind', async () => {
    // layer 1's up_proj gets 100 output rows, which GPTQ cannot pack (multiples of 32 only)
    const wider: Readonly<Record<string, number[]>> = {
      'model.layers.1.mlp.up_proj.weight': [100, 64],
      'model.layers.1.mlp.down_proj.weight': [64, 100],
    };
    const tensors = synth
      .llamaTensors({ layers: 2, hidden: 64 })
      .map(([name, dtype, shape]): SynthTensor => [name, dtype, wider[name] ?? shape]);
    synth.writeShardedModel(at('late-case/m'), tensors, 2); // layer 1 is in the second shard
    writeFileSync(at('late-case/m/config.json'), CONFIG_TEXT);
    const args = ['quantize', 'm', '-o', 'out', '--layout', 'gptq:group_size=32', '-q'];
    await failsWith(at('late-case'), args, 'SHAPE_UNSUPPORTED', ['model.layers.1.mlp.up_proj.weight']);
  });
});

describe.concurrent('a companion file that cannot be read', () => {
  // root reads any file whatever its mode: the check can only be seen as another user
  it.skipIf(process.getuid?.() === 0)('is FILE_UNREADABLE before anything is written', async () => {
    const dir = modelFolder('unreadable-case/m', 1);
    chmodSync(join(dir, 'tokenizer.json'), 0o000);
    await failsWith(at('unreadable-case'), ['quantize', 'm', '-o', 'out', '-q'], 'FILE_UNREADABLE', [
      'tokenizer.json',
    ]);
  });
});
