/**
 * Load shedding shared by every transport: at most `capacity` requests in flight in the process
 * (for compute, the pool's threads plus its queue limit), holding at most `budget` bytes of
 * memory between them. Beyond either a request is refused at once with OVERLOADED (HTTP 503 +
 * Retry-After, gRPC UNAVAILABLE), before its body is read, so memory stays bounded however many
 * clients arrive.
 *
 * Why bytes as well as requests: a count of requests bounds memory only if every request is
 * small. Sixty-six 64 MiB gRPC calls were each one slot, and together passed 12 GB (each costs
 * several times its message: the frames, the decoded message, the result and its encodings). So
 * each admitted request also charges what it will hold — its input once its size is known (a
 * declared Content-Length, a gRPC message's length prefix), its result once planned, each times
 * the copies its transport makes — and a charge that does not fit is refused.
 */
import { QuantdError } from '../errors/index.js';

/**
 * One admitted request: calling it releases its slot and every byte it charged (idempotent).
 * `charge` adds bytes it will hold, or throws OVERLOADED (they do not fit now: retry) or
 * MEMORY_BUDGET_EXCEEDED (they never could: the request alone is larger than the budget).
 */
export interface Slot {
  (): void;
  /** Adds `bytes` (for `what`: "a 64 MiB message", named in the never-fits error). */
  charge(bytes: number, what: string): void;
  /** The bytes this request holds. */
  readonly held: () => number;
  /**
   * Gives the request's place back but not its bytes (idempotent): its work is done, its result
   * still being sent (a gRPC answer crosses the client's flow-control window a round trip at a
   * time; the next request may compute meanwhile). Calling the slot releases the bytes.
   */
  readonly leave: () => void;
}

export class Admission {
  private count = 0;
  private bytes = 0;

  /**
   * @param capacity requests at once
   * @param budget bytes the admitted requests may hold at once (QUANTD_MEMORY_BUDGET)
   */
  constructor(
    readonly capacity: number,
    readonly budget = Infinity,
  ) {}

  get inFlight(): number {
    return this.count;
  }

  /** Bytes the admitted requests hold now. */
  get bytesInFlight(): number {
    return this.bytes;
  }

  /**
   * Whether a request holding `bytes` would be admitted now: a slot free and the bytes fitting
   * (early shedding asks before a request is built; 0 bytes: only the slot).
   */
  admits(bytes = 0): boolean {
    return this.count < this.capacity && (bytes <= 0 || this.bytes + bytes <= this.budget);
  }

  /** Takes a slot, or throws OVERLOADED; the returned slot's release is idempotent. */
  acquire(): Slot {
    if (this.count >= this.capacity) throw this.overloaded(this.count);
    this.count++;
    let held = 0;
    let released = false;
    let left = false;
    const leave = (): void => {
      if (left) return;
      left = true;
      this.count--;
    };
    const release = (): void => {
      if (released) return;
      released = true;
      leave();
      this.bytes -= held;
      held = 0;
    };
    const charge = (bytes: number, what: string): void => {
      // a request already released (its client gone) holds nothing more: its work is stopping
      if (released || !(bytes > 0)) return;
      const need = Math.ceil(bytes);
      if (held + need > this.budget) {
        throw new QuantdError('MEMORY_BUDGET_EXCEEDED', {
          need: held + need,
          detail: what,
          budget: this.budget,
        });
      }
      // the busy count as a request refused before its slot would see it: the others in flight
      if (this.bytes + need > this.budget) throw this.overloaded(this.count - 1);
      held += need;
      this.bytes += need;
    };
    return Object.assign(release, { charge, held: () => held, leave });
  }

  private overloaded(queued: number): QuantdError {
    return new QuantdError('OVERLOADED', { queued, limit: this.capacity });
  }
}
