/**
 * Optional bearer-token authentication (QUANTD_API_KEYS), for every transport: HTTP takes the
 * Authorization header, gRPC the `authorization` metadata. Tokens are compared by their SHA-256
 * digests with timingSafeEqual: equal-length inputs, so neither a key's content nor its length
 * leaks through timing. Off when no key is configured.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import { QuantdError } from '../errors/index.js';

const digest = (token: string): Buffer => createHash('sha256').update(token, 'utf8').digest();

export function makeAuthenticator(keys: readonly string[]): ((header: string | undefined) => void) | null {
  if (keys.length === 0) return null;
  const digests = keys.map(digest);
  return (header) => {
    const match = /^Bearer\s+(\S+)\s*$/i.exec(header ?? '');
    if (!match) {
      throw new QuantdError('UNAUTHORIZED', {
        detail: header
          ? 'the Authorization header is not a bearer token'
          : 'the request has no Authorization header',
      });
    }
    const presented = digest(match[1]!);
    let ok = false;
    for (const d of digests) ok = timingSafeEqual(d, presented) || ok; // no early exit
    if (!ok) throw new QuantdError('UNAUTHORIZED', { detail: 'the bearer token is not a configured key' });
  };
}
