/**
 * The GGUF v3 container (ggml / llama.cpp), in memory: header encoding for the writer and a
 * strict header parser for the reader. No I/O here; gguf-file.ts streams files through these.
 *
 * Layout (little-endian; docs/gguf.md of ggml):
 *   magic "GGUF" · version u32 (3) · tensor_count u64 · kv_count u64
 *   kv_count × { key: string · value_type u32 · value }           string = u64 length + UTF-8
 *   tensor_count × { name: string · n_dims u32 · ne[n_dims] u64 · ggml_type u32 · offset u64 }
 *   zero padding to `general.alignment` (u32, default 32) · tensor data
 * Dimensions are ggml's order: ne[0] is the innermost (row) length, the REVERSE of the
 * safetensors / torch shape. Offsets are relative to the start of the data section and must be
 * multiples of the alignment; the writer pads every tensor (the last included) with zeros to
 * the alignment, as gguf-py and ggml do.
 *
 * The parser checks what ggml's gguf_init_from_file checks (magic, version, value types, bool
 * bytes, UTF-8, duplicate keys and tensor names, at most 4 dims, row length a multiple of the
 * type's block, a power-of-two alignment, aligned offsets inside the file) plus that tensors do
 * not overlap; every failure is a GGUF_INVALID naming the file and what is wrong.
 */
import { QuantdError } from '../errors/index.js';
import { ggmlTypeById, ggmlTypeByName, type GgmlTypeInfo } from '../core/interop/ggml.js';

export const GGUF_MAGIC = 'GGUF';
export const GGUF_VERSION = 3;
export const GGUF_DEFAULT_ALIGNMENT = 32;
/** GGML_MAX_DIMS. */
export const GGUF_MAX_DIMS = 4;
/** ggml keeps names in char[GGML_MAX_NAME = 64] with the terminating NUL: at most 63 bytes. */
export const GGUF_MAX_TENSOR_NAME = 63;
export const ALIGNMENT_KEY = 'general.alignment';

/** gguf_metadata_value_type / enum gguf_type. */
export const GGUF_VALUE_TYPES = {
  uint8: 0,
  int8: 1,
  uint16: 2,
  int16: 3,
  uint32: 4,
  int32: 5,
  float32: 6,
  bool: 7,
  string: 8,
  array: 9,
  uint64: 10,
  int64: 11,
  float64: 12,
} as const;
export type GgufValueType = keyof typeof GGUF_VALUE_TYPES;
export type GgufNumberType =
  'uint8' | 'int8' | 'uint16' | 'int16' | 'uint32' | 'int32' | 'float32' | 'float64';

export type GgufValue =
  | { readonly type: GgufNumberType; readonly value: number }
  | { readonly type: 'uint64' | 'int64'; readonly value: bigint }
  | { readonly type: 'bool'; readonly value: boolean }
  | { readonly type: 'string'; readonly value: string }
  | { readonly type: 'array'; readonly itemType: GgufValueType; readonly value: readonly GgufValue[] };

export interface GgufKv {
  readonly key: string;
  readonly value: GgufValue;
}

/** A tensor to write: ggml dims (ne[0] first) and a ggml type name. */
export interface GgufTensorPlan {
  readonly name: string;
  readonly dims: readonly number[];
  readonly type: string;
}

export interface GgufTensorInfo {
  readonly name: string;
  /** ggml order: dims[0] = ne[0], the row length. */
  readonly dims: readonly number[];
  readonly type: GgmlTypeInfo;
  /** Offset relative to the data section. */
  readonly offset: number;
  /** Bytes of the tensor's data (without padding). */
  readonly bytes: number;
  readonly numel: number;
}

export interface GgufHeader {
  readonly version: number;
  /** Metadata in file order. */
  readonly kvs: ReadonlyMap<string, GgufValue>;
  /** Tensors in file (tensor-info) order. */
  readonly tensors: readonly GgufTensorInfo[];
  readonly alignment: number;
  /** Absolute offset of the data section in the file. */
  readonly dataOffset: number;
}

const TYPE_NAMES = Object.fromEntries(Object.entries(GGUF_VALUE_TYPES).map(([k, v]) => [v, k])) as Record<
  number,
  GgufValueType
>;

const FIXED_SIZE: Readonly<Partial<Record<GgufValueType, number>>> = {
  uint8: 1,
  int8: 1,
  uint16: 2,
  int16: 2,
  uint32: 4,
  int32: 4,
  float32: 4,
  bool: 1,
  uint64: 8,
  int64: 8,
  float64: 8,
};

/** The least bytes a value of this type occupies (strings: their length; arrays: type + count). */
const minBytes = (t: GgufValueType): number => FIXED_SIZE[t] ?? (t === 'string' ? 8 : 12);

function invalid(source: string, detail: string): QuantdError {
  return new QuantdError('GGUF_INVALID', { source, detail });
}

const alignUp = (n: number, a: number): number => Math.ceil(n / a) * a;
const isPowerOfTwo = (n: number): boolean => Number.isInteger(n) && n > 0 && (n & (n - 1)) === 0;
const quoted = (s: string): string => JSON.stringify(s);

// --- writing ---------------------------------------------------------------------------------

const utf8 = new TextEncoder();

/** Grows as the header is encoded. */
class Encoder {
  private buf = new Uint8Array(4096);
  private view = new DataView(this.buf.buffer);
  length = 0;

  private reserve(n: number): number {
    if (this.length + n > this.buf.length) {
      const next = new Uint8Array(Math.max(this.buf.length * 2, this.length + n));
      next.set(this.buf.subarray(0, this.length));
      this.buf = next;
      this.view = new DataView(next.buffer);
    }
    const at = this.length;
    this.length += n;
    return at;
  }

  u8(v: number): void {
    const at = this.reserve(1); // reserve first: it may replace this.view
    this.view.setUint8(at, v);
  }
  u32(v: number): void {
    const at = this.reserve(4);
    this.view.setUint32(at, v, true);
  }
  u64(v: number | bigint): void {
    const at = this.reserve(8);
    this.view.setBigUint64(at, BigInt(v), true);
  }
  string(s: string): void {
    const b = utf8.encode(s);
    this.u64(b.length);
    const at = this.reserve(b.length);
    this.buf.set(b, at);
  }
  value(v: GgufValue, where: string): void {
    switch (v.type) {
      case 'uint8':
      case 'int8':
      case 'uint16':
      case 'int16':
      case 'uint32':
      case 'int32': {
        checkInteger(v.type, v.value, where);
        const size = v.type.endsWith('8') ? 1 : v.type.endsWith('16') ? 2 : 4;
        const at = this.reserve(size);
        if (v.type === 'uint8') this.view.setUint8(at, v.value);
        else if (v.type === 'int8') this.view.setInt8(at, v.value);
        else if (v.type === 'uint16') this.view.setUint16(at, v.value, true);
        else if (v.type === 'int16') this.view.setInt16(at, v.value, true);
        else if (v.type === 'uint32') this.view.setUint32(at, v.value, true);
        else this.view.setInt32(at, v.value, true);
        return;
      }
      case 'float32': {
        const at = this.reserve(4);
        this.view.setFloat32(at, v.value, true);
        return;
      }
      case 'float64': {
        const at = this.reserve(8);
        this.view.setFloat64(at, v.value, true);
        return;
      }
      case 'uint64': {
        if (v.value < 0n || v.value >= 2n ** 64n) throw internal(`${where}: ${v.value} is not a uint64`);
        const at = this.reserve(8);
        this.view.setBigUint64(at, v.value, true);
        return;
      }
      case 'int64': {
        if (v.value < -(2n ** 63n) || v.value >= 2n ** 63n)
          throw internal(`${where}: ${v.value} is not an int64`);
        const at = this.reserve(8);
        this.view.setBigInt64(at, v.value, true);
        return;
      }
      case 'bool':
        this.u8(v.value ? 1 : 0);
        return;
      case 'string':
        this.string(v.value);
        return;
      case 'array':
        this.u32(GGUF_VALUE_TYPES[v.itemType]);
        this.u64(v.value.length);
        for (const item of v.value) {
          if (item.type !== v.itemType) {
            throw internal(`${where}: an array of ${v.itemType} holds a ${item.type}`);
          }
          this.value(item, where);
        }
        return;
    }
  }
  bytes(): Uint8Array {
    return this.buf.slice(0, this.length);
  }
}

const INTEGER_RANGE: Readonly<Record<string, readonly [number, number]>> = {
  uint8: [0, 0xff],
  int8: [-0x80, 0x7f],
  uint16: [0, 0xffff],
  int16: [-0x8000, 0x7fff],
  uint32: [0, 0xffffffff],
  int32: [-0x80000000, 0x7fffffff],
};

function checkInteger(type: string, v: number, where: string): void {
  const [lo, hi] = INTEGER_RANGE[type]!;
  if (!Number.isInteger(v) || v < lo || v > hi) throw internal(`${where}: ${v} is not a ${type}`);
}

function internal(detail: string): QuantdError {
  return new QuantdError('INTERNAL', { detail });
}

export interface GgufPlan {
  /** Header, metadata, tensor infos and the padding before the data section. */
  readonly header: Uint8Array;
  readonly tensors: readonly GgufTensorInfo[];
  readonly alignment: number;
  /** Bytes of the data section, every tensor padded to the alignment. */
  readonly dataBytes: number;
}

/**
 * Lays out a GGUF v3 file: offsets in tensor order, each tensor's data padded to the alignment
 * (`general.alignment` when the metadata has it, else 32). Rejects what ggml would refuse to
 * load: duplicate keys or names, names over 63 bytes, more than 4 dims, rows that are not whole
 * blocks.
 */
export function planGguf(kvs: readonly GgufKv[], tensors: readonly GgufTensorPlan[]): GgufPlan {
  const enc = new Encoder();
  for (const c of GGUF_MAGIC) enc.u8(c.charCodeAt(0));
  enc.u32(GGUF_VERSION);
  enc.u64(tensors.length);
  enc.u64(kvs.length);

  let alignment = GGUF_DEFAULT_ALIGNMENT;
  const keys = new Set<string>();
  for (const { key, value } of kvs) {
    if (keys.has(key)) throw internal(`GGUF metadata key ${quoted(key)} given twice`);
    keys.add(key);
    if (key === ALIGNMENT_KEY) {
      if (value.type !== 'uint32' || !isPowerOfTwo(value.value)) {
        throw internal(`${ALIGNMENT_KEY} must be a uint32 power of two`);
      }
      alignment = value.value;
    }
    enc.string(key);
    enc.u32(GGUF_VALUE_TYPES[value.type]);
    enc.value(value, `GGUF metadata ${quoted(key)}`);
  }

  const infos: GgufTensorInfo[] = [];
  const names = new Set<string>();
  let offset = 0;
  for (const t of tensors) {
    const type = ggmlTypeByName(t.type);
    if (type === undefined) throw internal(`unknown ggml type ${t.type}`);
    if (names.has(t.name)) throw internal(`GGUF tensor ${quoted(t.name)} planned twice`);
    names.add(t.name);
    if (utf8.encode(t.name).length > GGUF_MAX_TENSOR_NAME) {
      throw internal(`GGUF tensor name ${quoted(t.name)} is longer than ${GGUF_MAX_TENSOR_NAME} bytes`);
    }
    if (t.dims.length < 1 || t.dims.length > GGUF_MAX_DIMS) {
      throw internal(`GGUF tensor ${quoted(t.name)} has ${t.dims.length} dims`);
    }
    const numel = t.dims.reduce((a, b) => a * b, 1);
    if (t.dims[0]! % type.blockSize !== 0) {
      throw internal(`GGUF tensor ${quoted(t.name)}: rows of ${t.dims[0]} are not whole ${type.name} blocks`);
    }
    const bytes = (numel / type.blockSize) * type.typeSize;
    enc.string(t.name);
    enc.u32(t.dims.length);
    for (const d of t.dims) enc.u64(d);
    enc.u32(type.id);
    enc.u64(offset);
    infos.push({ name: t.name, dims: [...t.dims], type, offset, bytes, numel });
    offset += alignUp(bytes, alignment);
  }
  const padded = alignUp(enc.length, alignment);
  const header = new Uint8Array(padded);
  header.set(enc.bytes());
  return { header, tensors: infos, alignment, dataBytes: offset };
}

// --- reading ---------------------------------------------------------------------------------

/** Thrown by the parser when the header runs past the bytes given (but not past the file). */
export class GgufNeedMore extends Error {
  constructor(readonly bytes: number) {
    super(`the GGUF header needs more than ${bytes} bytes`);
  }
}

const utf8Strict = new TextDecoder('utf-8', { fatal: true });
const MAX_ARRAY_DEPTH = 8;

class Cursor {
  pos = 0;
  private readonly view: DataView;

  constructor(
    private readonly buf: Uint8Array,
    private readonly fileSize: number,
    private readonly source: string,
  ) {
    this.view = new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
  }

  /** Ensures n more bytes: within the buffer, or asks for more, or the file is truncated. */
  need(n: number, what: string): number {
    const at = this.pos;
    if (at + n > this.fileSize) {
      throw invalid(
        this.source,
        `the file is truncated: it ends at byte ${this.fileSize} while reading ${what}`,
      );
    }
    if (at + n > this.buf.length) throw new GgufNeedMore(at + n);
    this.pos += n;
    return at;
  }

  remaining(): number {
    return this.fileSize - this.pos;
  }

  u8(what: string): number {
    return this.view.getUint8(this.need(1, what));
  }
  u32(what: string): number {
    return this.view.getUint32(this.need(4, what), true);
  }
  u64(what: string): bigint {
    return this.view.getBigUint64(this.need(8, what), true);
  }

  /** A u64 that must fit a JS number (counts, lengths, offsets). */
  size(what: string): number {
    const v = this.u64(what);
    if (v > BigInt(Number.MAX_SAFE_INTEGER)) throw invalid(this.source, `${what} is ${v}, beyond any file`);
    return Number(v);
  }

  string(what: string): string {
    const n = this.size(`the length of ${what}`);
    if (n > this.remaining()) {
      throw invalid(this.source, `${what} claims ${n} bytes but only ${this.remaining()} remain in the file`);
    }
    const at = this.need(n, what);
    try {
      return utf8Strict.decode(this.buf.subarray(at, at + n));
    } catch {
      throw invalid(this.source, `${what} is not valid UTF-8`);
    }
  }

  value(type: GgufValueType, where: string, depth = 0): GgufValue {
    const v = this.view;
    switch (type) {
      case 'uint8':
        return { type, value: v.getUint8(this.need(1, where)) };
      case 'int8':
        return { type, value: v.getInt8(this.need(1, where)) };
      case 'uint16':
        return { type, value: v.getUint16(this.need(2, where), true) };
      case 'int16':
        return { type, value: v.getInt16(this.need(2, where), true) };
      case 'uint32':
        return { type, value: v.getUint32(this.need(4, where), true) };
      case 'int32':
        return { type, value: v.getInt32(this.need(4, where), true) };
      case 'float32':
        return { type, value: v.getFloat32(this.need(4, where), true) };
      case 'float64':
        return { type, value: v.getFloat64(this.need(8, where), true) };
      case 'uint64':
        return { type, value: v.getBigUint64(this.need(8, where), true) };
      case 'int64':
        return { type, value: v.getBigInt64(this.need(8, where), true) };
      case 'bool': {
        const b = v.getUint8(this.need(1, where));
        if (b > 1) throw invalid(this.source, `${where} is a bool stored as ${b} (must be 0 or 1)`);
        return { type, value: b === 1 };
      }
      case 'string':
        return { type, value: this.string(where) };
      case 'array': {
        if (depth >= MAX_ARRAY_DEPTH)
          throw invalid(this.source, `${where} nests arrays deeper than ${MAX_ARRAY_DEPTH}`);
        const itemType = this.valueType(`the item type of ${where}`);
        const n = this.size(`the length of ${where}`);
        const least = minBytes(itemType);
        if (n * least > this.remaining()) {
          throw invalid(
            this.source,
            `${where} claims ${n} ${itemType} items, more than the ${this.remaining()} bytes left in the file can hold`,
          );
        }
        const items: GgufValue[] = new Array<GgufValue>(n);
        for (let i = 0; i < n; i++) items[i] = this.value(itemType, `${where}[${i}]`, depth + 1);
        return { type, itemType, value: items };
      }
    }
  }

  valueType(what: string): GgufValueType {
    const id = this.u32(what);
    const t = TYPE_NAMES[id];
    if (t === undefined) throw invalid(this.source, `${what} is ${id}, not a GGUF value type (0..12)`);
    return t;
  }
}

/**
 * Parses and validates a GGUF header from the first `bytes.length` bytes of a file of
 * `fileSize` bytes. Throws GgufNeedMore when the header extends past `bytes` (read more and call
 * again), GGUF_INVALID for anything malformed.
 */
export function parseGgufHeader(bytes: Uint8Array, fileSize: number, source: string): GgufHeader {
  const c = new Cursor(bytes, fileSize, source);
  if (fileSize < 4) throw invalid(source, `not a GGUF file: it has only ${fileSize} bytes`);
  const magic = String.fromCharCode(...bytes.subarray(0, c.need(4, 'the magic') + 4));
  if (magic !== GGUF_MAGIC) {
    throw invalid(source, `not a GGUF file: it starts with ${quoted(magic)}, not "GGUF"`);
  }
  const version = c.u32('the version');
  if (version !== 3 && version !== 2) {
    const swapped =
      ((version & 0xff) << 24) |
      (((version >>> 8) & 0xff) << 16) |
      (((version >>> 16) & 0xff) << 8) |
      (version >>> 24);
    if (swapped === 2 || swapped === 3) throw invalid(source, 'big-endian GGUF files are not supported');
    throw invalid(
      source,
      version === 1
        ? 'GGUF version 1 is not supported (32-bit counts); convert it again'
        : `GGUF version ${version} is not supported (expected 3)`,
    );
  }
  const tensorCount = c.size('the tensor count');
  const kvCount = c.size('the metadata count');
  // each KV takes at least 8 (key length) + 4 (type) + 1 bytes, each tensor info 8 + 4 + 4 + 8
  if (kvCount * 13 + tensorCount * 24 > c.remaining()) {
    throw invalid(
      source,
      `the header claims ${kvCount} metadata pairs and ${tensorCount} tensors, more than the file's ${fileSize} bytes can hold`,
    );
  }

  const kvs = new Map<string, GgufValue>();
  for (let i = 0; i < kvCount; i++) {
    const key = c.string(`metadata key #${i}`);
    if (kvs.has(key)) throw invalid(source, `metadata key ${quoted(key)} appears twice`);
    const type = c.valueType(`the value type of ${quoted(key)}`);
    kvs.set(key, c.value(type, `metadata ${quoted(key)}`));
  }

  let alignment = GGUF_DEFAULT_ALIGNMENT;
  const a = kvs.get(ALIGNMENT_KEY);
  if (a !== undefined) {
    if (a.type !== 'uint32') throw invalid(source, `${ALIGNMENT_KEY} is a ${a.type}, not a uint32`);
    if (!isPowerOfTwo(a.value)) throw invalid(source, `${ALIGNMENT_KEY} is ${a.value}, not a power of two`);
    alignment = a.value;
  }

  const raw: Array<{ name: string; dims: number[]; type: GgmlTypeInfo; offset: number; numel: number }> = [];
  const names = new Set<string>();
  for (let i = 0; i < tensorCount; i++) {
    const name = c.string(`the name of tensor #${i}`);
    const what = `tensor ${quoted(name)}`;
    if (utf8.encode(name).length > GGUF_MAX_TENSOR_NAME + 1) {
      throw invalid(source, `${what}: the name is longer than 64 bytes`);
    }
    if (names.has(name)) throw invalid(source, `${what} appears twice`);
    names.add(name);
    const nDims = c.u32(`the dimension count of ${what}`);
    if (nDims > GGUF_MAX_DIMS)
      throw invalid(source, `${what} has ${nDims} dimensions (at most ${GGUF_MAX_DIMS})`);
    const dims: number[] = [];
    let numel = 1;
    for (let d = 0; d < nDims; d++) {
      const ne = c.u64(`dimension ${d} of ${what}`);
      if (ne > BigInt(Number.MAX_SAFE_INTEGER)) throw invalid(source, `${what}: dimension ${d} is ${ne}`);
      dims.push(Number(ne));
      numel *= Number(ne);
      if (numel > Number.MAX_SAFE_INTEGER) throw invalid(source, `${what} has more than 2^53 elements`);
    }
    const typeId = c.u32(`the type of ${what}`);
    const type = ggmlTypeById(typeId);
    if (type === undefined)
      throw invalid(source, `${what} has ggml type ${typeId}, which is not a known ggml type`);
    const ne0 = dims[0] ?? 1;
    if (ne0 % type.blockSize !== 0) {
      throw invalid(
        source,
        `${what}: rows of ${ne0} elements are not whole ${type.name} blocks of ${type.blockSize}`,
      );
    }
    const offset = c.size(`the offset of ${what}`);
    if (offset % alignment !== 0) {
      throw invalid(source, `${what} has offset ${offset}, not a multiple of the alignment ${alignment}`);
    }
    raw.push({ name, dims, type, offset, numel });
  }

  const dataOffset = alignUp(c.pos, alignment);
  const dataLength = Math.max(0, fileSize - dataOffset);
  const tensors: GgufTensorInfo[] = raw.map((t) => ({
    ...t,
    bytes: (t.numel / t.type.blockSize) * t.type.typeSize,
  }));
  for (const t of tensors) {
    if (t.offset + t.bytes > dataLength) {
      throw invalid(
        source,
        `tensor ${quoted(t.name)} (${t.bytes} bytes at data offset ${t.offset}) extends past the end of the file (${dataLength} bytes of data)`,
      );
    }
  }
  const byOffset = [...tensors].sort((x, y) => x.offset - y.offset);
  for (let i = 1; i < byOffset.length; i++) {
    const prev = byOffset[i - 1]!;
    const t = byOffset[i]!;
    if (t.offset < prev.offset + prev.bytes) {
      throw invalid(source, `tensors ${quoted(prev.name)} and ${quoted(t.name)} overlap`);
    }
  }
  return { version, kvs, tensors, alignment, dataOffset };
}

/** Whether `head` (the first bytes of a file) starts with the GGUF magic. */
export function isGguf(head: Uint8Array): boolean {
  return head.length >= 4 && head[0] === 0x47 && head[1] === 0x47 && head[2] === 0x55 && head[3] === 0x46;
}
