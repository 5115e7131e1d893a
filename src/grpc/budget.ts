/**
 * What a gRPC call holds against the memory budget (src/service/admission.ts), in multiples of
 * its message and its result.
 *
 * Measured on `quantd serve` with one 64 MiB float32 tensor per call, peak RSS over the idle
 * process (2026-11-28; int8 per_channel Quantize, a 16 MiB result: +238 to +260 MiB;
 * FakeQuantize, 80 MiB of results: +516 MiB): about 3× the message and 4.2× the result. The
 * message arrives as HTTP/2 frames, which grpc-js concatenates into one buffer once the last has
 * come and decodes (the tensor's bytes a view of it), and files.ts copies into the pool's shared
 * memory; the result is concatenated into one container, encoded by protobufjs and framed by
 * grpc-js, a copy each, before it is written. The factors are rounded up.
 */

/** Bytes one request message of n bytes holds. */
export const MESSAGE_FACTOR = 3;
/** Bytes one unary result of n bytes holds. */
export const RESULT_FACTOR = 4.5;
/**
 * Bytes a QuantizeStream input or result of n bytes holds: one buffer (the input grown in place,
 * the result sent in chunks that view it); each chunk's copy is its message's, charged as such.
 */
export const STREAMED_FACTOR = 1.25;
