/**
 * The wrong kind of file given where safetensors is expected: the CLI says what the file is
 * (FILE_NOT_SAFETENSORS, exit 2, one line), not that its first bytes make an absurd header length
 * (SAFETENSORS_HEADER_TOO_LARGE, as it did: "header of 7935470578271546729 bytes"). `inspect`
 * reads GGUF and ONNX files themselves (test/cli/inspect.test.ts).
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, it } from 'vitest';

import { failsWith, scratch } from './cli-helpers.js';
import { tempDir } from './run-cli.js';

const tmp = tempDir();
afterAll(() => tmp.cleanup());

const gguf = new Uint8Array(4096);
gguf.set([0x47, 0x47, 0x55, 0x46, 3]); // "GGUF", version 3
const index =
  '{\n  "metadata": {"total_size": 8},\n  "weight_map": {"w": "model-00001-of-00001.safetensors"}\n}\n';

describe.concurrent('a file that is not safetensors is named for what it is', () => {
  it.each([
    ['quantize', 'model.gguf', gguf, 'model.gguf is not a safetensors file: it is a GGUF file (llama.cpp)'],
    [
      'inspect',
      'model.safetensors.index.json',
      index,
      'it is JSON text, such as a shard index (model.safetensors.index.json); give the model as its folder',
    ],
    [
      'quantize',
      'weights.safetensors',
      'PK\x03\x04 data.pkl',
      'it is a zip archive, as PyTorch saves checkpoints',
    ],
    [
      'fake-quantize',
      'notes.safetensors',
      'These are my notes, not a model.\n',
      'notes.safetensors is not a safetensors file: its first 8 bytes, read as the header length, say',
    ],
  ])('%s %s', async (op, name, content, says) => {
    const dir = scratch(tmp.dir);
    writeFileSync(join(dir, name), content);
    const args = op === 'inspect' ? [op, name] : [op, name, '-o', 'out.safetensors'];
    await failsWith(dir, args, 'FILE_NOT_SAFETENSORS', [says]);
  });
});
