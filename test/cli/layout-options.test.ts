/**
 * A layout's options are written `--layout NAME:key=value`, so an error names them that way
 * (`gguf:type`), never as a flag the command line does not have (`--type`); the exit code is 2.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';

import { writeLlama } from '../interop/gptq-awq-bnb.helpers.js';
import { quantdAsync } from './cli-helpers.js';

const dir = mkdtempSync(join(tmpdir(), 'quantd-cli-layout-options-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('layout option errors', () => {
  it.each([
    ['gguf:type=Q9_K', 'option gguf:type must be one of Q8_0'],
    ['gptq:bits=5', 'option gptq:bits must be 2, 4 or 8'],
    ['onnx:block_size=48', 'option onnx:block_size must be one of 16, 32, 64, 128, 256'],
    ['awq:zero_point=true', 'option awq:zero_point is not an option of the awq layout'],
  ])('--layout %s says %j', async (layout, says) => {
    const input = join(dir, 'm.safetensors');
    await writeLlama(input, 1, 64);
    const r = await quantdAsync(['quantize', input, '-o', join(dir, 'out'), '--layout', layout]);
    expect(r.code, r.stderr).toBe(2);
    expect(r.stderr).toContain(`error OPTION_INVALID: ${says}`);
    expect(r.stderr).not.toMatch(/option --/);
  });
});
