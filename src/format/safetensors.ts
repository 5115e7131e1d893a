/**
 * The safetensors container, in memory: 8 bytes little-endian u64 N, N bytes of UTF-8 JSON
 * header, then the data section. No I/O here; safetensors-file.ts streams the same format.
 *
 * The reader is strict (it is the trust boundary for uploaded models): every malformed header
 * is a QuantdError naming the tensor and the offending value, and the tensors must tile the
 * data section exactly, as the reference Rust implementation requires.
 */
import { isStDType, ST_DTYPE_SIZE, type StDType } from '../core/dtypes.js';
import { QuantdError, shapeText } from '../errors/index.js';
import { topLevelKeys } from './json-keys.js';
import { describeOtherFormat } from './sniff.js';

/** Largest header we parse by default; the reference implementation also caps it at 100 MB. */
export const DEFAULT_HEADER_LIMIT = 100_000_000;

/**
 * Tensors one file may list. Real checkpoints hold a few thousand per shard (large mixtures of
 * experts tens of thousands); the cap keeps a hostile header from costing seconds of planning.
 */
export const TENSOR_LIMIT = 65_536;

const METADATA_KEY = '__metadata__';
const PREFIX_BYTES = 8;
/** The writer pads the JSON so that the data section starts 8-byte aligned in the file. */
const HEADER_ALIGN = 8;
const SPACE = 0x20;

export interface TensorEntry {
  readonly name: string;
  readonly dtype: StDType;
  readonly shape: readonly number[];
  /** Byte offsets relative to the start of the data section; `end` is exclusive. */
  readonly begin: number;
  readonly end: number;
}

export interface SafetensorsHeader {
  /** Sorted by `begin`, i.e. in data order. */
  readonly entries: readonly TensorEntry[];
  readonly metadata: Readonly<Record<string, string>> | null;
  /** Offset of the data section in the file: 8 + N. */
  readonly dataOffset: number;
  readonly dataLength: number;
}

export interface TensorPlan {
  readonly name: string;
  readonly dtype: StDType;
  readonly shape: readonly number[];
}

// Headers are plain readonly objects (they cross worker boundaries); the name index is built
// on first lookup and kept beside them rather than in them.
const nameIndex = new WeakMap<SafetensorsHeader, ReadonlyMap<string, TensorEntry>>();

export function entryByName(header: SafetensorsHeader, name: string): TensorEntry | undefined {
  let index = nameIndex.get(header);
  if (index === undefined) {
    index = new Map(header.entries.map((e) => [e.name, e]));
    nameIndex.set(header, index);
  }
  return index.get(name);
}

/** u64 values go into error params as numbers when exact, else as decimal strings. */
function u64Param(value: bigint): number | string {
  return value <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(value) : value.toString();
}

/** A JSON rendering of an offending value, short enough for an error message. */
/**
 * A short JSON-like preview of a header value for a message. It looks at a bounded part of the
 * value (a few levels, a few items), so a hostile header (metadata nested 100,000 levels deep,
 * arrays of millions) costs nothing to describe.
 */
function show(value: unknown): string {
  const text = preview(value, 3);
  return text.length > 80 ? `${text.slice(0, 77)}...` : text;
}

function preview(value: unknown, depth: number): string {
  if (value === undefined) return 'undefined';
  if (value === null || typeof value !== 'object') return JSON.stringify(value);
  const items = Array.isArray(value)
    ? value.slice(0, 8).map((v) => (depth > 0 ? preview(v, depth - 1) : '…'))
    : Object.keys(value)
        .slice(0, 8)
        .map(
          (k) =>
            `${JSON.stringify(k)}:${depth > 0 ? preview((value as Record<string, unknown>)[k], depth - 1) : '…'}`,
        );
  const more = (Array.isArray(value) ? value.length : Object.keys(value).length) > 8 ? ',…' : '';
  return Array.isArray(value) ? `[${items.join(',')}${more}]` : `{${items.join(',')}${more}}`;
}

const quoted = (name: string): string => JSON.stringify(name);

function invalid(source: string, detail: string): QuantdError {
  return new QuantdError('SAFETENSORS_INVALID', { source, detail });
}

function badOffsets(source: string, tensor: string, detail: string): QuantdError {
  return new QuantdError('SAFETENSORS_OFFSETS_INVALID', { source, tensor, detail });
}

function isPlainObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

const isCount = (v: unknown): v is number => typeof v === 'number' && Number.isSafeInteger(v) && v >= 0;

/** What a sniffer needs of a file's first bytes; readers pass this many when they have them. */
export const SNIFF_BYTES = 64;

/**
 * A length prefix that cannot be right (past the end of the file, or over the limit) is first
 * a question of what the file is: another format recognised by its first bytes, or anything
 * whose header does not open with "{", is FILE_NOT_SAFETENSORS. A file that does look like
 * safetensors returns, to be reported as too large or truncated.
 */
function notSafetensors(
  prefix: Uint8Array,
  n: bigint,
  totalLength: number,
  source: string,
  limit: number,
): void {
  const other = describeOtherFormat(prefix);
  if (other !== undefined) throw new QuantdError('FILE_NOT_SAFETENSORS', { source, detail: other });
  const opening = prefix[PREFIX_BYTES];
  // a header opens with "{" (whitespace tolerated); without byte 8 the file is just short
  if (opening === undefined || [0x7b, 0x20, 0x09, 0x0a, 0x0d].includes(opening)) return;
  const bound = n > BigInt(limit) ? `the limit of ${limit}` : `the file's ${totalLength}`;
  throw new QuantdError('FILE_NOT_SAFETENSORS', {
    source,
    detail:
      `its first 8 bytes, read as the header length, say ${u64Param(n)} bytes, more than ${bound}, ` +
      'and no JSON header follows; a safetensors file starts with that length, then a JSON object',
  });
}

/**
 * Validates the 8-byte length prefix and returns N, the JSON header's byte length.
 * `prefix` holds the file's first bytes (8 are enough; SNIFF_BYTES, when the file has them, let a
 * file of another kind be named); `totalLength` is the file's size.
 */
export function readHeaderLength(
  prefix: Uint8Array,
  totalLength: number,
  source: string,
  limit = DEFAULT_HEADER_LIMIT,
): number {
  if (prefix.length < PREFIX_BYTES) {
    throw new QuantdError('SAFETENSORS_TRUNCATED', {
      source,
      detail: 'file is shorter than the 8-byte header length',
      expected: PREFIX_BYTES,
      actual: prefix.length,
    });
  }
  // Read as u64: a garbage prefix such as 0xFF.. must be reported as the huge number it is,
  // not wrapped into something that looks plausible.
  const n = new DataView(prefix.buffer, prefix.byteOffset, PREFIX_BYTES).getBigUint64(0, true);
  if (n > BigInt(limit) || BigInt(PREFIX_BYTES) + n > BigInt(totalLength)) {
    notSafetensors(prefix, n, totalLength, source, limit);
  }
  if (n > BigInt(limit)) {
    throw new QuantdError('SAFETENSORS_HEADER_TOO_LARGE', { source, size: u64Param(n), limit });
  }
  if (n < 2n) {
    throw invalid(source, `header length ${n} is too small to hold a JSON object`);
  }
  const needed = PREFIX_BYTES + Number(n);
  if (needed > totalLength) {
    throw new QuantdError('SAFETENSORS_TRUNCATED', {
      source,
      detail: `the ${n}-byte header runs past the end of the file`,
      expected: needed,
      actual: totalLength,
    });
  }
  return Number(n);
}

function parseMetadata(source: string, value: unknown): Readonly<Record<string, string>> {
  if (!isPlainObject(value)) {
    throw invalid(source, `${METADATA_KEY} must be an object of strings, got ${show(value)}`);
  }
  for (const [key, v] of Object.entries(value)) {
    if (typeof v !== 'string') {
      throw invalid(
        source,
        `${METADATA_KEY} values must be strings, but key ${quoted(key)} holds ${show(v)}`,
      );
    }
  }
  // A null prototype, so that a lookup of "constructor" or "toString" finds nothing.
  return Object.freeze(Object.assign(Object.create(null) as Record<string, string>, value));
}

function parseEntry(source: string, name: string, raw: unknown, dataLength: number): TensorEntry {
  if (name === '') throw invalid(source, 'a tensor has the empty name ""');
  if (!isPlainObject(raw)) {
    throw invalid(source, `tensor ${quoted(name)}: entry must be an object, got ${show(raw)}`);
  }
  for (const field of ['dtype', 'shape', 'data_offsets']) {
    if (!Object.hasOwn(raw, field)) throw invalid(source, `tensor ${quoted(name)}: missing "${field}"`);
  }
  const { dtype, shape, data_offsets: offsets } = raw;
  if (!Array.isArray(shape) || !shape.every(isCount)) {
    throw invalid(
      source,
      `tensor ${quoted(name)}: shape must be an array of non-negative integers, got ${show(shape)}`,
    );
  }
  if (!Array.isArray(offsets) || offsets.length !== 2 || !offsets.every(isCount)) {
    throw badOffsets(source, name, `data_offsets must be two non-negative integers, got ${show(offsets)}`);
  }
  // `+ 0` turns a JSON -0 into 0, so that shapes and offsets print and compare plainly.
  const [begin, end] = (offsets as number[]).map((v) => v + 0) as [number, number];
  if (begin > end) {
    throw badOffsets(source, name, `data_offsets [${begin}, ${end}] end before they begin`);
  }
  if (typeof dtype !== 'string' || !isStDType(dtype)) {
    throw new QuantdError('SAFETENSORS_DTYPE_UNKNOWN', {
      source,
      tensor: name,
      dtype: typeof dtype === 'string' ? dtype : show(dtype),
    });
  }
  const dims = (shape as number[]).map((d) => d + 0);
  // BigInt: a hostile shape can overflow doubles long before it is caught by the offsets.
  const expected = dims.reduce((acc, d) => acc * BigInt(d), BigInt(ST_DTYPE_SIZE[dtype]));
  if (expected !== BigInt(end - begin)) {
    throw new QuantdError('SAFETENSORS_SIZE_MISMATCH', {
      source,
      tensor: name,
      dtype,
      shape: shapeText(dims),
      expected: u64Param(expected),
      actual: end - begin,
    });
  }
  if (end > dataLength) {
    throw new QuantdError('SAFETENSORS_TRUNCATED', {
      source,
      detail: `tensor ${quoted(name)} ends at data offset ${end}, past the end of the data section`,
      expected: end,
      actual: dataLength,
    });
  }
  return Object.freeze({ name, dtype, shape: Object.freeze(dims), begin, end });
}

/** The tensors must cover the data section exactly, without gaps or overlaps. */
function checkTiling(source: string, entries: readonly TensorEntry[], dataLength: number): void {
  let cursor = 0;
  let owner: TensorEntry | undefined; // the entry whose data ends at `cursor`
  for (const e of entries) {
    if (e.begin > cursor) {
      throw badOffsets(
        source,
        e.name,
        owner === undefined
          ? `data_offsets [${e.begin}, ${e.end}]: the first tensor's data must begin at offset 0`
          : `data_offsets [${e.begin}, ${e.end}] leave a gap of ${e.begin - cursor} bytes after tensor ${quoted(owner.name)}, which ends at ${cursor}`,
      );
    }
    if (e.begin < cursor) {
      throw badOffsets(
        source,
        e.name,
        `data_offsets [${e.begin}, ${e.end}] overlap tensor ${quoted(owner?.name ?? '')}, which ends at ${cursor}`,
      );
    }
    if (e.end > cursor || owner === undefined) owner = e;
    cursor = e.end;
  }
  if (cursor < dataLength) {
    const trailing = `${dataLength - cursor} bytes of the ${dataLength}-byte data section follow the last tensor`;
    if (owner === undefined) throw invalid(source, `the header lists no tensors, but ${trailing}`);
    throw badOffsets(source, owner.name, `${trailing}, which ends at ${cursor}`);
  }
}

/** Parses and validates the JSON header; `dataLength` is the size of the data section. */
export function parseHeader(json: Uint8Array, dataLength: number, source: string): SafetensorsHeader {
  let text: string;
  try {
    // ignoreBOM keeps a BOM in the text, so that JSON.parse rejects it as the Rust reader does.
    text = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true }).decode(json);
  } catch {
    throw invalid(source, 'the header is not valid UTF-8');
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch (err) {
    throw invalid(source, `the header is not valid JSON (${(err as Error).message})`);
  }
  if (!isPlainObject(parsed)) {
    throw invalid(source, `the header must be a JSON object, got ${show(parsed)}`);
  }

  const keys = topLevelKeys(text);
  const count = keys.length - (Object.hasOwn(parsed, METADATA_KEY) ? 1 : 0);
  if (count > TENSOR_LIMIT) {
    throw new QuantdError('SAFETENSORS_TOO_MANY_TENSORS', { source, count, limit: TENSOR_LIMIT });
  }
  const seen = new Set<string>();
  let metadata: Readonly<Record<string, string>> | null = null;
  const entries: TensorEntry[] = [];
  // Document order, not Object.keys order: JS objects move integer-like keys ("0") first.
  for (const key of keys) {
    if (seen.has(key)) throw new QuantdError('SAFETENSORS_DUPLICATE_KEY', { source, tensor: key });
    seen.add(key);
    if (key === METADATA_KEY) metadata = parseMetadata(source, parsed[key]);
    else entries.push(parseEntry(source, key, parsed[key], dataLength));
  }
  // Stable sort: entries with equal offsets (zero-length tensors) keep document order, and a
  // zero-length tensor sorts before the tensor that begins where it sits.
  entries.sort((a, b) => a.begin - b.begin || a.end - b.end);
  checkTiling(source, entries, dataLength);

  return Object.freeze({
    entries: Object.freeze(entries),
    metadata,
    dataOffset: PREFIX_BYTES + json.length,
    dataLength,
  });
}

/**
 * The header of a file of `fileSize` bytes from its first bytes, which must reach the header's
 * end but need not hold the data section (a header sent alone, as the console's inspect does).
 */
export function parseHeaderPrefix(
  bytes: Uint8Array,
  fileSize: number,
  source: string,
  limit = DEFAULT_HEADER_LIMIT,
): { header: SafetensorsHeader; dataOffset: number } {
  const dataOffset = PREFIX_BYTES + readHeaderLength(bytes.subarray(0, SNIFF_BYTES), fileSize, source, limit);
  if (dataOffset > bytes.length) {
    throw new QuantdError('SAFETENSORS_TRUNCATED', {
      source,
      detail: 'the bytes given end inside the header; give at least the first 8 + header-length bytes',
      expected: dataOffset,
      actual: bytes.length,
    });
  }
  const header = parseHeader(bytes.subarray(PREFIX_BYTES, dataOffset), fileSize - dataOffset, source);
  return { header, dataOffset };
}

/** Parses a whole file held in memory; tensor bytes are views into `bytes`, not copies. */
export function parseSafetensors(
  bytes: Uint8Array,
  source: string,
  limit = DEFAULT_HEADER_LIMIT,
): { header: SafetensorsHeader; tensorBytes(entry: TensorEntry): Uint8Array } {
  const { header, dataOffset } = parseHeaderPrefix(bytes, bytes.length, source, limit);
  return {
    header,
    tensorBytes: (entry) => bytes.subarray(dataOffset + entry.begin, dataOffset + entry.end),
  };
}

function internal(detail: string): QuantdError {
  return new QuantdError('INTERNAL', { detail });
}

/** Made once: every response and every file written encodes a header. */
const UTF8 = new TextEncoder();

/**
 * Encodes the length prefix and the space-padded JSON header for tensors laid out
 * contiguously in plan order. Plans come from our own code, so a bad plan is INTERNAL.
 */
export function encodeHeader(
  plan: readonly TensorPlan[],
  metadata: Readonly<Record<string, string>> | null,
): { bytes: Uint8Array; entries: TensorEntry[] } {
  // The JSON text is assembled by hand: an object would reorder integer-like tensor names and
  // treat a "__proto__" name specially.
  const members: string[] = [];
  if (metadata !== null) {
    for (const [key, value] of Object.entries(metadata)) {
      if (typeof value !== 'string')
        throw internal(`metadata ${quoted(key)} is not a string: ${show(value)}`);
    }
    members.push(`${quoted(METADATA_KEY)}:${JSON.stringify(metadata)}`);
  }
  const names = new Set<string>();
  const entries: TensorEntry[] = [];
  let offset = 0;
  for (const { name, dtype, shape } of plan) {
    if (name === '' || name === METADATA_KEY) throw internal(`tensor name ${quoted(name)} is reserved`);
    if (names.has(name)) throw internal(`tensor ${quoted(name)} is planned twice`);
    if (!isStDType(dtype)) throw internal(`tensor ${quoted(name)} has unknown dtype ${show(dtype)}`);
    if (!shape.every(isCount)) throw internal(`tensor ${quoted(name)} has invalid shape ${show(shape)}`);
    names.add(name);
    const length = shape.reduce((acc, d) => acc * d, ST_DTYPE_SIZE[dtype]);
    if (!Number.isSafeInteger(offset + length)) throw internal(`tensor ${quoted(name)} is too large`);
    const entry = Object.freeze({
      name,
      dtype,
      shape: Object.freeze([...shape]),
      begin: offset,
      end: offset + length,
    });
    entries.push(entry);
    offset = entry.end;
    const json = { dtype, shape: entry.shape, data_offsets: [entry.begin, entry.end] };
    members.push(`${quoted(name)}:${JSON.stringify(json)}`);
  }
  const json = UTF8.encode(`{${members.join(',')}}`);
  const padded = Math.ceil(json.length / HEADER_ALIGN) * HEADER_ALIGN;
  const bytes = new Uint8Array(PREFIX_BYTES + padded).fill(SPACE, PREFIX_BYTES + json.length);
  new DataView(bytes.buffer).setBigUint64(0, BigInt(padded), true);
  bytes.set(json, PREFIX_BYTES);
  return { bytes, entries };
}

/** Serializes tensors, in the given order, to a complete in-memory safetensors file. */
export function serializeSafetensors(
  tensors: readonly (TensorPlan & { readonly data: Uint8Array })[],
  metadata: Readonly<Record<string, string>> | null,
): Uint8Array {
  const { bytes: header, entries } = encodeHeader(tensors, metadata);
  const dataLength = entries.length === 0 ? 0 : entries[entries.length - 1]!.end;
  const out = new Uint8Array(header.length + dataLength);
  out.set(header, 0);
  tensors.forEach((t, i) => {
    const e = entries[i]!;
    if (t.data.length !== e.end - e.begin) {
      throw internal(
        `tensor ${quoted(t.name)} has ${t.data.length} bytes of data, its plan needs ${e.end - e.begin}`,
      );
    }
    out.set(t.data, header.length + e.begin);
  });
  return out;
}
