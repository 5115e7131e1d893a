/** The package's own facts (its version), read where any layer can: node built-ins only. */
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
