/**
 * `quantd inspect` (human and --json output; fields as src/service/inspect*.ts document them,
 * numbers computed here from the shapes and dtypes) of qtensor containers and of what the
 * layouts write (GGUF, ONNX, GPTQ, AWQ, NF4, a layout's folder), `--help` and `--version`.
 */
import { mkdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { GGMLQuantizationType, gguf as hfGguf } from '@huggingface/gguf';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { encodeModel } from '../../src/format/onnx.js';
import { failsWith, quantdAsync, scratch, succeeds } from './cli-helpers.js';
import { MODEL, REPO, tempDir } from './run-cli.js';

const tmp = tempDir();
afterAll(() => tmp.cleanup());

/** compression ratio as inspect rounds it: three decimals. */
const ratio = (source: number, stored: number): number => Math.round((source / stored) * 1000) / 1000;

interface Row {
  name: string;
  kind: 'quantized' | 'tensor';
  dtype: string;
  shape: number[];
  scheme: string | null;
  mode: string | null;
  axis: number | null;
  group_size: number | null;
  source_dtype: string | null;
  bytes: number;
  source_bytes: number;
  ratio: number;
}

const plain = (name: string, dtype: string, shape: number[], elementSize: number): Row => {
  const bytes = shape.reduce((a, b) => a * b, elementSize);
  return {
    name,
    kind: 'tensor',
    dtype,
    shape,
    scheme: null,
    mode: null,
    axis: null,
    group_size: null,
    source_dtype: null,
    bytes,
    source_bytes: bytes,
    ratio: 1,
  };
};

/**
 * The container inspected below: the model with layers.*.weight as int4 per_group (group 32,
 * affine) and then embed.weight as uint8 per_channel along axis -1 (= 1), quantized in a second
 * pass over the first container.
 */
function expectedRows(): Row[] {
  // int4 [N, K], groups of 32: codes ceil(N·K·4/8) bytes; F32 scale and I32 zero point [N, K/32].
  const int4Group = (name: string, n: number, k: number, source: string, sourceSize: number): Row => {
    const bytes = Math.ceil((n * k * 4) / 8) + n * (k / 32) * 4 * 2;
    const sourceBytes = n * k * sourceSize;
    return {
      name,
      kind: 'quantized',
      dtype: 'int4',
      shape: [n, k],
      scheme: 'per_group',
      mode: 'affine',
      axis: null,
      group_size: 32,
      source_dtype: source,
      bytes,
      source_bytes: sourceBytes,
      ratio: ratio(sourceBytes, bytes),
    };
  };
  // uint8 [20, 16] along axis 1: 320 code bytes, 16 F32 scales and 16 I32 zero points.
  const embedBytes = 20 * 16 + 16 * 4 * 2;
  return [
    int4Group('layers.0.weight', 48, 64, 'float32', 4),
    plain('layers.0.bias', 'F32', [48], 4),
    int4Group('layers.1.weight', 32, 128, 'bfloat16', 2),
    {
      name: 'embed.weight',
      kind: 'quantized',
      dtype: 'uint8',
      shape: [20, 16],
      scheme: 'per_channel',
      mode: 'affine',
      axis: 1,
      group_size: null,
      source_dtype: 'float16',
      bytes: embedBytes,
      source_bytes: 20 * 16 * 2,
      ratio: ratio(20 * 16 * 2, embedBytes),
    },
    plain('activations', 'F32', [2, 5, 64], 4),
    plain('position_ids', 'I64', [10], 8),
  ];
}

describe.concurrent('inspect', () => {
  const FILE = 'c2.safetensors';
  let dir = '';
  beforeAll(async () => {
    dir = scratch(tmp.dir);
    await succeeds(
      dir,
      ['quantize', MODEL, '-o', 'c1.safetensors', '--include', 'layers.*.weight'].concat([
        '--qdtype',
        'int4',
        '--scheme',
        'per_group',
        '--group-size',
        '32',
      ]),
    );
    await succeeds(
      dir,
      ['quantize', 'c1.safetensors', '-o', FILE, '--include', 'embed.weight'].concat([
        '--qdtype',
        'uint8',
        '--scheme',
        'per_channel',
        '--axis',
        '-1',
      ]),
    );
  });

  it('--json gives the documented fields with the right byte counts and ratios', async () => {
    const r = await succeeds(dir, ['inspect', FILE, '--json']);
    expect(r.stderr).toBe('');
    const rows = expectedRows();
    const bytes = rows.reduce((n, t) => n + t.bytes, 0);
    const sourceBytes = rows.reduce((n, t) => n + t.source_bytes, 0);
    expect(JSON.parse(r.stdout)).toEqual({
      file: FILE,
      format: 'quantd.qtensor/1',
      size: statSync(join(dir, FILE)).size,
      checksum: null,
      tensors: rows,
      total: { bytes, source_bytes: sourceBytes, ratio: ratio(sourceBytes, bytes) },
    });
    // Spot values, worked by hand: 48·64·4/8 + 48·2·8 = 2304 bytes for 12288 float32 bytes.
    expect(rows[0]).toMatchObject({ bytes: 2304, source_bytes: 12288, ratio: 5.333 });
    expect(rows[3]).toMatchObject({ bytes: 448, source_bytes: 640, ratio: 1.429 });
  });

  it('the human summary lists each tensor with scheme, dtype, shape, bytes and ratio', async () => {
    const r = await succeeds(dir, ['inspect', FILE]);
    expect(r.stderr).toBe('');
    const lines = r.stdout.trimEnd().split('\n');
    expect(lines[0]).toMatch(/^c2\.safetensors: quantd\.qtensor\/1, 6 tensors \(3 quantized\), /);
    expect(lines[1]!.split(/\s{2,}/)).toEqual(['name', 'scheme', 'dtype', 'shape', 'bytes', 'ratio']);
    const rows = expectedRows();
    const scheme = (t: Row): string =>
      t.kind === 'tensor'
        ? 'none'
        : [
            t.scheme,
            t.axis !== null ? `axis ${t.axis}` : null,
            t.group_size !== null ? `g${t.group_size}` : null,
            t.mode,
          ]
            .filter((p) => p !== null)
            .join(' ');
    const dtype = (t: Row): string => (t.kind === 'tensor' ? t.dtype : `${t.dtype} (from ${t.source_dtype})`);
    const cells = lines.slice(2, 2 + rows.length).map((l) => l.split(/\s{2,}/));
    expect(cells).toEqual(
      rows.map((t) => [
        t.name,
        scheme(t),
        dtype(t),
        `[${t.shape.join(', ')}]`,
        String(t.bytes),
        `${t.ratio.toFixed(2)}x`,
      ]),
    );
    // e.g. the second row of that table, spelled out:
    expect(cells[0]).toEqual([
      'layers.0.weight',
      'per_group g32 affine',
      'int4 (from float32)',
      '[48, 64]',
      '2304',
      '5.33x',
    ]);
    expect(cells[3]).toEqual([
      'embed.weight',
      'per_channel axis 1 affine',
      'uint8 (from float16)',
      '[20, 16]',
      '448',
      '1.43x',
    ]);
    const bytes = rows.reduce((n, t) => n + t.bytes, 0);
    const sourceBytes = rows.reduce((n, t) => n + t.source_bytes, 0);
    const kib = (n: number): string => `${(n / 1024).toFixed(1)} KiB`;
    expect(lines.slice(2 + rows.length)).toEqual([
      `total: ${kib(sourceBytes)} of source tensors stored in ${kib(bytes)} (${ratio(sourceBytes, bytes).toFixed(2)}x)`,
    ]);
  });

  it('--json on a plain safetensors file: every tensor stored as is, ratio 1', async () => {
    const r = await succeeds(scratch(tmp.dir), ['inspect', MODEL, '--json']);
    const rows = [
      plain('layers.0.weight', 'F32', [48, 64], 4),
      plain('layers.0.bias', 'F32', [48], 4),
      plain('layers.1.weight', 'BF16', [32, 128], 2),
      plain('embed.weight', 'F16', [20, 16], 2),
      plain('activations', 'F32', [2, 5, 64], 4),
      plain('position_ids', 'I64', [10], 8),
    ];
    const bytes = rows.reduce((n, t) => n + t.bytes, 0);
    expect(JSON.parse(r.stdout)).toEqual({
      file: MODEL,
      format: 'pt',
      size: statSync(MODEL).size,
      checksum: null,
      tensors: rows,
      total: { bytes, source_bytes: bytes, ratio: 1 },
    });
  });
});

describe.concurrent('--help and --version', () => {
  it.each([['--help'], ['-h'], ['help']])(
    'quantd %s prints the usage and exits 0',
    async (...args: string[]) => {
      const r = await quantdAsync(args);
      expect(r.code).toBe(0);
      expect(r.stderr).toBe('');
      expect(r.stdout).toMatch(/^quantd — /);
      for (const command of ['quantize', 'dequantize', 'fake-quantize', 'qparams', 'inspect', 'serve']) {
        expect(r.stdout).toContain(`quantd ${command} `);
      }
    },
  );

  it.each(['--version', '-v'])('quantd %s prints the package version and exits 0', async (flag) => {
    const pkg = JSON.parse(readFileSync(join(REPO, 'package.json'), 'utf8')) as { version: string };
    const r = await quantdAsync([flag]);
    expect(r).toEqual({ code: 0, stdout: `${pkg.version}\n`, stderr: '' });
  });
});

/**
 * What quantd writes besides qtensor containers, inspected: the llama-spm fixture (a Hugging
 * Face folder with a SentencePiece tokenizer) as GGUF with llama-quantize's Q4_K_M mixture, as
 * an ONNX decoder folder and as one ONNX file, as GPTQ, AWQ and NF4 files and folders. Expected
 * values come from elsewhere: @huggingface/gguf's own parse of the GGUF, the fixture's
 * config.json, the layouts' documented tensor shapes (worked out here from [out, in]).
 */
describe.concurrent('inspect of what the layouts write', () => {
  const FIXTURE = join(REPO, 'test', 'gguf-hf', 'fixtures', 'llama-spm');
  const LINEAR = ['self_attn.q_proj', 'self_attn.k_proj', 'self_attn.v_proj', 'self_attn.o_proj'].concat([
    'mlp.gate_proj',
    'mlp.up_proj',
    'mlp.down_proj',
  ]);
  // [out, in] of each linear weight of the fixture (hidden 64, 2 KV heads of 16, intermediate 128)
  const SHAPES: Record<string, [number, number]> = {
    'self_attn.q_proj': [64, 64],
    'self_attn.k_proj': [32, 64],
    'self_attn.v_proj': [32, 64],
    'self_attn.o_proj': [64, 64],
    'mlp.gate_proj': [128, 64],
    'mlp.up_proj': [128, 64],
    'mlp.down_proj': [64, 128],
  };
  const WEIGHTS = [0, 1].flatMap((l) =>
    LINEAR.map((m) => [`model.layers.${l}.${m}.weight`, SHAPES[m]!] as const),
  );
  let dir = '';
  beforeAll(async () => {
    dir = scratch(tmp.dir);
    const weights = join(FIXTURE, 'model.safetensors');
    await Promise.all([
      succeeds(dir, ['quantize', FIXTURE, '-o', 'l.gguf', '--layout', 'gguf:ftype=Q4_K_M']),
      succeeds(dir, ['quantize', weights, '-o', 'one.onnx', '--layout', 'onnx:block_size=32']),
      succeeds(dir, ['quantize', weights, '-o', 'g.safetensors', '--layout', 'gptq:group_size=32']),
      succeeds(dir, ['quantize', weights, '-o', 'a.safetensors', '--layout', 'awq:group_size=32']),
      succeeds(dir, ['quantize', weights, '-o', 'n.safetensors', '--layout', 'nf4']),
    ]);
    mkdirSync(join(dir, 'od'));
    await Promise.all([
      succeeds(dir, ['quantize', FIXTURE, '-o', 'od/model.onnx', '--layout', 'onnx:block_size=32']),
      succeeds(dir, ['quantize', FIXTURE, '-o', 'gdir/', '--layout', 'gptq:group_size=32']),
    ]);
  }, 120_000);

  const json = async (path: string): Promise<Record<string, unknown>> => {
    const r = await succeeds(dir, ['inspect', path, '--json']);
    expect(r.stderr).toBe('');
    return JSON.parse(r.stdout) as Record<string, unknown>;
  };

  it('GGUF: types, shapes, bits per weight, metadata and tokenizer (was FILE_NOT_SAFETENSORS)', async () => {
    const s = (await json('l.gguf')) as {
      format: string;
      architecture: string;
      file_type: unknown;
      tokenizer: Record<string, unknown>;
      metadata: Record<string, unknown>;
      types: Record<string, { tensors: number; weights: number; bytes: number }>;
      tensors: { name: string; type: string; shape: number[]; bytes: number; bits_per_weight: number }[];
      total: { weights: number; bytes: number; bits_per_weight: number };
    };
    const parsed = await hfGguf(join(dir, 'l.gguf'), { allowLocalFile: true });
    const meta = parsed.metadata as Record<string, unknown>;
    const config = JSON.parse(readFileSync(join(FIXTURE, 'config.json'), 'utf8')) as Record<string, number>;
    expect(s).toMatchObject({ format: 'gguf', version: 3, architecture: 'llama' });
    expect(s.file_type).toEqual({ id: 15, name: 'Q4_K_M' });
    expect(meta['general.file_type']).toBe(15);
    // the tensors as @huggingface/gguf reads them: names, ggml types, shapes (ne[0] last here)
    expect(s.tensors.map((t) => [t.name, t.type, t.shape])).toEqual(
      parsed.tensorInfos.map((t) => [t.name, GGMLQuantizationType[t.dtype], t.shape.map(Number).reverse()]),
    );
    // bits per weight from bytes and elements; bytes from ggml's block sizes
    const block: Record<string, [number, number]> = {
      F32: [1, 4],
      Q5_0: [32, 22],
      Q8_0: [32, 34],
      Q4_K: [256, 144],
      Q6_K: [256, 210],
    };
    for (const t of s.tensors) {
      const n = t.shape.reduce((a, b) => a * b, 1);
      const [values, bytes] = block[t.type]!;
      expect(t.bytes, t.name).toBe((n / values) * bytes);
      expect(t.bits_per_weight, t.name).toBeCloseTo((t.bytes * 8) / n, 4);
    }
    const weights = s.tensors.reduce((a, t) => a + t.shape.reduce((x, y) => x * y, 1), 0);
    const bytes = s.tensors.reduce((a, t) => a + t.bytes, 0);
    expect(s.total).toEqual({
      weights,
      bytes,
      bits_per_weight: Math.round(((bytes * 8) / weights) * 1e4) / 1e4,
    });
    expect(Object.values(s.types).reduce((a, t) => a + t.tensors, 0)).toBe(s.tensors.length);
    // the tokenizer: SentencePiece (llama), the fixture's vocabulary and special ids
    expect(s.tokenizer).toMatchObject({
      model: 'llama',
      vocab_size: config['vocab_size'],
      special: expect.objectContaining({ bos: config['bos_token_id'], eos: config['eos_token_id'] }),
    });
    // metadata: scalars as they are, a vocabulary by its type and length
    expect(s.metadata['llama.block_count']).toBe(config['num_hidden_layers']);
    expect(s.metadata['tokenizer.ggml.tokens']).toEqual({ array: 'string', length: config['vocab_size'] });
    const human = (await succeeds(dir, ['inspect', 'l.gguf'])).stdout.split('\n');
    expect(human[0]).toMatch(/^l\.gguf: GGUF v3, llama .*file type Q4_K_M \(15\), 21 tensors, /);
    expect(human[1]).toMatch(/^tokenizer: llama.*, 416 tokens, .*bos 1, eos 2/);
  });

  /** MatMulNBits bytes of [N, K] in blocks of 32: codes, FLOAT scales, packed UINT8 zero points. */
  const nbitsBytes = ([n, k]: readonly [number, number], scaleSize: number): number =>
    n * (k / 2) + n * (k / 32) * scaleSize + n * Math.ceil(k / 32 / 2);

  it('ONNX decoder folder: a whole decoder, MatMulNBits weights, external data, genai_config.json', async () => {
    const s = (await json('od')) as {
      file: string;
      decoder: boolean;
      nodes: Record<string, number>;
      external_data: { file: string; bytes: number }[];
      quantized: {
        name: string;
        bits: number;
        group_size: number;
        shape: number[];
        bytes: number;
        scale_dtype: string;
      }[];
      graph: { inputs: { name: string }[]; outputs: { name: string }[] };
      genai_config: { model: Record<string, unknown> } | null;
    };
    expect(s.file).toBe(join('od', 'model.onnx'));
    expect(s.decoder).toBe(true);
    expect(s.graph.inputs[0]?.name).toBe('input_ids');
    expect(s.graph.outputs.map((o) => o.name)).toContain('logits');
    expect(s.nodes['com.microsoft.MatMulNBits']).toBe(14);
    expect(s.external_data).toEqual([
      { file: 'model.onnx.data', bytes: statSync(join(dir, 'od', 'model.onnx.data')).size },
    ]);
    expect(s.quantized.map((q) => [q.name, q.bits, q.group_size, q.shape])).toEqual(
      WEIGHTS.map(([name, shape]) => [name, 4, 32, shape]),
    );
    for (const q of s.quantized) {
      expect(q.bytes, q.name).toBe(
        nbitsBytes(q.shape as [number, number], q.scale_dtype === 'FLOAT' ? 4 : 2),
      );
    }
    expect(s.genai_config?.model).toMatchObject({ type: 'llama', vocab_size: 416 });
  });

  it('ONNX file: not a whole decoder, its .onnx.data, no genai_config.json', async () => {
    const s = (await json('one.onnx')) as Record<string, unknown> & { quantized: unknown[] };
    expect(s).toMatchObject({
      format: 'onnx',
      decoder: false,
      external_data: [{ file: 'one.onnx.data', bytes: statSync(join(dir, 'one.onnx.data')).size }],
      genai_config: null,
    });
    expect(s.quantized).toHaveLength(14);
  });

  it('GPTQ file: bits, group size, sym, desc_act and which tensors are quantized (was "0 quantized")', async () => {
    const s = (await json('g.safetensors')) as {
      format: string;
      scheme: unknown;
      quantization_config: { file: string };
      quantized: {
        name: string;
        stored: string[];
        shape: number[];
        bits: number;
        group_size: number;
        bytes: number;
      }[];
      tensors: { name: string }[];
    };
    expect(s.format).toBe('gptq');
    expect(s.scheme).toEqual({ bits: 4, group_size: 32, sym: true, desc_act: false });
    expect(s.quantization_config.file).toBe('g.quantize_config.json');
    expect(s.quantized.map((q) => [q.name, q.shape, q.bits, q.group_size])).toEqual(
      WEIGHTS.map(([name, shape]) => [name, shape, 4, 32]),
    );
    const m = 'model.layers.0.self_attn.k_proj';
    expect(s.quantized[1]!.stored).toEqual([`${m}.qweight`, `${m}.qzeros`, `${m}.scales`, `${m}.g_idx`]);
    // [32, 64]: qweight [64·4/32, 32] and qzeros [2, 32·4/32] int32, scales [2, 32] F16, g_idx [64] int32
    expect(s.quantized[1]!.bytes).toBe(8 * 32 * 4 + 2 * 4 * 4 + 2 * 32 * 2 + 64 * 4);
    expect(s.tensors.map((t) => t.name)).not.toContain(`${m}.qweight`);
    expect(s.tensors).toHaveLength(7);
    const human = (await succeeds(dir, ['inspect', 'g.safetensors'])).stdout;
    expect(human.split('\n')[0]).toMatch(
      /^g\.safetensors: gptq, 14 quantized weights \(int4 g32 sym no desc_act\), 7 tensors/,
    );
  });

  it('AWQ and NF4 files: their scheme and weights', async () => {
    const awq = (await json('a.safetensors')) as {
      scheme: unknown;
      quantized: { stored: string[]; bytes: number }[];
    };
    expect(awq.scheme).toEqual({ bits: 4, group_size: 32, sym: false, desc_act: null });
    expect(awq.quantized).toHaveLength(14);
    // q_proj [64, 64]: qweight [64, 64/8] and qzeros [2, 64/8] int32, scales [2, 64] F16
    expect(awq.quantized[0]!.bytes).toBe(64 * 8 * 4 + 2 * 8 * 4 + 2 * 64 * 2);
    const nf4 = (await json('n.safetensors')) as {
      format: string;
      scheme: unknown;
      quantized: { name: string; group_size: number; details: unknown }[];
    };
    expect(nf4.format).toBe('nf4');
    expect(nf4.scheme).toEqual({ bits: 4, group_size: 64, sym: null, desc_act: null });
    expect(nf4.quantized.map((q) => q.name)).toEqual(WEIGHTS.map(([name]) => name));
    expect(nf4.quantized[0]!.details).toEqual({ quant_type: 'nf4', double_quant: false });
  });

  it("GPTQ folder: config.json's quantization_config and the quantized weights", async () => {
    const s = (await json('gdir')) as {
      quantization_config: { file: string; config: Record<string, unknown> };
      layout: { format: string; scheme: unknown; quantized: { name: string }[] };
    };
    expect(s.quantization_config.file).toBe('config.json');
    expect(s.quantization_config.config).toMatchObject({ quant_method: 'gptq', bits: 4, group_size: 32 });
    expect(s.layout.format).toBe('gptq');
    expect(s.layout.scheme).toEqual({ bits: 4, group_size: 32, sym: true, desc_act: false });
    expect(s.layout.quantized.map((q) => q.name)).toEqual(WEIGHTS.map(([name]) => name));
  });

  it('an ONNX model naming external data outside its folder: LAYOUT_INVALID, as its reader says', async () => {
    const own = scratch(tmp.dir);
    const model = encodeModel({
      irVersion: 9,
      opsets: [{ domain: '', version: 21 }],
      producerName: 'test',
      producerVersion: '',
      docString: '',
      metadata: [],
      graphName: 'g',
      nodes: [],
      inputs: [],
      outputs: [],
      initializers: [
        {
          name: 'w',
          dataType: 1,
          dims: [2],
          data: { kind: 'external', location: '../outside.data', offset: 0, length: 8 },
        },
      ],
    });
    writeFileSync(join(own, 'x.onnx'), model);
    await failsWith(own, ['inspect', 'x.onnx'], 'LAYOUT_INVALID', ['is not a path inside the model']);
  });

  it('--verify of a GGUF or ONNX file: CHECKSUM_MISSING; a truncated GGUF: GGUF_INVALID', async () => {
    const own = scratch(tmp.dir);
    await failsWith(own, ['inspect', join(dir, 'l.gguf'), '--verify'], 'CHECKSUM_MISSING');
    await failsWith(own, ['inspect', join(dir, 'one.onnx'), '--verify'], 'CHECKSUM_MISSING');
    writeFileSync(join(own, 'cut.gguf'), readFileSync(join(dir, 'l.gguf')).subarray(0, 200));
    await failsWith(own, ['inspect', 'cut.gguf'], 'GGUF_INVALID');
  });
});
