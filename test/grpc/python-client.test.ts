/**
 * gRPC for a strict client that is not quantd's: Python stubs generated from proto/ by protoc and
 * grpc_python_plugin (Debian's protobuf-compiler and protobuf-compiler-grpc; bookworm's
 * python3-grpc-tools 1.14 bundles a protoc too old for proto3 `optional`), run by Debian's
 * python3-grpcio and python3-protobuf (its C++ descriptor pool) against `quantd serve` as a child
 * process. test/grpc/python_client.py imports every generated module (a proto comment copied into
 * a docstring must not break it), calls every service — Quantizer (unary and stream), Jobs,
 * Calibrations, Health, reflection v1 and v1alpha (listing, file and symbol lookups, every file
 * added to a fresh DescriptorPool and compared with what protoc compiled into the stubs) and the
 * Open Inference Protocol's GRPCInferenceService — and reports; this file compares the results
 * with the HTTP API and the CLI on the same inputs. Without the tools the test is skipped with a
 * printed reason, or fails when CI is set.
 */
import { execFile, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { DATA_SHA256_KEY, parseSafetensors } from '../../src/format/index.js';
import { quantdAsync } from '../cli/cli-helpers.js';
import { MODEL, REPO } from '../cli/run-cli.js';
import { startChildServer, type ChildServer } from '../reliability/server.js';

const PYTHON = '/usr/bin/python3';
const run = promisify(execFile);
const require = createRequire(import.meta.url);

const QUANTD_PROTOS = [
  'quantd/v1/quantd.proto',
  'quantd/v1/jobs.proto',
  'quantd/v1/calibration.proto',
  'inference/grpc_service.proto',
];

/** The health and reflection protos the Node packages ship, under names Python can import. */
const SIDE_PROTOS: Record<string, string> = {
  'health_v1.proto': join(
    dirname(require.resolve('grpc-health-check/package.json')),
    'proto/health/v1/health.proto',
  ),
  'reflection_v1.proto': join(
    dirname(require.resolve('@grpc/reflection/package.json')),
    'build/proto/grpc/reflection/v1/reflection.proto',
  ),
  'reflection_v1alpha.proto': join(
    dirname(require.resolve('@grpc/reflection/package.json')),
    'build/proto/grpc/reflection/v1alpha/reflection.proto',
  ),
};

/** A program on PATH, or null. */
function which(program: string): string | null {
  const r = spawnSync('sh', ['-c', `command -v ${program}`], { encoding: 'utf8' });
  return r.status === 0 ? r.stdout.trim() : null;
}

const PLUGIN = which('grpc_python_plugin');

/** Why the Python client cannot run here, or null. */
function toolsMissing(): string | null {
  const probe = spawnSync(PYTHON, ['-c', 'import grpc, google.protobuf'], { encoding: 'utf8' });
  if (probe.error) return `${PYTHON}: ${probe.error.message}`;
  if (probe.status !== 0) return `${PYTHON} lacks grpc or protobuf: ${probe.stderr.trim().split('\n').pop()}`;
  if (which('protoc') === null) return 'no protoc';
  if (PLUGIN === null) return 'no grpc_python_plugin';
  return null;
}

const missing = toolsMissing();
if (missing !== null && !process.env['CI']) {
  console.warn(
    `test/grpc/python-client.test.ts skipped: ${missing} ` +
      '(apt-get install python3-grpcio python3-protobuf protobuf-compiler protobuf-compiler-grpc)',
  );
}

const sha256 = (data: Uint8Array): string => createHash('sha256').update(data).digest('hex');

/** python_client.py's floats(n, seed), as float32 bytes. */
function floats(n: number, seed: number): Uint8Array {
  const values = Float32Array.from({ length: n }, (_, i) => (((i * 37 + seed * 11) % 29) - 14) * 0.125);
  return new Uint8Array(values.buffer);
}

interface Refusal {
  status: string;
  quantd_code: string | null;
}

interface ReflectionReport {
  services: string[];
  files: string[];
  by_symbol: Record<string, string>;
  same_as_protoc: Record<string, boolean>;
  with_comments: Record<string, boolean>;
  map_entries: string[];
  axis_oneof: string | null;
  metadata_read_back: boolean;
  unknown_file: string;
}

interface Report {
  quantizer: {
    quantize: string;
    dequantize: string;
    fake_quantize: string;
    qparams: string;
    stream_chunks: number;
    metadata: Record<string, string>;
    stream_metadata: Record<string, string>;
    tensors: [string, string, number[]][];
    error: Refusal;
  };
  jobs: {
    id: string;
    listed: boolean;
    files: Record<string, string>;
    recorded_sha256: Record<string, string>;
    report_keys: string[];
    cancel_state: string;
    after_cancel: Refusal;
  };
  calibrations: {
    batches: number;
    folded: number;
    observed: string[];
    observers: [string, string, number][];
    statistics: [string, number, number][];
    listed: boolean;
    qparams: string[];
    export_format: string;
    statistics_bytes: number;
    after_delete: Refusal;
    linear_error: { n: number; in_features: number; out_features: number; weight_only_sqnr_db: number };
  };
  inference: {
    live: boolean;
    ready: boolean;
    model_ready: boolean;
    server: [string, string[]];
    model_inputs: string[];
    outputs: [string, string, number[]][];
    codes: string;
    output_parameters: Record<string, Record<string, string>>;
  };
  health: Record<string, string>;
  reflection: { v1: ReflectionReport; v1alpha: ReflectionReport };
}

describe.skipIf(missing !== null && !process.env['CI'])('a Python client from proto/ (grpcio)', () => {
  let dir = '';
  let server: ChildServer;
  let report: Report;
  const MODEL_PATH = 'models/m.safetensors';

  beforeAll(async () => {
    expect(missing, 'CI must have python3-grpcio, protobuf-compiler and protobuf-compiler-grpc').toBeNull();
    dir = mkdtempSync(join(tmpdir(), 'quantd-pygrpc-'));
    const stubs = join(dir, 'stubs');
    const side = join(dir, 'side');
    mkdirSync(stubs);
    mkdirSync(side);
    for (const [name, path] of Object.entries(SIDE_PROTOS)) copyFileSync(path, join(side, name));
    // the stubs a Python user generates from proto/ (with Debian's protoc and gRPC plugin)
    await run('protoc', [
      `--proto_path=${join(REPO, 'proto')}`,
      `--proto_path=${side}`,
      `--python_out=${stubs}`,
      `--grpc_python_out=${stubs}`,
      `--plugin=protoc-gen-grpc_python=${PLUGIN}`,
      ...QUANTD_PROTOS,
      ...Object.keys(SIDE_PROTOS),
    ]);
    mkdirSync(join(dir, 'data', 'models'), { recursive: true });
    copyFileSync(MODEL, join(dir, 'data', MODEL_PATH));
    server = await startChildServer({ QUANTD_DATA_DIR: join(dir, 'data') });
    const { stdout } = await run(
      PYTHON,
      [join(REPO, 'test', 'grpc', 'python_client.py'), stubs, server.target, MODEL_PATH],
      { cwd: dir, timeout: 120_000 },
    ).catch((err: Error & { stderr?: string }) => {
      throw new Error(`python_client.py failed: ${err.message}\n${err.stderr ?? ''}`);
    });
    report = JSON.parse(stdout) as Report;
  }, 180_000);
  afterAll(async () => {
    await server?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  /** POST /v1/OP of the child server with the raw [4, 8] float32 tensor python_client.py sends. */
  async function http(op: string, query: string, body: Uint8Array, raw = true): Promise<Uint8Array> {
    const headers: Record<string, string> = raw
      ? {
          'content-type': 'application/octet-stream',
          'x-tensor-dtype': 'float32',
          'x-tensor-shape': '4,8',
        }
      : { 'content-type': 'application/x-safetensors' };
    const reply = await fetch(`${server.base}/v1/${op}?${query}`, { method: 'POST', headers, body });
    const bytes = new Uint8Array(await reply.arrayBuffer());
    expect(reply.status, Buffer.from(bytes).toString()).toBe(200);
    return bytes;
  }

  it('Quantizer: the unary calls give what HTTP gives; the stream gives the unary bytes', async () => {
    const spec = 'qdtype=int8&scheme=per_channel&axis=0';
    const data = floats(32, 1);
    const quantized = await http('quantize', spec, data);
    expect(report.quantizer.quantize).toBe(sha256(quantized));
    expect(report.quantizer.dequantize).toBe(sha256(await http('dequantize', '', quantized, false)));
    expect(report.quantizer.fake_quantize).toBe(sha256(await http('fake-quantize', spec, data)));
    expect(report.quantizer.qparams).toBe(sha256(await http('qparams', spec, data)));
    // the chunks, joined, are the unary call's bytes (checked in Python)
    expect(report.quantizer.stream_chunks).toBeGreaterThan(0);
    expect(report.quantizer.metadata['format']).toBe('quantd.qtensor/1');
    expect(report.quantizer.stream_metadata).toEqual(report.quantizer.metadata);
    expect(report.quantizer.tensors.map(([name]) => name)).toEqual([
      'tensor',
      'tensor.scale',
      'tensor.zero_point',
    ]);
    expect(report.quantizer.error).toEqual({ status: 'INVALID_ARGUMENT', quantd_code: 'UNKNOWN_QDTYPE' });
  });

  it('Jobs: Submit, Get, List, Result, Report, Cancel; the result is the CLI’s file', async () => {
    const out = join(dir, 'cli.safetensors');
    const cli = await quantdAsync([
      'quantize',
      join(dir, 'data', MODEL_PATH),
      '-o',
      out,
      '--qdtype',
      'int8',
      '--scheme',
      'per_channel',
      '--axis',
      '0',
    ]);
    expect(cli.code, cli.stderr).toBe(0);
    const { jobs } = report;
    expect(jobs.listed).toBe(true);
    expect(Object.keys(jobs.files)).toEqual(['m.safetensors']);
    expect(jobs.recorded_sha256).toEqual(jobs.files);
    // the CLI's file, tensor for tensor; a job's file also records its data's SHA-256
    const job = parseSafetensors(readFileSync(join(dir, 'job-m.safetensors')), 'job');
    const local = parseSafetensors(readFileSync(out), 'cli');
    expect(job.header.entries).toEqual(local.header.entries);
    const { [DATA_SHA256_KEY]: recorded, ...metadata } = job.header.metadata ?? {};
    expect(metadata).toEqual(local.header.metadata);
    for (const [i, entry] of job.header.entries.entries()) {
      const cli = local.tensorBytes(local.header.entries[i]!);
      expect(Buffer.from(job.tensorBytes(entry)).equals(cli), entry.name).toBe(true);
    }
    expect(recorded).toMatch(/^[0-9a-f]{64}$/);
    expect(jobs.report_keys.length).toBeGreaterThan(0);
    // a finished job is removed by Cancel and returned as it was
    expect(jobs.cancel_state).toBe('succeeded');
    expect(jobs.after_cancel).toEqual({ status: 'NOT_FOUND', quantd_code: 'JOB_NOT_FOUND' });
  });

  it('Calibrations: Create, Observe (a client stream), Get, List, QParams, Export, Statistics, Delete, LinearError', () => {
    const c = report.calibrations;
    expect([c.batches, c.folded]).toEqual([2, 2]);
    expect(c.observed).toEqual(['a.input', 'lin.input']);
    expect(c.observers).toEqual([['a.input', 'min_max', 16]]);
    expect(c.statistics).toEqual([['lin.input', 4, 4]]);
    expect(c.listed).toBe(true);
    expect(c.qparams).toEqual(['a.input.scale', 'a.input.zero_point']);
    expect(c.export_format).toBe('quantd.calibration/1');
    expect(c.statistics_bytes).toBeGreaterThan(0);
    expect(c.after_delete).toEqual({ status: 'NOT_FOUND', quantd_code: 'CALIBRATION_NOT_FOUND' });
    expect(c.linear_error).toMatchObject({ n: 3, in_features: 4, out_features: 2 });
    expect(c.linear_error.weight_only_sqnr_db).toBeGreaterThan(20);
  });

  it('GRPCInferenceService: ServerLive, ServerReady, ModelReady, metadata, ModelInfer', () => {
    const i = report.inference;
    expect([i.live, i.ready, i.model_ready]).toEqual([true, true, true]);
    expect(i.server[0]).toBe('quantd');
    expect(i.model_inputs).toEqual(['input']);
    expect(i.outputs.map(([name, datatype]) => [name, datatype])).toEqual([
      ['codes', 'UINT8'],
      ['scale', 'FP32'],
      ['zero_point', 'INT32'],
    ]);
    expect(i.outputs[0]![2]).toEqual([4, 8]);
  });

  it('Health: SERVING for the server and every service, the inference service included', () => {
    expect(report.health).toEqual({
      '': 'SERVING',
      'quantd.v1.Quantizer': 'SERVING',
      'quantd.v1.Jobs': 'SERVING',
      'quantd.v1.Calibrations': 'SERVING',
      'inference.GRPCInferenceService': 'SERVING',
    });
  });

  it.each(['v1', 'v1alpha'] as const)(
    'reflection %s: the real files, each protoc’s descriptor, accepted by a DescriptorPool',
    (version) => {
      const r = report.reflection[version];
      expect(r.services).toEqual([
        'inference.GRPCInferenceService',
        'quantd.v1.Calibrations',
        'quantd.v1.Jobs',
        'quantd.v1.Quantizer',
      ]);
      expect(r.files).toEqual([...QUANTD_PROTOS].sort());
      expect(r.by_symbol).toEqual({
        'inference.GRPCInferenceService': 'inference/grpc_service.proto',
        'quantd.v1.Calibrations': 'quantd/v1/calibration.proto',
        'quantd.v1.Jobs': 'quantd/v1/jobs.proto',
        'quantd.v1.Quantizer': 'quantd/v1/quantd.proto',
        'quantd.v1.OperationResponse': 'quantd/v1/quantd.proto',
        'quantd.v1.Jobs.Result': 'quantd/v1/jobs.proto',
      });
      const every = (value: boolean) => Object.fromEntries(QUANTD_PROTOS.map((f) => [f, value]));
      expect(r.same_as_protoc).toEqual(every(true));
      expect(r.with_comments).toEqual(every(true));
      expect(r.map_entries).toEqual(['MetadataEntry']);
      expect(r.axis_oneof).toBe('_axis');
      expect(r.metadata_read_back).toBe(true);
      // the made-up file of before is gone: NOT_FOUND (5)
      expect(r.unknown_file).toBe('5');
    },
  );
});
