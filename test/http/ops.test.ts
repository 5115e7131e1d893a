/**
 * POST /v1/{quantize,dequantize,fake-quantize,qparams} against the real CLI (README): every
 * endpoint × body kind (a safetensors file; one raw octet-stream tensor named "tensor", whose
 * equivalent file the CLI gets; the container alone for dequantize) × Accept (none,
 * application/x-safetensors, application/json). The container responses must be the CLI's output
 * file byte for byte; the JSON ones must decode (base64) to the same tensors, dtypes, shapes and
 * metadata, in the same order. Also: repeated query parameters (include=a&include=b), float16 and
 * bfloat16 octet bodies, a 16 MiB tensor that takes the worker pool, a server with
 * QUANTD_INLINE_LIMIT=0 on which every tensor takes the pool, and tensor names that are special to
 * JavaScript objects (__proto__, constructor, integer-like) or to the container ("format"), which
 * must survive quantize → dequantize and the JSON form.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { bfloat16BitsFromFloat32, float16BitsFromFloat32, type StDType } from '../../src/core/index.js';
import { serializeSafetensors } from '../../src/format/index.js';
import { MODEL } from '../cli/run-cli.js';
import {
  SAFETENSORS,
  cliArgs,
  cliOutput,
  expectProblem,
  expectSameBytes,
  floats,
  octetHeaders,
  queryOf,
  readJsonTensors,
  readTensors,
  send,
  serializeTensors,
  startTestServer,
  type Reply,
  type TestServer,
} from './helpers.js';

type Options = readonly (readonly [string, string])[];

const dir = mkdtempSync(join(tmpdir(), 'quantd-http-ops-'));
let t: TestServer;
/** The qtensor container dequantize is given: the CLI's int4 per_group quantization of MODEL. */
let CONTAINER: string;

beforeAll(async () => {
  t = await startTestServer();
  CONTAINER = join(dir, 'container.safetensors');
  await cliOutput('quantize', MODEL, CONTAINER, [
    ...cliArgs([
      ['qdtype', 'int4'],
      ['scheme', 'per_group'],
      ['group_size', '16'],
      ['include', '*.weight'],
    ]),
  ]);
});
afterAll(async () => {
  await t?.server.shutdown('test');
  rmSync(dir, { recursive: true, force: true });
});

/** A raw tensor body and the one-tensor file ("tensor") it stands for. */
interface Octet {
  readonly dtype: 'float32' | 'float16' | 'bfloat16';
  readonly shape: readonly number[];
  readonly data: Uint8Array;
}
const ST: Record<Octet['dtype'], StDType> = { float32: 'F32', float16: 'F16', bfloat16: 'BF16' };

function octet(dtype: Octet['dtype'], shape: readonly number[], seed: number): Octet {
  const values = floats(
    shape.reduce((a, b) => a * b, 1),
    seed,
  );
  if (dtype === 'float32') return { dtype, shape, data: new Uint8Array(values.buffer) };
  const bits = Uint16Array.from(values, (v) =>
    dtype === 'float16' ? float16BitsFromFloat32(v) : bfloat16BitsFromFloat32(v),
  );
  return { dtype, shape, data: new Uint8Array(bits.buffer) };
}

function fileOf(o: Octet, name: string): string {
  const path = join(dir, name);
  writeFileSync(
    path,
    serializeSafetensors([{ name: 'tensor', dtype: ST[o.dtype], shape: o.shape, data: o.data }], null),
  );
  return path;
}

interface Case {
  readonly label: string;
  readonly op: 'quantize' | 'dequantize' | 'fake-quantize' | 'qparams';
  readonly options: Options;
  /** A file sent as application/x-safetensors, or a raw tensor sent as application/octet-stream. */
  readonly body: (() => string) | Octet;
}

const CASES: readonly Case[] = [
  {
    label: 'quantize, safetensors, int4 per_group, include given twice',
    op: 'quantize',
    options: [
      ['qdtype', 'int4'],
      ['scheme', 'per_group'],
      ['group_size', '16'],
      ['include', 'layers.*.weight'],
      ['include', 'embed.weight'],
    ],
    body: () => MODEL,
  },
  {
    label: 'quantize, octet float32, int8 per_channel axis 1',
    op: 'quantize',
    options: [
      ['scheme', 'per_channel'],
      ['axis', '1'],
    ],
    body: octet('float32', [8, 16], 1),
  },
  {
    label: 'quantize, octet float16, float8_e4m3fn',
    op: 'quantize',
    options: [['qdtype', 'float8_e4m3fn']],
    body: octet('float16', [4, 32], 2),
  },
  {
    label: 'quantize, octet bfloat16, uint4 per_group',
    op: 'quantize',
    options: [
      ['qdtype', 'uint4'],
      ['scheme', 'per_group'],
      ['group_size', '32'],
    ],
    body: octet('bfloat16', [3, 64], 3),
  },
  {
    label: 'fake-quantize, safetensors, per_channel to bfloat16, exclude given twice',
    op: 'fake-quantize',
    options: [
      ['scheme', 'per_channel'],
      ['dtype', 'bfloat16'],
      ['exclude', 'activations'],
      ['exclude', 'layers.1.*'],
    ],
    body: () => MODEL,
  },
  {
    label: 'fake-quantize, octet float16, symmetric, to float16',
    op: 'fake-quantize',
    options: [
      ['mode', 'symmetric'],
      ['dtype', 'float16'],
    ],
    body: octet('float16', [5, 7], 4),
  },
  {
    label: 'qparams, safetensors, uint8 per_token, quant range narrowed',
    op: 'qparams',
    options: [
      ['qdtype', 'uint8'],
      ['scheme', 'per_token'],
      ['quant_min', '0'],
      ['quant_max', '100'],
      ['include', 'activations'],
      ['include', 'layers.0.weight'],
    ],
    body: () => MODEL,
  },
  {
    label: 'qparams, octet bfloat16, int2 greedy range search',
    op: 'qparams',
    options: [
      ['qdtype', 'int2'],
      ['range_search', 'greedy'],
    ],
    body: octet('bfloat16', [2, 3, 16], 5),
  },
  {
    label: 'dequantize, container, to float16',
    op: 'dequantize',
    options: [['dtype', 'float16']],
    body: () => CONTAINER,
  },
  {
    label: 'dequantize, container, default float32',
    op: 'dequantize',
    options: [],
    body: () => CONTAINER,
  },
];

const ACCEPTS = [undefined, SAFETENSORS, 'application/json'] as const;

/** The CLI's output file for a case (run once per case). */
const expected = new Map<string, Promise<Buffer>>();
function cliFor(c: Case, index: number): Promise<Buffer> {
  let p = expected.get(c.label);
  if (!p) {
    const input = typeof c.body === 'function' ? c.body() : fileOf(c.body, `in-${index}.safetensors`);
    p = cliOutput(c.op, input, join(dir, `out-${index}.safetensors`), cliArgs(c.options));
    expected.set(c.label, p);
  }
  return p;
}

function request(port: number, c: Case, accept: string | undefined): Promise<Reply> {
  const headers: Record<string, string> =
    typeof c.body === 'function' ? { 'content-type': SAFETENSORS } : octetHeaders(c.body.dtype, c.body.shape);
  if (accept !== undefined) headers['accept'] = accept;
  const body = typeof c.body === 'function' ? readFileSync(c.body()) : c.body.data;
  return send(port, `/v1/${c.op}${queryOf(c.options)}`, { headers, body });
}

/** Asserts that a response carries exactly the CLI's file, as a container or as JSON. */
function expectCliResult(reply: Reply, cli: Buffer, accept: string | undefined, label: string): void {
  expect(reply.status, `${label}: ${reply.body.toString()}`).toBe(200);
  if (accept === 'application/json') {
    expect(reply.headers['content-type']).toMatch(/^application\/json(;|$)/);
    const want = readTensors(cli, 'cli output');
    const got = readJsonTensors(reply.body);
    expect(got.metadata).toEqual(want.metadata);
    expect(got.names).toEqual(want.names);
    for (const name of want.names) {
      const w = want.tensors.get(name)!;
      const g = got.tensors.get(name)!;
      expect({ dtype: g.dtype, shape: g.shape }, name).toEqual({ dtype: w.dtype, shape: w.shape });
      expectSameBytes(g.data, w.data, `${label}: tensor ${name}`);
    }
    // and the container the JSON stands for is the CLI's file
    expectSameBytes(serializeTensors(got, want.names), cli, `${label}: JSON re-serialized`);
  } else {
    expect(reply.headers['content-type']).toBe(SAFETENSORS);
    expect(Number(reply.headers['content-length'])).toBe(cli.byteLength);
    expectSameBytes(reply.body, cli, label);
  }
}

describe.each(CASES.map((c, i) => [c.label, c, i] as const))('%s', (_label, c, index) => {
  it.each(ACCEPTS.map((a) => [a ?? '(no Accept)', a] as const))(
    'Accept %s gives the CLI output',
    async (_name, accept) => {
      const [cli, reply] = await Promise.all([cliFor(c, index), request(t.port, c, accept)]);
      expectCliResult(reply, cli, accept, `${c.label}, Accept ${accept ?? 'none'}`);
    },
  );
});

describe('content negotiation and bodies', () => {
  const c = CASES[1]!;
  it.each([
    ['*/*', SAFETENSORS],
    ['application/octet-stream', SAFETENSORS],
    ['text/html, application/json;q=0.9', 'application/json'],
  ])('Accept %s gives %s', async (accept, type) => {
    const reply = await request(t.port, c, accept);
    expect(reply.status).toBe(200);
    expect(reply.headers['content-type']).toMatch(new RegExp(`^${type.replace('/', '\\/')}`));
    expectCliResult(reply, await cliFor(c, 1), type === SAFETENSORS ? SAFETENSORS : type, c.label);
  });

  it('a safetensors body uploaded chunked (no Content-Length) gives the same file', async () => {
    const c0 = CASES[0]!;
    const reply = await send(t.port, `/v1/quantize${queryOf(c0.options)}`, {
      headers: { 'content-type': `${SAFETENSORS}; charset=binary` },
      body: readFileSync(MODEL),
      chunked: 1000,
    });
    expectCliResult(reply, await cliFor(c0, 0), undefined, 'chunked upload');
  });

  it('X-Tensor-Dtype accepts the safetensors spellings (F16, bf16) too', async () => {
    for (const [spelling, o] of [
      ['F16', octet('float16', [4, 32], 2)],
      ['bf16', octet('bfloat16', [3, 64], 3)],
    ] as const) {
      const c2 = CASES.find(
        (x) => typeof x.body !== 'function' && x.body.dtype === o.dtype && x.op === 'quantize',
      )!;
      const reply = await send(t.port, `/v1/quantize${queryOf(c2.options)}`, {
        headers: octetHeaders(spelling, o.shape),
        body: o.data,
      });
      expectCliResult(reply, await cliFor(c2, CASES.indexOf(c2)), undefined, `X-Tensor-Dtype ${spelling}`);
    }
  });

  it('an empty X-Tensor-Shape is a scalar tensor', async () => {
    const scalar: Octet = { dtype: 'float32', shape: [], data: new Uint8Array(Float32Array.of(2.5).buffer) };
    const cli = await cliOutput(
      'quantize',
      fileOf(scalar, 'scalar.safetensors'),
      join(dir, 'scalar-out.safetensors'),
      [],
    );
    const reply = await send(t.port, '/v1/quantize', {
      headers: octetHeaders('float32', []),
      body: scalar.data,
    });
    expectCliResult(reply, cli, undefined, 'scalar');
  });
});

describe('tensor names that are special to JavaScript objects or to the container', () => {
  // "__proto__" is a prototype setter on plain objects, "constructor" an inherited property,
  // integer-like names reorder in objects: each must survive like any other name.
  const NAMES = ['__proto__', '10', '2', 'constructor'];
  const fileOfNames = (names: readonly string[]): Uint8Array =>
    serializeSafetensors(
      names.map((name, i) => ({
        name,
        dtype: 'F32' as const,
        shape: [1, 4], // 2-D: a 1-D tensor of a file of several passes through by default
        data: new Uint8Array(Float32Array.of(i, -1, 0.5, 2).buffer),
      })),
      null,
    );
  const post = (op: string, body: Uint8Array, accept?: string): Promise<Reply> =>
    send(t.port, `/v1/${op}`, {
      headers: { 'content-type': SAFETENSORS, ...(accept ? { accept } : {}) },
      body,
    });

  /** Dequantizes a container and checks that `names` come back as float32 near their inputs. */
  async function expectRoundTrip(container: Buffer, names: readonly string[]): Promise<void> {
    const d = await post('dequantize', container);
    expect(d.status, d.body.toString()).toBe(200);
    const out = readTensors(d.body);
    expect([...out.names].sort()).toEqual([...names].sort());
    names.forEach((name, i) => {
      const got = out.tensors.get(name)!;
      expect(got.dtype, name).toBe('F32');
      const values = Array.from(new Float32Array(got.data.buffer));
      [i, -1, 0.5, 2].forEach((v, k) => expect(Math.abs(values[k]! - v), `${name}[${k}]`).toBeLessThan(0.05));
    });
  }

  it('quantize writes metadata for each of them, and dequantize gives each back as float32', async () => {
    const q = await post('quantize', fileOfNames(NAMES));
    expect(q.status, q.body.toString()).toBe(200);
    const container = readTensors(q.body);
    expect(container.metadata?.['format']).toBe('quantd.qtensor/1');
    for (const name of NAMES) {
      expect(container.tensors.get(name)?.dtype, name).toBe('I8');
      expect(Object.keys(container.metadata ?? {}), `metadata describes ${name}`).toContain(name);
    }
    await expectRoundTrip(q.body, NAMES);
  });

  it('the JSON form of a result holds every tensor of the container', async () => {
    const input = fileOfNames(NAMES);
    const [c, j] = await Promise.all([post('quantize', input), post('quantize', input, 'application/json')]);
    expect([c.status, j.status]).toEqual([200, 200]);
    const container = readTensors(c.body);
    const json = readJsonTensors(j.body);
    expect([...json.names].sort()).toEqual([...container.names].sort());
    for (const name of container.names) {
      expectSameBytes(
        json.tensors.get(name)?.data ?? new Uint8Array(0),
        container.tensors.get(name)!.data,
        name,
      );
    }
  });

  it('a tensor named "format" (the container\'s own metadata key) is refused or round-trips', async () => {
    const q = await post('quantize', fileOfNames(['format', 'w']));
    if (q.status !== 200) {
      // refusing the name is fine: the container format has no room for its metadata
      expectProblem(q, 'TENSOR_NAME_RESERVED', ['format']);
      return;
    }
    expect(readTensors(q.body).metadata?.['format']).toBe('quantd.qtensor/1');
    await expectRoundTrip(q.body, ['format', 'w']);
  });
});

/** Counts the kernel task batches the server's worker pool runs from now on. */
function countPoolRuns(server: TestServer): () => number {
  const pool = server.server.handle.pool;
  expect(pool, 'this machine has a native or wasm kernel backend, hence a pool').not.toBeNull();
  const workers = pool!.workers();
  const original = workers.run.bind(workers);
  let runs = 0;
  workers.run = (...args: Parameters<typeof original>) => {
    runs++;
    return original(...args);
  };
  return () => runs;
}

describe('the worker pool path', () => {
  it('a 16 MiB float32 tensor (over the inline limit) takes the pool and gives the CLI bytes', async () => {
    const big = octet('float32', [2048, 2048], 7);
    expect(big.data.byteLength).toBe(16 * 1024 * 1024);
    const options: Options = [
      ['qdtype', 'int4'],
      ['scheme', 'per_channel'],
    ];
    const cli = cliOutput(
      'quantize',
      fileOf(big, 'big.safetensors'),
      join(dir, 'big-out.safetensors'),
      cliArgs(options),
    );
    const runs = countPoolRuns(t);
    const reply = await send(t.port, `/v1/quantize${queryOf(options)}`, {
      headers: octetHeaders('float32', big.shape),
      body: big.data,
    });
    expectCliResult(reply, await cli, undefined, '16 MiB tensor');
    expect(runs(), 'kernel task batches run on the pool').toBeGreaterThan(0);
  });

  it('with QUANTD_INLINE_LIMIT=0 every tensor takes the pool, and the bytes are the CLI bytes', async () => {
    const pooled = await startTestServer({ QUANTD_INLINE_LIMIT: '0' });
    try {
      const runs = countPoolRuns(pooled);
      for (const c of [CASES[0]!, CASES[4]!, CASES[6]!, CASES[8]!, CASES[2]!]) {
        const reply = await request(pooled.port, c, undefined);
        expectCliResult(reply, await cliFor(c, CASES.indexOf(c)), undefined, `${c.label} (pool)`);
      }
      expect(runs()).toBeGreaterThan(0);
      expect(pooled.server.handle.pool!.workers().pending).toBe(0);
    } finally {
      await pooled.server.shutdown('test');
    }
  });
});

describe('1-D tensors of a file of several tensors pass through unless named (README)', () => {
  const norm = new Uint8Array(floats(8, 5).buffer);
  const file = serializeSafetensors(
    [
      { name: 'w', dtype: 'F32', shape: [2, 8], data: new Uint8Array(floats(16, 4).buffer) },
      { name: 'norm', dtype: 'F32', shape: [8], data: norm },
    ],
    null,
  );
  const quantize = (options: Options): Promise<Reply> =>
    send(t.port, `/v1/quantize${queryOf(options)}`, { headers: { 'content-type': SAFETENSORS }, body: file });

  it('int4 per_group: the matrix is quantized, the norm passes through byte for byte', async () => {
    const r = await quantize([
      ['qdtype', 'int4'],
      ['scheme', 'per_group'],
      ['group_size', '4'],
    ]);
    expect(r.status, r.body.toString()).toBe(200);
    const out = readTensors(r.body);
    expect([...out.names]).toEqual(['w', 'w.scale', 'w.zero_point', 'norm']);
    expect(out.tensors.get('norm')).toEqual({ dtype: 'F32', shape: [8], data: norm });
  });

  it('named by include, the norm is quantized', async () => {
    const r = await quantize([['include', 'norm']]);
    expect(r.status, r.body.toString()).toBe(200);
    expect([...readTensors(r.body).names]).toEqual(['w', 'norm', 'norm.scale', 'norm.zero_point']);
  });
});

describe('repeated one-tensor requests reuse their plan (PlanCache), never its answer', () => {
  const options: Options = [
    ['qdtype', 'int4'],
    ['scheme', 'per_group'],
    ['group_size', '16'],
  ];
  const path = `/v1/quantize${queryOf(options)}`;
  const quantize = (o: Octet): Promise<Reply> =>
    send(t.port, path, { headers: octetHeaders(o.dtype, o.shape), body: o.data });

  it('the same URL and tensor headers with other data, or another shape, give the CLI bytes', async () => {
    const bodies = [
      octet('float32', [4, 32], 11),
      octet('float32', [4, 32], 12),
      octet('float32', [2, 64], 13),
    ];
    for (const [i, o] of bodies.entries()) {
      const cli = await cliOutput(
        'quantize',
        fileOf(o, `cache-${i}.safetensors`),
        join(dir, `cache-${i}-out`),
        [...cliArgs(options)],
      );
      // twice each: the first may plan, the second finds the plan
      for (const round of [1, 2])
        expectCliResult(await quantize(o), cli, undefined, `body ${i}, round ${round}`);
    }
  });

  it('a planned request whose body does not fit its shape is still refused', async () => {
    const o = octet('float32', [4, 32], 14);
    expect((await quantize(o)).status).toBe(200);
    const short = await send(t.port, path, {
      headers: octetHeaders('float32', [4, 32]),
      body: o.data.subarray(4),
    });
    expectProblem(short, 'SAFETENSORS_SIZE_MISMATCH');
  });

  it('a bad option is reported before bad tensor headers, as without the cache', async () => {
    const reply = await send(t.port, '/v1/quantize?qdtpye=int4', {
      headers: octetHeaders('float64', [4, 32]),
      body: new Uint8Array(1024),
    });
    expectProblem(reply, 'OPTION_INVALID');
  });
});
