/**
 * quantd's operations as Open Inference Protocol models (docs/oip.md): quantize, dequantize,
 * fake_quantize and choose_qparams, each with one version, "1". What a model's metadata says, and
 * which inputs, outputs and request parameters each takes.
 */
import { CODE_SPEC_OPTION_NAMES, SPEC_OPTION_NAMES } from '../core/index.js';
import { QuantdError } from '../errors/index.js';
import { OUTPUT_DTYPE_ROW, type Operation } from '../service/index.js';
import type { FixedDatatype } from './datatypes.js';

export const SERVER_NAME = 'quantd';
export const MODEL_VERSION = '1';
export const PLATFORM = 'quantd';
/** Server metadata `extensions`. */
export const EXTENSIONS = ['binary_tensor_data', 'parameters'] as const;

export const MODEL_NAMES = ['quantize', 'dequantize', 'fake_quantize', 'choose_qparams'] as const;
export type ModelName = (typeof MODEL_NAMES)[number];

export interface TensorMetadata {
  readonly name: string;
  readonly datatype: FixedDatatype;
  /** -1: any size; [-1] also stands for any rank (quantd takes tensors of any shape). */
  readonly shape: readonly number[];
}

export interface InputDefinition extends TensorMetadata {
  /** The datatypes accepted (metadata shows the first). */
  readonly accepts: readonly FixedDatatype[];
  readonly required: boolean;
}

export interface ModelDefinition {
  readonly name: ModelName;
  readonly op: Operation;
  /** Inputs; the optional ones are documented, not listed in the metadata. */
  readonly inputs: readonly InputDefinition[];
  /** Outputs in the order they are returned when the request names none. */
  readonly outputs: readonly TensorMetadata[];
  /** Request parameters that set the operation (besides the protocol's own, see PROTOCOL_PARAMETERS). */
  readonly parameters: readonly string[];
}

const FLOATS: readonly FixedDatatype[] = ['FP32', 'FP16', 'BF16'];
const NUMBERS: readonly FixedDatatype[] = [
  'FP32',
  'FP64',
  'FP16',
  'BF16',
  'INT8',
  'UINT8',
  'INT16',
  'UINT16',
  'INT32',
  'UINT32',
  'INT64',
];
const ANY: readonly number[] = [-1];
const SPEC = SPEC_OPTION_NAMES;

const floatInput: InputDefinition = {
  name: 'input',
  datatype: 'FP32',
  shape: ANY,
  accepts: FLOATS,
  required: true,
};
/** Given qparams (NAME.scale / NAME.zero_point, docs/container.md): used instead of choosing. */
const givenScale: InputDefinition = {
  name: 'scale',
  datatype: 'FP32',
  shape: ANY,
  accepts: NUMBERS,
  required: false,
};
const givenZeroPoint: InputDefinition = {
  name: 'zero_point',
  datatype: 'INT32',
  shape: ANY,
  accepts: NUMBERS,
  required: false,
};
const scale: TensorMetadata = { name: 'scale', datatype: 'FP32', shape: ANY };
const zeroPoint: TensorMetadata = { name: 'zero_point', datatype: 'INT32', shape: ANY };

export const MODELS: Readonly<Record<ModelName, ModelDefinition>> = {
  quantize: {
    name: 'quantize',
    op: 'quantize',
    inputs: [floatInput, givenScale, givenZeroPoint],
    // codes: INT8 for the default qdtype int8; the datatype follows qdtype (docs/oip.md)
    outputs: [{ name: 'codes', datatype: 'INT8', shape: ANY }, scale, zeroPoint],
    parameters: SPEC,
  },
  dequantize: {
    name: 'dequantize',
    op: 'dequantize',
    inputs: [
      {
        name: 'codes',
        datatype: 'INT8',
        shape: ANY,
        accepts: ['INT8', 'UINT8', 'INT16', 'INT32'],
        required: true,
      },
      { name: 'scale', datatype: 'FP32', shape: ANY, accepts: ['FP32'], required: true },
      { name: 'zero_point', datatype: 'INT32', shape: ANY, accepts: ['INT32', 'FP32'], required: true },
    ],
    outputs: [{ name: 'output', datatype: 'FP32', shape: ANY }],
    parameters: [...CODE_SPEC_OPTION_NAMES, OUTPUT_DTYPE_ROW.name],
  },
  fake_quantize: {
    name: 'fake_quantize',
    op: 'fake-quantize',
    inputs: [floatInput, givenScale, givenZeroPoint],
    outputs: [
      { name: 'output', datatype: 'FP32', shape: ANY },
      { name: 'mask', datatype: 'BOOL', shape: ANY },
    ],
    parameters: [...SPEC, 'dtype'],
  },
  choose_qparams: {
    name: 'choose_qparams',
    op: 'qparams',
    inputs: [floatInput],
    outputs: [scale, zeroPoint],
    parameters: SPEC,
  },
};

/** Request parameters of the protocol itself, taken by every model. */
export const PROTOCOL_PARAMETERS = ['binary_data_output', 'timeout', 'priority'] as const;

/** The model `name` (and `version`, when given), or NOT_FOUND. */
export function findModel(name: string, version?: string): ModelDefinition {
  const model = (MODEL_NAMES as readonly string[]).includes(name) ? MODELS[name as ModelName] : undefined;
  if (!model) {
    throw new QuantdError('NOT_FOUND', {
      detail: `there is no model ${JSON.stringify(name)}; the models are ${MODEL_NAMES.join(', ')}`,
    });
  }
  if (version !== undefined && version !== '' && version !== MODEL_VERSION) {
    throw new QuantdError('NOT_FOUND', {
      detail: `model ${name} has no version ${JSON.stringify(version)}; its only version is ${MODEL_VERSION}`,
    });
  }
  return model;
}

export interface ServerMetadata {
  readonly name: string;
  readonly version: string;
  readonly extensions: readonly string[];
}

export function serverMetadata(version: string): ServerMetadata {
  return { name: SERVER_NAME, version, extensions: [...EXTENSIONS] };
}

export interface ModelMetadata {
  readonly name: string;
  readonly versions: readonly string[];
  readonly platform: string;
  readonly inputs: readonly TensorMetadata[];
  readonly outputs: readonly TensorMetadata[];
}

const metadataOf = (t: TensorMetadata): TensorMetadata => ({
  name: t.name,
  datatype: t.datatype,
  shape: [...t.shape],
});

export function modelMetadata(model: ModelDefinition): ModelMetadata {
  return {
    name: model.name,
    versions: [MODEL_VERSION],
    platform: PLATFORM,
    inputs: model.inputs.filter((i) => i.required).map(metadataOf),
    outputs: model.outputs.map(metadataOf),
  };
}
