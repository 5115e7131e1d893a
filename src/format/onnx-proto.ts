/**
 * The protocol-buffers wire format, as much of it as ONNX files need (written here from the
 * encoding spec, protobuf.dev/programming-guides/encoding): varints (wire type 0), 64-bit and
 * 32-bit fixed fields (1, 5; skipped when reading), and length-delimited fields (2: strings,
 * bytes, nested messages, packed repeated scalars). No schema and no reflection: src/format/onnx.ts
 * names the fields of each ONNX message.
 */

export const WIRE_VARINT = 0;
export const WIRE_I64 = 1;
export const WIRE_LEN = 2;
export const WIRE_I32 = 5;

const TEXT = new TextEncoder();

/** Appends fields to a message; `finish()` concatenates them. */
export class ProtoWriter {
  private readonly parts: Uint8Array[] = [];
  private pending: number[] = [];
  private size = 0;

  /** Bytes written so far. */
  get length(): number {
    return this.size + this.pending.length;
  }

  private flushPending(): void {
    if (this.pending.length === 0) return;
    this.parts.push(Uint8Array.from(this.pending));
    this.size += this.pending.length;
    this.pending = [];
  }

  /** A varint of a non-negative safe integer, or of a negative one as int64 (ten bytes). */
  varint(value: number): this {
    if (!Number.isSafeInteger(value)) throw new RangeError(`varint of ${value}`);
    if (value < 0) {
      let v = BigInt.asUintN(64, BigInt(value));
      for (let i = 0; i < 9; i++) {
        this.pending.push(Number(v & 0x7fn) | 0x80);
        v >>= 7n;
      }
      this.pending.push(Number(v));
      return this;
    }
    let v = value;
    while (v >= 0x80) {
      this.pending.push((v % 0x80) | 0x80);
      v = Math.floor(v / 0x80);
    }
    this.pending.push(v);
    return this;
  }

  tag(field: number, wire: number): this {
    return this.varint(field * 8 + wire);
  }

  /** An int32 / int64 / enum / bool field (varint). */
  int(field: number, value: number): this {
    return this.tag(field, WIRE_VARINT).varint(value);
  }

  bytes(field: number, value: Uint8Array): this {
    this.tag(field, WIRE_LEN).varint(value.length);
    this.flushPending();
    if (value.length > 0) {
      this.parts.push(value);
      this.size += value.length;
    }
    return this;
  }

  /** A 32-bit fixed field (float): the tag, then four little-endian bytes. */
  fixed32(field: number, value: Uint8Array): this {
    this.tag(field, WIRE_I32);
    this.pending.push(...value.subarray(0, 4));
    return this;
  }

  string(field: number, value: string): this {
    return this.bytes(field, TEXT.encode(value));
  }

  /** A nested message. */
  message(field: number, message: ProtoWriter): this {
    return this.bytes(field, message.finish());
  }

  finish(): Uint8Array {
    this.flushPending();
    if (this.parts.length === 1) return this.parts[0]!;
    const out = new Uint8Array(this.size);
    let at = 0;
    for (const p of this.parts) {
      out.set(p, at);
      at += p.length;
    }
    this.parts.splice(0, this.parts.length, out);
    return out;
  }
}

/** Malformed protobuf: where (a byte offset) and what. */
export class ProtoError extends Error {
  constructor(
    readonly offset: number,
    readonly detail: string,
  ) {
    super(`${detail} at byte ${offset}`);
  }
}

export interface ProtoField {
  readonly field: number;
  readonly wire: number;
  /** The value of a varint field (an int64 that does not fit a double's integers is refused). */
  readonly int: number;
  /** The payload of a length-delimited field (a view into the message). */
  readonly bytes: Uint8Array;
  /** The field's offset in the message. */
  readonly offset: number;
}

const EMPTY = new Uint8Array(0);

/** Reads a varint at `at`; returns the value (as int64: negative values too) and the next offset. */
export function readVarint(buf: Uint8Array, at: number): { value: number; next: number } {
  let value = 0;
  let scale = 1;
  for (let i = 0; i < 10; i++) {
    if (at + i >= buf.length) throw new ProtoError(at, 'truncated varint');
    const byte = buf[at + i]!;
    if (i < 7) {
      value += (byte & 0x7f) * scale;
      scale *= 0x80;
      if (byte < 0x80) return { value, next: at + i + 1 };
      continue;
    }
    // 8 bytes or more: past 2^49, exactly only with BigInt (and int64 negatives are ten bytes)
    let big = BigInt(value);
    for (let j = i; j < 10; j++) {
      if (at + j >= buf.length) throw new ProtoError(at, 'truncated varint');
      const b = buf[at + j]!;
      big |= BigInt(b & 0x7f) << BigInt(7 * j);
      if (b < 0x80) {
        const signed = BigInt.asIntN(64, big);
        if (signed > BigInt(Number.MAX_SAFE_INTEGER) || signed < BigInt(Number.MIN_SAFE_INTEGER)) {
          throw new ProtoError(at, `integer ${signed} out of range`);
        }
        return { value: Number(signed), next: at + j + 1 };
      }
    }
    break;
  }
  throw new ProtoError(at, 'varint longer than ten bytes');
}

/** The fields of a message, in order. Throws ProtoError on malformed input. */
export function* protoFields(buf: Uint8Array): Generator<ProtoField> {
  let at = 0;
  while (at < buf.length) {
    const offset = at;
    const key = readVarint(buf, at);
    at = key.next;
    const field = Math.floor(key.value / 8);
    const wire = key.value % 8;
    if (field < 1 || key.value < 0) throw new ProtoError(offset, `field number ${field}`);
    if (wire === WIRE_VARINT) {
      const v = readVarint(buf, at);
      at = v.next;
      yield { field, wire, int: v.value, bytes: EMPTY, offset };
    } else if (wire === WIRE_LEN) {
      const len = readVarint(buf, at);
      at = len.next;
      if (len.value < 0 || at + len.value > buf.length) {
        throw new ProtoError(offset, `field ${field} of ${len.value} bytes runs past the end`);
      }
      yield { field, wire, int: 0, bytes: buf.subarray(at, at + len.value), offset };
      at += len.value;
    } else if (wire === WIRE_I64 || wire === WIRE_I32) {
      const n = wire === WIRE_I64 ? 8 : 4;
      if (at + n > buf.length) throw new ProtoError(offset, `fixed field ${field} runs past the end`);
      yield { field, wire, int: 0, bytes: buf.subarray(at, at + n), offset };
      at += n;
    } else {
      throw new ProtoError(offset, `wire type ${wire} (field ${field})`);
    }
  }
}

/** The integers of a repeated int field: packed (one length-delimited run) or one varint. */
export function repeatedInts(f: ProtoField): number[] {
  if (f.wire === WIRE_VARINT) return [f.int];
  if (f.wire !== WIRE_LEN) throw new ProtoError(f.offset, `field ${f.field} is not an integer`);
  const out: number[] = [];
  let at = 0;
  while (at < f.bytes.length) {
    const v = readVarint(f.bytes, at);
    out.push(v.value);
    at = v.next;
  }
  return out;
}

export function utf8(f: ProtoField): string {
  if (f.wire !== WIRE_LEN) throw new ProtoError(f.offset, `field ${f.field} is not a string`);
  try {
    return new TextDecoder('utf-8', { fatal: true }).decode(f.bytes);
  } catch {
    throw new ProtoError(f.offset, `field ${f.field} is not valid UTF-8`);
  }
}
