/**
 * Load shedding shared by every transport: at most `capacity` operation requests in flight in the
 * process (the pool's threads plus its queue limit). Beyond it a request is refused at once with
 * OVERLOADED (HTTP 503 + Retry-After, gRPC UNAVAILABLE), before its body is read, so memory stays
 * bounded however many clients arrive.
 */
import { QuantdError } from '../errors/index.js';

export class Admission {
  private count = 0;

  constructor(readonly capacity: number) {}

  get inFlight(): number {
    return this.count;
  }

  /** Takes a slot, or throws OVERLOADED; the returned release() is idempotent. */
  acquire(): () => void {
    if (this.count >= this.capacity) {
      throw new QuantdError('OVERLOADED', { queued: this.count, limit: this.capacity });
    }
    this.count++;
    let released = false;
    return () => {
      if (!released) {
        released = true;
        this.count--;
      }
    };
  }
}
