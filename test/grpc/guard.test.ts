/**
 * The one catch around every gRPC method (src/grpc/guard.ts), on a real server and connection:
 * handlers that fail in every way a handler can — a synchronous throw, a rejected promise, a
 * listener of the call's events that throws, a thrown value that cannot even be described, a
 * report (log) that throws — on a unary, a server-streaming and a bidirectional method. Each
 * answers a catalogued error with quantd-code (INTERNAL for anything that is not a QuantdError)
 * and the process goes on: vitest reports any unhandled rejection or exception as an error.
 */
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { afterEach, describe, expect, it } from 'vitest';

import type * as Errors from '../../src/errors/index.js';
import type * as GrpcErrors from '../../src/grpc/errors.js';
import type * as Guard from '../../src/grpc/guard.js';
import { REPO } from '../cli/run-cli.js';
import {
  expectGrpcError,
  grpcServerModule,
  quantizerClient,
  rejection,
  unary,
  type QuantizerClient,
} from './helpers.js';
import { jobsClient, receive } from './jobs-helpers.js';

const dist = async <T>(...parts: string[]): Promise<T> =>
  (await import(pathToFileURL(join(REPO, 'dist', 'src', ...parts)).href)) as T;

const { GuardedServer } = await dist<typeof Guard>('grpc', 'guard.js');
const { errorForGrpc } = await dist<typeof GrpcErrors>('grpc', 'errors.js');
const { QuantdError } = await dist<typeof Errors>('errors', 'index.js');

type Behaviour = () => unknown;

let running: grpc.Server | undefined;
const clients: grpc.Client[] = [];
afterEach(() => {
  for (const c of clients.splice(0)) c.close();
  running?.forceShutdown();
  running = undefined;
});

/** Reports as the server does, counting the calls (as a log would). */
function counting(): { report: Guard.Report; reported: string[] } {
  const reported: string[] = [];
  return {
    reported,
    report: (err, rpc) => {
      reported.push(rpc);
      return errorForGrpc(err);
    },
  };
}

/** A GuardedServer on an ephemeral port serving these Quantizer and Jobs methods; its target. */
async function serveMethods(
  quantizerMethods: grpc.UntypedServiceImplementation,
  jobsMethods: grpc.UntypedServiceImplementation,
  report: Guard.Report,
): Promise<string> {
  const { LOADER_OPTIONS, PROTO_FILE } = await grpcServerModule();
  const definition = protoLoader.loadSync([PROTO_FILE, 'quantd/v1/jobs.proto'], LOADER_OPTIONS);
  const proto = grpc.loadPackageDefinition(definition) as unknown as {
    quantd: { v1: { Quantizer: grpc.ServiceClientConstructor; Jobs: grpc.ServiceClientConstructor } };
  };
  const server = new GuardedServer({}, report);
  running = server;
  server.addService(proto.quantd.v1.Quantizer.service, quantizerMethods);
  server.addService(proto.quantd.v1.Jobs.service, jobsMethods);
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (err, p) =>
      err ? reject(err) : resolve(p),
    ),
  );
  return `127.0.0.1:${port}`;
}

/**
 * Quantize, QuantizeStream and Jobs.Result doing `behaviour` (its value is returned, so that a
 * promise reaches the guard); `onStream` sees each QuantizeStream call first.
 */
function serve(
  behaviour: Behaviour,
  report: Guard.Report = counting().report,
  onStream?: (call: grpc.ServerDuplexStream<unknown, unknown>) => void,
): Promise<string> {
  return serveMethods(
    {
      Quantize: () => behaviour(),
      QuantizeStream: (call: grpc.ServerDuplexStream<unknown, unknown>) => {
        onStream?.(call);
        return behaviour();
      },
    },
    { Result: () => behaviour() },
    report,
  );
}

async function quantizer(target: string): Promise<QuantizerClient> {
  const client = await quantizerClient(target);
  clients.push(client);
  return client;
}

async function unaryError(target: string): Promise<grpc.ServiceError> {
  return rejection(unary(await quantizer(target), 'Quantize', {}, { deadline: Date.now() + 10_000 }));
}

async function serverStreamError(target: string): Promise<grpc.ServiceError> {
  const client = await jobsClient(target);
  clients.push(client);
  const { error } = await receive(client.Result({ id: 'x' }));
  expect(error, 'the stream fails').not.toBeNull();
  return error!;
}

async function bidiError(target: string): Promise<grpc.ServiceError> {
  const stream = (await quantizer(target)).QuantizeStream(new grpc.Metadata(), {
    deadline: Date.now() + 10_000,
  });
  return new Promise((resolve, reject) => {
    stream.on('error', resolve);
    stream.on('end', () => reject(new Error('the stream ended without an error')));
    stream.write({ header: { operation: 'quantize' } });
  });
}

const RPCS = [
  ['unary', unaryError],
  ['server-streaming', serverStreamError],
  ['bidirectional', bidiError],
] as const;

describe.each(RPCS)('a %s handler', (_, errorOf) => {
  it('that throws answers INTERNAL with its message, reported once', async () => {
    const { report, reported } = counting();
    const target = await serve(() => {
      throw new TypeError('boom: a bug');
    }, report);
    expectGrpcError(await errorOf(target), 'INTERNAL', ['boom: a bug']);
    expect(reported).toHaveLength(1);
  });

  it('whose promise rejects answers INTERNAL with its message', async () => {
    const target = await serve(() => Promise.reject(new RangeError('late boom')));
    expectGrpcError(await errorOf(target), 'INTERNAL', ['late boom']);
  });

  it('that throws a QuantdError answers its catalogued code', async () => {
    const target = await serve(() =>
      Promise.reject(new QuantdError('OPTION_INVALID', { option: 'é', detail: 'is bad', value: '…' })),
    );
    const params = expectGrpcError(await errorOf(target), 'OPTION_INVALID');
    expect(params).toEqual({ option: 'é', detail: 'is bad', value: '…' });
  });

  it('that throws something that cannot be described answers INTERNAL', async () => {
    // every property read throws, so does every conversion to text
    const untouchable = new Proxy(
      {},
      {
        get() {
          throw new Error('do not touch');
        },
      },
    );
    const target = await serve(() => Promise.reject(untouchable));
    expectGrpcError(await errorOf(target), 'INTERNAL', ['the error could not be reported']);
  });

  it('whose error report (the log) throws still answers', async () => {
    const target = await serve(
      () => Promise.reject(new Error('boom')),
      () => {
        throw new Error('the log is broken');
      },
    );
    expectGrpcError(await errorOf(target), 'INTERNAL', ['boom']);
  });
});

describe('a bidirectional handler', () => {
  it("whose 'data' listener throws answers INTERNAL", async () => {
    const target = await serve(
      () => undefined,
      undefined,
      (call) =>
        call.on('data', () => {
          throw new Error('listener boom');
        }),
    );
    expectGrpcError(await bidiError(target), 'INTERNAL', ['listener boom']);
  });
});

describe('a unary handler', () => {
  it('that answers twice: the first answer stands', async () => {
    const target = await serveMethods(
      {
        Quantize: (_call: unknown, callback: grpc.sendUnaryData<unknown>) => {
          callback(errorForGrpc(new QuantdError('USAGE', { detail: 'first' })));
          callback(null, {});
          throw new Error('and a throw after answering');
        },
      },
      {},
      counting().report,
    );
    expectGrpcError(await unaryError(target), 'USAGE', ['first']);
  });
});
