/**
 * The safetensors container, in memory: 8 bytes little-endian u64 N, N bytes of UTF-8 JSON
 * header, then the data section. No I/O here; safetensors-file.ts streams the same format.
 *
 * The reader is strict (it is the trust boundary for uploaded models): every malformed header
 * is a QuantdError naming the tensor and the offending value, and the tensors must tile the
 * data section exactly, as the reference Rust implementation requires.
 */
import { isStDType, ST_DTYPE_SIZE, type StDType } from '../core/dtypes.js';
import { completeNow, type Resumable } from '../core/time-slice.js';
import { QuantdError, shapeText } from '../errors/index.js';
import { objectMembersWork, type MemberSpan } from './json-members.js';
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
  return completeNow(parseHeaderWork(json, dataLength, source));
}

/**
 * The longest JSON text of one tensor's entry, and of its name: its dtype, shape and offsets take
 * under 200 characters at any real rank, names a few hundred. The cap keeps one hostile entry (a
 * shape of 30 million zeros in a 60 MB header took 2.8 s to parse) or name (matched, hashed and
 * quoted by every step after) from holding the event loop as one unit.
 */
export const ENTRY_TEXT_LIMIT = 65_536;

/** The error of a header that is not a JSON object, in JSON.parse's words. */
function notJson(text: string, source: string): QuantdError {
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch (err) {
    return invalid(source, `the header is not valid JSON (${(err as Error).message})`);
  }
  if (!isPlainObject(parsed)) return invalid(source, `the header must be a JSON object, got ${show(parsed)}`);
  return internal('the header scan refused a JSON object that JSON.parse accepts');
}

/** One member's value, parsed; a value that is not JSON fails the header (notJson). */
function jsonValue(text: string, member: MemberSpan, source: string): unknown {
  try {
    return JSON.parse(text.slice(member.start, member.end));
  } catch {
    throw notJson(text, source);
  }
}

/**
 * The value of __metadata__: an object is parsed member by member (a qtensor container of 65,536
 * tensors holds as many entries, 13 MB of text), into what JSON.parse would give: keys in
 * assignment order, the last of duplicates kept, "__proto__" an ordinary key (no prototype).
 */
function* metadataValue(text: string, member: MemberSpan, source: string): Resumable<unknown> {
  if (text.charCodeAt(member.start) !== 0x7b) return jsonValue(text, member, source); // not "{"
  const inner = yield* objectMembersWork(text, member.start, member.end);
  if (inner === null) throw notJson(text, source);
  const value = Object.create(null) as Record<string, unknown>;
  for (const m of inner) {
    value[m.key] = jsonValue(text, m, source);
    yield;
  }
  return value;
}

/** Bytes of header text decoded in one unit of parseHeaderWork. */
const DECODE_RUN = 1 << 20;

/**
 * parseHeader in units of one tensor entry (../core/time-slice.ts): a server parses a body's
 * header of tens of thousands of tensors without holding its event loop: the text is decoded a
 * megabyte at a time, and each member of the JSON object parsed on its own (./json-members.ts).
 */
export function* parseHeaderWork(
  json: Uint8Array,
  dataLength: number,
  source: string,
): Resumable<SafetensorsHeader> {
  let text = '';
  // ignoreBOM keeps a BOM in the text, so that JSON.parse rejects it as the Rust reader does.
  const decoder = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });
  // a megabyte at a time (a few milliseconds each): a 100 MB header took 300 ms in one call
  for (let at = 0; at < json.length; at += DECODE_RUN) {
    try {
      text += decoder.decode(json.subarray(at, at + DECODE_RUN), { stream: true });
    } catch {
      throw invalid(source, 'the header is not valid UTF-8');
    }
    yield;
  }
  try {
    text += decoder.decode(); // a sequence cut off at the end
  } catch {
    throw invalid(source, 'the header is not valid UTF-8');
  }
  // The object's members, scanned; each value is parsed on its own (./json-members.ts).
  const members = yield* objectMembersWork(text);
  if (members === null) throw notJson(text, source);
  // Refused here, before any entry is parsed, and so before anything is planned for them.
  const hasMetadata = members.some((m) => m.key === METADATA_KEY);
  const count = members.length - (hasMetadata ? 1 : 0);
  if (count > TENSOR_LIMIT) {
    throw new QuantdError('SAFETENSORS_TOO_MANY_TENSORS', { source, count, limit: TENSOR_LIMIT });
  }
  // Every value is parsed before any is checked, so that a header that is not JSON is reported
  // as such, whatever else is wrong with it.
  const values: unknown[] = [];
  for (const m of members) {
    if (m.key === METADATA_KEY) {
      values.push(yield* metadataValue(text, m, source));
    } else {
      if (m.key.length > ENTRY_TEXT_LIMIT) {
        // every step after this one handles the name (matched, hashed, quoted, written out)
        throw invalid(
          source,
          `a tensor name of ${m.key.length} characters (${quoted(m.key.slice(0, 40))}...), more than the ${ENTRY_TEXT_LIMIT} a name may take`,
        );
      }
      const length = m.end - m.start;
      if (length > ENTRY_TEXT_LIMIT) {
        throw invalid(
          source,
          `tensor ${quoted(m.key)}: its entry is ${length} characters of JSON, more than the ${ENTRY_TEXT_LIMIT} an entry may take`,
        );
      }
      values.push(jsonValue(text, m, source));
    }
    yield;
  }
  const seen = new Set<string>();
  let metadata: Readonly<Record<string, string>> | null = null;
  const entries: TensorEntry[] = [];
  // Document order, not Object.keys order: JS objects move integer-like keys ("0") first.
  for (const [i, { key }] of members.entries()) {
    if (seen.has(key)) throw new QuantdError('SAFETENSORS_DUPLICATE_KEY', { source, tensor: key });
    seen.add(key);
    if (key === METADATA_KEY) metadata = parseMetadata(source, values[i]);
    else entries.push(parseEntry(source, key, values[i], dataLength));
    yield;
  }
  // Stable sort: entries with equal offsets (zero-length tensors) keep document order, and a
  // zero-length tensor sorts before the tensor that begins where it sits. Writers list tensors
  // in data order, so the sort is skipped when one pass finds them sorted already.
  const byOffsets = (a: TensorEntry, b: TensorEntry): number => a.begin - b.begin || a.end - b.end;
  if (entries.some((e, i) => i > 0 && byOffsets(entries[i - 1]!, e) > 0)) entries.sort(byOffsets);
  yield;
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
  return completeNow(parseHeaderPrefixWork(bytes, fileSize, source, limit));
}

/** parseHeaderPrefix in units (parseHeaderWork). */
export function* parseHeaderPrefixWork(
  bytes: Uint8Array,
  fileSize: number,
  source: string,
  limit = DEFAULT_HEADER_LIMIT,
): Resumable<{ header: SafetensorsHeader; dataOffset: number }> {
  const dataOffset = PREFIX_BYTES + readHeaderLength(bytes.subarray(0, SNIFF_BYTES), fileSize, source, limit);
  if (dataOffset > bytes.length) {
    throw new QuantdError('SAFETENSORS_TRUNCATED', {
      source,
      detail: 'the bytes given end inside the header; give at least the first 8 + header-length bytes',
      expected: dataOffset,
      actual: bytes.length,
    });
  }
  const json = bytes.subarray(PREFIX_BYTES, dataOffset);
  const header = yield* parseHeaderWork(json, fileSize - dataOffset, source);
  return { header, dataOffset };
}

/** A safetensors file held in memory: its header, and each tensor's bytes as a view. */
export interface ParsedSafetensors {
  readonly header: SafetensorsHeader;
  tensorBytes(entry: TensorEntry): Uint8Array;
}

/** Parses a whole file held in memory; tensor bytes are views into `bytes`, not copies. */
export function parseSafetensors(
  bytes: Uint8Array,
  source: string,
  limit = DEFAULT_HEADER_LIMIT,
): ParsedSafetensors {
  return completeNow(parseSafetensorsWork(bytes, source, limit));
}

/** parseSafetensors in units (parseHeaderWork), for a server's request bodies. */
export function* parseSafetensorsWork(
  bytes: Uint8Array,
  source: string,
  limit = DEFAULT_HEADER_LIMIT,
): Resumable<ParsedSafetensors> {
  const { header, dataOffset } = yield* parseHeaderPrefixWork(bytes, bytes.length, source, limit);
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
): EncodedHeader {
  return completeNow(encodeHeaderWork(plan, metadata));
}

export interface EncodedHeader {
  readonly bytes: Uint8Array;
  readonly entries: TensorEntry[];
}

/** encodeHeader in units of one tensor (../core/time-slice.ts), for a server's responses. */
export function* encodeHeaderWork(
  plan: readonly TensorPlan[],
  metadata: Readonly<Record<string, string>> | null,
): Resumable<EncodedHeader> {
  // The JSON text is assembled by hand: an object would reorder integer-like tensor names and
  // treat a "__proto__" name specially.
  const out = new Utf8Runs();
  out.write('{');
  if (metadata !== null) {
    // What JSON.stringify(metadata) writes, member by member (same order: Object.keys's, same
    // quoting), so that a qtensor's 65,536 metadata entries are encoded in units too.
    out.write(`${quoted(METADATA_KEY)}:{`);
    let first = true;
    for (const key of Object.keys(metadata)) {
      const value = metadata[key];
      if (typeof value !== 'string')
        throw internal(`metadata ${quoted(key)} is not a string: ${show(value)}`);
      out.write(`${first ? '' : ','}${quoted(key)}:${quoted(value)}`);
      first = false;
      yield;
    }
    out.write('}');
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
    const json = { dtype, shape: entry.shape, data_offsets: [entry.begin, entry.end] };
    out.write(`${metadata !== null || entries.length > 0 ? ',' : ''}${quoted(name)}:${JSON.stringify(json)}`);
    entries.push(entry);
    offset = entry.end;
    yield;
  }
  out.write('}');
  const json = out.bytes();
  const padded = Math.ceil(json.length / HEADER_ALIGN) * HEADER_ALIGN;
  const bytes = new Uint8Array(PREFIX_BYTES + padded).fill(SPACE, PREFIX_BYTES + json.length);
  new DataView(bytes.buffer).setBigUint64(0, BigInt(padded), true);
  bytes.set(json, PREFIX_BYTES);
  return { bytes, entries };
}

/**
 * Text encoded to UTF-8 a run at a time as it is written: joining and encoding a header of
 * 200,000 tensors (15 MB) at the end was one step of 100 ms; a run of 64 Ki characters takes
 * well under a millisecond.
 */
class Utf8Runs {
  private static readonly RUN = 65_536;
  private readonly runs: Uint8Array[] = [];
  private pending: string[] = [];
  private pendingLength = 0;
  private length = 0;

  write(text: string): void {
    this.pending.push(text);
    this.pendingLength += text.length;
    if (this.pendingLength >= Utf8Runs.RUN) this.flush();
  }

  bytes(): Uint8Array {
    this.flush();
    const out = new Uint8Array(this.length);
    let at = 0;
    for (const run of this.runs) {
      out.set(run, at);
      at += run.length;
    }
    return out;
  }

  private flush(): void {
    const run = UTF8.encode(this.pending.join(''));
    this.runs.push(run);
    this.length += run.length;
    this.pending = [];
    this.pendingLength = 0;
  }
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
