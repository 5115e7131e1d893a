/**
 * gRPC calls a full server cannot take are refused on their metadata, before their message is
 * received (src/grpc/early-admission.ts): with the only slot held by a slow call, twenty 16 MiB
 * Quantize calls all get UNAVAILABLE with quantd-code OVERLOADED, and the server's RSS grows by
 * far less than their messages (an outside test measured ~37 MiB per refused call when the
 * message was decoded first: 740 MiB here).
 */
import * as grpc from '@grpc/grpc-js';
import { afterAll, beforeAll, expect, it } from 'vitest';

import { callRaw, loadMethods, rawClient } from './fuzz/grpc-cases.js';
import { startChildServer, type ChildServer } from './server.js';

let server: ChildServer;

beforeAll(async () => {
  server = await startChildServer({
    QUANTD_POOL_SIZE: '1',
    QUANTD_QUEUE_LIMIT: '0',
    QUANTD_INLINE_LIMIT: '0',
    // each kernel task is held 3 s in the worker: the first call keeps the only slot that long
    QUANTD_TEST_HOOKS: '1',
    QUANTD_TEST_TASK_DELAY_MS: '3000',
  });
});
afterAll(async () => {
  await server?.stop();
});

it('refuses calls on a full server before their 16 MiB messages arrive', async () => {
  const method = loadMethods().find((m) => m.path === '/quantd.v1.Quantizer/Quantize')!;
  const encode = (rows: number): Buffer =>
    method.encode({
      tensor: { name: 'w', dtype: 'float32', shape: [rows, 1024], data: Buffer.alloc(rows * 1024 * 4, 1) },
      spec: { qdtype: 'int8' },
    });
  const client = rawClient(server.target);
  const holder = callRaw(client, method, [encode(16)], 60_000);
  await new Promise((r) => setTimeout(r, 500)); // the holder is admitted and computing
  const before = server.rssBytes();
  const big = encode(4096); // 16 MiB
  const refused = await Promise.all(
    Array.from({ length: 20 }, () => callRaw(rawClient(server.target), method, [big], 30_000)),
  );
  const growth = server.rssBytes() - before;
  console.log(
    `gRPC early admission: 20 × 16 MiB calls on a full server: ${refused.filter((a) => a.quantdCode === 'OVERLOADED').length} OVERLOADED, RSS +${(growth / 2 ** 20).toFixed(0)} MiB`,
  );
  for (const answer of refused) {
    expect(answer.code).toBe(grpc.status.UNAVAILABLE);
    expect(answer.quantdCode).toBe('OVERLOADED');
  }
  expect(growth).toBeLessThan(160 * 2 ** 20);
  expect((await holder).code).toBe(grpc.status.OK);
  client.close();
});
