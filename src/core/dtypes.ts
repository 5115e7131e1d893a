/**
 * Element types: the float types quantd reads, the quantized types it writes, and the
 * safetensors dtype strings both are stored as.
 */

export const FLOAT_DTYPES = ['float32', 'float16', 'bfloat16'] as const;
export type FloatDType = (typeof FLOAT_DTYPES)[number];

export const QDTYPES = [
  'int8',
  'uint8',
  'int16',
  'int32',
  'int4',
  'uint4',
  'int2',
  'uint2',
  'float8_e4m3fn',
  'float8_e5m2',
] as const;
export type QDType = (typeof QDTYPES)[number];

/** safetensors dtype strings (the format's own names). */
export type StDType =
  | 'BOOL'
  | 'U8'
  | 'I8'
  | 'I16'
  | 'U16'
  | 'I32'
  | 'U32'
  | 'I64'
  | 'U64'
  | 'F16'
  | 'BF16'
  | 'F32'
  | 'F64'
  | 'F8_E4M3'
  | 'F8_E5M2';

/** Bytes per element of each safetensors dtype. */
export const ST_DTYPE_SIZE: Readonly<Record<StDType, number>> = {
  BOOL: 1,
  U8: 1,
  I8: 1,
  I16: 2,
  U16: 2,
  I32: 4,
  U32: 4,
  I64: 8,
  U64: 8,
  F16: 2,
  BF16: 2,
  F32: 4,
  F64: 8,
  F8_E4M3: 1,
  F8_E5M2: 1,
};

export function isStDType(value: string): value is StDType {
  return Object.hasOwn(ST_DTYPE_SIZE, value);
}

export const FLOAT_TO_ST: Readonly<Record<FloatDType, StDType>> = {
  float32: 'F32',
  float16: 'F16',
  bfloat16: 'BF16',
};

export function floatDTypeOfSt(st: StDType): FloatDType | undefined {
  if (st === 'F32') return 'float32';
  if (st === 'F16') return 'float16';
  if (st === 'BF16') return 'bfloat16';
  return undefined;
}

export interface QDTypeInfo {
  readonly name: QDType;
  /** Bits per element in storage (sub-byte types are packed). */
  readonly bits: number;
  /** Default (and widest allowed) quant_min / quant_max. */
  readonly min: number;
  readonly max: number;
  readonly signed: boolean;
  readonly float8: boolean;
  /** The safetensors dtype the quantized values are stored as. */
  readonly st: StDType;
}

const info = (
  name: QDType,
  bits: number,
  min: number,
  max: number,
  st: StDType,
  float8 = false,
): QDTypeInfo => ({ name, bits, min, max, signed: min < 0, float8, st });

export const QDTYPE_INFO: Readonly<Record<QDType, QDTypeInfo>> = {
  int8: info('int8', 8, -128, 127, 'I8'),
  uint8: info('uint8', 8, 0, 255, 'U8'),
  int16: info('int16', 16, -32768, 32767, 'I16'),
  int32: info('int32', 32, -2147483648, 2147483647, 'I32'),
  int4: info('int4', 4, -8, 7, 'U8'),
  uint4: info('uint4', 4, 0, 15, 'U8'),
  int2: info('int2', 2, -2, 1, 'U8'),
  uint2: info('uint2', 2, 0, 3, 'U8'),
  float8_e4m3fn: info('float8_e4m3fn', 8, -448, 448, 'F8_E4M3', true),
  float8_e5m2: info('float8_e5m2', 8, -57344, 57344, 'F8_E5M2', true),
};

export function isQDType(value: string): value is QDType {
  return Object.hasOwn(QDTYPE_INFO, value);
}

export function isFloatDType(value: string): value is FloatDType {
  return (FLOAT_DTYPES as readonly string[]).includes(value);
}

export function isSubByte(q: QDType): boolean {
  return QDTYPE_INFO[q].bits < 8;
}

/** Storage bytes for `numel` quantized elements (sub-byte types pack flat, last byte padded). */
export function quantizedByteLength(q: QDType, numel: number): number {
  const bits = QDTYPE_INFO[q].bits;
  return Math.ceil((numel * bits) / 8);
}

export function numelOf(shape: readonly number[]): number {
  let n = 1;
  for (const d of shape) n *= d;
  return n;
}
