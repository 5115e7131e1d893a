/**
 * Which config.json classes convert, and how: Mistral is llama to llama.cpp (the same bytes as
 * the llama checkpoint it matches), and an unsupported class is refused by name with the list.
 */
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';

import { QuantdError } from '../../src/errors/index.js';
import { ggufLayout } from '../../src/service/layouts/gguf.js';
import { fixtureDir } from './llama-cpp.js';

const DIR = mkdtempSync(join(tmpdir(), 'quantd-gguf-hf-arch-'));
afterAll(() => rmSync(DIR, { recursive: true, force: true }));

function withClass(fixture: string, architecture: string): string {
  const dir = join(DIR, `${fixture}-${architecture}`);
  cpSync(fixtureDir(fixture), dir, { recursive: true });
  const path = join(dir, 'config.json');
  const config = JSON.parse(readFileSync(path, 'utf8')) as Record<string, unknown>;
  writeFileSync(path, JSON.stringify({ ...config, architectures: [architecture] }));
  return dir;
}

describe('HF folder → GGUF: architectures', () => {
  it('MistralForCausalLM converts as llama, byte for byte', async () => {
    const llama = join(DIR, 'llama.gguf');
    const mistral = join(DIR, 'mistral.gguf');
    await ggufLayout.write(fixtureDir('llama-spm'), llama, { type: 'Q8_0', name: 'm' });
    await ggufLayout.write(withClass('llama-spm', 'MistralForCausalLM'), mistral, {
      type: 'Q8_0',
      name: 'm',
    });
    expect(readFileSync(mistral).equals(readFileSync(llama))).toBe(true);
  });

  it('an unsupported class names itself and every supported one', async () => {
    const err = await ggufLayout
      .write(withClass('llama-spm', 'GPTNeoXForCausalLM'), join(DIR, 'neox.gguf'), {})
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(QuantdError);
    expect((err as QuantdError).code).toBe('FEATURE_UNSUPPORTED');
    expect((err as QuantdError).message).toContain(
      'architecture GPTNeoXForCausalLM cannot be converted to GGUF; supported: LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, Phi3ForCausalLM, Gemma2ForCausalLM',
    );
  });
});
