/**
 * Building an ONNX graph node by node: each node's outputs get unique names from its own, small
 * constants become inline initializers, and the model's own tensors are referenced by name (their
 * data goes to the external data file, onnx-file.ts). The result is an OnnxModelPlan plus the
 * inline initializers, which onnx-file.ts writes.
 */
import { ATTR_FLOAT, ATTR_INT, ATTR_INTS, ATTR_STRING, ONNX_DTYPE, type OnnxAttribute } from './onnx.js';
import type { OnnxInitializer, OnnxNode, OnnxValueInfo } from './onnx.js';

export type AttributeValue = number | string | readonly number[] | { readonly float: number };

/** A node's attributes: integers as numbers, floats as { float }, lists of integers as arrays. */
export type Attributes = Readonly<Record<string, AttributeValue>>;

function attribute(name: string, value: AttributeValue): OnnxAttribute {
  if (typeof value === 'number') return { name, type: ATTR_INT, i: value };
  if (typeof value === 'string') return { name, type: ATTR_STRING, s: value };
  if (Array.isArray(value)) return { name, type: ATTR_INTS, ints: value as readonly number[] };
  return { name, type: ATTR_FLOAT, f: (value as { readonly float: number }).float };
}

export class GraphBuilder {
  readonly nodes: OnnxNode[] = [];
  readonly inputs: OnnxValueInfo[] = [];
  readonly outputs: OnnxValueInfo[] = [];
  /** Small tensors whose bytes live in the model file itself. */
  readonly inline: OnnxInitializer[] = [];
  private readonly used = new Set<string>();
  private readonly constants = new Map<string, string>();

  /** A name not taken yet: `base`, else `base_2`, `base_3`, … */
  unique(base: string): string {
    let name = base;
    for (let i = 2; this.used.has(name); i++) name = `${base}_${i}`;
    this.used.add(name);
    return name;
  }

  /** Reserves names that exist outside the builder (the model's own initializers). */
  reserve(names: Iterable<string>): void {
    for (const n of names) this.used.add(n);
  }

  /**
   * Adds a node and returns its output names (`outputs` of them, named `name/output_i`, or
   * `name/output` for one). An empty string in `inputs` is an omitted optional input.
   */
  node(
    opType: string,
    inputs: readonly string[],
    options: {
      readonly name: string;
      readonly attributes?: Attributes;
      readonly domain?: string;
      readonly outputs?: number;
    },
  ): string[] {
    const name = this.unique(options.name);
    const count = options.outputs ?? 1;
    const outputs = Array.from({ length: count }, (_, i) =>
      this.unique(count === 1 ? `${name}/output_0` : `${name}/output_${i}`),
    );
    this.nodes.push({
      name,
      opType,
      domain: options.domain ?? '',
      inputs: [...inputs],
      outputs,
      attributes: Object.entries(options.attributes ?? {}).map(([k, v]) => attribute(k, v)),
    });
    return outputs;
  }

  /** A node with one output. */
  op(
    opType: string,
    inputs: readonly string[],
    name: string,
    attributes?: Attributes,
    domain?: string,
  ): string {
    return this.node(opType, inputs, { name, attributes: attributes ?? {}, domain: domain ?? '' })[0]!;
  }

  /** Renames a node output to a graph-level name (a graph output must carry its declared name). */
  output(value: string, info: OnnxValueInfo): void {
    this.nodes.push({
      name: this.unique(`${info.name}/Identity`),
      opType: 'Identity',
      domain: '',
      inputs: [value],
      outputs: [info.name],
      attributes: [],
    });
    this.used.add(info.name);
    this.outputs.push(info);
  }

  input(info: OnnxValueInfo): string {
    this.used.add(info.name);
    this.inputs.push(info);
    return info.name;
  }

  /** An int64 constant (shapes, axes), shared by every node that uses the same values. */
  int64(values: readonly number[], dims: readonly number[] = [values.length]): string {
    const key = `i64:${dims.join('x')}:${values.join(',')}`;
    return this.constant(key, () => {
      const bytes = new Uint8Array(values.length * 8);
      const view = new DataView(bytes.buffer);
      values.forEach((v, i) => view.setBigInt64(i * 8, BigInt(v), true));
      return { dataType: ONNX_DTYPE.INT64, dims, bytes };
    });
  }

  /** A float32 constant (a scalar unless dims are given). */
  float32(values: readonly number[], dims: readonly number[] = []): string {
    const key = `f32:${dims.join('x')}:${values.join(',')}`;
    return this.constant(key, () => {
      const bytes = new Uint8Array(new Float32Array(values).buffer);
      return { dataType: ONNX_DTYPE.FLOAT, dims, bytes };
    });
  }

  /** A float32 tensor of any size held inline (rotary tables, folded norms). */
  tensor(name: string, data: Float32Array, dims: readonly number[]): string {
    const unique = this.unique(name);
    this.inline.push({
      name: unique,
      dataType: ONNX_DTYPE.FLOAT,
      dims,
      data: { kind: 'raw', bytes: new Uint8Array(data.buffer, data.byteOffset, data.byteLength) },
    });
    return unique;
  }

  private constant(
    key: string,
    make: () => { dataType: number; dims: readonly number[]; bytes: Uint8Array },
  ): string {
    const known = this.constants.get(key);
    if (known !== undefined) return known;
    const { dataType, dims, bytes } = make();
    const name = this.unique(`const_${this.constants.size}`);
    this.inline.push({ name, dataType, dims, data: { kind: 'raw', bytes } });
    this.constants.set(key, name);
    return name;
  }
}
