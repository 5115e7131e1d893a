#!/usr/bin/env node
// Builds the native addon (node-gyp) during `npm ci` / `npm install`. A machine without a C
// compiler still installs: the failure is recorded in build/native-build.log, the loader then
// says in one line why native is unavailable and falls back to WebAssembly.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, realpathSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';

const root = join(dirname(new URL(import.meta.url).pathname), '..');
const logPath = join(root, 'build', 'native-build.log');

if (process.env.QUANTD_SKIP_NATIVE === '1') {
  console.log('quantd: QUANTD_SKIP_NATIVE=1, not building the native addon');
  process.exit(0);
}

/** node-gyp as npm runs it: npm names it in npm_config_node_gyp; otherwise next to npm itself. */
function findNodeGyp() {
  if (process.env.npm_config_node_gyp && existsSync(process.env.npm_config_node_gyp)) {
    return process.env.npm_config_node_gyp;
  }
  const candidates = [];
  if (process.env.npm_execpath) candidates.push(dirname(dirname(process.env.npm_execpath)));
  for (const dir of (process.env.PATH ?? '').split(':')) {
    const npm = join(dir, 'npm');
    if (existsSync(npm)) candidates.push(dirname(dirname(realpathSync(npm))));
  }
  for (const npmRoot of candidates) {
    const gyp = join(npmRoot, 'node_modules', 'node-gyp', 'bin', 'node-gyp.js');
    if (existsSync(gyp)) return gyp;
  }
  return null;
}

const nodeGyp = findNodeGyp();
/** Node's own headers (as npm is configured here with nodedir): node-gyp must not download them. */
function nodeDir() {
  if (process.env.npm_config_nodedir) return process.env.npm_config_nodedir;
  const prefix = dirname(dirname(process.execPath));
  return existsSync(join(prefix, 'include', 'node', 'node_api.h')) ? prefix : null;
}

const dir = nodeDir();
const args = nodeGyp ? [nodeGyp, 'rebuild', ...(dir ? [`--nodedir=${dir}`] : [])] : null;
const result = args
  ? spawnSync(process.execPath, args, { cwd: root, encoding: 'utf8' })
  : { status: 1, stdout: '', stderr: 'node-gyp not found next to npm' };
mkdirSync(join(root, 'build'), { recursive: true });
writeFileSync(logPath, `${result.stdout ?? ''}\n${result.stderr ?? ''}\n`);
if (result.status === 0) {
  console.log('quantd: native addon built (build/Release/quantd.node)');
} else {
  const lines = `${result.stdout ?? ''}\n${result.stderr ?? ''}`.split('\n');
  const reason =
    lines.find((l) => /error:/i.test(l) && !/gyp ERR! (not ok|stack at)/.test(l))?.trim() ??
    lines.filter((l) => l.trim()).pop() ??
    'unknown error';
  console.warn(`quantd: native addon not built (${reason}); WebAssembly will be used. Log: ${logPath}`);
}
