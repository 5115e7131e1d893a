/**
 * A summary of an ONNX model (`quantd inspect FILE.onnx`): its graph's inputs and outputs and
 * whether they make it a whole decoder (input_ids in, logits out, as onnxruntime-genai runs it),
 * its nodes by operator, its initializers and the external data files they live in, each
 * com.microsoft MatMulNBits weight (found and checked as the onnx layout's reader does) with its
 * bits and block size, and genai_config.json when one lies beside the model. The model file is
 * parsed; external data is not read, only its files' sizes.
 */
import { stat } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { OnnxFileReader, externalDataPath } from '../format/onnx-file.js';
import { onnxDTypeName, onnxElementBytes, type OnnxInitializer, type OnnxValueInfo } from '../format/onnx.js';
import { readJsonObject } from './quantization-config-files.js';
import { matMulNBitsGroups } from './layouts/onnx.js';
import type { QuantizedWeight } from './layouts/types.js';

export interface OnnxValueSummary {
  readonly name: string;
  readonly dtype: string;
  /** Dimensions: sizes, or the names of symbolic ones (batch_size, sequence_length). */
  readonly shape: readonly (number | string)[];
}

export interface OnnxInitializerSummary {
  readonly name: string;
  readonly dtype: string;
  readonly shape: readonly number[];
  /** null for a type with no fixed element size (strings). */
  readonly bytes: number | null;
  /** The external data file that holds it; null when the model file does. */
  readonly location: string | null;
}

export interface OnnxSummary {
  readonly file: string;
  readonly format: 'onnx';
  readonly size: number;
  readonly ir_version: number;
  readonly opsets: ReadonlyArray<{ readonly domain: string; readonly version: number }>;
  readonly producer: string;
  readonly graph: {
    readonly name: string;
    readonly inputs: readonly OnnxValueSummary[];
    readonly outputs: readonly OnnxValueSummary[];
  };
  /** A whole decoder: input_ids among the graph's inputs and logits among its outputs. */
  readonly decoder: boolean;
  /** Nodes per operator (domain.op_type for a domain other than ONNX's), in order of first use. */
  readonly nodes: Readonly<Record<string, number>>;
  /** The external data files the initializers name, with their sizes on disk (null: missing). */
  readonly external_data: ReadonlyArray<{ readonly file: string; readonly bytes: number | null }>;
  readonly initializers: { readonly count: number; readonly bytes: number };
  /** The MatMulNBits weights, in node order. */
  readonly quantized: readonly QuantizedWeight[];
  /** The initializers that are not part of a MatMulNBits weight. */
  readonly tensors: readonly OnnxInitializerSummary[];
  /** The parsed genai_config.json beside the model, or null. */
  readonly genai_config: Readonly<Record<string, unknown>> | null;
  readonly total: { readonly weights: number; readonly bytes: number; readonly bits_per_weight: number };
}

function valueSummary(v: OnnxValueInfo): OnnxValueSummary {
  return { name: v.name, dtype: onnxDTypeName(v.elemType), shape: v.dims };
}

function initializerSummary(t: OnnxInitializer): OnnxInitializerSummary {
  const size = onnxElementBytes(t.dataType);
  return {
    name: t.name,
    dtype: onnxDTypeName(t.dataType),
    shape: t.dims,
    bytes: size === undefined ? null : t.dims.reduce((n, d) => n * d, 1) * size,
    location: t.data.kind === 'external' ? t.data.location : null,
  };
}

async function sizeOf(path: string): Promise<number | null> {
  try {
    return (await stat(path)).size;
  } catch {
    return null; // reported as missing; reading a tensor would say why
  }
}

/** Summarizes the ONNX model at `path` (LAYOUT_INVALID / FEATURE_UNSUPPORTED as the reader's). */
export async function summarizeOnnx(path: string): Promise<OnnxSummary> {
  const reader = await OnnxFileReader.open(path);
  try {
    const { model } = reader;
    const groups = matMulNBitsGroups(path, model);
    const byName = new Map(model.initializers.map((t) => [t.name, initializerSummary(t)]));
    const quantized = groups.map((g): QuantizedWeight => {
      const stored = [g.b, g.scales, ...(g.zeroPoints ? [g.zeroPoints] : [])].map((t) => byName.get(t.name)!);
      const bits = g.node.attributes.find((a) => a.name === 'bits')?.i ?? 4;
      const level = g.node.attributes.find((a) => a.name === 'accuracy_level')?.i;
      return {
        name: g.weight,
        stored: stored.map((t) => t.name),
        shape: [g.shapes.N, g.shapes.K],
        bits,
        group_size: g.shapes.blockSize,
        scale_dtype: onnxDTypeName(g.scales.dataType),
        bytes: stored.reduce((n, t) => n + (t.bytes ?? 0), 0),
        details: {
          zero_points: g.zeroPoints !== null,
          ...(level !== undefined && { accuracy_level: level }),
        },
      };
    });
    const inWeights = new Set(quantized.flatMap((q) => q.stored));
    const nodes: Record<string, number> = {};
    for (const n of model.nodes) {
      const op = n.domain === '' || n.domain === 'ai.onnx' ? n.opType : `${n.domain}.${n.opType}`;
      nodes[op] = (nodes[op] ?? 0) + 1;
    }
    // each file once, checked as the reader checks it before opening one (inside the model's
    // directory): a model file never makes inspect look elsewhere
    const locations = new Map<string, string>();
    for (const t of byName.values()) {
      if (t.location !== null && !locations.has(t.location)) {
        locations.set(t.location, externalDataPath(path, t.location, t.name));
      }
    }
    const externalData = await Promise.all(
      [...locations].map(async ([file, at]) => ({ file, bytes: await sizeOf(at) })),
    );
    const weights = quantized.reduce((n, q) => n + q.shape[0]! * q.shape[1]!, 0);
    const bytes = quantized.reduce((n, q) => n + q.bytes, 0);
    const inputs = model.inputs.map(valueSummary);
    const outputs = model.outputs.map(valueSummary);
    return {
      file: path,
      format: 'onnx',
      size: (await stat(path)).size,
      ir_version: model.irVersion,
      opsets: model.opsets,
      producer: `${model.producerName} ${model.producerVersion}`.trim(),
      graph: { name: model.graphName, inputs, outputs },
      decoder: inputs.some((i) => i.name === 'input_ids') && outputs.some((o) => o.name === 'logits'),
      nodes,
      external_data: externalData,
      initializers: {
        count: model.initializers.length,
        bytes: [...byName.values()].reduce((n, t) => n + (t.bytes ?? 0), 0),
      },
      quantized,
      tensors: [...byName.values()].filter((t) => !inWeights.has(t.name)),
      genai_config: await genaiConfig(path),
      total: {
        weights,
        bytes,
        bits_per_weight: weights === 0 ? 0 : Math.round(((bytes * 8) / weights) * 1e4) / 1e4,
      },
    };
  } finally {
    await reader.close();
  }
}

/** genai_config.json beside the model (onnxruntime-genai's), parsed; null when there is none. */
function genaiConfig(path: string): Promise<Record<string, unknown> | null> {
  return readJsonObject(join(dirname(path), 'genai_config.json'));
}
