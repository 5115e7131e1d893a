/**
 * Peak memory of a whole-model run (docs/models.md "Memory and concurrency"): whatever the model's
 * size, peak RSS stays under 3 × the largest tensor + 256 MiB. The model here is ~200 MiB, 24
 * bf16 weights of 8 MiB each plus norms, over 20 times its largest tensor; the real CLI runs it in
 * a child process (main() from dist, as bin/quantd.js does) that reports its own
 * process.resourceUsage().maxRSS — the peak, worker threads included — when it is done.
 */
import { spawn } from 'node:child_process';
import { closeSync, openSync, statSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';

import { REPO } from '../cli/run-cli.js';
import { readRaw, synthetic, tempRoot, type SynthTensor } from './helpers.js';

const tmp = tempRoot('quantd-memory-');
afterAll(() => tmp.cleanup());

const MiB = 2 ** 20;
const LAYERS = 12;
const WEIGHT: readonly number[] = [2048, 2048]; // bf16: 8 MiB

/**
 * The synthetic model's bytes for one weight and one norm, repeated under every layer's names
 * (generating each tensor anew would take most of the test's time).
 */
async function writeBigModel(
  path: string,
  shape: readonly number[] = WEIGHT,
  layers = LAYERS,
): Promise<{ largest: number; total: number }> {
  const synth = await synthetic();
  const weight = synth.tensorBytes('model.layers.0.mlp.up_proj.weight', 'BF16', shape);
  const norm = synth.tensorBytes('model.layers.0.input_layernorm.weight', 'F32', [shape[1]!]);
  const tensors: Array<[SynthTensor, Uint8Array]> = [];
  for (let i = 0; i < layers; i++) {
    tensors.push(
      [[`model.layers.${i}.input_layernorm.weight`, 'F32', [shape[1]!]], norm],
      [[`model.layers.${i}.self_attn.o_proj.weight`, 'BF16', [...shape]], weight],
      [[`model.layers.${i}.mlp.up_proj.weight`, 'BF16', [...shape]], weight],
    );
  }
  const header: Record<string, unknown> = { __metadata__: { format: 'pt' } };
  let offset = 0;
  for (const [[name, dtype, shape], data] of tensors) {
    header[name] = { dtype, shape, data_offsets: [offset, offset + data.length] };
    offset += data.length;
  }
  let json = JSON.stringify(header);
  json += ' '.repeat((8 - (json.length % 8)) % 8);
  const prefix = Buffer.alloc(8);
  prefix.writeBigUInt64LE(BigInt(json.length));
  const fd = openSync(path, 'w');
  try {
    writeSync(fd, prefix);
    writeSync(fd, json);
    for (const [, data] of tensors) writeSync(fd, data);
  } finally {
    closeSync(fd);
  }
  return { largest: weight.length, total: offset };
}

/** Runs `quantd ARGS` in a child and returns its exit code, stderr and peak RSS in KiB. */
function runMeasured(
  args: readonly string[],
): Promise<{ code: number | null; stderr: string; maxRssKiB: number }> {
  const main = pathToFileURL(join(REPO, 'dist', 'src', 'cli', 'main.js')).href;
  const script = `import(${JSON.stringify(main)}).then(async (m) => {
    const code = await m.main(${JSON.stringify(args)});
    process.stderr.write('maxrss ' + process.resourceUsage().maxRSS + '\\n');
    process.exit(code);
  })`;
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['--input-type=module', '-e', script], {
      cwd: tmp.dir,
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    let stderr = '';
    child.stderr.setEncoding('utf8').on('data', (c: string) => (stderr += c));
    child.on('error', reject);
    child.on('close', (code) => {
      const m = /^maxrss (\d+)$/m.exec(stderr);
      resolve({ code, stderr, maxRssKiB: m ? Number(m[1]) : NaN });
    });
  });
}

describe('peak RSS of a model run', () => {
  it('stays under 3 x the largest tensor + 256 MiB for a model many times that size', async () => {
    const model = join(tmp.dir, 'big.safetensors');
    const { largest, total } = await writeBigModel(model);
    expect(total).toBeGreaterThanOrEqual(4 * largest);
    expect(statSync(model).size).toBeGreaterThan(190 * MiB);
    const r = await runMeasured([
      'quantize',
      model,
      '-o',
      'big-int.safetensors',
      '--qdtype',
      'int8',
      '--scheme',
      'per_channel',
      '--rule',
      '*.mlp.*:qdtype=int4,scheme=per_group,group_size=128,mode=symmetric',
      '--no-progress',
    ]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr).toContain('24 tensors transformed, 12 passed through');
    const boundKiB = (3 * largest + 256 * MiB) / 1024;
    console.info(
      `memory.test: maxRSS ${(r.maxRssKiB / 1024).toFixed(1)} MiB, bound ${(boundKiB / 1024).toFixed(1)} MiB ` +
        `(largest tensor ${(largest / MiB).toFixed(1)} MiB, model ${(total / MiB).toFixed(1)} MiB)`,
    );
    expect(r.maxRssKiB).toBeGreaterThan(0);
    expect(r.maxRssKiB, 'peak RSS in KiB').toBeLessThan(boundKiB);
    const out = readRaw(join(tmp.dir, 'big-int.safetensors'));
    expect(out.tensors).toHaveLength(12 + 24 * 3);
  });

  it('many tensors in flight: stderr holds the summary line and nothing else (no listener-leak warning)', async () => {
    // Bug: every pooled kernel task adds an abort listener to the run's one AbortSignal; with
    // more than 10 tensors in flight (--concurrency > 10, or the default on a machine with more
    // than 10 cores) node prints "MaxListenersExceededWarning: Possible EventTarget memory leak
    // detected. 11 abort listeners added to [AbortSignal]" on stderr.
    const model = join(tmp.dir, 'mid.safetensors');
    await writeBigModel(model, [512, 512], 12);
    const r = await runMeasured([
      'quantize',
      model,
      '-o',
      'mid-int8.safetensors',
      '--qdtype',
      'int8',
      '--scheme',
      'per_channel',
      '--concurrency',
      '16',
      '--memory',
      '4G',
      '--no-progress',
    ]);
    expect(r.code, r.stderr).toBe(0);
    const lines = r.stderr.split('\n').filter((l) => l !== '' && !l.startsWith('maxrss '));
    expect(lines.join('\n')).not.toMatch(/Warning/);
    expect(lines).toHaveLength(1);
    // no recipe: every matrix is quantized; the 1-D norms pass through (README, 1-D tensors)
    expect(lines[0]).toMatch(/^quantize: 24 tensors transformed, 12 passed through;/);
  });
});
