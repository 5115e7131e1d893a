/**
 * QuantizeStream: inputs larger than one message. A server with QUANTD_BODY_LIMIT=256k (its
 * largest gRPC message) takes a 4 MiB tensor in 128 KiB chunks — raw-tensor mode (header.tensor)
 * and safetensors mode, every operation name — and the result equals, byte for byte, the unary
 * result of a server without the small limit for the same request (and POST /v1/<op> there).
 * The result comes back as one StreamResult (total_bytes, the container's metadata), then chunks
 * of at most chunk_bytes with contiguous offsets that together carry total_bytes.
 */
import * as grpc from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { serializeSafetensors } from '../../src/format/index.js';
import {
  assembleResult,
  bytesOf,
  decodeContainer,
  expectSameBytes,
  floats,
  httpOp,
  queryOf,
  quantizerClient,
  rejection,
  runStream,
  startTestServer,
  streamMessages,
  unary,
  type OperationRequest,
  type QuantizerClient,
  type SpecMessage,
  type StreamHeader,
  type StreamResponse,
  type TestServer,
  type UnaryRpc,
} from './helpers.js';

const KiB = 1024;
const MiB = 1024 * KiB;
const LIMIT = 256 * KiB;
const SEND_CHUNK = 128 * KiB;
const SHAPE = [1024, 1024];
/** 4 MiB of float32: sixteen times the small server's message limit. */
const BIG = bytesOf(floats(SHAPE[0]! * SHAPE[1]!, 42));
const BIAS = bytesOf(floats(1024, 7));
const FILE = serializeSafetensors(
  [
    { name: 'proj.weight', dtype: 'F32', shape: SHAPE, data: BIG },
    { name: 'proj.bias', dtype: 'F32', shape: [1024], data: BIAS },
  ],
  { source: 'stream test' },
);

/** small: 256 KiB messages; ref: default limits (the unary reference). */
let small: TestServer;
let ref: TestServer;
let smallClient: QuantizerClient;
let refClient: QuantizerClient;
/** The reference's int8 container of BIG, the Dequantize input. */
let qtensor: Buffer;

beforeAll(async () => {
  [small, ref] = await Promise.all([
    startTestServer({ QUANTD_BODY_LIMIT: '256k' }),
    startTestServer({ QUANTD_POOL_SIZE: '1' }),
  ]);
  [smallClient, refClient] = await Promise.all([quantizerClient(small.target), quantizerClient(ref.target)]);
  qtensor = (await unary(refClient, 'Quantize', { tensor: { dtype: 'float32', shape: SHAPE, data: BIG } }))
    .safetensors!;
});
afterAll(async () => {
  smallClient?.close();
  refClient?.close();
  await Promise.all([small?.server.shutdown('test'), ref?.server.shutdown('test')]);
});

const RPC_OF: Readonly<Record<string, UnaryRpc>> = {
  '': 'Quantize',
  quantize: 'Quantize',
  dequantize: 'Dequantize',
  'fake-quantize': 'FakeQuantize',
  qparams: 'ChooseQParams',
};

interface Case {
  readonly label: string;
  readonly operation: string;
  readonly spec?: SpecMessage;
  readonly dtype?: string;
  readonly mode: 'tensor' | 'safetensors';
  readonly input: () => Uint8Array;
  readonly chunkBytes: number;
}

const CASES: readonly Case[] = [
  {
    label: 'quantize, raw tensor, int4 per_token',
    operation: 'quantize',
    spec: { qdtype: 'int4', scheme: 'per_token' },
    mode: 'tensor',
    input: () => BIG,
    chunkBytes: 64 * KiB,
  },
  {
    label: 'no operation (quantize), raw tensor, defaults',
    operation: '',
    mode: 'tensor',
    input: () => BIG,
    chunkBytes: 100 * KiB,
  },
  {
    label: 'fake-quantize, raw tensor, uint8 to bfloat16',
    operation: 'fake-quantize',
    spec: { qdtype: 'uint8' },
    dtype: 'bfloat16',
    mode: 'tensor',
    input: () => BIG,
    chunkBytes: 200 * KiB,
  },
  {
    label: 'qparams, raw tensor, symmetric',
    operation: 'qparams',
    spec: { mode: 'symmetric' },
    mode: 'tensor',
    input: () => BIG,
    chunkBytes: 1024,
  },
  {
    label: 'quantize, safetensors file, float8_e4m3fn, exclude the bias',
    operation: 'quantize',
    spec: { qdtype: 'float8_e4m3fn', exclude: ['*.bias'] },
    mode: 'safetensors',
    input: () => FILE,
    chunkBytes: 96 * KiB,
  },
  {
    label: 'fake-quantize, safetensors file, int8 per_tensor to float16',
    operation: 'fake-quantize',
    dtype: 'float16',
    mode: 'safetensors',
    input: () => FILE,
    chunkBytes: 128 * KiB,
  },
  {
    label: 'qparams, safetensors file, uint4 per_token',
    operation: 'qparams',
    spec: { qdtype: 'uint4', scheme: 'per_token' },
    mode: 'safetensors',
    input: () => FILE,
    chunkBytes: 64 * KiB,
  },
  {
    label: 'dequantize, an int8 container, to float16',
    operation: 'dequantize',
    dtype: 'float16',
    mode: 'safetensors',
    input: () => qtensor,
    chunkBytes: 160 * KiB,
  },
];

function headerOf(c: Case, input: Uint8Array): StreamHeader {
  return {
    ...(c.operation ? { operation: c.operation } : {}),
    ...(c.spec ? { spec: c.spec } : {}),
    ...(c.dtype ? { dtype: c.dtype } : {}),
    total_bytes: input.byteLength,
    chunk_bytes: c.chunkBytes,
    ...(c.mode === 'tensor' ? { tensor: { name: 'tensor', dtype: 'float32', shape: SHAPE } } : {}),
  };
}

function unaryRequest(c: Case, input: Uint8Array): OperationRequest {
  return {
    ...(c.mode === 'tensor'
      ? { tensor: { dtype: 'float32', shape: SHAPE, data: input } }
      : { safetensors: input }),
    ...(c.spec ? { spec: c.spec } : {}),
    ...(c.dtype ? { dtype: c.dtype } : {}),
  };
}

describe('a 4 MiB input through a 256 KiB message limit', () => {
  it('the premise: the same input as one unary message is refused (RESOURCE_EXHAUSTED)', async () => {
    const err = await rejection(
      unary(smallClient, 'Quantize', { tensor: { dtype: 'float32', shape: SHAPE, data: BIG } }),
    );
    expect(err.code, err.details).toBe(grpc.status.RESOURCE_EXHAUSTED);
  });

  it.each(CASES.map((c) => [c.label, c] as const))('%s', async (_label, c) => {
    const input = c.input();
    expect(input.byteLength, 'the input is larger than a message').toBeGreaterThan(LIMIT);
    const outcome = await runStream(smallClient, streamMessages(headerOf(c, input), input, SEND_CHUNK));
    const result = assembleResult(outcome, c.chunkBytes);

    const want = (await unary(refClient, RPC_OF[c.operation]!, unaryRequest(c, input))).safetensors!;
    expectSameBytes(result.bytes, want, 'the streamed result vs the unary result');
    expect(result.totalBytes).toBe(want.byteLength);
    expect(result.metadata, 'StreamResult.metadata is the container metadata').toEqual(
      decodeContainer(want).metadata,
    );
    // chunks are cut at most at chunk_bytes, so a result of P parts takes fewer than
    // ceil(total / chunk_bytes) + P chunks, and at least ceil(total / chunk_bytes)
    const parts = decodeContainer(want).tensors.length + 1;
    expect(result.chunkSizes.length).toBeGreaterThanOrEqual(Math.ceil(result.totalBytes / c.chunkBytes));
    expect(result.chunkSizes.length).toBeLessThanOrEqual(Math.ceil(result.totalBytes / c.chunkBytes) + parts);
    if (result.totalBytes > c.chunkBytes) {
      expect(Math.max(...result.chunkSizes), 'the largest chunk is chunk_bytes').toBe(c.chunkBytes);
    }
  });

  it('the streamed result equals POST /v1/<op> on the reference server too', async () => {
    const c = CASES[0]!;
    const outcome = await runStream(smallClient, streamMessages(headerOf(c, BIG), BIG, SEND_CHUNK));
    const result = assembleResult(outcome, c.chunkBytes);
    const reply = await httpOp(ref.base, 'quantize', queryOf(c.spec), {
      tensor: { dtype: 'float32', shape: SHAPE, data: BIG },
    });
    expect(reply.status).toBe(200);
    expectSameBytes(result.bytes, reply.body, 'stream vs HTTP');
  });

  it('chunk sizes of the input do not matter: one-byte-odd chunks give the same result', async () => {
    const c = CASES[0]!;
    const a = assembleResult(
      await runStream(smallClient, streamMessages(headerOf(c, BIG), BIG, 65_537)),
      c.chunkBytes,
    );
    const b = assembleResult(
      await runStream(smallClient, streamMessages(headerOf(c, BIG), BIG, 250_001)),
      c.chunkBytes,
    );
    expectSameBytes(a.bytes, b.bytes, 'different input chunking');
  });

  it('options in proto3 `optional` fields (axis, group_size, quant_min/max, eps) apply in streams', async () => {
    const spec: SpecMessage = { qdtype: 'int4', scheme: 'per_group', group_size: 64 };
    const c: Case = {
      label: '',
      operation: 'quantize',
      spec,
      mode: 'tensor',
      input: () => BIG,
      chunkBytes: 128 * KiB,
    };
    const outcome = await runStream(smallClient, streamMessages(headerOf(c, BIG), BIG, SEND_CHUNK));
    const result = assembleResult(outcome, c.chunkBytes);
    const reply = await httpOp(ref.base, 'quantize', queryOf(spec), {
      tensor: { dtype: 'float32', shape: SHAPE, data: BIG },
    });
    expect(reply.status, reply.body.toString()).toBe(200);
    expectSameBytes(result.bytes, reply.body, 'per_group stream vs HTTP');
  });

  it('without chunk_bytes a result larger than the message limit still arrives (default chunking fits)', async () => {
    const c: Case = {
      label: '',
      operation: 'fake-quantize',
      mode: 'tensor',
      input: () => BIG,
      chunkBytes: 0,
    };
    const header = { ...headerOf(c, BIG) };
    delete header.chunk_bytes;
    const outcome = await runStream(smallClient, streamMessages(header, BIG, SEND_CHUNK));
    expect(outcome.error?.details ?? null, 'a result chunk over QUANTD_BODY_LIMIT').toBeNull();
    const result = assembleResult(outcome, LIMIT);
    const want = (await unary(refClient, 'FakeQuantize', unaryRequest(c, BIG))).safetensors!;
    expectSameBytes(result.bytes, want, 'default chunking vs unary');
  });

  it('a client with grpc-js default limits (4 MiB receive) gets a > 4 MiB result with default chunk_bytes', async () => {
    const plain = await quantizerClient(ref.target, grpc.credentials.createInsecure(), {});
    try {
      const c: Case = {
        label: '',
        operation: 'fake-quantize',
        mode: 'tensor',
        input: () => BIG,
        chunkBytes: 0,
      };
      const header = { ...headerOf(c, BIG) };
      delete header.chunk_bytes;
      const outcome = await runStream(plain, streamMessages(header, BIG, SEND_CHUNK));
      expect(
        outcome.error?.details ?? null,
        'a default-sized chunk over the client default limit',
      ).toBeNull();
      const result = assembleResult(outcome, 4 * MiB);
      expect(result.totalBytes).toBeGreaterThan(4 * MiB);
    } finally {
      plain.close();
    }
  });
});

describe('StreamResult and chunk order', () => {
  it('the StreamResult comes before any chunk, and total_bytes is announced up front', async () => {
    const c = CASES[2]!;
    const outcome = await runStream(smallClient, streamMessages(headerOf(c, BIG), BIG, SEND_CHUNK));
    expect(outcome.responses.filter((r) => r.part === 'result')).toHaveLength(1);
    expect(outcome.responses[0]?.part).toBe('result');
    const result = assembleResult(outcome, c.chunkBytes);
    // fake-quantize to bfloat16 of 1M elements: 2 MiB of values + the mask and the header
    expect(result.totalBytes).toBeGreaterThan(2 * MiB);
  });

  it('nothing is left in flight after the streams', async () => {
    expect(small.pending()).toBe(0);
    expect(ref.pending()).toBe(0);
  });
});

describe('result chunks are not overwritten by later requests', () => {
  /**
   * A client that reads slowly: it pauses after the StreamResult, so the HTTP/2 flow-control
   * window fills and the server's last result chunks wait in the call's write queue (as message
   * objects holding views of the output buffer) after handleStream has finished its loop.
   * 144 KiB chunks of a 4 MiB result: ~17 messages are read ahead, one stalls, the remaining ~13
   * stay queued (fewer than the 16 that would make write() ask for drain).
   */
  it('a slow reader gets its own result even when another request of the same size runs meanwhile', async () => {
    const chunkBytes = 144 * KiB;
    const other = bytesOf(floats(SHAPE[0]! * SHAPE[1]!, 4711));
    const otherQ = (
      await unary(refClient, 'Quantize', { tensor: { dtype: 'float32', shape: SHAPE, data: other } })
    ).safetensors!;
    const want = (await unary(refClient, 'Dequantize', { safetensors: qtensor })).safetensors!;

    const call = refClient.QuantizeStream();
    const responses: StreamResponse[] = [];
    let resultSeen!: () => void;
    const result = new Promise<void>((r) => (resultSeen = r));
    call.on('data', (r: StreamResponse) => {
      responses.push(r);
      if (r.part === 'result') {
        call.pause();
        resultSeen();
      }
    });
    const status = new Promise<grpc.StatusObject>((resolve) => call.on('status', resolve));
    const ended = new Promise<void>((resolve) => {
      call.on('end', resolve);
      call.on('error', () => resolve());
    });
    const header: StreamHeader = {
      operation: 'dequantize',
      total_bytes: qtensor.byteLength,
      chunk_bytes: chunkBytes,
    };
    for (const m of streamMessages(header, qtensor, 1 * MiB)) call.write(m);
    call.end();
    await result;
    // the server has computed the result and queued its chunks; the reader is paused
    await new Promise((r) => setTimeout(r, 300));
    // another client's request whose output has the same size (4 MiB of float32)
    const otherResult = (await unary(refClient, 'Dequantize', { safetensors: otherQ })).safetensors!;
    expect(otherResult.equals(want), 'the other request has another result').toBe(false);

    call.resume();
    const s = await status;
    await ended;
    expect(s.code, s.details).toBe(grpc.status.OK);
    const assembled = assembleResult({ responses, status: s, error: null }, chunkBytes);
    expectSameBytes(assembled.bytes, want, "the slow reader's result after another request of the same size");
  });

  it('concurrent streams of one size each get their own bytes', async () => {
    const inputs = [1, 2, 3, 4].map((seed) => bytesOf(floats(SHAPE[0]! * SHAPE[1]!, seed)));
    const wants = await Promise.all(
      inputs.map(
        async (data) =>
          (await unary(refClient, 'Quantize', { tensor: { dtype: 'float32', shape: SHAPE, data } }))
            .safetensors!,
      ),
    );
    const header = (n: number): StreamHeader => ({
      total_bytes: n,
      chunk_bytes: 64 * KiB,
      tensor: { dtype: 'float32', shape: SHAPE },
    });
    for (let round = 0; round < 3; round++) {
      const results = await Promise.all(
        inputs.map(async (data) =>
          assembleResult(
            await runStream(refClient, streamMessages(header(data.byteLength), data, 512 * KiB)),
            64 * KiB,
          ),
        ),
      );
      results.forEach((r, i) => expectSameBytes(r.bytes, wants[i]!, `round ${round}, stream ${i}`));
    }
  });
});
