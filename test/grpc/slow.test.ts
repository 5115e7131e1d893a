/**
 * Deadlines and cancellation over gRPC, with slow work: one pool worker (QUANTD_POOL_SIZE=1),
 * every tensor on the pool (QUANTD_INLINE_LIMIT=0), and the pool's test hooks (QUANTD_TEST_HOOKS=1
 * with QUANTD_TEST_TASK_DELAY_MS: each kernel task is held that long in the worker — a call whose
 * task is *running*; the `__spin` test task holding the worker — a call whose task *waits*).
 *  - a deadline shorter than the work: DEADLINE_EXCEEDED at the client, long before the work
 *    would have ended; the pool soon has nothing in flight; the server still answers, right;
 *  - call.cancel() on a unary call and on QuantizeStream (during the compute, and mid-upload):
 *    the same; a stream ended mid-upload gives back its admission slot;
 *  - QUANTD_REQUEST_TIMEOUT_MS bounds gRPC calls as it bounds HTTP requests (REQUEST_TIMEOUT →
 *    DEADLINE_EXCEEDED).
 */
import * as grpc from '@grpc/grpc-js';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';

import {
  bytesOf,
  eventually,
  expectGrpcError,
  expectSameBytes,
  floats,
  quantizerClient,
  rejection,
  runStream,
  startTestServer,
  streamMessages,
  unary,
  type OperationRequest,
  type OperationResponse,
  type QuantizerClient,
  type StreamRequest,
  type StreamResponse,
  type TestServer,
} from './helpers.js';

/** Each kernel task is held this long; a Quantize runs several tasks in turn. */
const DELAY_MS = 150;
const SPIN_MS = 800;
const SHAPE = [64, 64];
const DATA = bytesOf(floats(SHAPE[0]! * SHAPE[1]!, 3));
const REQUEST: OperationRequest = { tensor: { dtype: 'float32', shape: SHAPE, data: DATA } };
const STREAM_HEADER = { total_bytes: DATA.byteLength, tensor: { dtype: 'float32', shape: SHAPE } };

let t: TestServer;
let client: QuantizerClient;
/** The unary result of REQUEST (computed first). */
let expected: Buffer;
/** The spin holding the worker, if any (awaited after each test). */
let spinning: Promise<unknown> | undefined;

/** Holds the only worker for `ms` with the pool's `__spin` test task. */
function holdWorker(ms = SPIN_MS): void {
  spinning = t.server.handle.pool!.workers().runTestTask({ op: '__spin', ms });
}

beforeAll(async () => {
  t = await startTestServer(
    { QUANTD_POOL_SIZE: '1', QUANTD_INLINE_LIMIT: '0', QUANTD_QUEUE_LIMIT: '1' },
    { taskDelayMs: DELAY_MS },
  );
  expect(t.server.handle.pool, 'a native or wasm backend, hence a pool').not.toBeNull();
  client = await quantizerClient(t.target);
  expected = (await unary(client, 'Quantize', REQUEST)).safetensors!;
});
afterEach(async () => {
  await spinning;
  spinning = undefined;
  expect(await eventually(() => t.pending() === 0, 5000), 'nothing in flight between tests').toBe(true);
});
afterAll(async () => {
  client?.close();
  await t?.server.shutdown('test');
});

/**
 * After an aborted call: nothing in flight within `ms` (less than the aborted work had left), and
 * the server answers with the right bytes.
 */
async function expectRecovered(label: string, ms: number): Promise<void> {
  expect(await eventually(() => t.pending() === 0, ms), `${label}: nothing in flight soon after`).toBe(true);
  await spinning;
  const again = await unary(client, 'Quantize', REQUEST, { deadline: Date.now() + 10_000 });
  expectSameBytes(again.safetensors, expected, `${label}: the call after`);
  expect(t.pending()).toBe(0);
}

describe('slow work', () => {
  it('the premise: QUANTD_TEST_TASK_DELAY_MS holds each kernel task (pool test hooks)', async () => {
    const started = Date.now();
    const r = await unary(client, 'Quantize', REQUEST);
    expectSameBytes(r.safetensors, expected, 'the slow call');
    // several held tasks in turn (range, qparams, codes): the bounds below rely on it
    expect(Date.now() - started, 'a Quantize runs held tasks').toBeGreaterThanOrEqual(2.5 * DELAY_MS);
  });

  it('the premise: a call waits while the worker is held by a spin', async () => {
    holdWorker(500);
    const started = Date.now();
    const r = await unary(client, 'Quantize', REQUEST);
    expectSameBytes(r.safetensors, expected, 'the queued call');
    expect(Date.now() - started).toBeGreaterThanOrEqual(500);
  });

  it('a unary deadline inside a running task: DEADLINE_EXCEEDED, the task is aborted', async () => {
    const started = Date.now();
    const err = await rejection(unary(client, 'Quantize', REQUEST, { deadline: Date.now() + 100 }));
    expect(err.code, err.details).toBe(grpc.status.DEADLINE_EXCEEDED);
    // the call's three held tasks would take 3 x DELAY_MS
    expect(Date.now() - started, 'at the deadline, not when the work ends').toBeLessThan(2.5 * DELAY_MS);
    // left running, the call would hold the pool for its remaining tasks (>= 2 x DELAY_MS)
    await expectRecovered('deadline, running task', DELAY_MS);
  });

  it('a unary deadline while the task waits for the worker: DEADLINE_EXCEEDED, the task is dropped', async () => {
    holdWorker();
    const started = Date.now();
    const err = await rejection(unary(client, 'ChooseQParams', REQUEST, { deadline: Date.now() + 200 }));
    expect(err.code, err.details).toBe(grpc.status.DEADLINE_EXCEEDED);
    expect(Date.now() - started, 'at the deadline, not when the worker is free').toBeLessThan(SPIN_MS - 200);
    await expectRecovered('deadline, queued task', 300);
  });

  it('a unary call cancelled during its task: CANCELLED, the task is aborted', async () => {
    let call: grpc.ClientUnaryCall | undefined;
    const pending = unary(client, 'FakeQuantize', REQUEST, { onCall: (c) => (call = c) });
    expect(await eventually(() => t.pending() === 1, 2000), 'the call reaches the pool').toBe(true);
    call!.cancel();
    const err = await rejection(pending);
    expect(err.code).toBe(grpc.status.CANCELLED);
    await expectRecovered('unary cancel', DELAY_MS);
  });

  it('QuantizeStream cancelled during its task: CANCELLED, the task is aborted', async () => {
    let call: grpc.ClientDuplexStream<StreamRequest, StreamResponse> | undefined;
    const outcome = runStream(client, streamMessages(STREAM_HEADER, DATA, 4096), {
      control: (c) => (call = c),
    });
    expect(await eventually(() => t.pending() === 1, 2000), 'the stream reaches the pool').toBe(true);
    call!.cancel();
    expect((await outcome).status.code).toBe(grpc.status.CANCELLED);
    await expectRecovered('stream cancel during compute', DELAY_MS);
  });

  it('a QuantizeStream deadline during its task: DEADLINE_EXCEEDED, the task is aborted', async () => {
    const started = Date.now();
    const outcome = await runStream(client, streamMessages(STREAM_HEADER, DATA, 4096), {
      deadline: Date.now() + 100,
    });
    expect(outcome.status.code, outcome.status.details).toBe(grpc.status.DEADLINE_EXCEEDED);
    expect(Date.now() - started, 'at the deadline, not when the work ends').toBeLessThan(2.5 * DELAY_MS);
    await expectRecovered('stream deadline', DELAY_MS);
  });

  it('after aborted calls (one running, one waiting) the admission slots are free again', async () => {
    const errs = await Promise.all(
      [0, 1].map(() => rejection(unary(client, 'Quantize', REQUEST, { deadline: Date.now() + 100 }))),
    );
    for (const e of errs) expect(e.code, e.details).toBe(grpc.status.DEADLINE_EXCEEDED);
    await expectRecovered('two deadlines', DELAY_MS);
    // capacity is pool size + queue limit = 2: two calls at once are both admitted
    const ok = await Promise.all([0, 1].map(() => unary(client, 'Quantize', REQUEST)));
    for (const r of ok) expectSameBytes(r.safetensors, expected, 'after the aborted calls');
  });
});

describe('streams ended mid-upload free their admission slot (capacity 1)', () => {
  let one: TestServer;
  let c: QuantizerClient;
  beforeAll(async () => {
    one = await startTestServer({ QUANTD_POOL_SIZE: '1', QUANTD_QUEUE_LIMIT: '0' });
    c = await quantizerClient(one.target);
  });
  afterAll(async () => {
    c?.close();
    await one?.server.shutdown('test');
  });
  const half = (): ReturnType<typeof streamMessages> =>
    streamMessages(STREAM_HEADER, DATA.subarray(0, DATA.byteLength / 2), 1024);

  /** The one slot is free: a call is admitted (OVERLOADED otherwise). */
  async function expectSlotFree(label: string): Promise<void> {
    // the server learns of the end of the stream a moment after the client does
    let last: unknown;
    let ok: OperationResponse | null = null;
    for (let i = 0; i < 20 && !ok; i++) {
      try {
        ok = await unary(c, 'Quantize', REQUEST);
      } catch (err) {
        last = err;
        await new Promise((r) => setTimeout(r, 25));
      }
    }
    expect(
      ok?.safetensors,
      `${label}: a call after (${String((last as Error | undefined)?.message)})`,
    ).toBeDefined();
    expectSameBytes(ok!.safetensors, expected, `${label}: the call after`);
  }

  it('the premise: while a stream is open, another call is refused (OVERLOADED)', async () => {
    let call: grpc.ClientDuplexStream<StreamRequest, StreamResponse> | undefined;
    const outcome = runStream(c, half(), { keepOpen: true, control: (x) => (call = x) });
    await new Promise((r) => setTimeout(r, 100));
    expectGrpcError(await rejection(unary(c, 'Quantize', REQUEST)), 'OVERLOADED');
    call!.cancel();
    await outcome;
    await expectSlotFree('after the premise');
  });

  it('QuantizeStream cancelled mid-upload: CANCELLED at the client, the slot is freed', async () => {
    let call: grpc.ClientDuplexStream<StreamRequest, StreamResponse> | undefined;
    const outcome = runStream(c, half(), { keepOpen: true, control: (x) => (call = x) });
    await new Promise((r) => setTimeout(r, 100));
    call!.cancel();
    const o = await outcome;
    expect(o.status.code, o.status.details).toBe(grpc.status.CANCELLED);
    await expectSlotFree('cancel mid-upload');
  });

  it('QuantizeStream past its deadline mid-upload: DEADLINE_EXCEEDED, the slot is freed', async () => {
    const outcome = await runStream(c, half(), { keepOpen: true, deadline: Date.now() + 200 });
    expect(outcome.status.code).toBe(grpc.status.DEADLINE_EXCEEDED);
    await expectSlotFree('deadline mid-upload');
  });
});

describe('QUANTD_REQUEST_TIMEOUT_MS', () => {
  const TIMEOUT_MS = 300;
  let s: TestServer;
  let c: QuantizerClient;
  beforeAll(async () => {
    s = await startTestServer(
      { QUANTD_POOL_SIZE: '1', QUANTD_INLINE_LIMIT: '0', QUANTD_REQUEST_TIMEOUT_MS: String(TIMEOUT_MS) },
      { hooks: true },
    );
    c = await quantizerClient(s.target);
  });
  afterAll(async () => {
    c?.close();
    await s?.server.shutdown('test');
  });

  it('a call without a client deadline running past the timeout: REQUEST_TIMEOUT → DEADLINE_EXCEEDED', async () => {
    // the worker is held; without a client deadline only the server's timeout can end the call
    const spin = s.server.handle.pool!.workers().runTestTask({ op: '__spin', ms: SPIN_MS });
    try {
      const started = Date.now();
      const err = await rejection(unary(c, 'Quantize', REQUEST));
      expect(Date.now() - started, 'answered at the timeout, not when the work ended').toBeLessThan(
        SPIN_MS - 200,
      );
      expectGrpcError(err, 'REQUEST_TIMEOUT', [`within ${TIMEOUT_MS} ms`]);
    } finally {
      await spin;
    }
    expect(await eventually(() => s.pending() === 0, 1000)).toBe(true);
  });
});
