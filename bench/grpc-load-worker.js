// bench/grpc.js's load generator (bench/load.js): one gRPC client, `concurrency` unary calls at a
// time.
import { parentPort, workerData } from 'node:worker_threads';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { LOADER_OPTIONS, PROTO_FILE } from '../dist/src/grpc/server.js';
import { runLoad } from './load.js';

const { target, service, method, request } = workerData;
// the bench's echo service, or quantd's (whose loader options hold a function: not cloneable)
const def = grpc.loadPackageDefinition(
  service === 'echo'
    ? protoLoader.loadSync(new URL('./echo.proto', import.meta.url).pathname, { keepCase: true })
    : protoLoader.loadSync(PROTO_FILE, LOADER_OPTIONS),
);
const Client = service === 'echo' ? def.bench.Echo : def.quantd.v1.Quantizer;
const client = new Client(target, grpc.credentials.createInsecure());
const message = request.tensor
  ? { ...request, tensor: { ...request.tensor, data: Buffer.from(request.tensor.data) } }
  : request;

const once = () =>
  new Promise((resolve, reject) => client[method](message, (err) => (err ? reject(err) : resolve())));

const report = await runLoad(once, workerData);
client.close();
parentPort.postMessage(report);
