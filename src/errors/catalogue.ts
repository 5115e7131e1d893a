/**
 * The one catalogue of quantd errors. Codes are stable: clients match on them, tests pin them
 * (test/errors/catalogue.test.ts), and each maps to exactly one HTTP status, one gRPC status
 * and one CLI exit code. Message templates name their parameters as {param}; every message
 * about a tensor names the tensor and the offending value.
 *
 * To add an error: append an entry here, give it a test that reaches it, and never rename or
 * re-map an existing code.
 */

/** gRPC status codes (numeric values are fixed by the gRPC spec). */
export const GrpcStatus = {
  CANCELLED: 1,
  UNKNOWN: 2,
  INVALID_ARGUMENT: 3,
  DEADLINE_EXCEEDED: 4,
  NOT_FOUND: 5,
  PERMISSION_DENIED: 7,
  RESOURCE_EXHAUSTED: 8,
  FAILED_PRECONDITION: 9,
  ABORTED: 10,
  OUT_OF_RANGE: 11,
  UNIMPLEMENTED: 12,
  INTERNAL: 13,
  UNAVAILABLE: 14,
  DATA_LOSS: 15,
  UNAUTHENTICATED: 16,
} as const;
export type GrpcStatusName = keyof typeof GrpcStatus;

export interface ErrorDefinition {
  /** HTTP status of the RFC 9457 problem response. */
  readonly http: number;
  /** gRPC status name. */
  readonly grpc: GrpcStatusName;
  /** Short human title (the problem's `title`). */
  readonly title: string;
  /** Message template; `{name}` is replaced by the parameter of that name. */
  readonly message: string;
  /** CLI exit code when it differs from the HTTP-derived default (see exitCodeFor). */
  readonly exit?: number;
}

const bad = (title: string, message: string): ErrorDefinition => ({
  http: 400,
  grpc: 'INVALID_ARGUMENT',
  title,
  message,
});

export const catalogue = {
  // --- command line and request options ---------------------------------------------------
  USAGE: bad('Invalid usage', '{detail}'),
  OPTION_INVALID: bad('Invalid option value', 'option {option} {detail} (got {value})'),
  UNKNOWN_QDTYPE: bad(
    'Unknown qdtype',
    'unknown qdtype {value}; expected one of int8, uint8, int16, int32, int4, uint4, int2, uint2, float8_e4m3fn, float8_e5m2',
  ),
  UNKNOWN_SCHEME: bad(
    'Unknown scheme',
    'unknown scheme {value}; expected one of per_tensor, per_channel, per_token, per_group',
  ),
  UNKNOWN_MODE: bad('Unknown mode', 'unknown mode {value}; expected one of affine, symmetric, float_qparams'),
  UNKNOWN_DTYPE: bad(
    'Unknown dtype',
    'unknown output dtype {value}; expected one of float32, float16, bfloat16',
  ),
  MODE_UNSUPPORTED: bad('Mode not supported here', '{detail}'),
  QUANT_RANGE_INVALID: bad('Invalid quant_min/quant_max', '{detail}'),
  EPS_INVALID: bad(
    'Invalid eps',
    'eps must be a finite float32 value >= 2^-126 (so that 1/scale stays finite), got {value}',
  ),
  FEATURE_UNSUPPORTED: bad('Not supported', '{detail}'),
  TEXT_INVALID: bad('Text unusable', '{path}: {detail}'),
  MODEL_UNRUNNABLE: bad('Model cannot be run', '{engine} refused the model: {detail}'),
  ENGINE_UNAVAILABLE: {
    http: 501,
    grpc: 'UNIMPLEMENTED',
    title: 'Inference engine not installed',
    message: '{engine} is needed to {purpose} and cannot be loaded ({detail}); {remedy}',
    exit: 2,
  },

  // --- tensors -----------------------------------------------------------------------------
  INPUT_DTYPE_UNSUPPORTED: bad(
    'Input dtype not supported',
    'tensor {tensor} has dtype {dtype}; quantd quantizes float32, float16 and bfloat16 tensors',
  ),
  INPUT_NOT_FINITE: bad(
    'Input is not finite',
    'tensor {tensor} holds {value} at flat index {index}; {op} needs finite input',
  ),
  EMPTY_TENSOR: bad('Empty tensor', 'tensor {tensor} has no elements (shape {shape}); cannot choose qparams'),
  AXIS_OUT_OF_RANGE: bad(
    'Axis out of range',
    'axis {axis} is out of range for tensor {tensor} of shape {shape} (rank {rank})',
  ),
  SHAPE_UNSUPPORTED: bad('Shape not supported', 'tensor {tensor} has shape {shape}; {detail}'),
  GROUP_SIZE_INVALID: bad(
    'Invalid group size',
    'tensor {tensor}: {detail} (group_size {group_size}, shape {shape})',
  ),
  RANGE_OVERFLOW: bad(
    'Range overflows float32',
    'tensor {tensor}: the value range [{min}, {max}] gives scale {scale}, which is not a finite positive float32',
  ),
  RECIPE_INVALID: bad('Invalid recipe', 'recipe {where}: {detail}'),
  RECIPE_RULE_FAILED: bad('Recipe rule does not fit a tensor', '{rule} cannot be applied: {detail}'),
  NO_TENSOR_SELECTED: bad('No tensor selected', 'no tensor of the input matched the selection ({detail})'),
  TENSOR_NAME_RESERVED: bad(
    'Reserved tensor name',
    '{source}: a tensor named {tensor} would clash with the container metadata key of that name; rename the tensor',
  ),
  NAME_COLLISION: bad(
    'Output name collision',
    '{source}: the output would hold two tensors named {tensor}; rename that input tensor, or exclude the tensor whose output takes its name',
  ),

  // --- quantization parameters -------------------------------------------------------------
  SCALE_INVALID: bad(
    'Invalid scale',
    'tensor {tensor}: scale[{index}] = {value}; scales must be finite, > 0, with a finite float32 reciprocal',
  ),
  ZERO_POINT_OUT_OF_RANGE: bad(
    'Zero point out of range',
    'tensor {tensor}: zero_point[{index}] = {value} is outside [{quant_min}, {quant_max}]',
  ),
  ZERO_POINT_INVALID: bad('Invalid zero point', 'tensor {tensor}: zero_point[{index}] = {value}; {detail}'),
  QPARAMS_SHAPE_MISMATCH: bad(
    'Qparam shape mismatch',
    'tensor {tensor}: {qparam} has shape {shape}, expected {expected} for {scheme}',
  ),
  QPARAMS_DTYPE_INVALID: bad(
    'Qparam dtype invalid',
    'tensor {tensor}: {qparam} has dtype {dtype}; expected {expected}',
  ),
  QPARAMS_MISSING: bad('Qparam missing', 'tensor {tensor}: {detail}'),

  // --- files and containers ----------------------------------------------------------------
  SAFETENSORS_INVALID: bad('Malformed safetensors', '{source}: {detail}'),
  // another kind of file where a safetensors file was expected (GGUF, ONNX, JSON, a PyTorch
  // checkpoint): recognised by its first bytes when its length prefix makes no sense
  FILE_NOT_SAFETENSORS: bad('Not a safetensors file', '{source} is not a safetensors file: {detail}'),
  SAFETENSORS_HEADER_TOO_LARGE: {
    http: 413,
    grpc: 'RESOURCE_EXHAUSTED',
    title: 'Safetensors header too large',
    message: '{source}: header of {size} bytes exceeds the limit of {limit} bytes',
  },
  SAFETENSORS_TOO_MANY_TENSORS: {
    http: 413,
    grpc: 'RESOURCE_EXHAUSTED',
    title: 'Too many tensors',
    message: '{source}: the header lists {count} tensors, more than the limit of {limit} per file',
  },
  SAFETENSORS_TRUNCATED: bad(
    'Truncated safetensors',
    '{source}: {detail} (expected {expected} bytes, have {actual})',
  ),
  SAFETENSORS_OFFSETS_INVALID: bad('Invalid tensor offsets', '{source}: tensor {tensor}: {detail}'),
  SAFETENSORS_DTYPE_UNKNOWN: bad(
    'Unknown tensor dtype',
    '{source}: tensor {tensor} has unknown dtype {dtype}',
  ),
  SAFETENSORS_SIZE_MISMATCH: bad(
    'Tensor byte length mismatch',
    '{source}: tensor {tensor} of dtype {dtype} and shape {shape} needs {expected} bytes, but its offsets span {actual}',
  ),
  SAFETENSORS_DUPLICATE_KEY: bad(
    'Duplicate tensor name',
    '{source}: the header names {tensor} more than once',
  ),
  QTENSOR_INVALID: bad('Malformed qtensor container', '{source}: tensor {tensor}: {detail}'),
  GGUF_INVALID: bad('Malformed GGUF file', '{source}: {detail}'),
  // GPTQ / AWQ / bitsandbytes files read back by an interop layout (src/service/layouts/)
  LAYOUT_INVALID: bad('Malformed interop layout file', '{source}: tensor {tensor}: {detail}'),
  // a Hugging Face model folder (config.json, tokenizer files, shards) converted to GGUF
  HF_MODEL_INVALID: bad('Invalid Hugging Face model folder', '{path}: {detail}'),
  // text a tokenizer cannot encode (not Unicode) or ids it cannot decode (src/core/tokenize)
  TOKENIZER_INPUT_INVALID: bad('Invalid tokenizer input', '{detail}'),
  NOT_A_QTENSOR: bad(
    'Not a qtensor container',
    '{source}: no tensor carries quantd.qtensor/1 metadata; nothing to dequantize',
  ),
  SHARD_INDEX_INVALID: bad('Invalid shard index', '{path}: {detail}'),
  CHECKSUM_MISMATCH: bad(
    'Checksum mismatch',
    '{path}: the data section hashes to SHA-256 {actual}, but the file records {recorded}; the file is damaged',
  ),
  CHECKSUM_MISSING: bad('No checksum', '{path} records no data checksum (quantd.data_sha256) to verify'),
  FILE_NOT_FOUND: {
    http: 404,
    grpc: 'NOT_FOUND',
    title: 'File not found',
    message: 'cannot open {path}: no such file',
  },
  FILE_UNREADABLE: bad('File unreadable', 'cannot read {path}: {detail}'),
  STORAGE_FULL: {
    http: 507,
    grpc: 'RESOURCE_EXHAUSTED',
    title: 'Storage full',
    message: 'no space left on the device writing {path}; free space or point the output elsewhere',
    exit: 2,
  },
  // the command line's refusals to destroy data (src/cli/output-guard.ts)
  OUTPUT_IS_INPUT: bad(
    'Output is an input',
    'the output {path} is the input {input}; writing it would destroy the input, so write the output elsewhere (--force does not change this)',
  ),
  OUTPUT_EXISTS: bad('Output exists', '{path} already exists; pass --force to replace it'),
  OUTPUT_UNWRITABLE: {
    http: 500,
    grpc: 'INTERNAL',
    title: 'Output not writable',
    message: 'cannot write {path}: {detail}',
    // A server's own storage failing is its fault; on the command line the path is the user's.
    exit: 2,
  },

  // --- the service -------------------------------------------------------------------------
  UNAUTHORIZED: {
    http: 401,
    grpc: 'UNAUTHENTICATED',
    title: 'Unauthorized',
    message: '{detail}; send Authorization: Bearer <key> with a key from QUANTD_API_KEYS',
  },
  PAYLOAD_TOO_LARGE: {
    http: 413,
    grpc: 'RESOURCE_EXHAUSTED',
    title: 'Payload too large',
    message: 'the request body of {size} bytes exceeds the limit of {limit} bytes ({setting})',
  },
  RESULT_TOO_LARGE: {
    http: 500,
    grpc: 'RESOURCE_EXHAUSTED',
    title: 'Result too large for one message',
    message:
      'the result of {size} bytes exceeds the largest message of {limit} bytes ({setting}); use QuantizeStream, or /v1/jobs over HTTP',
  },
  MEMORY_BUDGET_EXCEEDED: {
    http: 413,
    grpc: 'RESOURCE_EXHAUSTED',
    title: 'Request too large for the memory budget',
    message:
      'the request would hold about {need} bytes of memory ({detail}), more than the whole budget of {budget} bytes for requests in flight (QUANTD_MEMORY_BUDGET); send a smaller input, or submit a job (/v1/jobs), which streams',
  },
  ENCODING_UNSUPPORTED: {
    http: 415,
    grpc: 'INVALID_ARGUMENT',
    title: 'Unsupported content coding',
    message: 'Content-Encoding {value} is not accepted here; {detail}',
  },
  EXPECTATION_FAILED: {
    http: 417,
    grpc: 'INVALID_ARGUMENT',
    title: 'Expectation failed',
    message: 'Expect {value} cannot be met; the server understands only Expect: 100-continue',
  },
  UNSUPPORTED_MEDIA_TYPE: {
    http: 415,
    grpc: 'INVALID_ARGUMENT',
    title: 'Unsupported media type',
    message:
      'content type {type} is not accepted; send application/x-safetensors or application/octet-stream',
  },
  NOT_ACCEPTABLE: {
    http: 406,
    grpc: 'INVALID_ARGUMENT',
    title: 'Not acceptable',
    message: 'cannot respond with {type}; quantd responds with application/x-safetensors or application/json',
  },
  NOT_FOUND: {
    http: 404,
    grpc: 'NOT_FOUND',
    title: 'Not found',
    message: '{detail}',
  },
  SERVER_UNREACHABLE: {
    http: 502,
    grpc: 'UNAVAILABLE',
    title: 'Server unreachable',
    message: 'cannot reach the quantd server at {url}: {detail}',
  },
  PATH_FORBIDDEN: {
    http: 403,
    grpc: 'PERMISSION_DENIED',
    title: 'Path forbidden',
    message: 'path {path} {detail}',
  },
  JOB_NOT_FOUND: {
    http: 404,
    grpc: 'NOT_FOUND',
    title: 'Job not found',
    message: 'there is no job {id}',
  },
  JOB_NOT_READY: {
    http: 409,
    grpc: 'FAILED_PRECONDITION',
    title: 'Job result not ready',
    message: 'job {id} is {state}; a result exists once a job has succeeded',
  },
  BODY_INCOMPLETE: bad('Incomplete body', 'the request body ended after {received} of {expected} bytes'),
  ARCHIVE_INVALID: bad('Invalid folder archive', 'folder upload (application/x-tar): {detail}'),
  // llama.cpp's importance matrix (--imatrix): its file, or its fit to the model
  IMATRIX_INVALID: bad('Invalid importance matrix', '{source}: {detail}'),
  // calibration observers (docs/observers.md)
  OBSERVER_INVALID: bad('Invalid observer', 'observer {observer}: {detail}'),
  OBSERVED_RANGE_INVALID: bad('Observed range unusable', 'observer {observer}: {detail}'),
  CALIBRATION_NOT_FOUND: {
    http: 404,
    grpc: 'NOT_FOUND',
    title: 'Calibration session not found',
    message: 'there is no calibration session {id} (expired, deleted, or never created)',
  },
  // layer statistics (calibration=FILE for gptq / awq): the file, or its fit to the model
  CALIBRATION_INVALID: bad('Invalid layer statistics', '{source}: {detail}'),
  CALIBRATION_FULL: {
    http: 413,
    grpc: 'RESOURCE_EXHAUSTED',
    title: 'Calibration limit reached',
    message: '{detail}',
  },
  // the server's budget for every session's state together (QUANTD_CALIBRATION_BYTES): full by
  // design, as a disk is (not a fault of the server's), and freed by deleting sessions
  CALIBRATION_MEMORY: {
    http: 507,
    grpc: 'RESOURCE_EXHAUSTED',
    title: 'Calibration memory budget reached',
    message: '{detail}',
    exit: 2,
  },
  QUOTA_EXCEEDED: {
    http: 429,
    grpc: 'RESOURCE_EXHAUSTED',
    title: 'Quota exceeded',
    message: 'job quota: {detail}',
  },
  BODY_TOO_SLOW: {
    http: 408,
    grpc: 'DEADLINE_EXCEEDED',
    title: 'Body too slow',
    message:
      'the request body arrived too slowly ({received} bytes in {seconds} s): the server needs a byte every {idle} s and at least {rate} bytes/s (QUANTD_BODY_IDLE_MS, QUANTD_BODY_MIN_RATE)',
    exit: 2,
  },
  HEAD_TOO_SLOW: {
    http: 408,
    grpc: 'DEADLINE_EXCEEDED',
    title: 'Request head too slow',
    message:
      'the request line and headers did not arrive within {ms} ms of the connection or of the previous answer (QUANTD_HEADERS_TIMEOUT_MS)',
    exit: 2,
  },
  STREAM_IDLE: {
    http: 408,
    grpc: 'DEADLINE_EXCEEDED',
    title: 'Stream idle',
    message: 'the stream waited {ms} ms for its client ({detail}) and was cut (QUANTD_STREAM_IDLE_MS)',
    exit: 2,
  },
  STREAM_INVALID: bad('Invalid stream', 'QuantizeStream: {detail}'),
  // Open Inference Protocol (/v2, inference.GRPCInferenceService): docs/oip.md
  INFER_REQUEST_INVALID: bad('Invalid inference request', 'inference request: {detail}'),
  INFER_INPUT_INVALID: bad('Invalid inference input', 'input {input}: {detail}'),
  HEADER_INVALID: bad('Invalid header', 'header {header} {detail} (got {value})'),
  REQUEST_TIMEOUT: {
    http: 504,
    grpc: 'DEADLINE_EXCEEDED',
    title: 'Request timed out',
    message: 'the request did not finish within {ms} ms',
  },
  CONFIG_INVALID: {
    http: 500,
    grpc: 'FAILED_PRECONDITION',
    title: 'Invalid configuration',
    message: 'configuration {key} {detail} (got {value})',
  },
  BACKEND_UNAVAILABLE: {
    http: 500,
    grpc: 'FAILED_PRECONDITION',
    title: 'Kernel backend unavailable',
    message: 'kernel backend {backend} is unavailable: {reason}',
  },
  OVERLOADED: {
    http: 503,
    grpc: 'UNAVAILABLE',
    title: 'Overloaded',
    message: 'the server is busy ({queued} jobs queued, limit {limit}); retry later',
  },
  QUEUE_UNAVAILABLE: {
    http: 503,
    grpc: 'UNAVAILABLE',
    title: 'Job queue unavailable',
    message: 'the job queue (Redis, QUANTD_REDIS_URL) cannot be reached: {detail}; retry later',
  },
  SHUTTING_DOWN: {
    http: 503,
    grpc: 'UNAVAILABLE',
    title: 'Shutting down',
    message:
      'the server is shutting down and takes no new work; retry (another instance, or once it restarts)',
  },
  CANCELLED: {
    http: 499,
    grpc: 'CANCELLED',
    title: 'Cancelled',
    message: 'the request was cancelled{detail}',
    exit: 1,
  },
  RESULT_CORRUPT: {
    http: 500,
    grpc: 'DATA_LOSS',
    title: 'Result damaged',
    message:
      'result file {file} no longer matches the SHA-256 recorded when its job finished ({expected}, now {actual}): the data directory was changed or damaged; run the job again',
  },
  WORKER_FAILED: {
    http: 500,
    grpc: 'INTERNAL',
    title: 'Worker failed',
    message: 'a worker died while processing tensor {tensor} ({detail}); it has been replaced',
  },
  INTERNAL: {
    http: 500,
    grpc: 'INTERNAL',
    title: 'Internal error',
    message: 'internal error: {detail}',
  },
} as const satisfies Record<string, ErrorDefinition>;

export type ErrorCode = keyof typeof catalogue;

/** CLI exit code: 2 for anything the caller can fix (bad input, bad options), 1 otherwise. */
export function exitCodeFor(code: ErrorCode): number {
  const def: ErrorDefinition = catalogue[code];
  if (def.exit !== undefined) return def.exit;
  return def.http >= 400 && def.http < 500 ? 2 : 1;
}

export function grpcStatusFor(code: ErrorCode): number {
  return GrpcStatus[catalogue[code].grpc];
}

/**
 * Whether an answer with this code is the server's fault, to be logged as an error: a 5xx, but
 * not a refusal the service makes by design (busy, shutting down, the calibration budget full).
 * Under load those come by the thousand a second; each is counted in the metrics and logged at
 * info.
 */
export function isServerFault(code: ErrorCode): boolean {
  return (
    catalogue[code].http >= 500 &&
    code !== 'OVERLOADED' &&
    code !== 'SHUTTING_DOWN' &&
    code !== 'CALIBRATION_MEMORY'
  );
}
