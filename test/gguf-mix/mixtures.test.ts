/**
 * llama-quantize's file types (gguf:ftype=Q4_K_M …) against llama.cpp itself: for Llama-,
 * Qwen2- and Mistral-shaped synthetic checkpoints (synthetic.mjs), every tensor's type equals the
 * type llama.cpp's llama_model_quantize chose, run by run (file type, --pure, the output and token
 * embedding types, --tensor-type), and where quantd writes every type of the run, every tensor's
 * bytes equal llama.cpp's (SHA-256). The expectations come from test/gguf-mix/generate.py, which
 * runs the libllama node-llama-cpp ships; the tests never run it.
 */
import { createHash } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { ggmlDecode, isQuantType } from '../../src/core/interop/ggml.js';
import { takesImatrix } from '../../src/core/interop/ggml-imatrix.js';
import {
  chooseMixture,
  llamaFileType,
  type MixtureModel,
  type MixtureOptions,
  type MixtureTensor,
} from '../../src/core/interop/llama-mixtures.js';
import { GgufFileReader } from '../../src/format/gguf-file.js';
import type { Encoding } from '../../src/kernels/encoders.js';
import { createCompute } from '../../src/pool/index.js';
import { ggufLayout } from '../../src/service/layouts/gguf.js';
import { mixtureOptions } from '../../src/service/layouts/gguf-mixture.js';
import { histogramOf, sampleIndices } from '../../src/core/error-histogram.js';
import type { LayoutReport } from '../../src/cli/layout-command.js';
import { quantd } from '../cli/run-cli.js';
import { argmax, loadModel, logitsAfterEach } from '../gguf-hf/llama-cpp.js';
import { MODELS, writeSynthetic } from './synthetic.mjs';

interface Run {
  readonly file_type: string;
  readonly options: {
    readonly pure?: boolean;
    readonly output_tensor_type?: string;
    readonly token_embedding_type?: string;
    readonly tensor_types?: ReadonlyArray<readonly [string, string]>;
    /** The importance matrix's base name: MODEL.imatrix(.gguf|.dat) beside this file. */
    readonly imatrix?: string;
  };
  /** name → "TYPE sha256[0:16]" */
  readonly tensors: Readonly<Record<string, string>>;
}
interface Expected {
  readonly llama_cpp: string;
  readonly input: Readonly<Record<string, string>>;
  readonly runs: Readonly<Record<string, Run>>;
}

const DIR = mkdtempSync(join(tmpdir(), 'quantd-gguf-mix-'));
afterAll(() => rmSync(DIR, { recursive: true, force: true }));

const load = (model: string): Expected =>
  JSON.parse(readFileSync(new URL(`./expected/${model}.json`, import.meta.url), 'utf8')) as Expected;

/** The layout options that ask quantd for what the run asked llama.cpp. */
function layoutOptions(run: Run, imatrixFormat: 'gguf' | 'dat' = 'gguf'): Record<string, string> {
  const o = run.options;
  return {
    ...(o.imatrix !== undefined && {
      imatrix: fileURLToPath(new URL(`./${o.imatrix}.${imatrixFormat}`, import.meta.url)),
    }),
    ftype: run.file_type,
    ...(o.pure === true && { pure: 'true' }),
    ...(o.output_tensor_type !== undefined && { output_tensor_type: o.output_tensor_type }),
    ...(o.token_embedding_type !== undefined && { token_embedding_type: o.token_embedding_type }),
    ...(o.tensor_types !== undefined && {
      tensor_type: o.tensor_types.map(([p, t]) => `${p}=${t}`).join(';'),
    }),
  };
}

/** Each tensor of a GGUF file as "TYPE sha256[0:16]", as generate.py records them. */
async function digests(path: string): Promise<Record<string, string>> {
  const reader = await GgufFileReader.open(path);
  try {
    const out: Record<string, string> = {};
    for (const t of reader.header.tensors) {
      const hash = createHash('sha256')
        .update(await reader.read(t))
        .digest('hex');
      out[t.name] = `${t.type.name} ${hash.slice(0, 16)}`;
    }
    return out;
  } finally {
    await reader.close();
  }
}

const typesOf = (tensors: Readonly<Record<string, string>>): Record<string, string> =>
  Object.fromEntries(Object.entries(tensors).map(([name, v]) => [name, v.split(' ')[0]!]));

/**
 * Whether quantd writes every type of the run (with an importance matrix: quantizes each with
 * one); the other runs are checked as tables, and their conversions refused with a reason.
 */
const writable = (run: Run): boolean =>
  Object.values(typesOf(run.tensors)).every(
    (t) =>
      t === 'F32' ||
      t === 'F16' ||
      (isQuantType(t) && (run.options.imatrix === undefined || takesImatrix(t))),
  );

/** The rules' table as llama.cpp prints it: tensors it does not quantize keep their F32. */
function mixtureChoices(
  tensors: MixtureTensor[],
  model: MixtureModel,
  o: MixtureOptions,
): Record<string, string> {
  const chosen = chooseMixture(tensors, model, o);
  return Object.fromEntries(tensors.map((t) => [t.name, chosen.get(t.name)!.type ?? 'F32']));
}

describe.each(Object.keys(MODELS) as Array<keyof typeof MODELS>)('%s-shaped checkpoint', (model) => {
  const expected = load(model);
  const folder = join(DIR, model);
  const f32 = join(DIR, `${model}-F32.gguf`);
  beforeAll(async () => {
    writeSynthetic(model, folder);
    await ggufLayout.write(folder, f32, { type: 'F32' });
  });

  it('the synthetic folder is the one llama.cpp quantized (float32 tensors byte-equal)', async () => {
    expect(await digests(f32)).toEqual(expected.input);
  });

  it.each(Object.entries(expected.runs))('%s: the per-tensor types are llama.cpp’s', async (_label, run) => {
    // the rules alone, on the tensors of the float32 file llama.cpp was given: every run, also
    // those whose types quantd does not write yet
    const reader = await GgufFileReader.open(f32);
    const tensors = reader.header.tensors.map((t) => ({ name: t.name, ne: t.dims }));
    await reader.close();
    const c = MODELS[model].config;
    const options = mixtureOptions(layoutOptions(run))!;
    const o = { ...options, hasImatrix: options.imatrixPath !== undefined };
    const chosen = mixtureChoices(
      tensors,
      {
        arch: c.model_type === 'qwen2' ? 'qwen2' : 'llama',
        layers: c.num_hidden_layers,
        heads: c.num_attention_heads,
        kvHeads: c.num_key_value_heads,
        experts: 0,
      },
      o,
    );
    expect(chosen).toEqual(typesOf(run.tensors));
  });

  it.each(Object.entries(expected.runs))('%s: a conversion writes llama.cpp’s bytes', async (label, run) => {
    if (!writable(run)) {
      // a type quantd does not write yet is refused, naming it, before anything is written
      await expect(ggufLayout.write(folder, join(DIR, 'refused.gguf'), layoutOptions(run))).rejects.toThrow(
        /which quantd does not write yet|with an importance matrix yet/,
      );
      return;
    }
    const out = join(DIR, `${model}-${label}.gguf`);
    const result = await ggufLayout.write(folder, out, layoutOptions(run));
    const got = await digests(out);
    expect(typesOf(got)).toEqual(typesOf(run.tensors));
    expect(got).toEqual(run.tensors);
    const reported = Object.fromEntries(result.tensors.map((t) => [t.name, t.type]));
    expect(reported).toMatchObject(typesOf(run.tensors));
    const reader = await GgufFileReader.open(out);
    await reader.close();
    expect(reader.header.kvs.get('general.file_type')?.value, 'llama-quantize’s value').toBe(
      llamaFileType(run.file_type)!.ftype,
    );
    // the size summary (llama-quantize's BPW) is the file's tensor data over its weights
    const { tensors } = reader.header;
    expect(result.size).toEqual({
      weights: tensors.reduce((n, t) => n + t.numel, 0),
      bits: tensors.reduce((n, t) => n + 8 * t.bytes, 0),
    });
  });

  it.runIf(expected.runs['Q4_K_M+imatrix'] !== undefined)(
    'the legacy .dat importance matrix gives the same file as the GGUF one',
    async () => {
      const run = expected.runs['Q4_K_M+imatrix']!;
      const out = join(DIR, `${model}-dat.gguf`);
      await ggufLayout.write(folder, out, layoutOptions(run, 'dat'));
      expect(await digests(out)).toEqual(run.tensors);
    },
  );

  // the conversions above run the TypeScript encoders; the CLI's pool runs the C kernels, whose
  // weighted paths (native/src/ggml_weighted.c and the SIMD template) must give the same bytes
  const viaKernels = ['Q4_K_M', 'Q3_K_M', 'Q2_K', 'IQ4_XS', 'IQ4_NL', 'Q4_0', 'Q5_1'].map(
    (t) => `${t}+imatrix`,
  );
  it.runIf(model === 'llama').each(viaKernels)(
    '%s through the CLI (the C kernels) writes llama.cpp’s bytes',
    async (label) => {
      const run = expected.runs[label]!;
      const out = join(DIR, `${model}-${label}-cli.gguf`);
      const o = layoutOptions(run);
      const layout = `gguf:ftype=${run.file_type}`;
      const cli = quantd(['quantize', folder, '-o', out, '--layout', layout, '--imatrix', o['imatrix']!]);
      expect(cli.code, cli.stderr).toBe(0);
      expect(await digests(out)).toEqual(run.tensors);
    },
    60_000,
  );

  // a model run reads, encodes and writes a large weight in slices of rows (job-slices.ts): on a
  // few KiB slices, every weight of this small model is cut into several, q/k in whole heads
  const sliced = ['Q4_K_M', 'Q8_0', 'Q5_1', 'Q6_K+imatrix', 'IQ4_XS+imatrix'];
  it.runIf(model === 'llama').each(sliced)(
    '%s in slices on the pool writes llama.cpp’s bytes, and the same report as whole weights',
    async (label) => {
      const run = expected.runs[label]!;
      const handle = createCompute({ threads: 2 });
      try {
        const encoding = handle.encoding();
        const whole = await ggufLayout.write(
          folder,
          join(DIR, `${model}-${label}-whole.gguf`),
          layoutOptions(run),
          {
            encoding,
            sliceBytes: Infinity,
          },
        );
        const out = join(DIR, `${model}-${label}-sliced.gguf`);
        let windows = 0; // the tasks that encode a slice's rows alone
        const spy: Encoding = {
          parallelism: encoding.parallelism,
          shared: encoding.shared,
          kernels: encoding.kernels,
          encode: (task, signal) => {
            if (task.call.kind === 'ggml' && task.call.window) windows++;
            return encoding.encode(task, signal);
          },
        };
        const result = await ggufLayout.write(folder, out, layoutOptions(run), {
          encoding: spy,
          sliceBytes: 16 * 1024,
        });
        expect(windows).toBeGreaterThan(20);
        expect(await digests(out)).toEqual(run.tensors);
        const measured = (r: typeof result) =>
          r.tensors.map((t) => [t.name, t.type, t.quality?.max_abs_error, t.error_histogram]);
        expect(measured(result)).toEqual(measured(whole));
      } finally {
        await handle.close();
      }
    },
    60_000,
  );
});

describe('the options', () => {
  it('are accepted at submission for a folder job (type=F16, ftype=…) as the folder writer takes them', () => {
    expect(() => ggufLayout.checkOptions({ ftype: 'q4_k' })).not.toThrow(); // an alias, any case
    expect(() => ggufLayout.checkOptions({ type: 'F16' })).not.toThrow();
    expect(() =>
      ggufLayout.checkOptions({ ftype: 'Q5_K_M', tensor_type: 'attn_v=Q8_0;ffn_down=q6_k' }),
    ).not.toThrow();
  });

  it.each([
    [{ ftype: 'Q4_K_XL' }, /gguf:ftype must be one of Q4_0, .*IQ4_XS/],
    [{ ftype: 'Q4_K_M', type: 'Q4_K' }, /gguf:type and ftype exclude each other/],
    [{ pure: 'true' }, /gguf:pure only applies with ftype/],
    [{ ftype: 'Q4_K_M', pure: 'yes' }, /gguf:pure must be true or false/],
    [
      { ftype: 'Q4_K_M', output_tensor_type: 'IQ1_S' },
      /gguf:output_tensor_type must be a type quantd writes/,
    ],
    [{ ftype: 'Q4_K_M', tensor_type: 'attn_v' }, /gguf:tensor_type takes PATTERN=TYPE rules separated by ;/],
    [
      { ftype: 'Q4_K_M', tensor_type: '(a)\\1=Q8_0' },
      /gguf:tensor_type the regex uses syntax that linear-time/,
    ],
  ])('%j is refused: %s', (options, message) => {
    expect(() => ggufLayout.checkOptions(options)).toThrow(message);
  });

  it('an alias names the _M mixture, as llama-quantize’s does', () => {
    expect(llamaFileType('Q4_K')).toEqual(llamaFileType('Q4_K_M'));
    expect(llamaFileType('q5_k')!.name).toBe('Q5_K_M');
    expect(llamaFileType('Q3_K')!.ftype).toBe(12);
  });
});

describe('importance matrix refusals', () => {
  const folder = join(DIR, 'refusals');
  beforeAll(() => writeSynthetic('llama', folder));

  /** A legacy .dat file of these entries (values written as they are, ncall 1). */
  function dat(name: string, entries: Record<string, number[]>): string {
    const parts: Buffer[] = [Buffer.from(Int32Array.of(Object.keys(entries).length).buffer)];
    for (const [key, values] of Object.entries(entries)) {
      const bytes = Buffer.from(key);
      parts.push(
        Buffer.from(Int32Array.of(bytes.length).buffer),
        bytes,
        Buffer.from(Int32Array.of(1, values.length).buffer),
      );
      parts.push(Buffer.from(Float32Array.from(values).buffer));
    }
    const path = join(DIR, name);
    writeFileSync(path, Buffer.concat(parts));
    return path;
  }
  const convert = (imatrix: string): Promise<unknown> =>
    ggufLayout.write(folder, join(DIR, 'refused.gguf'), { ftype: 'Q4_K_M', imatrix });

  it('an entry whose size is not the row’s names the tensor and both sizes', async () => {
    const err = await convert(dat('short.dat', { 'blk.3.ffn_down.weight': [1, 2, 3] })).catch(
      (e: unknown) => e,
    );
    expect(err).toMatchObject({ code: 'IMATRIX_INVALID' });
    expect(String(err)).toMatch(/blk\.3\.ffn_down\.weight: 3 weights, but its rows have 512 columns/);
  });

  it('a token_embd entry of another size is ignored, as llama.cpp ignores it', async () => {
    await expect(convert(dat('embd.dat', { 'token_embd.weight': [1, 2] }))).resolves.toBeDefined();
  });

  it('a non-finite weight is refused, naming the tensor', async () => {
    const values = Array.from({ length: 256 }, () => 1);
    values[7] = Number.NaN;
    const err = await convert(dat('nan.dat', { 'blk.0.attn_q.weight': values })).catch((e: unknown) => e);
    expect(err).toMatchObject({ code: 'IMATRIX_INVALID' });
    expect(String(err)).toMatch(/blk\.0\.attn_q\.weight: value 7 is NaN/);
  });

  it('a truncated file, a file of another kind and a missing file are refused', async () => {
    const good = readFileSync(fileURLToPath(new URL('./llama.imatrix.dat', import.meta.url)));
    const cut = join(DIR, 'cut.dat');
    writeFileSync(cut, good.subarray(0, 1000));
    await expect(convert(cut)).rejects.toMatchObject({ code: 'IMATRIX_INVALID' });
    await expect(convert(cut)).rejects.toThrow(/ends inside/);
    const text = join(DIR, 'text.dat');
    writeFileSync(text, '\u0000\u0000\u0000\u0000 not an importance matrix');
    await expect(convert(text)).rejects.toThrow(/neither a GGUF imatrix nor llama.cpp's legacy .dat/);
    await expect(convert(join(DIR, 'absent.dat'))).rejects.toMatchObject({ code: 'FILE_NOT_FOUND' });
  });

  it('a GGUF that is not an imatrix (a model) is refused, saying what it lacks', async () => {
    const model = join(DIR, 'model.gguf');
    await ggufLayout.write(folder, model, { type: 'Q8_0' });
    await expect(convert(model)).rejects.toThrow(
      /needs imatrix.datasets, imatrix.chunk_count and imatrix.chunk_size/,
    );
  });

  it('the matrix is recorded in the file as llama-quantize records it', async () => {
    const out = join(DIR, 'recorded.gguf');
    await ggufLayout.write(folder, out, {
      ftype: 'Q4_K_M',
      imatrix: fileURLToPath(new URL('./llama.imatrix.gguf', import.meta.url)),
    });
    const reader = await GgufFileReader.open(out);
    await reader.close();
    const kv = (key: string): unknown => reader.header.kvs.get(key)?.value;
    expect(kv('quantize.imatrix.file')).toBe('llama.imatrix.gguf');
    expect(kv('quantize.imatrix.dataset')).toBe('synthetic.txt');
    expect(kv('quantize.imatrix.chunks_count')).toBe(3);
    expect(kv('quantize.imatrix.entries_count')).toBe(56);
  });
});

describe('a Q4_K_M file in llama.cpp', () => {
  it('loads and runs in node-llama-cpp; its top-1 agreement with F32 is printed beside Q8_0’s', async () => {
    const folder = join(DIR, 'run');
    writeSynthetic('llama', folder);
    const ids = Array.from({ length: 48 }, (_, i) => ((i * 37 + 5) % 400) + 3);
    const runs: Record<string, Record<string, string>> = {
      F32: { type: 'F32' },
      Q8_0: { ftype: 'Q8_0' },
      Q4_K_M: { ftype: 'Q4_K_M' },
      'Q4_K_M+imatrix': {
        ftype: 'Q4_K_M',
        imatrix: fileURLToPath(new URL('./llama.imatrix.gguf', import.meta.url)),
      },
    };
    const logits: Record<string, Float32Array[]> = {};
    for (const [label, options] of Object.entries(runs)) {
      const out = join(DIR, `run-${label}.gguf`);
      await ggufLayout.write(folder, out, options);
      const model = await loadModel(out);
      try {
        logits[label] = await logitsAfterEach(model, ids);
      } finally {
        await model.dispose();
      }
    }
    const f32 = logits['F32']!;
    const summary = Object.entries(logits).map(([label, rows]) => {
      rows.forEach((row) => row.forEach((v) => expect(Number.isFinite(v)).toBe(true)));
      const agree = rows.filter((row, i) => argmax(row) === argmax(f32[i]!)).length;
      let err = 0;
      let norm = 0;
      rows.forEach((row, i) =>
        row.forEach((v, j) => {
          err += (v - f32[i]![j]!) ** 2;
          norm += f32[i]![j]! ** 2;
        }),
      );
      return `${label} top-1 ${agree}/${ids.length}, logits relative RMSE ${Math.sqrt(err / norm).toFixed(3)}`;
    });
    // a random-weight network amplifies any weight error layer after layer (Q8_0's own RMSE
    // shows how much), so these are a record, not a quality bound
    console.log(`llama-shaped synthetic model in node-llama-cpp: ${summary.join('; ')}`);
    expect(summary).toHaveLength(4);
  }, 120_000);
});

describe('the report of a mixture (--report)', () => {
  it('gives each tensor its type, bits per weight and error, worst first; the errors are the file’s', async () => {
    const folder = join(DIR, 'report');
    writeSynthetic('llama', folder);
    const out = join(DIR, 'report.gguf');
    const reportPath = join(DIR, 'report.json');
    const cli = quantd([
      'quantize',
      folder,
      '-o',
      out,
      '--layout',
      'gguf:ftype=Q4_K_M',
      '--report',
      reportPath,
    ]);
    expect(cli.code, cli.stderr).toBe(0);
    expect(cli.stderr).toMatch(/4\.83 bits per weight; worst blk\.\d+\.\w+\.weight \(Q4_K, SQNR [\d.]+ dB\)/);
    const report = JSON.parse(readFileSync(reportPath, 'utf8')) as LayoutReport;
    expect(report).toMatchObject({
      format: 'quantd.layout-report/1',
      layout: 'gguf',
      options: { ftype: 'Q4_K_M' },
    });
    const measured = report.tensors.filter((t) => t.quality !== undefined);
    expect(measured.map((t) => t.type).sort()).toEqual(
      Object.values(typesOf(load('llama').runs['Q4_K_M']!.tensors))
        .filter((t) => t !== 'F32')
        .sort(),
    );
    const sqnr = measured.map((t) => t.quality!.sqnr_db!);
    expect(sqnr).toEqual([...sqnr].sort((a, b) => a - b));
    // recompute one tensor's error from the files: the F32 conversion against the decoded output
    const worst = measured[0]!;
    const f32 = join(DIR, 'report-f32.gguf');
    await ggufLayout.write(folder, f32, { type: 'F32' });
    const [x, y] = await Promise.all([f32, out].map((p) => decodeTensor(p, worst.name)));
    let err = 0;
    let sig = 0;
    x!.forEach((v, i) => {
      err += (y![i]! - v) ** 2;
      sig += v * v;
    });
    expect(worst.quality!.elements).toBe(x!.length);
    expect(worst.quality!.rmse).toBeCloseTo(Math.sqrt(err / x!.length), 12);
    expect(worst.quality!.sqnr_db).toBeCloseTo(10 * Math.log10(sig / err), 9);
    expect(worst.bits_per_weight).toBe(4.5);
    expect(report.bits_per_weight).toBeCloseTo(4.8329, 4);
    // its error histogram: the same errors, at the sampled elements, binned
    const errors = Float64Array.from(sampleIndices(x!.length), (i) => y![i]! - x![i]!);
    expect(worst.error_histogram).toEqual(histogramOf(errors));
    expect(measured.every((t) => t.error_histogram!.samples === Math.min(4096, t.quality!.elements))).toBe(
      true,
    );
  }, 60_000);
});

/** A tensor of a GGUF file, decoded to float32. */
async function decodeTensor(path: string, name: string): Promise<Float32Array> {
  const reader = await GgufFileReader.open(path);
  try {
    const t = reader.header.tensors.find((i) => i.name === name)!;
    return ggmlDecode(t.type.name, await reader.read(t), t.numel);
  } finally {
    await reader.close();
  }
}
