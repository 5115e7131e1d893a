/**
 * ONNX models (onnx/onnx.proto, proto2) as quantd writes and reads them: a ModelProto whose graph
 * holds nodes, typed graph inputs and outputs, and initializers whose data lives inline
 * (`raw_data`) or in an external file (`data_location = EXTERNAL` with `location` / `offset` /
 * `length` entries). Only those messages and fields; field numbers from onnx.proto:
 *
 *   ModelProto          ir_version 1, producer_name 2, producer_version 3, domain 4, model_version 5,
 *                       doc_string 6, graph 7, opset_import 8, metadata_props 14
 *   OperatorSetIdProto  domain 1, version 2
 *   StringStringEntry   key 1, value 2
 *   GraphProto          node 1, name 2, initializer 5, doc_string 10, input 11, output 12, value_info 13
 *   NodeProto           input 1, output 2, name 3, op_type 4, attribute 5, doc_string 6, domain 7
 *   AttributeProto      name 1, f 2, i 3, s 4, ints 8, type 20 (INT = 2, FLOAT = 1, STRING = 3, INTS = 7)
 *   ValueInfoProto      name 1, type 2
 *   TypeProto           tensor_type 1 → Tensor: elem_type 1, shape 2 → TensorShapeProto: dim 1 →
 *                       Dimension: dim_value 1, dim_param 2
 *   TensorProto         dims 1, data_type 2, name 8, raw_data 9, external_data 13, data_location 14
 *                       (float_data 4, int32_data 5, string_data 6, int64_data 7, double_data 10,
 *                       uint64_data 11 and segment 3 are recognised only to be refused)
 *
 * Fields are written in field-number order, as protobuf's own serializers do (so ir_version comes
 * first, which detection relies on); repeated scalars unpacked (`dims` is not [packed] in proto2);
 * a reader accepts both.
 */
import { ST_DTYPE_SIZE, type StDType } from '../core/dtypes.js';
import {
  ProtoError,
  ProtoWriter,
  protoFields,
  repeatedInts,
  utf8,
  WIRE_LEN,
  WIRE_VARINT,
} from './onnx-proto.js';

/** TensorProto.DataType values. */
export const ONNX_DTYPE = {
  FLOAT: 1,
  UINT8: 2,
  INT8: 3,
  UINT16: 4,
  INT16: 5,
  INT32: 6,
  INT64: 7,
  STRING: 8,
  BOOL: 9,
  FLOAT16: 10,
  DOUBLE: 11,
  UINT32: 12,
  UINT64: 13,
  COMPLEX64: 14,
  COMPLEX128: 15,
  BFLOAT16: 16,
  FLOAT8E4M3FN: 17,
  FLOAT8E4M3FNUZ: 18,
  FLOAT8E5M2: 19,
  FLOAT8E5M2FNUZ: 20,
  UINT4: 21,
  INT4: 22,
} as const;

/** Each safetensors dtype's ONNX type (every one has one). */
export const ONNX_OF_ST: Readonly<Record<StDType, number>> = {
  BOOL: ONNX_DTYPE.BOOL,
  U8: ONNX_DTYPE.UINT8,
  I8: ONNX_DTYPE.INT8,
  I16: ONNX_DTYPE.INT16,
  U16: ONNX_DTYPE.UINT16,
  I32: ONNX_DTYPE.INT32,
  U32: ONNX_DTYPE.UINT32,
  I64: ONNX_DTYPE.INT64,
  U64: ONNX_DTYPE.UINT64,
  F16: ONNX_DTYPE.FLOAT16,
  BF16: ONNX_DTYPE.BFLOAT16,
  F32: ONNX_DTYPE.FLOAT,
  F64: ONNX_DTYPE.DOUBLE,
  F8_E4M3: ONNX_DTYPE.FLOAT8E4M3FN,
  F8_E5M2: ONNX_DTYPE.FLOAT8E5M2,
};

/** The safetensors dtype of an ONNX type, where there is one. */
export const ST_OF_ONNX: ReadonlyMap<number, StDType> = new Map(
  Object.entries(ONNX_OF_ST).map(([st, onnx]) => [onnx, st as StDType]),
);

/** Bytes per element of the ONNX types that have a safetensors dtype (others: undefined). */
export function onnxElementBytes(dataType: number): number | undefined {
  const st = ST_OF_ONNX.get(dataType);
  return st === undefined ? undefined : ST_DTYPE_SIZE[st];
}

export function onnxDTypeName(dataType: number): string {
  return Object.entries(ONNX_DTYPE).find(([, v]) => v === dataType)?.[0] ?? `data_type ${dataType}`;
}

export const ATTR_FLOAT = 1;
export const ATTR_INT = 2;
export const ATTR_STRING = 3;
export const ATTR_INTS = 7;

export interface OnnxAttribute {
  readonly name: string;
  readonly type: number;
  readonly i?: number;
  readonly f?: number;
  readonly s?: string;
  readonly ints?: readonly number[];
}

export interface OnnxNode {
  readonly name: string;
  readonly opType: string;
  readonly domain: string;
  readonly inputs: readonly string[];
  readonly outputs: readonly string[];
  readonly attributes: readonly OnnxAttribute[];
}

/** A graph input or output: a tensor of `elemType` with fixed (number) or symbolic (string) dims. */
export interface OnnxValueInfo {
  readonly name: string;
  readonly elemType: number;
  readonly dims: readonly (number | string)[];
}

/** Where an initializer's bytes are. */
export type OnnxData =
  | { readonly kind: 'raw'; readonly bytes: Uint8Array }
  | {
      readonly kind: 'external';
      readonly location: string;
      readonly offset: number;
      readonly length: number | null;
    };

export interface OnnxInitializer {
  readonly name: string;
  readonly dataType: number;
  readonly dims: readonly number[];
  readonly data: OnnxData;
}

export interface OnnxModel {
  readonly irVersion: number;
  readonly opsets: ReadonlyArray<{ readonly domain: string; readonly version: number }>;
  readonly producerName: string;
  readonly producerVersion: string;
  readonly docString: string;
  readonly metadata: ReadonlyArray<{ readonly key: string; readonly value: string }>;
  readonly graphName: string;
  readonly nodes: readonly OnnxNode[];
  readonly inputs: readonly OnnxValueInfo[];
  readonly outputs: readonly OnnxValueInfo[];
  readonly initializers: readonly OnnxInitializer[];
}

// --- encoding ----------------------------------------------------------------------------------

const entry = (key: string, value: string): ProtoWriter => new ProtoWriter().string(1, key).string(2, value);

function encodeAttribute(a: OnnxAttribute): ProtoWriter {
  const w = new ProtoWriter().string(1, a.name);
  if (a.type === ATTR_FLOAT) {
    const f = new Uint8Array(4);
    new DataView(f.buffer).setFloat32(0, a.f ?? 0, true);
    w.fixed32(2, f);
  }
  if (a.type === ATTR_INT) w.int(3, a.i ?? 0);
  if (a.type === ATTR_STRING) w.string(4, a.s ?? '');
  if (a.type === ATTR_INTS) for (const v of a.ints ?? []) w.int(8, v);
  return w.int(20, a.type);
}

function encodeNode(n: OnnxNode): ProtoWriter {
  const w = new ProtoWriter();
  for (const i of n.inputs) w.string(1, i);
  for (const o of n.outputs) w.string(2, o);
  if (n.name !== '') w.string(3, n.name);
  w.string(4, n.opType);
  for (const a of n.attributes) w.message(5, encodeAttribute(a));
  if (n.domain !== '') w.string(7, n.domain);
  return w;
}

function encodeValueInfo(v: OnnxValueInfo): ProtoWriter {
  const shape = new ProtoWriter();
  for (const d of v.dims) {
    shape.message(1, typeof d === 'number' ? new ProtoWriter().int(1, d) : new ProtoWriter().string(2, d));
  }
  const tensor = new ProtoWriter().int(1, v.elemType).message(2, shape);
  return new ProtoWriter().string(1, v.name).message(2, new ProtoWriter().message(1, tensor));
}

function encodeInitializer(t: OnnxInitializer): ProtoWriter {
  const w = new ProtoWriter();
  for (const d of t.dims) w.int(1, d);
  w.int(2, t.dataType);
  w.string(8, t.name);
  if (t.data.kind === 'raw') {
    w.bytes(9, t.data.bytes);
  } else {
    w.message(13, entry('location', t.data.location));
    w.message(13, entry('offset', String(t.data.offset)));
    if (t.data.length !== null) w.message(13, entry('length', String(t.data.length)));
    w.int(14, 1); // DataLocation.EXTERNAL
  }
  return w;
}

/** The ModelProto bytes of `model`. */
export function encodeModel(model: OnnxModel): Uint8Array {
  const graph = new ProtoWriter();
  for (const n of model.nodes) graph.message(1, encodeNode(n));
  graph.string(2, model.graphName);
  for (const t of model.initializers) graph.message(5, encodeInitializer(t));
  for (const i of model.inputs) graph.message(11, encodeValueInfo(i));
  for (const o of model.outputs) graph.message(12, encodeValueInfo(o));
  const w = new ProtoWriter().int(1, model.irVersion).string(2, model.producerName);
  if (model.producerVersion !== '') w.string(3, model.producerVersion);
  if (model.docString !== '') w.string(6, model.docString);
  w.message(7, graph);
  for (const o of model.opsets) {
    const op = new ProtoWriter();
    if (o.domain !== '') op.string(1, o.domain);
    w.message(8, op.int(2, o.version));
  }
  for (const m of model.metadata) w.message(14, entry(m.key, m.value));
  return w.finish();
}

// --- decoding ----------------------------------------------------------------------------------

/** Malformed or unsupported content of an ONNX file: `where` names the message. */
export class OnnxFormatError extends Error {
  constructor(
    readonly where: string,
    readonly detail: string,
  ) {
    super(`${where}: ${detail}`);
  }
}

function fields(
  buf: Uint8Array,
  where: string,
): ReturnType<typeof protoFields> extends Generator<infer F> ? F[] : never {
  try {
    return [...protoFields(buf)];
  } catch (err) {
    if (err instanceof ProtoError) throw new OnnxFormatError(where, `malformed protobuf: ${err.message}`);
    throw err;
  }
}

type Field = ReturnType<typeof fields>[number];

function expectWire(f: Field, wire: number, where: string, name: string): void {
  if (f.wire !== wire) throw new OnnxFormatError(where, `field ${name} (${f.field}) has wire type ${f.wire}`);
}

function str(f: Field, where: string, name: string): string {
  expectWire(f, WIRE_LEN, where, name);
  try {
    return utf8(f);
  } catch {
    throw new OnnxFormatError(where, `field ${name} is not valid UTF-8`);
  }
}

function ints(f: Field, where: string, name: string): number[] {
  try {
    return repeatedInts(f);
  } catch (err) {
    throw new OnnxFormatError(where, `field ${name}: ${(err as Error).message}`);
  }
}

function int(f: Field, where: string, name: string): number {
  expectWire(f, WIRE_VARINT, where, name);
  return f.int;
}

function decodeEntry(buf: Uint8Array, where: string): { key: string; value: string } {
  let key = '';
  let value = '';
  for (const f of fields(buf, where)) {
    if (f.field === 1) key = str(f, where, 'key');
    else if (f.field === 2) value = str(f, where, 'value');
  }
  return { key, value };
}

function decodeAttribute(buf: Uint8Array, where: string): OnnxAttribute {
  let name = '';
  let type = 0;
  let i: number | undefined;
  let fl: number | undefined;
  let s: string | undefined;
  const list: number[] = [];
  for (const f of fields(buf, where)) {
    if (f.field === 1) name = str(f, where, 'name');
    else if (f.field === 2 && f.wire === 5)
      fl = new DataView(f.bytes.buffer, f.bytes.byteOffset, 4).getFloat32(0, true);
    else if (f.field === 3) i = int(f, where, 'i');
    else if (f.field === 4) s = str(f, where, 's');
    else if (f.field === 8) list.push(...ints(f, where, 'ints'));
    else if (f.field === 20) type = int(f, where, 'type');
  }
  return {
    name,
    type,
    ...(i !== undefined && { i }),
    ...(fl !== undefined && { f: fl }),
    ...(s !== undefined && { s }),
    ...(list.length > 0 && { ints: list }),
  };
}

function decodeNode(buf: Uint8Array, where: string): OnnxNode {
  const inputs: string[] = [];
  const outputs: string[] = [];
  const attributes: OnnxAttribute[] = [];
  let name = '';
  let opType = '';
  let domain = '';
  for (const f of fields(buf, where)) {
    if (f.field === 1) inputs.push(str(f, where, 'input'));
    else if (f.field === 2) outputs.push(str(f, where, 'output'));
    else if (f.field === 3) name = str(f, where, 'name');
    else if (f.field === 4) opType = str(f, where, 'op_type');
    else if (f.field === 5) {
      expectWire(f, WIRE_LEN, where, 'attribute');
      attributes.push(decodeAttribute(f.bytes, `${where}.attribute[${attributes.length}]`));
    } else if (f.field === 7) domain = str(f, where, 'domain');
  }
  return { name, opType, domain, inputs, outputs, attributes };
}

function decodeValueInfo(buf: Uint8Array, where: string): OnnxValueInfo {
  let name = '';
  let elemType = 0;
  const dims: (number | string)[] = [];
  for (const f of fields(buf, where)) {
    if (f.field === 1) name = str(f, where, 'name');
    else if (f.field === 2) {
      expectWire(f, WIRE_LEN, where, 'type');
      for (const t of fields(f.bytes, `${where}.type`)) {
        if (t.field !== 1 || t.wire !== WIRE_LEN) continue; // not a tensor type
        for (const g of fields(t.bytes, `${where}.type.tensor_type`)) {
          if (g.field === 1) elemType = int(g, where, 'elem_type');
          else if (g.field === 2 && g.wire === WIRE_LEN) {
            for (const d of fields(g.bytes, `${where}.shape`)) {
              if (d.field !== 1 || d.wire !== WIRE_LEN) continue;
              let dim: number | string = '?';
              for (const v of fields(d.bytes, `${where}.shape.dim`)) {
                if (v.field === 1) dim = int(v, where, 'dim_value');
                else if (v.field === 2) dim = str(v, where, 'dim_param');
              }
              dims.push(dim);
            }
          }
        }
      }
    }
  }
  return { name, elemType, dims };
}

const TYPED_DATA: Readonly<Record<number, string>> = {
  3: 'segment',
  4: 'float_data',
  5: 'int32_data',
  6: 'string_data',
  7: 'int64_data',
  10: 'double_data',
  11: 'uint64_data',
};

function decodeInitializer(buf: Uint8Array, where: string): OnnxInitializer {
  const dims: number[] = [];
  let dataType = 0;
  let name = '';
  let raw: Uint8Array | null = null;
  let location = 0;
  const external = new Map<string, string>();
  for (const f of fields(buf, where)) {
    if (f.field === 1) dims.push(...ints(f, where, 'dims'));
    else if (f.field === 2) dataType = int(f, where, 'data_type');
    else if (f.field === 8) name = str(f, where, 'name');
    else if (f.field === 9) {
      expectWire(f, WIRE_LEN, where, 'raw_data');
      raw = f.bytes;
    } else if (f.field === 13) {
      expectWire(f, WIRE_LEN, where, 'external_data');
      const e = decodeEntry(f.bytes, `${where}.external_data`);
      external.set(e.key, e.value);
    } else if (f.field === 14) location = int(f, where, 'data_location');
    else if (TYPED_DATA[f.field] !== undefined) {
      throw new OnnxFormatError(
        name === '' ? where : name,
        `stores its values in ${TYPED_DATA[f.field]}; quantd reads tensors stored as raw_data or external data`,
      );
    }
  }
  const at = name === '' ? where : name;
  if (dims.some((d) => d < 0)) throw new OnnxFormatError(at, `has negative dims [${dims.join(', ')}]`);
  if (location === 1) {
    const loc = external.get('location');
    if (loc === undefined) throw new OnnxFormatError(at, 'is external data without a location');
    const number = (key: string): number | null => {
      const text = external.get(key);
      if (text === undefined) return null;
      if (!/^\d+$/.test(text) || !Number.isSafeInteger(Number(text))) {
        throw new OnnxFormatError(at, `external data ${key} ${JSON.stringify(text)} is not a byte count`);
      }
      return Number(text);
    };
    return {
      name,
      dataType,
      dims,
      data: { kind: 'external', location: loc, offset: number('offset') ?? 0, length: number('length') },
    };
  }
  if (location !== 0) throw new OnnxFormatError(at, `has data_location ${location}`);
  return { name, dataType, dims, data: { kind: 'raw', bytes: raw ?? new Uint8Array(0) } };
}

/** Parses a ModelProto (the messages and fields listed above; others are skipped). */
export function decodeModel(buf: Uint8Array): OnnxModel {
  let irVersion = 0;
  let producerName = '';
  let producerVersion = '';
  let docString = '';
  let graph: Uint8Array | null = null;
  const opsets: { domain: string; version: number }[] = [];
  const metadata: { key: string; value: string }[] = [];
  for (const f of fields(buf, 'ModelProto')) {
    if (f.field === 1) irVersion = int(f, 'ModelProto', 'ir_version');
    else if (f.field === 2) producerName = str(f, 'ModelProto', 'producer_name');
    else if (f.field === 3) producerVersion = str(f, 'ModelProto', 'producer_version');
    else if (f.field === 6) docString = str(f, 'ModelProto', 'doc_string');
    else if (f.field === 7) {
      expectWire(f, WIRE_LEN, 'ModelProto', 'graph');
      graph = f.bytes;
    } else if (f.field === 8) {
      expectWire(f, WIRE_LEN, 'ModelProto', 'opset_import');
      let domain = '';
      let version = 0;
      for (const g of fields(f.bytes, 'ModelProto.opset_import')) {
        if (g.field === 1) domain = str(g, 'OperatorSetIdProto', 'domain');
        else if (g.field === 2) version = int(g, 'OperatorSetIdProto', 'version');
      }
      opsets.push({ domain, version });
    } else if (f.field === 14) {
      expectWire(f, WIRE_LEN, 'ModelProto', 'metadata_props');
      metadata.push(decodeEntry(f.bytes, 'ModelProto.metadata_props'));
    }
  }
  if (irVersion < 1) throw new OnnxFormatError('ModelProto', 'has no ir_version');
  if (graph === null) throw new OnnxFormatError('ModelProto', 'has no graph');
  const nodes: OnnxNode[] = [];
  const inputs: OnnxValueInfo[] = [];
  const outputs: OnnxValueInfo[] = [];
  const initializers: OnnxInitializer[] = [];
  let graphName = '';
  for (const f of fields(graph, 'GraphProto')) {
    const where = (what: string, n: number): string => `GraphProto.${what}[${n}]`;
    if (f.field === 2) graphName = str(f, 'GraphProto', 'name');
    else if (f.field === 1 || f.field === 5 || f.field === 11 || f.field === 12) {
      expectWire(f, WIRE_LEN, 'GraphProto', String(f.field));
      if (f.field === 1) nodes.push(decodeNode(f.bytes, where('node', nodes.length)));
      else if (f.field === 5)
        initializers.push(decodeInitializer(f.bytes, where('initializer', initializers.length)));
      else if (f.field === 11) inputs.push(decodeValueInfo(f.bytes, where('input', inputs.length)));
      else outputs.push(decodeValueInfo(f.bytes, where('output', outputs.length)));
    } else if (f.field === 15) {
      throw new OnnxFormatError('GraphProto', 'has sparse initializers, which quantd does not read');
    }
  }
  return {
    irVersion,
    opsets,
    producerName,
    producerVersion,
    docString,
    metadata,
    graphName,
    nodes,
    inputs,
    outputs,
    initializers,
  };
}

/** The ModelProto fields (number → wire type) a model's first bytes may hold, for detection. */
const MODEL_FIELDS: ReadonlyMap<number, number> = new Map([
  [1, WIRE_VARINT],
  [2, WIRE_LEN],
  [3, WIRE_LEN],
  [4, WIRE_LEN],
  [5, WIRE_VARINT],
  [6, WIRE_LEN],
  [7, WIRE_LEN],
  [8, WIRE_LEN],
  [14, WIRE_LEN],
  [20, WIRE_LEN],
  [25, WIRE_LEN],
]);

/**
 * Whether `head` (a file's first bytes, possibly cut short) starts like an ONNX ModelProto:
 * ir_version (field 1) first with a plausible value (1..100), then only ModelProto fields of the
 * right wire types, until the bytes end (a field running past the end of `head` is accepted).
 */
export function looksLikeOnnxModel(head: Uint8Array): boolean {
  if (head.length < 2 || head[0] !== 0x08) return false;
  let at = 0;
  let first = true;
  try {
    for (;;) {
      if (at >= head.length) return true;
      let key: number;
      let next: number;
      try {
        ({ value: key, next } = readVarintSafe(head, at));
      } catch {
        return !first; // cut short inside a tag
      }
      const field = Math.floor(key / 8);
      const wire = key % 8;
      if (MODEL_FIELDS.get(field) !== wire) return false;
      let value: number;
      try {
        ({ value, next } = readVarintSafe(head, next));
      } catch {
        return !first;
      }
      if (first) {
        if (field !== 1 || value < 1 || value > 100) return false;
        first = false;
      }
      at = wire === WIRE_LEN ? next + value : next;
      if (wire === WIRE_LEN && value < 0) return false;
    }
  } catch {
    return false;
  }
}

function readVarintSafe(buf: Uint8Array, at: number): { value: number; next: number } {
  let value = 0;
  let scale = 1;
  for (let i = 0; i < 8; i++) {
    if (at + i >= buf.length) throw new Error('cut');
    const b = buf[at + i]!;
    value += (b & 0x7f) * scale;
    scale *= 0x80;
    if (b < 0x80) return { value, next: at + i + 1 };
  }
  throw new Error('too long');
}
