/**
 * Optional bearer-token authentication (QUANTD_API_KEYS, QUANTD_ADMIN_KEYS), for every
 * transport: HTTP takes the Authorization header, gRPC the `authorization` metadata. Tokens are
 * compared by their SHA-256 digests with timingSafeEqual: equal-length inputs, so neither a key's
 * content nor its length leaks through timing. Off when no key is configured.
 *
 * A caller is who the key says: its jobs are owned by the key's id (the first 16 hex digits of
 * its SHA-256, never the key itself), and an admin key sees every job. With auth off there is
 * one tenant, who sees everything.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import { QuantdError } from '../errors/index.js';

export interface Caller {
  /** The id jobs are owned by; null with auth off. */
  readonly owner: string | null;
  /** Sees and manages every job (an admin key, or auth off). */
  readonly admin: boolean;
}

/** Who calls when authentication is off: the one tenant. */
export const EVERYONE: Caller = { owner: null, admin: true };

const digest = (token: string): Buffer => createHash('sha256').update(token, 'utf8').digest();

export function makeAuthenticator(
  keys: readonly string[],
  adminKeys: readonly string[] = [],
): ((header: string | undefined) => Caller) | null {
  if (keys.length === 0 && adminKeys.length === 0) return null;
  const known = [
    ...keys.map((k) => ({ digest: digest(k), admin: false })),
    ...adminKeys.map((k) => ({ digest: digest(k), admin: true })),
  ];
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
    let found: { admin: boolean } | null = null;
    for (const k of known) if (timingSafeEqual(k.digest, presented) && found === null) found = k; // no early exit
    if (found === null)
      throw new QuantdError('UNAUTHORIZED', { detail: 'the bearer token is not a configured key' });
    return { owner: presented.toString('hex').slice(0, 16), admin: found.admin };
  };
}
