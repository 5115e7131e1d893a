/**
 * quantd's import rules, as ESLint rules (eslint.config.js applies them to src/ and workers/):
 *
 * - `quantd/layers`: a module imports only from layers below its own. The layers, lowest first:
 *   errors and the package facts; config; core; kernels and format; service; pool, jobs and oip;
 *   http and grpc; server; cli. workers/ sits at the service's level. Modules of one layer in
 *   different directories (http and grpc, kernels and format) do not import each other either:
 *   what two of them share belongs below both.
 * - `quantd/no-cycle`: no module imports one that imports it back, however long the loop.
 *
 * The import graph is read from the sources once per lint run (relative `import` / `export …
 * from` / `import()` specifiers, `./x.js` standing for `./x.ts`), so the rules need no resolver
 * plugin and cost a few milliseconds.
 */
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';

const ROOT = resolve(dirname(new URL(import.meta.url).pathname), '..');

/** Directory (or file) under the root → its rank; lower ranks are lower layers. */
const LAYERS = [
  ['src/errors', 0],
  ['src/package-info.ts', 0],
  ['src/config.ts', 1],
  ['src/core', 2],
  ['src/kernels', 3],
  ['src/format', 3],
  ['src/service', 4],
  ['workers', 4],
  ['src/pool', 5],
  ['src/jobs', 5],
  ['src/oip', 5],
  ['src/http', 6],
  ['src/grpc', 6],
  ['src/server', 7],
  ['src/cli', 8],
];

/** The layer of a file: [name, rank], or null outside every layer. */
function layerOf(file) {
  const path = relative(ROOT, file);
  for (const [name, rank] of LAYERS) {
    if (path === name || path.startsWith(`${name}/`)) return [name, rank];
  }
  return null;
}

/** The .ts file a relative specifier names, or null for a package or a missing file. */
function resolveSpecifier(from, specifier) {
  if (!specifier.startsWith('.')) return null;
  const target = resolve(dirname(from), specifier);
  for (const candidate of [target.replace(/\.js$/, '.ts'), target, join(target, 'index.ts')]) {
    if (existsSync(candidate) && statSync(candidate).isFile()) return candidate;
  }
  return null;
}

const SPECIFIER =
  /(?:^|[\s;])(?:import|export)\s[^'"`;]*?from\s*['"]([^'"]+)['"]|import\(\s*['"]([^'"]+)['"]\s*\)/g;

function sourceFiles(dir) {
  const out = [];
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) out.push(...sourceFiles(path));
    else if (entry.name.endsWith('.ts') && !entry.name.endsWith('.d.ts')) out.push(path);
  }
  return out;
}

/** Every file's position in a strongly connected component of more than one file (a cycle). */
function cyclesOf(graph) {
  const index = new Map();
  const low = new Map();
  const stack = [];
  const onStack = new Set();
  const component = new Map();
  let next = 0;
  const visit = (v) => {
    index.set(v, next);
    low.set(v, next++);
    stack.push(v);
    onStack.add(v);
    for (const w of graph.get(v) ?? []) {
      if (!graph.has(w)) continue;
      if (!index.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v), low.get(w)));
      } else if (onStack.has(w)) {
        low.set(v, Math.min(low.get(v), index.get(w)));
      }
    }
    if (low.get(v) === index.get(v)) {
      const members = [];
      let w;
      do {
        w = stack.pop();
        onStack.delete(w);
        members.push(w);
      } while (w !== v);
      if (members.length > 1) for (const m of members) component.set(m, members);
    }
  };
  for (const v of graph.keys()) if (!index.has(v)) visit(v);
  return component;
}

let cached = null;
/** The import graph of src/ and workers/ and its cycles, read once per process. */
function analysis() {
  if (cached) return cached;
  const graph = new Map();
  for (const file of ['src', 'workers'].flatMap((d) => sourceFiles(join(ROOT, d)))) {
    const text = readFileSync(file, 'utf8');
    const targets = new Set();
    for (const m of text.matchAll(SPECIFIER)) {
      const target = resolveSpecifier(file, m[1] ?? m[2]);
      if (target) targets.add(target);
    }
    graph.set(file, targets);
  }
  cached = { cycles: cyclesOf(graph) };
  return cached;
}

/** Calls `check(node, specifier)` for every import, re-export and dynamic import of a file. */
function onImports(check) {
  return {
    ImportDeclaration: (node) => check(node, node.source.value),
    ExportNamedDeclaration: (node) => node.source && check(node, node.source.value),
    ExportAllDeclaration: (node) => check(node, node.source.value),
    ImportExpression: (node) => node.source.type === 'Literal' && check(node, node.source.value),
  };
}

const layers = {
  meta: {
    type: 'problem',
    docs: { description: 'imports go down the layers only (docs/architecture.md)' },
    schema: [],
  },
  create(context) {
    const file = context.filename;
    const own = layerOf(file);
    if (!own) return {};
    return onImports((node, specifier) => {
      const target = resolveSpecifier(file, specifier);
      const theirs = target && layerOf(target);
      if (!theirs || theirs[0] === own[0]) return;
      if (theirs[1] > own[1]) {
        context.report({
          node,
          message: `${own[0]} must not import ${relative(ROOT, target)}: ${theirs[0]} is a higher layer (docs/architecture.md)`,
        });
      } else if (theirs[1] === own[1]) {
        context.report({
          node,
          message: `${own[0]} must not import ${relative(ROOT, target)}: ${theirs[0]} is a sibling layer; move what both need below them`,
        });
      }
    });
  },
};

const noCycle = {
  meta: {
    type: 'problem',
    docs: { description: 'no import cycles among the sources' },
    schema: [],
  },
  create(context) {
    const file = context.filename;
    const loop = analysis().cycles.get(file);
    if (!loop) return {};
    return onImports((node, specifier) => {
      const target = resolveSpecifier(file, specifier);
      if (target && loop.includes(target)) {
        context.report({
          node,
          message: `import cycle: ${relative(ROOT, file)} imports ${relative(ROOT, target)}, which imports it back (the loop runs through ${loop.length} modules: ${loop
            .slice(0, 6)
            .map((f) => relative(ROOT, f))
            .join(', ')}${loop.length > 6 ? ', …' : ''})`,
        });
      }
    });
  },
};

export default { rules: { layers, 'no-cycle': noCycle } };
