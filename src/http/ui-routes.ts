/**
 * The web console at /ui (docs/ui.md): the static page Vite builds from ui/ into dist/ui at
 * install time (`npm run build:ui`), served from memory — a few hundred KiB, read once at start.
 * The page holds no data: everything it shows comes from the /v1 API, with the API key the user
 * enters (auth on), so the shell itself is served without one, like /docs.
 *
 * Hashed assets (dist/ui/assets/*) are cached for good; index.html is revalidated every time so
 * that a new version is picked up. A strict Content-Security-Policy of its own, in place of the
 * API's (security-headers.ts, whose other headers every answer carries): the page loads nothing
 * from elsewhere (it works without internet) and runs no inline script.
 */
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { extname, join, relative } from 'node:path';
import type { FastifyInstance } from 'fastify';
import { QuantdError } from '../errors/index.js';
import { packageRoot } from '../package-info.js';

const TYPES: Readonly<Record<string, string>> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.ico': 'image/x-icon',
  '.json': 'application/json',
};

const POLICY = [
  "default-src 'self'",
  "img-src 'self' data: blob:",
  // Chart.js sizes its canvases through style attributes
  "style-src 'self' 'unsafe-inline'",
  "connect-src 'self'",
  "frame-ancestors 'none'",
  "base-uri 'none'",
  "form-action 'none'",
].join('; ');

interface Asset {
  readonly body: Buffer;
  readonly type: string;
  readonly immutable: boolean;
}

/** The built console's files by path below /ui/ ('' is index.html); empty when not built. */
export function loadConsole(dir = join(packageRoot(), 'dist', 'ui')): Map<string, Asset> {
  const assets = new Map<string, Asset>();
  const walk = (at: string): void => {
    for (const name of readdirSync(at)) {
      const path = join(at, name);
      if (statSync(path).isDirectory()) {
        walk(path);
        continue;
      }
      const key = relative(dir, path).split('\\').join('/');
      assets.set(key, {
        body: readFileSync(path),
        type: TYPES[extname(name)] ?? 'application/octet-stream',
        immutable: key.startsWith('assets/'),
      });
    }
  };
  try {
    walk(dir);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
  }
  const index = assets.get('index.html');
  if (index) assets.set('', index);
  return assets;
}

export async function registerConsole(app: FastifyInstance, assets = loadConsole()): Promise<void> {
  app.get('/ui', { schema: { hide: true } }, async (_request, reply) => reply.redirect('/ui/', 308));
  app.get('/ui/*', { schema: { hide: true } }, async (request, reply) => {
    const path = (request.params as { '*': string })['*'];
    const asset = assets.get(path);
    if (!asset) {
      throw new QuantdError('NOT_FOUND', {
        detail: assets.size === 0 ? 'the console is not built: run npm run build:ui' : `no file /ui/${path}`,
      });
    }
    return reply
      .header('Content-Type', asset.type)
      .header('Cache-Control', asset.immutable ? 'public, max-age=31536000, immutable' : 'no-cache')
      .header('Content-Security-Policy', POLICY)
      .send(asset.body);
  });
}
