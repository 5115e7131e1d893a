/** The bearer-token check (src/service/auth.ts) applied to gRPC call metadata. */
import type { Metadata } from '@grpc/grpc-js';
import { makeAuthenticator, type Caller } from '../service/auth.js';

export function makeMetadataAuthenticator(
  keys: readonly string[],
  adminKeys: readonly string[] = [],
): ((metadata: Metadata) => Caller) | null {
  const check = makeAuthenticator(keys, adminKeys);
  if (!check) return null;
  return (metadata) => {
    const value = metadata.get('authorization')[0];
    return check(typeof value === 'string' ? value : value?.toString('utf8'));
  };
}
