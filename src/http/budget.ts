/**
 * What an HTTP request holds against the memory budget (src/service/admission.ts), and its
 * admission slot kept between the hook that admits it (app.ts) and the code that learns its
 * sizes: the body parser of a chunked body (body.ts) and the operation once planned
 * (op-routes.ts).
 *
 * The factors are this transport's copies, measured on `quantd serve` with one 64 MiB float32
 * tensor, peak RSS over the idle process (2026-11-28; int8 per_channel, a 16 MiB result: +90 to
 * +112 MiB; fake-quantize, 80 MiB of results: +145 MiB): about 1.4× the body and 0.75× the
 * result, rounded up. The body is read once into a buffer the workers read in place, and a result
 * goes out as views of the outputs (one of up to 1 MiB is concatenated once). A JSON result is
 * built as base64 text and a JSON string around it: about four times the result.
 */
import type { IncomingMessage } from 'node:http';
import type { Slot } from '../service/index.js';

/** Bytes a request body of n bytes holds: its buffer, and what reading it costs around it. */
export const BODY_FACTOR = 1.5;
/** Bytes a binary result of n bytes holds: the outputs, sent as views of themselves. */
export const RESULT_FACTOR = 1.25;
/** Bytes a JSON result of n bytes holds: the outputs, their base64 text, the JSON around it. */
export const JSON_RESULT_FACTOR = 4;

const slots = new WeakMap<IncomingMessage, Slot>();

/** Keeps `slot` as the admission of `request` (app.ts, when the hook admits it). */
export function keepSlot(request: IncomingMessage, slot: Slot): void {
  slots.set(request, slot);
}

/** The admission slot of `request`, when it took one (a compute route). */
export function slotOf(request: IncomingMessage): Slot | undefined {
  return slots.get(request);
}
