/**
 * Catalogue errors as gRPC errors: the catalogue's gRPC status, details "CODE: message", and the
 * code (and its parameters, as JSON) in trailing metadata — `quantd-code`, `quantd-params`.
 *
 * Both travel as HTTP/2 header values, and grpc-js throws on a metadata value that is not
 * printable ASCII — a throw that, inside a promise handler, would end the process. So both are
 * made safe here, the one place gRPC errors are built, whatever the parameters hold (tensor
 * names, model names, paths and ids are the client's own text):
 * - `quantd-params` is JSON with every character outside printable ASCII written as a `\uXXXX`
 *   escape: ASCII by construction, and any JSON parser gives back the original strings.
 * - the details may hold any text: grpc-js percent-encodes them (encodeURI) and clients decode
 *   them. encodeURI throws on a lone UTF-16 surrogate, so those become U+FFFD first.
 * - each is kept to MAX_SENT characters as sent, long strings cut and marked with "…": a client
 *   refuses trailers past its metadata limit (grpc-js's then waits for a status that never comes).
 * - if building the error fails anyway, the answer is a fixed INTERNAL error, never a throw.
 */
import { Metadata, type ServiceError } from '@grpc/grpc-js';
import { grpcStatusFor, QuantdError, toQuantdError } from '../errors/index.js';

export interface GrpcError extends Partial<ServiceError> {
  readonly code: number;
  readonly status: number;
  readonly details: string;
  readonly metadata: Metadata;
  readonly quantdCode: string;
}

const NOT_PRINTABLE_ASCII = /[^\x20-\x7e]/g;

/**
 * Characters of the details (percent-encoded) and of quantd-params at most: together about 6 KiB,
 * under the 8 KiB of metadata that the strictest gRPC clients accept by default.
 */
export const MAX_SENT = 3072;

/** The gRPC error of `err`; never throws. */
export function errorForGrpc(err: unknown): GrpcError {
  try {
    return grpcError(toQuantdError(err));
  } catch (failure) {
    // e.g. a thrown object whose message getter throws: reported as INTERNAL, with a text that
    // cannot fail in turn
    return grpcError(
      new QuantdError('INTERNAL', { detail: `the error could not be reported (${describe(failure)})` }),
    );
  }
}

function grpcError(error: QuantdError): GrpcError {
  const metadata = new Metadata();
  metadata.set('quantd-code', error.code);
  metadata.set('quantd-params', paramsText(error.toJSON().params));
  const status = grpcStatusFor(error.code);
  const details = shortDetails(wellFormed(`${error.code}: ${error.message}`));
  return {
    name: 'QuantdError',
    message: details,
    code: status,
    status,
    details,
    metadata,
    quantdCode: error.code,
  };
}

function describe(failure: unknown): string {
  try {
    return failure instanceof Error ? failure.message.replace(NOT_PRINTABLE_ASCII, '?') : typeof failure;
  } catch {
    return 'unreadable';
  }
}

/** JSON of `value` in printable ASCII: other characters as `\uXXXX` escapes (JSON.parse undoes them). */
export function asciiJson(value: unknown): string {
  // JSON.stringify escapes control characters and lone surrogates itself; the rest are escaped here
  const json = JSON.stringify(value) ?? 'null';
  return json.replace(NOT_PRINTABLE_ASCII, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
}

/** `text` without lone UTF-16 surrogates (U+FFFD instead), which encodeURI refuses. */
export function wellFormed(text: string): string {
  return text.replace(/\p{Surrogate}/gu, '\ufffd');
}

const ELLIPSIS = '…';

/** quantd-params: the params as ASCII JSON, within MAX_SENT by cutting their longest strings. */
function paramsText(params: Record<string, unknown>): string {
  for (const keep of [Infinity, 1024, 256, 64, 0]) {
    const cut = Object.fromEntries(
      Object.entries(params).map(([k, v]) =>
        typeof v === 'string' && v.length > keep ? [k, v.slice(0, keep) + ELLIPSIS] : [k, v],
      ),
    );
    const text = asciiJson(cut);
    if (text.length <= MAX_SENT) return text;
  }
  return '{}'; // only a catalogue entry with hundreds of params could get here
}

/** The details, cut to MAX_SENT characters once percent-encoded (as grpc-js sends them). */
function shortDetails(details: string): string {
  if (encodeURI(details).length <= MAX_SENT) return details;
  const room = MAX_SENT - encodeURI(ELLIPSIS).length;
  let out = '';
  let size = 0;
  for (const c of details) {
    size += encodeURI(c).length;
    if (size > room) break;
    out += c;
  }
  return out + ELLIPSIS;
}
