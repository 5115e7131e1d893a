/**
 * Open Inference Protocol tensor datatypes: their sizes, the safetensors dtypes quantd stores
 * them as, and conversions between tensor bytes (little-endian, row-major: the binary tensor data
 * extension, raw_input_contents) and element lists (REST `data` arrays, gRPC typed `contents`).
 *
 * FP16 and BF16 have no JSON or typed-contents form in the protocol. quantd accepts them in REST
 * `data` as numbers, each rounded to the nearest FP16 / BF16 value (ties to even), and writes them
 * there as the exact decimal value of each element; gRPC carries them in raw contents only.
 */
import {
  bfloat16BitsFromFloat32,
  float16BitsFromFloat32,
  float32FromBfloat16Bits,
  float32FromFloat16Bits,
  toFloat32,
  type StDType,
} from '../core/index.js';
import { QuantdError } from '../errors/index.js';

export const DATATYPES = [
  'BOOL',
  'UINT8',
  'UINT16',
  'UINT32',
  'UINT64',
  'INT8',
  'INT16',
  'INT32',
  'INT64',
  'FP16',
  'FP32',
  'FP64',
  'BF16',
  'BYTES',
] as const;
export type Datatype = (typeof DATATYPES)[number];
/** The datatypes with a fixed element size (every one but BYTES). */
export type FixedDatatype = Exclude<Datatype, 'BYTES'>;

export function isDatatype(value: string): value is Datatype {
  return (DATATYPES as readonly string[]).includes(value);
}

/** Bytes per element. */
export const DATATYPE_SIZE: Readonly<Record<FixedDatatype, number>> = {
  BOOL: 1,
  UINT8: 1,
  UINT16: 2,
  UINT32: 4,
  UINT64: 8,
  INT8: 1,
  INT16: 2,
  INT32: 4,
  INT64: 8,
  FP16: 2,
  FP32: 4,
  FP64: 8,
  BF16: 2,
};

/** The safetensors dtype of each fixed-size datatype (the same bytes). */
export const ST_OF_DATATYPE: Readonly<Record<FixedDatatype, StDType>> = {
  BOOL: 'BOOL',
  UINT8: 'U8',
  UINT16: 'U16',
  UINT32: 'U32',
  UINT64: 'U64',
  INT8: 'I8',
  INT16: 'I16',
  INT32: 'I32',
  INT64: 'I64',
  FP16: 'F16',
  FP32: 'F32',
  FP64: 'F64',
  BF16: 'BF16',
};

/** The datatype a safetensors dtype travels as: fp8 codes are UINT8 (their bytes, as stored). */
export function datatypeOfSt(st: StDType): FixedDatatype {
  if (st === 'F8_E4M3' || st === 'F8_E5M2') return 'UINT8';
  const found = (Object.keys(ST_OF_DATATYPE) as FixedDatatype[]).find((d) => ST_OF_DATATYPE[d] === st);
  if (!found) throw new QuantdError('INTERNAL', { detail: `no datatype for safetensors dtype ${st}` });
  return found;
}

/**
 * The InferTensorContents field that carries each datatype in gRPC (FP16 and BF16: none, raw
 * contents only).
 */
export const CONTENTS_FIELD: Readonly<Record<Datatype, string | null>> = {
  BOOL: 'bool_contents',
  UINT8: 'uint_contents',
  UINT16: 'uint_contents',
  UINT32: 'uint_contents',
  UINT64: 'uint64_contents',
  INT8: 'int_contents',
  INT16: 'int_contents',
  INT32: 'int_contents',
  INT64: 'int64_contents',
  FP16: null,
  FP32: 'fp32_contents',
  FP64: 'fp64_contents',
  BF16: null,
  BYTES: 'bytes_contents',
};

const INT_RANGE: Readonly<Partial<Record<FixedDatatype, readonly [number, number]>>> = {
  UINT8: [0, 255],
  UINT16: [0, 65535],
  UINT32: [0, 4294967295],
  INT8: [-128, 127],
  INT16: [-32768, 32767],
  INT32: [-2147483648, 2147483647],
};

function invalid(input: string, detail: string): QuantdError {
  return new QuantdError('INFER_INPUT_INVALID', { input, detail });
}

/**
 * The 16-bit pattern nearest `x` (ties to even). The float32 encoders round a float32; a JSON
 * number is a double, whose rounding to float32 first could land on a 16-bit midpoint it was not
 * on. So the result is corrected against its neighbour on the other side of `x`.
 */
function nearest16(
  x: number,
  encode: (v: number) => number,
  decode: (bits: number) => number,
  infinity: number,
): number {
  if (Number.isNaN(x) || !Number.isFinite(x)) return encode(x);
  const sign = x < 0 || Object.is(x, -0) ? 0x8000 : 0;
  const a = Math.abs(x);
  const bits = encode(a);
  const value = decode(bits);
  // Overflow is decided right by float32 rounding (both thresholds are float32 values).
  if (value === a || bits >= infinity) return sign | bits;
  const other = a > value ? bits + 1 : bits - 1;
  if (other >= infinity) return sign | bits;
  const d1 = Math.abs(a - value);
  const d2 = Math.abs(a - decode(other));
  const pick = d2 < d1 || (d2 === d1 && (other & 1) === 0) ? other : bits;
  return sign | pick;
}

export const fp16BitsOf = (x: number): number =>
  nearest16(x, float16BitsFromFloat32, float32FromFloat16Bits, 0x7c00);
export const bf16BitsOf = (x: number): number =>
  nearest16(x, bfloat16BitsFromFloat32, float32FromBfloat16Bits, 0x7f80);

/**
 * The bytes of `count` elements of `datatype` given as a list (REST `data`, gRPC typed contents),
 * each checked: booleans for BOOL, integers in range for the integer types, numbers for the float
 * types. `input` and `where` name the tensor and the list in messages.
 */
export function bytesFromElements(
  datatype: FixedDatatype,
  values: ArrayLike<unknown>,
  input: string,
  where: string,
): Uint8Array {
  const n = values.length;
  const out = new Uint8Array(n * DATATYPE_SIZE[datatype]);
  const view = new DataView(out.buffer);
  const bad = (i: number, expected: string): never => {
    const shown = JSON.stringify(values[i]) ?? String(values[i]);
    throw invalid(input, `${where}[${i}] is ${shown.slice(0, 40)}; ${datatype} elements are ${expected}`);
  };
  const number = (i: number): number => {
    const v = values[i];
    if (typeof v === 'number') return v;
    return bad(i, 'numbers');
  };
  switch (datatype) {
    case 'BOOL':
      for (let i = 0; i < n; i++) {
        const v = values[i];
        if (typeof v !== 'boolean') bad(i, 'true or false');
        out[i] = v ? 1 : 0;
      }
      return out;
    case 'FP32':
      for (let i = 0; i < n; i++) view.setFloat32(i * 4, number(i), true);
      return out;
    case 'FP64':
      for (let i = 0; i < n; i++) view.setFloat64(i * 8, number(i), true);
      return out;
    case 'FP16':
      for (let i = 0; i < n; i++) view.setUint16(i * 2, fp16BitsOf(number(i)), true);
      return out;
    case 'BF16':
      for (let i = 0; i < n; i++) view.setUint16(i * 2, bf16BitsOf(number(i)), true);
      return out;
    case 'INT64':
    case 'UINT64': {
      const [lo, hi] = datatype === 'INT64' ? [-(2n ** 63n), 2n ** 63n - 1n] : [0n, 2n ** 64n - 1n];
      for (let i = 0; i < n; i++) {
        const v = values[i];
        // 64-bit values arrive as numbers (JSON, exact up to 2^53), bigints or decimal strings
        // (protobuf int64 as some loaders give them).
        let big: bigint | undefined;
        if (typeof v === 'bigint') big = v;
        else if (typeof v === 'number' && Number.isSafeInteger(v)) big = BigInt(v);
        else if (typeof v === 'string' && /^-?\d+$/.test(v)) big = BigInt(v);
        if (big === undefined || big < lo || big > hi) return bad(i, `integers in [${lo}, ${hi}]`);
        if (datatype === 'INT64') view.setBigInt64(i * 8, big, true);
        else view.setBigUint64(i * 8, big, true);
      }
      return out;
    }
    default: {
      const [lo, hi] = INT_RANGE[datatype]!;
      const size = DATATYPE_SIZE[datatype];
      for (let i = 0; i < n; i++) {
        const v = values[i];
        if (typeof v !== 'number' || !Number.isInteger(v) || v < lo || v > hi)
          bad(i, `integers in [${lo}, ${hi}]`);
        const x = v as number;
        if (size === 1) out[i] = x & 0xff;
        else if (size === 2) view.setUint16(i * 2, x & 0xffff, true);
        else view.setUint32(i * 4, x >>> 0, true);
      }
      return out;
    }
  }
}

/** A little-endian typed view of `bytes` (copied when unaligned). */
function aligned(bytes: Uint8Array, size: number): ArrayBuffer {
  if (bytes.byteOffset % size === 0 && bytes.buffer instanceof ArrayBuffer) return bytes.buffer;
  return bytes.slice().buffer;
}

function viewOf<T>(
  ctor: new (buffer: ArrayBuffer, offset: number, length: number) => T,
  bytes: Uint8Array,
  size: number,
): T {
  const buffer = aligned(bytes, size);
  const offset = buffer === bytes.buffer ? bytes.byteOffset : 0;
  return new ctor(buffer, offset, bytes.byteLength / size);
}

/**
 * The elements of a tensor as a list: numbers (FP16 and BF16: their exact values; INT64 / UINT64:
 * numbers, exact up to 2^53) or booleans (BOOL).
 */
export function elementsOf(datatype: FixedDatatype, bytes: Uint8Array): number[] | boolean[] {
  switch (datatype) {
    case 'BOOL':
      return Array.from(bytes, (b) => b !== 0);
    case 'UINT8':
      return Array.from(bytes);
    case 'INT8':
      return Array.from(new Int8Array(bytes.buffer, bytes.byteOffset, bytes.byteLength));
    case 'UINT16':
      return Array.from(viewOf(Uint16Array, bytes, 2));
    case 'INT16':
      return Array.from(viewOf(Int16Array, bytes, 2));
    case 'UINT32':
      return Array.from(viewOf(Uint32Array, bytes, 4));
    case 'INT32':
      return Array.from(viewOf(Int32Array, bytes, 4));
    case 'UINT64':
      return Array.from(viewOf(BigUint64Array, bytes, 8), (v) => Number(v));
    case 'INT64':
      return Array.from(viewOf(BigInt64Array, bytes, 8), (v) => Number(v));
    case 'FP32':
      return Array.from(viewOf(Float32Array, bytes, 4));
    case 'FP64':
      return Array.from(viewOf(Float64Array, bytes, 8));
    case 'FP16':
      return Array.from(toFloat32(bytes, 'float16'));
    case 'BF16':
      return Array.from(toFloat32(bytes, 'bfloat16'));
  }
}

/**
 * REST `data`: a flat list or nested lists (row-major), flattened. Anything else than arrays of
 * scalars is refused.
 */
export function flattenData(data: unknown, input: string): unknown[] {
  if (!Array.isArray(data)) throw invalid(input, '"data" must be an array of elements (flat or nested)');
  if (!data.some(Array.isArray)) return data;
  const out: unknown[] = [];
  const stack: { items: unknown[]; at: number }[] = [{ items: data, at: 0 }];
  while (stack.length > 0) {
    const top = stack[stack.length - 1]!;
    if (top.at === top.items.length) {
      stack.pop();
      continue;
    }
    const item = top.items[top.at++];
    if (Array.isArray(item)) {
      if (stack.length >= 64) throw invalid(input, '"data" is nested more than 64 levels deep');
      stack.push({ items: item, at: 0 });
    } else {
      out.push(item);
    }
  }
  return out;
}
