/** The interop layouts by name (see ./types.ts): adding a layout is its module plus one line here. */
import { awqLayout } from './awq.js';
import { fp4Layout, nf4Layout } from './bnb.js';
import { compressedTensorsLayout } from './compressed-tensors.js';
import { ggufLayout } from './gguf.js';
import { gptqLayout } from './gptq.js';
import { onnxLayout } from './onnx.js';
import type { InteropLayout } from './types.js';

export type { InteropLayout, LayoutOptions, LayoutWriteResult } from './types.js';

export const LAYOUTS: ReadonlyMap<string, InteropLayout> = new Map<string, InteropLayout>([
  ['gptq', gptqLayout],
  ['awq', awqLayout],
  ['nf4', nf4Layout],
  ['fp4', fp4Layout],
  ['gguf', ggufLayout],
  ['onnx', onnxLayout],
  ['compressed-tensors', compressedTensorsLayout],
]);
