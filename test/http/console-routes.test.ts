/**
 * The routes behind the console, on real servers: GET /v1/jobs/events (a snapshot, then each
 * job change and removal, only the caller's jobs, no admission slot held, ended by shutdown),
 * POST /v1/inspect (the CLI's inspect --json from a file or from its header alone, clear errors),
 * and /ui (the built page with its policy; a clear 404 when the console is not built).
 */
import http from 'node:http';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import Fastify from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { quantd } from '../cli/run-cli.js';
import { expectProblem, send, type TestServer } from './helpers.js';
import { json, smallModel, startJobServer, tempDir, writeModel, type Job } from '../jobs/helpers.js';
import { loadConsole, registerConsole } from '../../src/http/ui-routes.js';
import { loadConfig } from '../../src/config.js';
import { asQuantdError, sendProblem } from '../../src/http/problem.js';

const ALICE = 'alice-key-0123456789';
const BOB = 'bob-key-0123456789ab';

interface Event {
  readonly event: string;
  readonly data: unknown;
}

/** An open event stream: the events so far, a way to wait for one, and the end. */
interface Stream {
  readonly events: Event[];
  next(match: (e: Event) => boolean, ms?: number): Promise<Event>;
  readonly ended: Promise<void>;
  close(): void;
}

function openStream(port: number, key?: string): Promise<Stream> {
  return new Promise((resolve, reject) => {
    const events: Event[] = [];
    const waiters: Array<() => void> = [];
    const request = http.get(
      {
        host: '127.0.0.1',
        port,
        path: '/v1/jobs/events',
        headers: key ? { authorization: `Bearer ${key}` } : {},
        agent: false,
      },
      (response) => {
        if (
          response.statusCode !== 200 ||
          !/^text\/event-stream/.test(response.headers['content-type'] ?? '')
        ) {
          response.resume();
          reject(new Error(`event stream refused: ${response.statusCode}`));
          return;
        }
        let buffer = '';
        response.setEncoding('utf8');
        response.on('data', (chunk: string) => {
          buffer += chunk;
          let end: number;
          while ((end = buffer.indexOf('\n\n')) >= 0) {
            const block = buffer.slice(0, end);
            buffer = buffer.slice(end + 2);
            const event = /^event: (.*)$/m.exec(block)?.[1];
            const data = /^data: (.*)$/m.exec(block)?.[1];
            if (event !== undefined && data !== undefined) events.push({ event, data: JSON.parse(data) });
          }
          for (const wake of waiters.splice(0)) wake();
        });
        const ended = new Promise<void>((done) => response.on('close', done));
        resolve({
          events,
          ended,
          close: () => request.destroy(),
          next: async (match, ms = 20_000) => {
            const deadline = Date.now() + ms;
            for (;;) {
              const found = events.find(match);
              if (found) return found;
              if (Date.now() > deadline) throw new Error(`no such event in ${JSON.stringify(events)}`);
              await new Promise<void>((wake) => {
                waiters.push(wake);
                setTimeout(wake, 100);
              });
            }
          },
        });
      },
    );
    request.on('error', reject);
  });
}

const jobEvent =
  (id: string, state?: string) =>
  (e: Event): boolean =>
    e.event === 'job' &&
    (e.data as Job).id === id &&
    (state === undefined || (e.data as Job).state === state);

describe('GET /v1/jobs/events', () => {
  const data = tempDir('events');
  writeModel(join(data, 'model.safetensors'), smallModel());
  let t: TestServer;
  beforeAll(async () => {
    // one compute slot and no queue: a stream that held a slot would shut out every request
    t = await startJobServer(data, {
      QUANTD_API_KEYS: `${ALICE},${BOB}`,
      QUANTD_POOL_SIZE: '1',
      QUANTD_QUEUE_LIMIT: '0',
    });
  });
  afterAll(async () => {
    await t?.server.shutdown('test done');
  });

  const submit = async (key: string): Promise<Job> => {
    const reply = await send(t.port, '/v1/jobs', {
      headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
      body: JSON.stringify({ input: 'model.safetensors', params: { qdtype: 'int8' } }),
    });
    expect(reply.status, reply.body.toString()).toBe(202);
    return json<Job>(reply);
  };

  it('sends a snapshot, then the changes of the caller’s jobs only, then removals', async () => {
    const earlier = await submit(ALICE);
    const alice = await openStream(t.port, ALICE);
    const bob = await openStream(t.port, BOB);
    try {
      const snapshot = await alice.next((e) => e.event === 'snapshot');
      expect((snapshot.data as { jobs: Job[] }).jobs.map((j) => j.id)).toContain(earlier.id);
      expect(((await bob.next((e) => e.event === 'snapshot')).data as { jobs: Job[] }).jobs).toEqual([]);
      const job = await submit(ALICE);
      const done = (await alice.next(jobEvent(job.id, 'succeeded'))).data as Job;
      // the job as GET /v1/jobs/ID shows it
      const shown = await send(t.port, `/v1/jobs/${job.id}`, {
        headers: { authorization: `Bearer ${ALICE}` },
      });
      expect(done).toEqual(json<Job>(shown));
      expect(done.progress?.tensors_done).toBe(done.progress?.tensors_total);
      const removed = await send(t.port, `/v1/jobs/${job.id}`, {
        method: 'DELETE',
        headers: { authorization: `Bearer ${ALICE}` },
      });
      expect(removed.status).toBe(204);
      await alice.next((e) => e.event === 'removed' && (e.data as { id: string }).id === job.id);
      // Bob saw nothing of Alice's
      expect(bob.events.map((e) => e.event)).toEqual(['snapshot']);
    } finally {
      alice.close();
      bob.close();
    }
  });

  it('holds no compute slot: requests pass while streams are open', async () => {
    const streams = await Promise.all([1, 2, 3].map(() => openStream(t.port, ALICE)));
    try {
      const health = await send(t.port, '/v1/jobs', { headers: { authorization: `Bearer ${ALICE}` } });
      expect(health.status, health.body.toString()).toBe(200);
    } finally {
      for (const s of streams) s.close();
    }
  });

  /** QUANTD_LIVE_STREAMS_PER_CLIENT's default: streams one key may hold (the console holds one a tab). */
  const STREAMS_PER_KEY = loadConfig({}).liveStreamsPerClient;

  it('lets one key hold at most STREAMS_PER_KEY streams (429 QUOTA_EXCEEDED), others unaffected', async () => {
    const streams = await Promise.all(
      Array.from({ length: STREAMS_PER_KEY }, () => openStream(t.port, ALICE)),
    );
    try {
      expectProblem(
        await send(t.port, '/v1/jobs/events', { headers: { authorization: `Bearer ${ALICE}` } }),
        'QUOTA_EXCEEDED',
        ['event streams'],
      );
      const bob = await openStream(t.port, BOB);
      await bob.next((e) => e.event === 'snapshot');
      bob.close();
      // a closed stream gives its place back
      streams.pop()!.close();
      let again: Stream | undefined;
      for (let i = 0; i < 50 && again === undefined; i++) {
        try {
          again = await openStream(t.port, ALICE);
        } catch {
          await new Promise((r) => setTimeout(r, 20)); // the server has not seen the close yet
        }
      }
      expect(again, 'a place after a stream closed').toBeDefined();
      again?.close();
    } finally {
      for (const s of streams) s.close();
    }
  });

  it('needs the key', async () => {
    expectProblem(await send(t.port, '/v1/jobs/events'), 'UNAUTHORIZED');
  });

  it('ends open streams when the server shuts down', async () => {
    const other = await startJobServer(tempDir('events-stop'));
    let running = true;
    try {
      const stream = await openStream(other.port);
      try {
        await stream.next((e) => e.event === 'snapshot');
        running = false;
        await other.server.shutdown('test');
        await stream.ended;
      } finally {
        stream.close();
      }
    } finally {
      if (running) await other.server.shutdown('test');
    }
  });
});

describe('POST /v1/inspect', () => {
  const dir = tempDir('inspect');
  const model = writeModel(join(dir, 'model.safetensors'), smallModel());
  const quantized = join(dir, 'q.safetensors');
  let t: TestServer;
  beforeAll(async () => {
    expect(
      quantd([
        'quantize',
        model,
        '-o',
        quantized,
        '--qdtype',
        'int4',
        '--scheme',
        'per_group',
        '--group-size',
        '16',
      ]).code,
    ).toBe(0);
    t = await startJobServer(dir);
  });
  afterAll(async () => {
    await t?.server.shutdown('test done');
  });

  const post = (body: Uint8Array, query = ''): ReturnType<typeof send> =>
    send(t.port, `/v1/inspect${query}`, { headers: { 'content-type': 'application/x-safetensors' }, body });

  it('answers what the CLI’s inspect --json says, from the whole file or its header alone', async () => {
    const bytes = new Uint8Array(readFileSync(quantized));
    const cli = JSON.parse(quantd(['inspect', quantized, '--json']).stdout) as Record<string, unknown>;
    const whole = json<Record<string, unknown>>(await post(bytes));
    const headerBytes = 8 + Number(Buffer.from(bytes).readBigUInt64LE(0));
    const header = json<Record<string, unknown>>(
      await post(bytes.subarray(0, headerBytes), `?size=${bytes.length}`),
    );
    expect(whole).toEqual(header);
    for (const key of ['format', 'size', 'tensors', 'total']) expect(whole[key], key).toEqual(cli[key]);
    const rows = (whole['tensors'] as Array<{ kind: string; scheme: string }>).filter(
      (x) => x.kind === 'quantized',
    );
    expect(rows.length).toBeGreaterThan(0);
    expect(rows.every((x) => x.scheme === 'per_group')).toBe(true);
  });

  it('names what is wrong', async () => {
    const bytes = new Uint8Array(readFileSync(quantized));
    expectProblem(await post(bytes.subarray(0, 20), `?size=${bytes.length}`), 'SAFETENSORS_TRUNCATED');
    expectProblem(await post(bytes, '?size=12'), 'OPTION_INVALID');
    expectProblem(await post(bytes, '?verify=true'), 'OPTION_INVALID');
    expectProblem(
      await post(new TextEncoder().encode('GGUF\x03\x00\x00\x00 not safetensors')),
      'FILE_NOT_SAFETENSORS',
    );
    expectProblem(
      await send(t.port, '/v1/inspect', { headers: { 'content-type': 'text/plain' }, body: 'x' }),
      'UNSUPPORTED_MEDIA_TYPE',
    );
  });
});

describe('/ui', () => {
  let t: TestServer;
  beforeAll(async () => {
    t = await startJobServer(tempDir('ui-route'), { QUANTD_API_KEYS: ALICE });
  });
  afterAll(async () => {
    await t?.server.shutdown('test done');
  });

  it('serves the built page without a key (it holds no data), under a strict policy', async () => {
    const redirect = await send(t.port, '/ui');
    expect(redirect.status).toBe(308);
    expect(redirect.headers['location']).toBe('/ui/');
    const page = await send(t.port, '/ui/');
    expect(page.status).toBe(200);
    expect(page.headers['content-type']).toBe('text/html; charset=utf-8');
    expect(page.headers['cache-control']).toBe('no-cache');
    expect(page.headers['content-security-policy']).toContain("default-src 'self'");
    const script = /src="\/ui\/(assets\/[^"]+\.js)"/.exec(page.body.toString())?.[1];
    expect(script).toBeDefined();
    const asset = await send(t.port, `/ui/${script}`);
    expect(asset.status).toBe(200);
    expect(asset.headers['content-type']).toBe('text/javascript; charset=utf-8');
    expect(asset.headers['cache-control']).toContain('immutable');
    expectProblem(await send(t.port, '/ui/assets/none.js'), 'NOT_FOUND');
  });

  it('leaves /ui out of the API description, which documents the routes the console uses', async () => {
    const doc = json<{ paths: Record<string, Record<string, unknown>> }>(await send(t.port, '/docs/json'));
    expect(Object.keys(doc.paths).filter((p) => p.startsWith('/ui'))).toEqual([]);
    expect(doc.paths['/v1/inspect']?.['post']).toBeDefined();
    expect(doc.paths['/v1/jobs/events']?.['get']).toBeDefined();
  });

  it('says how to build it when it is not built', async () => {
    const app = Fastify();
    app.setErrorHandler((err, request, reply) => sendProblem(asQuantdError(err, request), request, reply));
    await registerConsole(app, loadConsole(join(tempDir('no-ui'), 'missing')));
    const reply = await app.inject({ method: 'GET', url: '/ui/' });
    expect(reply.statusCode).toBe(404);
    expect(reply.body).toContain('npm run build:ui');
    await app.close();
  });
});
