/**
 * A shard index (model.safetensors.index.json) naming the tensors of files quantd wrote, for a
 * folder whose shards were rewritten with other tensor names (dequantized GPTQ groups become
 * `X.weight`).
 */
import { basename, join } from 'node:path';

import { writeFileAtomic } from '../../format/file-io.js';
import { SafetensorsFileReader } from '../../format/safetensors-file.js';

export async function writeShardIndex(dir: string, files: readonly string[]): Promise<string> {
  const weightMap: Record<string, string> = {};
  let totalSize = 0;
  for (const file of files) {
    const reader = await SafetensorsFileReader.open(file);
    try {
      totalSize += reader.header.dataLength;
      for (const e of reader.header.entries) weightMap[e.name] = basename(file);
    } finally {
      await reader.close();
    }
  }
  const path = join(dir, 'model.safetensors.index.json');
  await writeFileAtomic(
    path,
    `${JSON.stringify({ metadata: { total_size: totalSize }, weight_map: weightMap }, null, 2)}\n`,
  );
  return path;
}
