/**
 * Safetensors files, mostly broken: a small valid file built from random tensors, then damaged
 * the ways a hostile or buggy writer damages one — the header length, the header JSON, dtypes,
 * offsets out of range or overlapping, huge shapes, deeply nested __metadata__, non-ASCII and
 * 10k-character names, NaN and Inf in the data, truncation, flipped bytes.
 */
import type { Prng } from './prng.js';
import {
  DTYPES,
  floatBytes,
  hostileDtype,
  hostileName,
  hostileNumber,
  hostileShape,
} from './hostile-values.js';

type Entry = { dtype: unknown; shape: unknown; data_offsets: unknown };
type Header = Record<string, Entry | Record<string, unknown>>;

interface Parts {
  header: Header;
  data: Buffer;
}

function validParts(r: Prng, hostileData: boolean): Parts {
  const header: Header = {};
  const chunks: Buffer[] = [];
  let offset = 0;
  const count = 1 + r.int(3);
  for (let i = 0; i < count; i++) {
    const shape = Array.from({ length: 1 + r.int(2) }, () => 1 + r.int(8));
    const n = shape.reduce((a, b) => a * b, 1);
    const data = floatBytes(r, n, hostileData && r.chance(0.2));
    header[`t${i}.weight`] = { dtype: 'F32', shape, data_offsets: [offset, offset + data.byteLength] };
    chunks.push(data);
    offset += data.byteLength;
  }
  if (r.chance(0.5)) header['__metadata__'] = { format: 'pt' };
  return { header, data: Buffer.concat(chunks) };
}

/** The first tensor entry (one is added if an earlier mutation renamed them all away). */
function firstEntry(parts: Parts): Entry {
  const name = Object.keys(parts.header).find((k) => k !== '__metadata__');
  if (name !== undefined) return parts.header[name] as Entry;
  const entry: Entry = { dtype: 'F32', shape: [0], data_offsets: [0, 0] };
  parts.header['t'] = entry;
  return entry;
}

/** Stands for `depth` nested objects: written as text, since JSON.stringify would recurse. */
const nested = (depth: number): Record<string, unknown> => ({ $nested: depth });
const NESTED = /\{"\$nested":(\d+)\}/;

/** Damage to the header object, before it is serialised. */
const HEADER_MUTATIONS: readonly ((r: Prng, parts: Parts) => void)[] = [
  (r, p) => (firstEntry(p).dtype = hostileDtype(r)),
  (r, p) => (firstEntry(p).shape = hostileShape(r)),
  (r, p) => (firstEntry(p).data_offsets = [hostileNumber(r), hostileNumber(r)]),
  (r, p) => {
    const e = firstEntry(p);
    const [a, b] = e.data_offsets as number[];
    e.data_offsets = [b, a]; // reversed
  },
  (_r, p) => {
    // overlapping: every tensor claims the first bytes of the data
    for (const [k, v] of Object.entries(p.header)) {
      if (k === '__metadata__') continue;
      const [a, b] = (v as Entry).data_offsets as number[];
      (v as Entry).data_offsets = [0, b! - a!];
    }
  },
  (r, p) => (firstEntry(p).data_offsets = [0, p.data.byteLength + 1 + r.int(1 << 20)]),
  (r, p) => (firstEntry(p).data_offsets = 'x'),
  (r, p) => (firstEntry(p).shape = ['2', { a: 1 }]),
  (r, p) => {
    const e = firstEntry(p);
    delete p.header[Object.keys(p.header).find((k) => p.header[k] === e)!];
    p.header[hostileName(r)] = e;
  },
  (r, p) => (p.header['__metadata__'] = nested(r.pick([50, 5_000, 100_000]))),
  (r, p) => (p.header['__metadata__'] = { format: 'quantd.qtensor/1', [hostileName(r)]: hostileName(r) }),
  (r, p) => (p.header['__metadata__'] = { n: 1, list: [1, 2] } as Record<string, unknown>),
  (r, p) => (firstEntry(p).dtype = r.pick(DTYPES)),
  (r, p) => (p.header['extra'] = { dtype: 'F32', shape: [2 ** 31, 2 ** 31], data_offsets: [0, 0] }),
  (r, p) => ((firstEntry(p) as unknown as Record<string, unknown>)['unknown_key'] = hostileNumber(r)),
];

function serialise(header: unknown, data: Buffer, r: Prng, hostile: boolean): Buffer {
  let json = JSON.stringify(header).replace(NESTED, (_m, depth: string) => {
    const n = Number(depth);
    return `${'{"a":'.repeat(n)}"x"${'}'.repeat(n)}`;
  });
  if (hostile && r.chance(0.05)) {
    // a duplicate key: JSON.stringify cannot write one
    json = json.replace(/^\{("[^"]*":\{[^}]*\})/, '{$1,$1');
  }
  const head = Buffer.from(json, 'utf8');
  const pad = !hostile || r.chance(0.7) ? (8 - (head.byteLength % 8)) % 8 : 0;
  const padded = Buffer.concat([head, Buffer.alloc(pad, 0x20)]);
  const length = Buffer.alloc(8);
  length.writeBigUInt64LE(BigInt(padded.byteLength));
  return Buffer.concat([length, padded, data]);
}

/** Damage to the serialised bytes. */
const BYTE_MUTATIONS: readonly ((r: Prng, file: Buffer) => Buffer)[] = [
  (r, f) => f.subarray(0, r.int(f.byteLength)), // truncated
  (r, f) => {
    const out = Buffer.from(f);
    out.writeBigUInt64LE(
      r.pick([0n, 1n, 7n, 2n ** 63n, 2n ** 64n - 1n, BigInt(f.byteLength), 100_000_001n]),
      0,
    );
    return out;
  },
  (r, f) => {
    const out = Buffer.from(f);
    for (let i = 0; i < 1 + r.int(8); i++) out[r.int(out.byteLength)] = r.int(256);
    return out;
  },
  (r, f) => {
    // garbage where the JSON is
    const out = Buffer.from(f);
    const len = Number(out.readBigUInt64LE(0));
    r.bytes(Math.min(len, out.byteLength - 8)).copy(out, 8);
    return out;
  },
  (r, f) => Buffer.concat([f, r.bytes(1 + r.int(64))]), // trailing bytes
  (r) => r.bytes(r.int(64)), // not safetensors at all
];

/** A safetensors body: valid about one time in six, broken otherwise. */
export function safetensorsMutant(r: Prng): Buffer {
  const parts = validParts(r, true);
  if (r.chance(0.15)) return serialise(parts.header, parts.data, r, true);
  const headerDamage = r.chance(0.7);
  if (headerDamage) {
    for (let i = 0; i < 1 + r.int(2); i++) r.pick(HEADER_MUTATIONS)(r, parts);
  }
  let file = serialise(parts.header, parts.data, r, true);
  if (!headerDamage || r.chance(0.3)) file = r.pick(BYTE_MUTATIONS)(r, file);
  return file;
}

/** A valid small safetensors file (for requests whose hostility lies elsewhere). */
export function validSafetensors(r: Prng, name?: string): Buffer {
  const parts = validParts(r, false);
  if (name !== undefined) {
    const entry = firstEntry(parts);
    delete parts.header[Object.keys(parts.header).find((k) => parts.header[k] === entry)!];
    parts.header[name] = entry;
  }
  return serialise(parts.header, parts.data, r, false);
}
