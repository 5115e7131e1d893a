import { catalogue, type ErrorCode } from './catalogue.js';

export type ErrorParams = Readonly<Record<string, string | number | bigint | boolean | null | undefined>>;

/** Formats a parameter for a message: numbers keep float32 detail, arrays print as [a, b]. */
function show(value: ErrorParams[string]): string {
  if (value === undefined) return '?';
  if (value === null) return 'null';
  if (typeof value === 'number') {
    if (Object.is(value, -0)) return '-0';
    return String(value);
  }
  return String(value);
}

export function formatMessage(code: ErrorCode, params: ErrorParams): string {
  return catalogue[code].message.replace(/\{(\w+)\}/g, (_, key: string) => show(params[key]));
}

/**
 * The only error type quantd throws on purpose. Carries a catalogue code and the parameters
 * its message was built from, so transports can map it without parsing text.
 */
export class QuantdError extends Error {
  readonly code: ErrorCode;
  readonly params: ErrorParams;

  constructor(code: ErrorCode, params: ErrorParams = {}) {
    super(formatMessage(code, params));
    this.name = 'QuantdError';
    this.code = code;
    this.params = params;
  }

  get httpStatus(): number {
    return catalogue[this.code].http;
  }

  /** A plain object that survives structured cloning (worker boundaries). */
  toJSON(): { code: ErrorCode; message: string; params: ErrorParams } {
    // bigint does not survive JSON.stringify; its decimal text does
    const params = Object.fromEntries(
      Object.entries(this.params).map(([k, v]) => [k, typeof v === 'bigint' ? v.toString() : v]),
    );
    return { code: this.code, message: this.message, params };
  }
}

export function isQuantdError(value: unknown): value is QuantdError {
  return value instanceof QuantdError;
}

/**
 * Anything thrown, as the error a client gets: a QuantdError as it is, anything else INTERNAL
 * (with its message). Transports map their own library's errors first (src/http/problem.ts).
 */
export function toQuantdError(err: unknown): QuantdError {
  if (isQuantdError(err)) return err;
  return new QuantdError('INTERNAL', { detail: err instanceof Error ? err.message : String(err) });
}

/** Shapes render as [2, 3] in messages. */
export function shapeText(shape: readonly number[]): string {
  return `[${shape.join(', ')}]`;
}
