/**
 * The gRPC side services: grpc.health.v1.Health (Check answers SERVING for '', quantd.v1.Quantizer,
 * quantd.v1.Jobs, quantd.v1.Calibrations and inference.GRPCInferenceService, NOT_FOUND for others;
 * Watch sees NOT_SERVING when shutdown starts; a call in flight at shutdown still completes, new
 * calls are refused) and server reflection (v1 and v1alpha ServerReflectionInfo list the services
 * served and return protoc's descriptor of each file under its own name — proto/quantd.protoset,
 * byte for byte: map entries named FieldEntry, proto3 optional fields with their flag and
 * synthetic oneof, fully qualified type names — with the Quantizer's five methods), each over a
 * real connection with clients built from the packages' own proto files.
 * test/grpc/python-client.test.ts checks the same descriptors with Python protobuf's pool.
 */
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { service as healthService } from 'grpc-health-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import {
  bytesOf,
  floats,
  quantizerClient,
  startTestServer,
  unary,
  type QuantizerClient,
  type StreamResponse,
  type TestServer,
} from './helpers.js';
import { REPO } from '../cli/run-cli.js';

const require = createRequire(import.meta.url);
const REFLECTION_PROTO = join(dirname(require.resolve('@grpc/reflection/package.json')), 'build', 'proto');

// --- health ---------------------------------------------------------------------------------------

type ServingStatus = 'UNKNOWN' | 'SERVING' | 'NOT_SERVING' | 'SERVICE_UNKNOWN';
type HealthClient = grpc.Client & {
  Check(
    request: { service: string },
    metadata: grpc.Metadata,
    options: grpc.CallOptions,
    callback: (err: grpc.ServiceError | null, response?: { status: ServingStatus }) => void,
  ): grpc.ClientUnaryCall;
  Watch(request: { service: string }): grpc.ClientReadableStream<{ status: ServingStatus }>;
};
const HealthCtor = grpc.makeGenericClientConstructor(
  healthService as unknown as grpc.ServiceDefinition,
  'Health',
);
const healthClient = (target: string): HealthClient =>
  new HealthCtor(target, grpc.credentials.createInsecure()) as unknown as HealthClient;

function check(client: HealthClient, service: string): Promise<ServingStatus> {
  return new Promise((resolve, reject) =>
    client.Check({ service }, new grpc.Metadata(), { deadline: Date.now() + 5000 }, (err, res) =>
      err ? reject(err) : resolve(res!.status),
    ),
  );
}

// --- reflection -----------------------------------------------------------------------------------

interface ReflectionResponse {
  message_response?: string;
  list_services_response?: { service: { name: string }[] };
  file_descriptor_response?: { file_descriptor_proto: Buffer[] };
  error_response?: { error_code: number; error_message: string };
}
type ReflectionCtor = new (
  target: string,
  creds: grpc.ChannelCredentials,
) => grpc.Client & {
  ServerReflectionInfo(): grpc.ClientDuplexStream<Record<string, string>, ReflectionResponse>;
};

function reflectionClass(version: 'v1' | 'v1alpha'): ReflectionCtor {
  const definition = protoLoader.loadSync(`grpc/reflection/${version}/reflection.proto`, {
    keepCase: true,
    longs: Number,
    enums: String,
    defaults: true,
    oneofs: true,
    includeDirs: [REFLECTION_PROTO],
  });
  const pkg = grpc.loadPackageDefinition(definition) as unknown as {
    grpc: { reflection: Record<string, { ServerReflection: ReflectionCtor }> };
  };
  return pkg.grpc.reflection[version]!.ServerReflection;
}

/** One request on a fresh ServerReflectionInfo stream; the one response. */
function reflect(
  Ctor: ReflectionCtor,
  target: string,
  request: Record<string, string>,
): Promise<ReflectionResponse> {
  const client = new Ctor(target, grpc.credentials.createInsecure());
  return new Promise<ReflectionResponse>((resolve, reject) => {
    const call = client.ServerReflectionInfo();
    const responses: ReflectionResponse[] = [];
    call.on('data', (r: ReflectionResponse) => responses.push(r));
    call.on('error', reject);
    call.on('end', () =>
      responses.length === 1 ? resolve(responses[0]!) : reject(new Error(`${responses.length} responses`)),
    );
    call.write(request);
    call.end();
  }).finally(() => client.close());
}

/** A minimal protobuf reader: the fields of one message as [field number, value] pairs. */
function fields(buf: Uint8Array): [number, Uint8Array | number][] {
  const out: [number, Uint8Array | number][] = [];
  let at = 0;
  const varint = (): number => {
    let value = 0;
    let shift = 0;
    for (;;) {
      const b = buf[at++]!;
      value += (b & 0x7f) * 2 ** shift;
      if (b < 0x80) return value;
      shift += 7;
    }
  };
  while (at < buf.length) {
    const key = varint();
    const field = Math.floor(key / 8);
    const wire = key & 7;
    if (wire === 0) out.push([field, varint()]);
    else if (wire === 2) {
      const n = varint();
      out.push([field, buf.subarray(at, at + n)]);
      at += n;
    } else if (wire === 1) at += 8;
    else if (wire === 5) at += 4;
    else throw new Error(`wire type ${wire}`);
  }
  return out;
}
const text = (v: Uint8Array | number): string => Buffer.from(v as Uint8Array).toString('utf8');
const sub = (msg: Uint8Array, field: number): Uint8Array[] =>
  fields(msg)
    .filter(([f, v]) => f === field && typeof v !== 'number')
    .map(([, v]) => v as Uint8Array);

interface FieldDescriptor {
  name: string;
  typeName: string;
  oneofIndex: number | null;
  proto3Optional: boolean;
}

interface MessageDescriptor {
  name: string;
  fields: FieldDescriptor[];
  nested: MessageDescriptor[];
  oneofs: string[];
  mapEntry: boolean;
}

interface FileDescriptor {
  name: string;
  package: string;
  dependencies: string[];
  messages: MessageDescriptor[];
  services: {
    name: string;
    methods: { name: string; input: string; output: string; cs: boolean; ss: boolean }[];
  }[];
}

const one = (m: Uint8Array, f: number): string => {
  const v = sub(m, f)[0];
  return v ? text(v) : '';
};
const int = (m: Uint8Array, f: number): number | null => {
  const v = fields(m).find(([k, x]) => k === f && typeof x === 'number');
  return v ? (v[1] as number) : null;
};
const flag = (m: Uint8Array, f: number): boolean => int(m, f) === 1;

// descriptor.proto's field numbers: DescriptorProto name 1, field 2, nested_type 3, options 7
// (MessageOptions.map_entry 7), oneof_decl 8; FieldDescriptorProto name 1, type_name 6,
// oneof_index 9, proto3_optional 17
function decodeMessage(bytes: Uint8Array): MessageDescriptor {
  return {
    name: one(bytes, 1),
    fields: sub(bytes, 2).map((f) => ({
      name: one(f, 1),
      typeName: one(f, 6),
      oneofIndex: int(f, 9),
      proto3Optional: flag(f, 17),
    })),
    nested: sub(bytes, 3).map(decodeMessage),
    oneofs: sub(bytes, 8).map((o) => one(o, 1)),
    mapEntry: sub(bytes, 7).some((o) => flag(o, 7)),
  };
}

function decodeFileDescriptor(bytes: Uint8Array): FileDescriptor {
  return {
    name: one(bytes, 1),
    package: one(bytes, 2),
    dependencies: sub(bytes, 3).map(text),
    messages: sub(bytes, 4).map(decodeMessage),
    services: sub(bytes, 6).map((s) => ({
      name: one(s, 1),
      methods: sub(s, 2).map((m) => ({
        name: one(m, 1),
        input: one(m, 2),
        output: one(m, 3),
        cs: flag(m, 5),
        ss: flag(m, 6),
      })),
    })),
  };
}

/** proto/quantd.protoset's files (FileDescriptorSet.file, field 1), by name. */
const PROTOSET = new Map(
  sub(readFileSync(join(REPO, 'proto', 'quantd.protoset')), 1).map((f) => [one(f, 1), Buffer.from(f)]),
);

// --- tests ----------------------------------------------------------------------------------------

let t: TestServer;
let health: HealthClient;

beforeAll(async () => {
  t = await startTestServer();
  health = healthClient(t.target);
});
afterAll(async () => {
  health?.close();
  await t?.server.shutdown('test');
});

describe('grpc.health.v1.Health', () => {
  it.each([
    '',
    'quantd.v1.Quantizer',
    'quantd.v1.Jobs',
    'quantd.v1.Calibrations',
    'inference.GRPCInferenceService',
  ])('Check(%j) is SERVING', async (service) => {
    expect(await check(health, service)).toBe('SERVING');
  });

  it('Check of an unknown service: NOT_FOUND', async () => {
    const err = await check(health, 'quantd.v1.Nope').then(
      () => null,
      (e: grpc.ServiceError) => e,
    );
    expect(err?.code).toBe(grpc.status.NOT_FOUND);
  });
});

describe.each(['v1', 'v1alpha'] as const)('server reflection %s', (version) => {
  const Ctor = reflectionClass(version);

  it('list_services names every service served', async () => {
    const r = await reflect(Ctor, t.target, { list_services: '' });
    const names = r.list_services_response?.service.map((s) => s.name) ?? [];
    expect(names.sort(), JSON.stringify(r)).toEqual([
      'inference.GRPCInferenceService',
      'quantd.v1.Calibrations',
      'quantd.v1.Jobs',
      'quantd.v1.Quantizer',
    ]);
  });

  it.each(['quantd.v1.Quantizer', 'quantd.v1.Quantizer.QuantizeStream', 'quantd.v1.OperationRequest'])(
    'file_containing_symbol %s returns quantd/v1/quantd.proto with the service and its methods',
    async (symbol) => {
      const r = await reflect(Ctor, t.target, { file_containing_symbol: symbol });
      const files = r.file_descriptor_response?.file_descriptor_proto ?? [];
      expect(files.length, JSON.stringify(r.error_response)).toBe(1);
      const fd = decodeFileDescriptor(files[0]!);
      expect(fd).toMatchObject({ name: 'quantd/v1/quantd.proto', package: 'quantd.v1', dependencies: [] });
      expect(fd.messages.map((m) => m.name)).toEqual(
        expect.arrayContaining([
          'Spec',
          'Tensor',
          'OperationRequest',
          'OperationResponse',
          'StreamHeader',
          'Chunk',
        ]),
      );
      const svc = fd.services.find((s) => s.name === 'Quantizer');
      expect(svc?.methods.map((m) => m.name)).toEqual([
        'Quantize',
        'Dequantize',
        'FakeQuantize',
        'ChooseQParams',
        'QuantizeStream',
      ]);
      const stream = svc!.methods.find((m) => m.name === 'QuantizeStream')!;
      expect(stream).toMatchObject({ cs: true, ss: true, input: '.quantd.v1.StreamRequest' });
      const quantize = svc!.methods.find((m) => m.name === 'Quantize')!;
      expect(quantize).toMatchObject({ cs: false, ss: false, output: '.quantd.v1.OperationResponse' });
    },
  );

  it('map fields have FieldEntry types; proto3 optional fields their flag and synthetic oneof', async () => {
    const r = await reflect(Ctor, t.target, { file_by_filename: 'quantd/v1/quantd.proto' });
    const fd = decodeFileDescriptor(r.file_descriptor_response!.file_descriptor_proto[0]!);
    const message = (name: string): MessageDescriptor => fd.messages.find((m) => m.name === name)!;
    const response = message('OperationResponse');
    expect(response.nested.map((n) => [n.name, n.mapEntry])).toEqual([['MetadataEntry', true]]);
    expect(response.fields.find((f) => f.name === 'metadata')?.typeName).toBe(
      '.quantd.v1.OperationResponse.MetadataEntry',
    );
    const spec = message('Spec');
    const axis = spec.fields.find((f) => f.name === 'axis')!;
    expect(axis.proto3Optional).toBe(true);
    expect(spec.oneofs[axis.oneofIndex!]).toBe('_axis');
    expect(spec.fields.find((f) => f.name === 'qdtype')).toMatchObject({
      proto3Optional: false,
      oneofIndex: null,
    });
  });

  it.each([...PROTOSET.keys()])(
    'file_by_filename %s: protoc’s descriptor (proto/quantd.protoset), with the files it imports',
    async (name) => {
      const r = await reflect(Ctor, t.target, { file_by_filename: name });
      const files = r.file_descriptor_response?.file_descriptor_proto ?? [];
      expect(files.length, JSON.stringify(r.error_response)).toBeGreaterThanOrEqual(1);
      expect(Buffer.from(files[0]!).equals(PROTOSET.get(name)!), 'the same bytes').toBe(true);
      const served = files.map((f) => decodeFileDescriptor(f).name);
      const imports = (file: string): string[] =>
        decodeFileDescriptor(PROTOSET.get(file)!).dependencies.flatMap((d) => [d, ...imports(d)]);
      expect(served.slice(1).sort()).toEqual([...new Set(imports(name))].sort());
    },
  );

  it('the made-up file of proto-loader (quantd_v1.proto) and an unknown symbol are NOT_FOUND', async () => {
    const requests: Record<string, string>[] = [
      { file_by_filename: 'quantd_v1.proto' },
      { file_containing_symbol: 'quantd.v1.Nope' },
    ];
    for (const request of requests) {
      const r = await reflect(Ctor, t.target, request);
      expect(r.error_response?.error_code).toBe(grpc.status.NOT_FOUND);
    }
  });
});

describe('shutdown', () => {
  it('Watch sees NOT_SERVING when shutdown starts; a stream in flight completes; new calls are refused', async () => {
    const s = await startTestServer({ QUANTD_SHUTDOWN_TIMEOUT_MS: '5000' });
    const h = healthClient(s.target);
    const q: QuantizerClient = await quantizerClient(s.target);
    try {
      const seen: ServingStatus[] = [];
      const watch = h.Watch({ service: 'quantd.v1.Quantizer' });
      const notServing = new Promise<void>((resolve) =>
        watch.on('data', (r: { status: ServingStatus }) => {
          seen.push(r.status);
          if (r.status === 'NOT_SERVING') resolve();
        }),
      );
      watch.on('error', () => undefined);
      expect(await check(h, '')).toBe('SERVING');

      // a stream in flight: header sent, data not yet
      const data = bytesOf(floats(256, 5));
      const call = q.QuantizeStream();
      const responses: StreamResponse[] = [];
      call.on('data', (r: StreamResponse) => responses.push(r));
      call.on('error', () => undefined);
      const status = new Promise<grpc.StatusObject>((resolve) => call.on('status', resolve));
      call.write({ header: { total_bytes: data.byteLength, tensor: { dtype: 'float32', shape: [256] } } });
      await new Promise((r) => setTimeout(r, 100));

      const stopped = s.server.shutdown('test');
      await Promise.race([notServing, new Promise((r) => setTimeout(r, 3000))]);
      expect(seen, 'Watch statuses').toEqual(['SERVING', 'NOT_SERVING']);
      watch.cancel();

      // new calls: NOT_SERVING or refused outright
      const during = await check(h, '').then(
        (st) => st,
        (e: grpc.ServiceError) => e.code,
      );
      expect([grpc.status.UNAVAILABLE, 'NOT_SERVING']).toContain(during);
      const fresh = await unary(q, 'Quantize', {
        tensor: { dtype: 'float32', shape: [2], data: bytesOf(floats(2, 1)) },
      }).then(
        () => null,
        (e: grpc.ServiceError) => e,
      );
      expect(fresh, 'a new call during the drain is refused').not.toBeNull();
      expect(fresh!.code, fresh!.details).toBe(grpc.status.UNAVAILABLE);

      // the stream admitted before the shutdown still gets its result
      call.write({ chunk: { offset: 0, data } });
      call.end();
      const st = await status;
      expect(st.code, st.details).toBe(grpc.status.OK);
      expect(responses[0]?.part).toBe('result');
      await stopped;

      const after = await check(h, '').then(
        () => null,
        (e: grpc.ServiceError) => e.code,
      );
      expect(after).toBe(grpc.status.UNAVAILABLE);
    } finally {
      h.close();
      q.close();
      await s.server.shutdown('test');
    }
  });
});
