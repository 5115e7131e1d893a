/** Who made an HTTP request (src/service/auth.ts): set by app.ts's auth hook, read by the job routes. */
import type { FastifyRequest } from 'fastify';
import { EVERYONE, type Caller } from '../service/auth.js';

const callers = new WeakMap<FastifyRequest['raw'], Caller>();

export function setCaller(request: FastifyRequest, caller: Caller): void {
  callers.set(request.raw, caller);
}

/** The request's caller; with auth off, the one tenant (sees everything). */
export function callerOf(request: FastifyRequest): Caller {
  return callers.get(request.raw) ?? EVERYONE;
}
