/**
 * `NAME[:key=value,...]`: how the command line (`quantize --layout`) and the jobs API (`layout=`)
 * name an interop layout and its options, and the check of those options that needs no model —
 * the same parsers each layout's write() starts with, so that a bad option is refused when a job
 * is submitted rather than when it runs.
 */
import { QuantdError } from '../../errors/index.js';
import { LAYOUTS } from './index.js';
import type { InteropLayout, LayoutOptions } from './types.js';

/** The layout `text` names ("gguf:type=Q4_K" → gguf), or undefined for a name there is none of. */
export function layoutNamed(text: string): InteropLayout | undefined {
  const at = text.indexOf(':');
  return LAYOUTS.get((at < 0 ? text : text.slice(0, at)).trim());
}

/** "gguf:type=Q4_K,arch=llama" → the layout and its options (names and syntax checked, not values). */
export function parseLayout(text: string): { layout: InteropLayout; options: LayoutOptions } {
  const at = text.indexOf(':');
  const layout = layoutNamed(text);
  if (!layout) {
    throw new QuantdError('OPTION_INVALID', {
      option: 'layout',
      detail: `must be one of ${[...LAYOUTS.keys()].join(', ')}`,
      value: text,
    });
  }
  const options: Record<string, string> = {};
  for (const pair of at < 0 ? [] : text.slice(at + 1).split(',')) {
    const eq = pair.indexOf('=');
    if (eq <= 0) {
      throw new QuantdError('OPTION_INVALID', {
        option: 'layout',
        detail: `takes options as NAME:key=value,key=value (${layout.name}'s options: ${Object.keys(layout.options).join(', ')})`,
        value: text,
      });
    }
    options[pair.slice(0, eq).trim()] = pair.slice(eq + 1).trim();
  }
  return { layout, options };
}

/**
 * Refuses what the layout's write() would refuse about its options alone (unknown options, bad
 * values): OPTION_INVALID / FEATURE_UNSUPPORTED. What depends on the model (no linear weight, a
 * shape the format cannot hold) is only known when it runs.
 */
export function checkLayoutOptions(layout: InteropLayout, options: LayoutOptions): void {
  layout.checkOptions(options);
}

/** parseLayout, then checkLayoutOptions. */
export function parseLayoutChecked(text: string): { layout: InteropLayout; options: LayoutOptions } {
  const parsed = parseLayout(text);
  checkLayoutOptions(parsed.layout, parsed.options);
  return parsed;
}

/** The file name extension of a layout's model file: .gguf, .onnx, or .safetensors. */
export function layoutExtension(layout: InteropLayout): string {
  return layout.extension;
}
