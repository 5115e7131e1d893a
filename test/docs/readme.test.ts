/**
 * The README's commands run as written. A fenced block preceded by `<!-- test: run -->` runs
 * (```sh with bash, ```js as an ES module with node) and must exit 0; one preceded by
 * `<!-- test: file NAME -->` is written to NAME first (the recipe the CLI example reads).
 *
 * Every block runs in one temporary directory, in README order, against a real server built
 * from this checkout (dist/, compiled by the test setup) on ephemeral ports. What the README
 * takes for granted, the test provides, and nothing more:
 * - the inputs the examples name: x.safetensors, x.f32 (24 bytes), a llama-like model.safetensors
 *   (scripts/synthetic-model.js), model/ (a sharded one), models/llama under the data directory, and
 *   `$ID`, a job submitted and finished before the blocks run;
 * - `localhost:8080` / `localhost:50051` read as the server's ports (QUANTD_GRPC_PORT and
 *   QUANTD_URL set, as a user of another port sets them), `npx quantd` as this checkout's
 *   bin/quantd.js (never a download), and `curl` with --fail-with-body, so that an HTTP error
 *   fails its block instead of passing silently;
 * - proto/, examples/ and node_modules/ beside the blocks, as in a checkout.
 *
 * Blocks left unmarked, on purpose: `npm ci` / `npm start` / `npm test` (the install, a server
 * that never exits, the whole suite), grpcurl (not installed, and it would be a download), the
 * Hugging Face folder conversion (needs a tokenizer and config), Docker (no engine here), the
 * benchmarks. A block that needs a tool that is missing (curl; /usr/bin/python3 with torch, numpy
 * and requests) is skipped with the reason printed, or fails when CI is set.
 */
import { execFile, execFileSync, spawnSync } from 'node:child_process';
import {
  copyFileSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { serializeSafetensors } from '../../src/format/index.js';
import { REPO } from '../cli/run-cli.js';
import { send, startTestServer, type TestServer } from '../http/helpers.js';
import { f32Tensor, finished, json, waitJob, type Job } from '../jobs/helpers.js';

const run = promisify(execFile);

interface Block {
  /** 1-based line of the opening fence. */
  readonly line: number;
  readonly lang: string;
  readonly marker: 'run' | { file: string };
  readonly text: string;
}

/** The marked blocks of a Markdown text, in order; a marker not followed by a fence is an error. */
function markedBlocks(markdown: string): Block[] {
  const lines = markdown.split('\n');
  const blocks: Block[] = [];
  for (let i = 0; i < lines.length; i++) {
    const marker = /^<!-- test: (run|file (\S+)) -->$/.exec(lines[i]!);
    if (!marker) continue;
    const fence = /^```(\w+)$/.exec(lines[i + 1] ?? '');
    if (!fence) throw new Error(`README.md:${i + 1}: a test marker must be followed by a fenced block`);
    const end = lines.indexOf('```', i + 2);
    if (end < 0) throw new Error(`README.md:${i + 2}: the block never closes`);
    blocks.push({
      line: i + 2,
      lang: fence[1]!,
      marker: marker[2] === undefined ? 'run' : { file: marker[2] },
      text: lines.slice(i + 2, end).join('\n') + '\n',
    });
  }
  return blocks;
}

const blocks = markedBlocks(readFileSync(join(REPO, 'README.md'), 'utf8'));
const runnable = blocks.filter((b) => b.marker === 'run');

/** Why a block cannot run on this machine, or null. */
function missingTool(text: string): string | null {
  if (/\bcurl\b/.test(text) && spawnSync('curl', ['--version']).status !== 0) return 'curl is not installed';
  if (text.includes('/usr/bin/python3')) {
    const probe = spawnSync('/usr/bin/python3', ['-c', 'import torch, numpy, requests']);
    if (probe.status !== 0)
      return '/usr/bin/python3 lacks torch, numpy or requests (apt-get install python3-torch python3-numpy python3-requests)';
  }
  return null;
}

const PRELUDE = `set -euo pipefail
npx() {
  if [ "$1" != quantd ]; then echo "npx $1: only npx quantd runs in this test" >&2; return 127; fi
  shift; node "$QUANTD_REPO/bin/quantd.js" "$@"
}
curl() { command curl --fail-with-body "$@"; }
`;

describe('the README', () => {
  it('marks its runnable blocks, and each marker stands before a block', () => {
    expect(runnable.length).toBeGreaterThanOrEqual(7);
    for (const b of runnable) expect(['sh', 'bash', 'js'], `README.md:${b.line}`).toContain(b.lang);
  });
});

describe('the README commands', () => {
  let dir: string;
  let server: TestServer;
  let env: NodeJS.ProcessEnv;
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'quantd-readme-'));
    const data = join(dir, 'data');
    server = await startTestServer({ QUANTD_DATA_DIR: data });
    for (const name of ['proto', 'examples', 'node_modules']) symlinkSync(join(REPO, name), join(dir, name));
    for (const b of blocks) if (b.marker !== 'run') writeFileSync(join(dir, b.marker.file), b.text);

    const tensors = [f32Tensor('layer.weight', [4, 256], 1), f32Tensor('layer.norm.weight', [256], 2)];
    writeFileSync(join(dir, 'x.safetensors'), serializeSafetensors(tensors, null));
    writeFileSync(join(dir, 'x.f32'), new Uint8Array(new Float32Array([0.5, -1.25, 2, 3, 0, -0.75]).buffer));
    const model = join(dir, 'model.safetensors');
    execFileSync(process.execPath, [
      join(REPO, 'scripts/synthetic-model.js'),
      model,
      '--layers',
      '1',
      '--hidden',
      '256',
    ]);
    // model/: a sharded checkpoint (the directory example writes a directory of shards)
    const shards = ['--layers', '2', '--hidden', '256', '--shards', '2'];
    execFileSync(process.execPath, [join(REPO, 'scripts/synthetic-model.js'), join(dir, 'model'), ...shards]);
    mkdirSync(join(data, 'models', 'llama'), { recursive: true });
    copyFileSync(model, join(data, 'models', 'llama', 'model.safetensors'));

    const submitted = await send(server.port, '/v1/jobs?qdtype=int8', {
      headers: { 'content-type': 'application/x-safetensors' },
      body: readFileSync(model),
    });
    expect(submitted.status, submitted.body.toString()).toBe(202);
    const job = await waitJob(server.port, json<Job>(submitted).id, finished);
    expect(job.state).toBe('succeeded');
    env = {
      ...process.env,
      QUANTD_REPO: REPO,
      QUANTD_URL: `http://localhost:${server.port}`,
      QUANTD_GRPC_PORT: String(server.server.grpcPort),
      ID: job.id,
    };
  });
  afterAll(async () => {
    await server?.server.shutdown('test done');
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  /** The block as it runs here: the default ports read as the server's. */
  const localize = (text: string): string =>
    text
      .replaceAll('localhost:8080', `localhost:${server.port}`)
      .replaceAll('localhost:50051', `localhost:${server.server.grpcPort}`);

  it.for(runnable.map((b) => [`README.md:${b.line} ${b.text.split('\n')[0]!.slice(0, 60)}`, b] as const))(
    '%s',
    { timeout: 180_000 },
    async ([, block], ctx) => {
      const missing = missingTool(block.text);
      if (missing !== null) {
        expect(process.env['CI'], `README.md:${block.line}: ${missing}`).toBeUndefined();
        console.warn(`README.md:${block.line} not run: ${missing}`);
        ctx.skip();
      }
      const file = join(dir, `block-${block.line}.${block.lang === 'js' ? 'mjs' : 'sh'}`);
      writeFileSync(file, block.lang === 'js' ? localize(block.text) : PRELUDE + localize(block.text));
      const command = block.lang === 'js' ? process.execPath : 'bash';
      const failure = await run(command, [file], { cwd: dir, env, timeout: 120_000 }).then(
        () => null,
        (err: { code: number; stdout: string; stderr: string }) => err,
      );
      const report = failure && `exit ${failure.code}\n${failure.stdout}\n${failure.stderr}`;
      expect(report, `README.md:${block.line}`).toBeNull();
    },
  );
});
