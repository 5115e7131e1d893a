/** Small constructors for GGUF metadata entries, so the converter's tables read as key → value. */
import type { GgufKv } from '../../../format/gguf.js';

export const u32 = (key: string, value: number): GgufKv => ({ key, value: { type: 'uint32', value } });
export const i32 = (key: string, value: number): GgufKv => ({ key, value: { type: 'int32', value } });
export const f32 = (key: string, value: number): GgufKv => ({ key, value: { type: 'float32', value } });
export const str = (key: string, value: string): GgufKv => ({ key, value: { type: 'string', value } });
export const bool = (key: string, value: boolean): GgufKv => ({ key, value: { type: 'bool', value } });

export const strings = (key: string, values: readonly string[]): GgufKv => ({
  key,
  value: { type: 'array', itemType: 'string', value: values.map((value) => ({ type: 'string', value })) },
});

export const floats = (key: string, values: readonly number[]): GgufKv => ({
  key,
  value: { type: 'array', itemType: 'float32', value: values.map((value) => ({ type: 'float32', value })) },
});

export const int32s = (key: string, values: readonly number[]): GgufKv => ({
  key,
  value: { type: 'array', itemType: 'int32', value: values.map((value) => ({ type: 'int32', value })) },
});
