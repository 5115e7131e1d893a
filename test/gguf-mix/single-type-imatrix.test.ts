/**
 * An importance matrix with one type (`gguf:type=Q4_K,imatrix=…`, `--layout gguf:type=Q4_K
 * --imatrix FILE`): llama-quantize --pure --imatrix. The file must be the one
 * `ftype=Q4_K_S,pure=true,imatrix=…` writes — which mixtures.test.ts checks against llama.cpp —
 * byte for byte, for every type whose quantizer uses the matrix; a type the matrix would not
 * change (Q8_0, F16, F32) is refused, naming the types that take one.
 */
import { createHash } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { LLAMA_FILE_TYPES } from '../../src/core/interop/llama-mixtures.js';
import { GgufFileReader } from '../../src/format/gguf-file.js';
import { createCompute } from '../../src/pool/index.js';
import { ggufLayout } from '../../src/service/layouts/gguf.js';
import { SINGLE_TYPES_WITH_IMATRIX } from '../../src/service/layouts/gguf-imatrix.js';
import { LLAMA_FTYPE } from '../../src/service/layouts/gguf-types.js';
import { quantdAsync } from '../cli/cli-helpers.js';
import { writeSynthetic } from './synthetic.mjs';

const DIR = mkdtempSync(join(tmpdir(), 'quantd-single-imatrix-'));
const folder = join(DIR, 'llama');
const IMATRIX = fileURLToPath(new URL('./llama.imatrix.gguf', import.meta.url));
// the C kernels (what the CLI and jobs run), on a small pool; test/gguf-mix/mixtures.test.ts
// checks them against the TypeScript and llama.cpp
const handle = createCompute({ threads: 2 });
const hooks = { encoding: handle.encoding() };

beforeAll(() => writeSynthetic('llama', folder));
afterAll(async () => {
  await handle.close();
  rmSync(DIR, { recursive: true, force: true });
});

/** llama-quantize's file type whose --pure run gives every weight `type` (and `type`'s file_type). */
function pureFileType(type: string): string {
  const ft = [...LLAMA_FILE_TYPES.values()].find(
    (f) => f.defaultType === type && f.ftype === LLAMA_FTYPE[type as keyof typeof LLAMA_FTYPE],
  );
  if (ft === undefined) throw new Error(`no file type for ${type}`);
  return ft.name;
}

const sha = (path: string): string => createHash('sha256').update(readFileSync(path)).digest('hex');

async function tensorBytes(path: string): Promise<Map<string, string>> {
  const reader = await GgufFileReader.open(path);
  try {
    const out = new Map<string, string>();
    for (const t of reader.header.tensors) {
      out.set(
        t.name,
        createHash('sha256')
          .update(await reader.read(t))
          .digest('hex'),
      );
    }
    return out;
  } finally {
    await reader.close();
  }
}

describe('type=T with an importance matrix', () => {
  it('takes every type whose ggml quantizer uses the matrix (all but Q8_0)', () => {
    expect(SINGLE_TYPES_WITH_IMATRIX).toEqual([
      'Q4_0',
      'Q4_1',
      'Q5_0',
      'Q5_1',
      'Q2_K',
      'Q3_K',
      'Q4_K',
      'Q5_K',
      'Q6_K',
      'IQ4_NL',
      'IQ4_XS',
    ]);
  });

  it.each(SINGLE_TYPES_WITH_IMATRIX)(
    '%s: the file of ftype=…,pure=true with the matrix, byte for byte, and not the file without it',
    async (type) => {
      const single = join(DIR, `${type}-single.gguf`);
      const pure = join(DIR, `${type}-pure.gguf`);
      const plain = join(DIR, `${type}-plain.gguf`);
      const result = await ggufLayout.write(folder, single, { type, imatrix: IMATRIX }, hooks);
      await ggufLayout.write(
        folder,
        pure,
        { ftype: pureFileType(type), pure: 'true', imatrix: IMATRIX },
        hooks,
      );
      await ggufLayout.write(folder, plain, { type }, hooks);
      // the whole file: metadata (general.file_type, quantize.imatrix.*), tensor infos and data
      expect(sha(single)).toBe(sha(pure));
      // the matrix changed the weights it has entries for (every quantized one here)
      const withMatrix = await tensorBytes(single);
      const without = await tensorBytes(plain);
      const changed = [...withMatrix].filter(([name, digest]) => without.get(name) !== digest);
      expect(changed.length).toBeGreaterThan(50);
      expect(result.tensors.find((t) => t.name === 'blk.0.attn_q.weight')).toMatchObject({
        type,
        note: 'importance matrix',
      });
      const reader = await GgufFileReader.open(single);
      await reader.close();
      expect(reader.header.kvs.get('quantize.imatrix.file')?.value).toBe('llama.imatrix.gguf');
    },
    60_000,
  );

  it('through the CLI: --layout gguf:type=Q4_K --imatrix FILE writes the ftype=Q4_K_S,pure=true file', async () => {
    const out = join(DIR, 'cli-Q4_K.gguf');
    const cli = await quantdAsync([
      'quantize',
      folder,
      '-o',
      out,
      '--layout',
      'gguf:type=Q4_K',
      '--imatrix',
      IMATRIX,
      '--no-progress',
    ]);
    expect(cli.code, cli.stderr).toBe(0);
    const pure = join(DIR, 'Q4_K-pure-cli.gguf');
    await ggufLayout.write(folder, pure, { ftype: 'Q4_K_S', pure: 'true', imatrix: IMATRIX }, hooks);
    expect(sha(out)).toBe(sha(pure));
  }, 60_000);
});

describe('refusals', () => {
  it.each([
    [
      { type: 'Q8_0', imatrix: 'm.gguf' },
      /gguf:imatrix does not change Q8_0 \(ggml's Q8_0 quantizer ignores/,
    ],
    [{ imatrix: 'm.gguf' }, /gguf:imatrix does not change Q8_0/], // the default type
    [{ type: 'F16', imatrix: 'm.gguf' }, /gguf:imatrix does not change F16 \(not a quantized type\)/],
    [{ type: 'Q4_K', imatrix: ' ' }, /gguf:imatrix must name a file/],
  ])('%j is refused before anything is read: %s', (options, message) => {
    expect(() => ggufLayout.checkOptions(options)).toThrow(message);
    expect(() => ggufLayout.checkOptions(options)).toThrow(
      /Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS|must name a file/,
    );
  });

  it('a job checks the same at submission: type=Q4_K with a matrix is accepted', () => {
    expect(() => ggufLayout.checkOptions({ type: 'q4_k', imatrix: 'imatrix.gguf' })).not.toThrow();
  });

  it('the CLI refuses --imatrix without a type or file type, and with Q8_0, as usage or option errors', async () => {
    const out = join(DIR, 'refused.gguf');
    const bare = await quantdAsync(['quantize', folder, '-o', out, '--layout', 'gguf', '--imatrix', IMATRIX]);
    expect(bare.code).toBe(2);
    expect(bare.stderr).toMatch(
      /^error USAGE: --imatrix applies to a GGUF type or a llama-quantize file type/,
    );
    const q8 = await quantdAsync([
      'quantize',
      folder,
      '-o',
      out,
      '--layout',
      'gguf:type=Q8_0',
      '--imatrix',
      IMATRIX,
    ]);
    expect(q8.code).toBe(2);
    expect(q8.stderr).toMatch(/^error OPTION_INVALID: .*imatrix does not change Q8_0/);
  });
});
