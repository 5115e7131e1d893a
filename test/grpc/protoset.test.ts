/**
 * proto/quantd.protoset, the descriptors server reflection serves (src/grpc/descriptors.ts), is
 * what proto/ says now: byte for byte what protoc builds from it (scripts/build-protoset.sh;
 * skipped without protoc, which CI has), and — without protoc, on any machine — the same
 * services, methods, messages and fields as protobufjs's parse of the .proto files, which
 * proto-loader and so the server's wire codec use. A .proto edited without `npm run build:protoset` fails here.
 */
import { execFile, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import protobuf from 'protobufjs';
import descriptor from 'protobufjs/ext/descriptor/index.js';
import { afterAll, describe, expect, it } from 'vitest';

import type * as Descriptors from '../../src/grpc/descriptors.js';
import { REPO } from '../cli/run-cli.js';

const run = promisify(execFile);
const PROTOSET = join(REPO, 'proto', 'quantd.protoset');
const PROTOC = spawnSync('protoc', ['--version'], { encoding: 'utf8' }).status === 0;
if (!PROTOC && !process.env['CI']) {
  console.warn(
    'test/grpc/protoset.test.ts: the protoc comparison skipped (apt-get install protobuf-compiler)',
  );
}

const dir = mkdtempSync(join(tmpdir(), 'quantd-protoset-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/**
 * Every service, message and enum of a protobufjs root as plain data both sources agree on when
 * the files agree: fields by name, number, rule, type (fully qualified), map key and value, and
 * oneof. protobufjs reads a descriptor's map fields back as repeated FieldEntry messages and
 * drops its proto3_optional flag (the synthetic oneof stays): both are normalized here.
 */
function shape(root: protobuf.NamespaceBase): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  // a map's entry: a nested FieldEntry {key = 1, value = 2} that a repeated field of its parent
  // has as its type (protobufjs's own map_entry option is not to be trusted: it also puts it on
  // the parent)
  const isEntry = (t: protobuf.ReflectionObject | null): t is protobuf.Type =>
    t instanceof protobuf.Type &&
    t.parent instanceof protobuf.Type &&
    t.name.endsWith('Entry') &&
    t.fieldsArray.map((f) => `${f.name}=${f.id}`).join() === 'key=1,value=2' &&
    t.parent.fieldsArray.some((f) => f.repeated && f.resolvedType === t);
  const typeOf = (f: protobuf.Field): string => f.resolvedType?.fullName ?? f.type;
  const walk = (ns: protobuf.NamespaceBase): void => {
    for (const o of ns.nestedArray) {
      if (isEntry(o)) continue;
      if (o instanceof protobuf.Type) {
        out[o.fullName] = o.fieldsArray.map((f) => {
          const entry = f.resolvedType;
          const type = f.map
            ? `map<${(f as unknown as protobuf.MapField).keyType}, ${typeOf(f)}>`
            : isEntry(entry)
              ? `map<${typeOf(entry.fieldsArray[0]!)}, ${typeOf(entry.fieldsArray[1]!)}>`
              : typeOf(f);
          const rule = f.map || isEntry(entry) ? null : f.repeated ? 'repeated' : null;
          return [f.name, f.id, rule, type, f.partOf?.name ?? null];
        });
      } else if (o instanceof protobuf.Enum) {
        out[o.fullName] = o.values;
      } else if (o instanceof protobuf.Service) {
        out[o.fullName] = o.methodsArray.map((m) => [
          m.name,
          m.resolvedRequestType?.fullName,
          m.resolvedResponseType?.fullName,
          m.requestStream === true,
          m.responseStream === true,
        ]);
      }
      if (o instanceof protobuf.Namespace) walk(o);
    }
  };
  walk(root);
  return out;
}

const FILES = [
  'quantd/v1/quantd.proto',
  'quantd/v1/jobs.proto',
  'quantd/v1/calibration.proto',
  'inference/grpc_service.proto',
];

describe('proto/quantd.protoset', () => {
  it('declares what protobufjs (proto-loader, the wire codec) reads from proto/', () => {
    const parsed = new protobuf.Root();
    parsed.resolvePath = (_origin, target) => join(REPO, 'proto', target);
    parsed.loadSync(FILES, { keepCase: true }).resolveAll();
    const set = descriptor.FileDescriptorSet.decode(readFileSync(PROTOSET));
    const fromSet = (protobuf.Root as unknown as { fromDescriptor(d: unknown): protobuf.Root })
      .fromDescriptor(set)
      .resolveAll();
    const expected = shape(parsed);
    expect(Object.keys(expected).length).toBeGreaterThan(50);
    expect(shape(fromSet)).toEqual(expected);
  });

  it('holds every .proto file under proto/, each under its own name, imports first', async () => {
    const { parseProtoset } = (await import(
      join(REPO, 'dist', 'src', 'grpc', 'descriptors.js')
    )) as typeof Descriptors;
    const files = parseProtoset(readFileSync(PROTOSET));
    expect(files.map((f) => f.name)).toEqual([
      'inference/grpc_service.proto',
      'quantd/v1/quantd.proto',
      'quantd/v1/jobs.proto',
      'quantd/v1/calibration.proto',
    ]);
    expect(files.flatMap((f) => f.services)).toEqual([
      'inference.GRPCInferenceService',
      'quantd.v1.Quantizer',
      'quantd.v1.Jobs',
      'quantd.v1.Calibrations',
    ]);
  });

  it.skipIf(!PROTOC && !process.env['CI'])(
    'is what protoc builds from proto/ now, byte for byte',
    async () => {
      const out = join(dir, 'check.protoset');
      await run(join(REPO, 'scripts', 'build-protoset.sh'), [out]);
      expect(readFileSync(out).equals(readFileSync(PROTOSET)), 'run npm run build:protoset').toBe(true);
    },
  );
});

describe('reflectionDefinition', () => {
  it('refuses to start when a served service is missing from the protoset', async () => {
    const { parseProtoset, reflectionDefinition } = (await import(
      join(REPO, 'dist', 'src', 'grpc', 'descriptors.js')
    )) as typeof Descriptors;
    const files = parseProtoset(readFileSync(PROTOSET));
    expect(() => reflectionDefinition(files, ['quantd.v1.Quantizer', 'quantd.v1.Later'])).toThrow(
      /does not declare quantd\.v1\.Later: run npm run build:protoset/,
    );
    const definition = reflectionDefinition(files, ['quantd.v1.Quantizer']) as unknown as Record<
      string,
      { fileDescriptorProtos: Buffer[] }
    >;
    expect(Object.values(definition).flatMap((d) => d.fileDescriptorProtos).length).toBe(4);
  });
});
