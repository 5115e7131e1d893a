/** The package's own facts (its root, its version), for any layer: node built-ins only. */
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

/**
 * The version in quantd's package.json, found by walking up from this module's directory: the
 * module runs from dist/src/ (built) or src/ (the sources, under vitest or tsx),
 * and as an installed dependency from node_modules/quantd/…. The first package.json with a
 * version is the package's own (a nested one that only sets "type" has none).
 */
export function packageVersion(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (;;) {
    let text: string | undefined;
    try {
      text = readFileSync(join(dir, 'package.json'), 'utf8');
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
    }
    if (text !== undefined) {
      const version = (JSON.parse(text) as { version?: unknown }).version;
      if (typeof version === 'string') return version;
    }
    const parent = dirname(dir);
    if (parent === dir)
      throw new Error(`no package.json with a version above ${fileURLToPath(import.meta.url)}`);
    dir = parent;
  }
}

/**
 * The package's root directory (with a trailing /): this module runs from dist/src/ (built) or
 * src/ (the sources, under vitest), both one level below the root; dist/workers, build/Release
 * and native/wasm are found from there.
 */
export function packageRoot(): string {
  const here = new URL('.', import.meta.url).pathname;
  const marker = here.includes('/dist/src/') ? '/dist/src/' : '/src/';
  return here.slice(0, here.lastIndexOf(marker) + 1);
}
