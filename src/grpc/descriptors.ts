/**
 * The file descriptors server reflection serves: proto/quantd.protoset, the FileDescriptorSet
 * protoc makes of proto/ (scripts/build-protoset.sh; committed, and checked against protoc in CI
 * by `npm run check:protoset`).
 *
 * Why protoc's and not the descriptors @grpc/proto-loader derives from its protobufjs parse: those
 * merge every file of a package into one made-up file (`quantd_v1.proto`), name map entries after
 * the field (`Metadata`, not `MetadataEntry`), drop proto3 `optional`'s presence flag and give
 * relative type names, so a strict client (Python protobuf's DescriptorPool, grpcurl) refuses
 * them. Rebuilding protoc's rules here would be a second implementation to keep right as the
 * files grow; protoc's own output is right by construction, carries the comments, and the server
 * needs no protoc to serve it. proto-loader still parses the .proto files for the wire codec: both
 * come from the same files, and the check keeps them the same.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { PackageDefinition } from '@grpc/proto-loader';
import { protoFields, utf8, WIRE_LEN } from '../format/onnx-proto.js';

export const PROTOSET_FILE = 'quantd.protoset';

export interface ProtoFile {
  /** The file's name as protoc knows it (its path under proto/): quantd/v1/quantd.proto. */
  readonly name: string;
  /** Its serialized google.protobuf.FileDescriptorProto, as protoc wrote it. */
  readonly bytes: Uint8Array;
  /** The fully qualified names of the services it declares. */
  readonly services: readonly string[];
}

// google.protobuf.FileDescriptorSet.file; FileDescriptorProto.name, .package, .service;
// ServiceDescriptorProto.name (descriptor.proto's field numbers)
const SET_FILE = 1;
const FILE_NAME = 1;
const FILE_PACKAGE = 2;
const FILE_SERVICE = 6;
const SERVICE_NAME = 1;

/** The strings of the length-delimited fields numbered `field` of `message`. */
function strings(message: Uint8Array, field: number): string[] {
  const out: string[] = [];
  for (const f of protoFields(message)) if (f.field === field && f.wire === WIRE_LEN) out.push(utf8(f));
  return out;
}

/** The files of a serialized FileDescriptorSet, in its order (each after the files it imports). */
export function parseProtoset(set: Uint8Array): ProtoFile[] {
  const files: ProtoFile[] = [];
  for (const f of protoFields(set)) {
    if (f.field !== SET_FILE || f.wire !== WIRE_LEN) continue;
    const [name = ''] = strings(f.bytes, FILE_NAME);
    const [pkg = ''] = strings(f.bytes, FILE_PACKAGE);
    const services: string[] = [];
    for (const s of protoFields(f.bytes)) {
      if (s.field !== FILE_SERVICE || s.wire !== WIRE_LEN) continue;
      const [service = ''] = strings(s.bytes, SERVICE_NAME);
      services.push(pkg === '' ? service : `${pkg}.${service}`);
    }
    files.push({ name, bytes: f.bytes, services });
  }
  return files;
}

/** proto/quantd.protoset under `protoRoot`, read and split into its files. */
export function loadProtoset(protoRoot: string): ProtoFile[] {
  return parseProtoset(readFileSync(join(protoRoot, PROTOSET_FILE)));
}

/**
 * What @grpc/reflection takes: a package definition, of which it reads only each entry's
 * `fileDescriptorProtos` (decoded, indexed by name and symbol, served with the files they import).
 * One entry holding every file gives it protoc's descriptors instead of proto-loader's.
 * Throws when a service the server serves is declared in none of them: a .proto changed without
 * `npm run build:protoset`, which would leave reflection clients without that service.
 */
export function reflectionDefinition(
  files: readonly ProtoFile[],
  served: readonly string[],
): PackageDefinition {
  const declared = new Set(files.flatMap((f) => f.services));
  const missing = served.filter((s) => !declared.has(s));
  if (missing.length > 0) {
    throw new Error(
      `${PROTOSET_FILE} does not declare ${missing.join(', ')}: run npm run build:protoset after changing proto/`,
    );
  }
  const entry = { fileDescriptorProtos: files.map((f) => Buffer.from(f.bytes)) };
  return { [PROTOSET_FILE]: entry } as unknown as PackageDefinition;
}
