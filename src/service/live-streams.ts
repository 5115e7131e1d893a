/**
 * Live streams — GET /v1/jobs/events, gRPC health Watch and server reflection — compute nothing
 * and may stay open for hours, so they take no admission slot; instead they have their own cap:
 * `capacity` open at once (QUANTD_LIVE_STREAMS; past it 503 OVERLOADED / UNAVAILABLE), of which one
 * client may hold `perClient` (QUANTD_LIVE_STREAMS_PER_CLIENT; past it 429 QUOTA_EXCEEDED /
 * RESOURCE_EXHAUSTED).
 *
 * A client is its API key where it presented one, else its address: with authentication off,
 * counting every stream against one shared name let 32 streams from one client lock every other
 * client out of the job events. Clients behind one address (a proxy, a NAT) share its share.
 */
import { QuantdError } from '../errors/index.js';

export class LiveStreams {
  private count = 0;
  private readonly byClient = new Map<string, number>();

  constructor(
    readonly capacity: number,
    readonly perClient: number,
  ) {}

  /** Streams open now. */
  get open(): number {
    return this.count;
  }

  /**
   * Opens one stream of `what` ("job event streams") for `client` (clientOf), or throws
   * QUOTA_EXCEEDED (the client holds its share) or OVERLOADED (the server holds its cap).
   * Returns its close, idempotent.
   */
  enter(client: string, what: string): () => void {
    const held = this.byClient.get(client) ?? 0;
    if (held >= this.perClient) {
      throw new QuantdError('QUOTA_EXCEEDED', {
        detail: `this client holds ${held} live streams, the most one client may hold (QUANTD_LIVE_STREAMS_PER_CLIENT = ${this.perClient}); close one before opening more ${what}`,
      });
    }
    if (this.count >= this.capacity) {
      throw new QuantdError('OVERLOADED', { queued: this.count, limit: this.capacity });
    }
    this.count++;
    this.byClient.set(client, held + 1);
    let closed = false;
    return () => {
      if (closed) return;
      closed = true;
      this.count--;
      const left = (this.byClient.get(client) ?? 1) - 1;
      if (left > 0) this.byClient.set(client, left);
      else this.byClient.delete(client);
    };
  }
}

/**
 * The name a client's live streams are counted under: its key's id when it has one (src/service/
 * auth.ts), else its address (an IPv4 address seen through an IPv6 socket counts as itself).
 */
export function clientOf(owner: string | null, address: string | undefined): string {
  if (owner !== null) return `key ${owner}`;
  return `address ${(address ?? 'unknown').replace(/^::ffff:(?=\d+\.\d+\.\d+\.\d+$)/, '')}`;
}
