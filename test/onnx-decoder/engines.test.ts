/**
 * The engines' refusals: a missing engine is ENGINE_UNAVAILABLE naming how to install it (the
 * test hook hides an installed one), a model the engine refuses is MODEL_UNRUNNABLE, and a text
 * shorter than one window is TEXT_INVALID, each before any work.
 */
import { afterEach, describe, expect, it } from 'vitest';

import { isQuantdError } from '../../src/errors/index.js';
import { DecoderSession } from '../../src/service/engines/onnxruntime.js';
import { GgufSession } from '../../src/service/engines/llama-cpp.js';
import { windowsOf } from '../../src/service/eval/text.js';
import { HAVE_ONNXRUNTIME } from '../setup/engines.js';

async function code(p: Promise<unknown>): Promise<string> {
  try {
    await p;
  } catch (err) {
    if (isQuantdError(err)) return `${err.code}: ${err.message}`;
    throw err;
  }
  return 'no error';
}

describe('engine refusals', () => {
  afterEach(() => {
    delete process.env['QUANTD_TEST_NO_ENGINES'];
    delete process.env['QUANTD_TEST_HOOKS'];
  });

  it('ENGINE_UNAVAILABLE when ONNX Runtime or llama.cpp cannot be loaded, with the remedy', async () => {
    process.env['QUANTD_TEST_HOOKS'] = '1';
    process.env['QUANTD_TEST_NO_ENGINES'] = '1';
    const ort = await code(DecoderSession.open(new Uint8Array(8), 'evaluate a model'));
    expect(ort).toMatch(
      /^ENGINE_UNAVAILABLE: ONNX Runtime \(onnxruntime-node\) is needed to evaluate a model/,
    );
    expect(ort).toContain('npm install onnxruntime-node');
    const llama = await code(GgufSession.open('/nonexistent.gguf', 'evaluate a model', 64, 10));
    expect(llama.split(':')[0]).toBe('ENGINE_UNAVAILABLE');
    expect(llama).toMatch(/: llama\.cpp \(node-llama-cpp\)/);
    expect(llama).toContain('npm install node-llama-cpp');
  });

  it.skipIf(!HAVE_ONNXRUNTIME)('MODEL_UNRUNNABLE for bytes ONNX Runtime refuses', async () => {
    const refused = await code(DecoderSession.open(new Uint8Array([1, 2, 3, 4]), 'evaluate a model'));
    expect(refused.split(':')[0]).toBe('MODEL_UNRUNNABLE');
    expect(refused).toContain('ONNX Runtime refused the model');
  });

  it('TEXT_INVALID for a text shorter than one window', () => {
    const tokenizer = { encode: () => Int32Array.of(1, 5, 6, 7), bosId: 1, addsBos: true };
    expect(() => windowsOf('tiny', 'short.txt', tokenizer, 8)).toThrow(
      expect.objectContaining({ code: 'TEXT_INVALID' }),
    );
    expect(windowsOf('tiny', 'short.txt', tokenizer, 2).windows.map((w) => [...w])).toEqual([
      [1, 5],
      [1, 7],
    ]);
  });
});
