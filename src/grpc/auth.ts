/** The bearer-token check (src/service/auth.ts) applied to gRPC call metadata. */
import type { Metadata } from '@grpc/grpc-js';
import { makeAuthenticator } from '../service/auth.js';

export function makeMetadataAuthenticator(keys: readonly string[]): ((metadata: Metadata) => void) | null {
  const check = makeAuthenticator(keys);
  if (!check) return null;
  return (metadata) => {
    const value = metadata.get('authorization')[0];
    check(typeof value === 'string' ? value : value?.toString('utf8'));
  };
}
