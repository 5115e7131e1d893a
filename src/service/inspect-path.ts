/**
 * `quantd inspect PATH`: which summary a path gets. A file is recognized as the layouts recognize
 * their files for dequantize (detectLayout: GGUF by its magic, ONNX by its extension and first
 * bytes, GPTQ / AWQ / bitsandbytes by their tensors' names); anything else is read as a
 * safetensors file (a quantd.qtensor/1 container or a plain one), which refuses what is not one.
 * A folder is a model folder, or — when it holds no safetensors weights — the folder of one ONNX
 * model (an onnx layout's decoder, beside its genai_config.json) or one GGUF file.
 */
import { readdir, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { QuantdError } from '../errors/index.js';
import { SafetensorsFileReader } from '../format/index.js';
import { summarizeFile, type FileSummary } from './inspect.js';
import { summarizeFolder, type FolderSummary } from './inspect-folder.js';
import { summarizeGguf, type GgufSummary } from './inspect-gguf.js';
import { summarizeLayoutFile, type LayoutFileSummary } from './inspect-layout.js';
import { summarizeOnnx, type OnnxSummary } from './inspect-onnx.js';
import { detectLayout } from './layouts/detect.js';
import { isDirectory } from './model-folder.js';
import { INDEX_SUFFIX } from './shards.js';

export type Inspection =
  | { readonly kind: 'safetensors'; readonly summary: FileSummary }
  | { readonly kind: 'layout'; readonly summary: LayoutFileSummary }
  | { readonly kind: 'gguf'; readonly summary: GgufSummary }
  | { readonly kind: 'onnx'; readonly summary: OnnxSummary }
  | { readonly kind: 'folder'; readonly summary: FolderSummary };

/** The one ONNX or GGUF model file of a folder without safetensors weights, or null. */
async function singleModelFile(folder: string): Promise<string | null> {
  let names: string[];
  try {
    names = await readdir(folder);
  } catch {
    return null; // summarizeFolder reports an unreadable folder
  }
  if (names.some((n) => n.endsWith('.safetensors') || n.endsWith(INDEX_SUFFIX))) return null;
  for (const ext of ['.onnx', '.gguf']) {
    const found = names.filter((n) => n.toLowerCase().endsWith(ext));
    if (found.length === 1) return join(folder, found[0]!);
  }
  return null;
}

/**
 * The summary of the file or folder at `path`. `verify`: check the data SHA-256 a safetensors
 * file records (CHECKSUM_MISSING for a GGUF or ONNX file, which record none).
 */
export async function inspectPath(path: string, verify = false): Promise<Inspection> {
  if (await isDirectory(path)) {
    const model = await singleModelFile(path);
    if (model === null) return { kind: 'folder', summary: await summarizeFolder(path, verify) };
    return inspectPath(model, verify);
  }
  const layout = await detectLayout(path);
  if (layout?.name === 'gguf' || layout?.name === 'onnx') {
    if (verify) throw new QuantdError('CHECKSUM_MISSING', { path });
    return layout.name === 'gguf'
      ? { kind: 'gguf', summary: await summarizeGguf(path) }
      : { kind: 'onnx', summary: await summarizeOnnx(path) };
  }
  if (layout?.quantizedWeights) {
    return { kind: 'layout', summary: await summarizeLayoutFile(path, layout, verify) };
  }
  const reader = await SafetensorsFileReader.open(path);
  try {
    let verified = false;
    if (verify) {
      const check = await reader.verifyChecksum();
      if (check === null) throw new QuantdError('CHECKSUM_MISSING', { path });
      if (!check.ok) throw new QuantdError('CHECKSUM_MISMATCH', { path, ...check });
      verified = true;
    }
    const summary = summarizeFile(reader.header, path, (await stat(path)).size, verified);
    return { kind: 'safetensors', summary };
  } finally {
    await reader.close();
  }
}
