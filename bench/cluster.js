#!/usr/bin/env node
// npm run bench:cluster — throughput of cluster mode against a single node, and what one job costs
// the shared parts (Redis and the shared volume), on this machine:
//  - a single node (no Redis), 1 pool thread, 1 job at a time; the same with 2 threads, 2 jobs;
//  - 1 and 2 replicas in cluster mode (each 1 thread, 1 job at a time) on a redis-server of the
//    bench's own (no persistence, a free port), sharing one data directory.
// Each runs the same N jobs (by default int4 per_group g32 of one float32 model read by path;
// --params for others) submitted at once; reported: wall time, jobs/s, the replicas' CPU use as cores busy (utime + stime of the
// processes over the wall time), Redis commands and network bytes per job (INFO deltas), and the
// bytes each job reads and writes on the shared volume.
import { spawn } from 'node:child_process';
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import { createServer } from 'node:net';
import { availableParallelism, tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { Redis } from 'ioredis';
import { startServe } from './serve.js';

const { values } = parseArgs({
  options: {
    jobs: { type: 'string', default: '16' },
    mib: { type: 'string', default: '64' },
    // the job's options (the JSON form's params)
    params: { type: 'string', default: '{"qdtype":"int4","scheme":"per_group","group_size":32}' },
    json: { type: 'boolean' },
  },
});
const JOBS = Number(values.jobs);
const PARAMS = JSON.parse(values.params);
const dir = join(tmpdir(), `quantd-bench-cluster-${process.pid}`);
const data = join(dir, 'data');
mkdirSync(join(data, 'models'), { recursive: true });

// the model: float32 tensors of 1024 × 1024 (4 MiB each) up to --mib
const tensors = Math.max(1, Math.round(Number(values.mib) / 4));
writeModel(join(data, 'models', 'm.safetensors'), tensors, 1024, 1024);
const inputBytes = tensors * 4 * 1024 * 1024 + 8;

function writeModel(path, count, rows, cols) {
  const header = {};
  let offset = 0;
  for (let i = 0; i < count; i++) {
    const bytes = rows * cols * 4;
    header[`layer.${i}.weight`] = {
      dtype: 'F32',
      shape: [rows, cols],
      data_offsets: [offset, offset + bytes],
    };
    offset += bytes;
  }
  let text = JSON.stringify(header);
  text += ' '.repeat((8 - (text.length % 8)) % 8);
  const out = Buffer.alloc(8 + text.length + offset);
  out.writeBigUInt64LE(BigInt(text.length), 0);
  out.write(text, 8, 'latin1');
  const values = new Float32Array(out.buffer, out.byteOffset + 8 + text.length, offset / 4);
  let seed = 12345;
  for (let i = 0; i < values.length; i++) {
    seed = (seed * 1103515245 + 12345) >>> 0;
    values[i] = (seed / 2 ** 32 - 0.5) * 2;
  }
  writeFileSync(path, out);
}

function freePort() {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

function request(port, method, path, body) {
  return new Promise((resolve, reject) => {
    const req = http.request(
      { host: '127.0.0.1', port, method, path, headers: body ? { 'content-type': 'application/json' } : {} },
      (res) => {
        const chunks = [];
        res.on('data', (c) => chunks.push(c));
        res.on('end', () => resolve({ status: res.statusCode, body: Buffer.concat(chunks).toString() }));
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

/** Every server started, stopped at the end whatever happens. */
const started = [];

/** `quantd serve` with `env` (stopped at the end whatever happens). */
async function serve(env) {
  const server = await startServe(env);
  started.push(server.child);
  return server;
}

/** CPU seconds (user + system) a process has used: /proc/PID/stat, worker threads included. */
function cpuSeconds(pid) {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
  return (Number(fields[11]) + Number(fields[12])) / 100;
}

async function stopAll(servers) {
  await Promise.all(
    servers.map(
      (s) =>
        new Promise((resolve) => {
          s.child.once('exit', resolve);
          s.child.kill('SIGTERM');
        }),
    ),
  );
}

async function redisInfo(redis) {
  const text = (await redis.info('commandstats')) + (await redis.info('stats'));
  let calls = 0;
  for (const m of text.matchAll(/calls=(\d+)/g)) calls += Number(m[1]);
  const net = (key) => Number(new RegExp(`${key}:(\\d+)`).exec(text)?.[1] ?? 0);
  return { calls, bytes: net('total_net_input_bytes') + net('total_net_output_bytes') };
}

/** Runs JOBS jobs on `servers` (submitted round-robin, at once); returns the scenario's figures. */
async function run(label, servers, redis) {
  console.error(`running: ${label}`);
  const before = redis && (await redisInfo(redis));
  const cpu0 = servers.map((s) => cpuSeconds(s.child.pid));
  const t0 = performance.now();
  const ids = [];
  for (let i = 0; i < JOBS; i++) {
    const s = servers[i % servers.length];
    const r = await request(
      s.port,
      'POST',
      '/v1/jobs',
      JSON.stringify({
        op: 'quantize',
        input: 'models/m.safetensors',
        params: PARAMS,
      }),
    );
    if (r.status !== 202) throw new Error(`submit: ${r.status} ${r.body}`);
    ids.push(JSON.parse(r.body).id);
  }
  let outputBytes = 0;
  for (const id of ids) {
    for (;;) {
      const job = JSON.parse((await request(servers[0].port, 'GET', `/v1/jobs/${id}`)).body);
      if (job.state === 'succeeded') {
        outputBytes = job.result.files.reduce((n, f) => n + f.bytes, 0);
        break;
      }
      if (job.state === 'failed' || job.state === 'cancelled')
        throw new Error(`job ${id}: ${JSON.stringify(job.error)}`);
      await new Promise((r) => setTimeout(r, 20));
    }
  }
  const wall = (performance.now() - t0) / 1000;
  const cpu = servers.reduce((n, s, i) => n + cpuSeconds(s.child.pid) - cpu0[i], 0);
  const after = redis && (await redisInfo(redis));
  for (const id of ids) await request(servers[0].port, 'DELETE', `/v1/jobs/${id}`);
  return {
    label,
    wall_s: wall,
    jobs_per_s: JOBS / wall,
    cores_busy: cpu / wall,
    redis_commands_per_job: after ? (after.calls - before.calls) / JOBS : null,
    redis_bytes_per_job: after ? (after.bytes - before.bytes) / JOBS : null,
    volume_bytes_per_job: inputBytes + outputBytes,
  };
}

const results = [];
const common = { QUANTD_DATA_DIR: data, QUANTD_JOB_CONCURRENCY: '1', QUANTD_POOL_SIZE: '1' };
try {
  for (const [label, env] of [
    ['single node, 1 thread', common],
    [
      'single node, 2 threads, 2 jobs at once',
      { ...common, QUANTD_POOL_SIZE: '2', QUANTD_JOB_CONCURRENCY: '2' },
    ],
  ]) {
    const s = await serve(env);
    results.push(await run(label, [s], null));
    await stopAll([s]);
  }
  const port = await freePort();
  const redisServer = spawn(
    'redis-server',
    ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir],
    { stdio: 'ignore' },
  );
  await new Promise((r) => setTimeout(r, 300));
  const url = `redis://127.0.0.1:${port}`;
  const redis = new Redis(url);
  try {
    for (const n of [1, 2]) {
      const servers = [];
      for (let i = 0; i < n; i++) {
        servers.push(
          await serve({
            ...common,
            QUANTD_REDIS_URL: url,
            QUANTD_REPLICA_ID: `r${i + 1}`,
            QUANTD_REDIS_PREFIX: `bench${n}`,
          }),
        );
      }
      results.push(await run(`cluster, ${n} replica${n > 1 ? 's' : ''} × 1 thread`, servers, redis));
      await stopAll(servers);
    }
  } finally {
    redis.disconnect();
    redisServer.kill('SIGTERM');
  }
} finally {
  for (const child of started) if (child.exitCode === null) child.kill('SIGKILL');
  rmSync(dir, { recursive: true, force: true });
}

if (values.json) {
  console.log(
    JSON.stringify({ jobs: JOBS, input_bytes: inputBytes, cores: availableParallelism(), results }, null, 2),
  );
} else {
  console.log(
    `${JOBS} jobs, each ${JSON.stringify(PARAMS)} of a ${(inputBytes / 2 ** 20).toFixed(0)} MiB float32 model by path; ${availableParallelism()} cores`,
  );
  console.log(
    '| setup | wall s | jobs/s | cores busy | Redis commands / job | Redis bytes / job | volume bytes / job |',
  );
  console.log('|---|---|---|---|---|---|---|');
  for (const r of results) {
    const redisCells =
      r.redis_commands_per_job === null
        ? '— | —'
        : `${r.redis_commands_per_job.toFixed(0)} | ${(r.redis_bytes_per_job / 1024).toFixed(1)} KiB`;
    console.log(
      `| ${r.label} | ${r.wall_s.toFixed(2)} | ${r.jobs_per_s.toFixed(2)} | ${r.cores_busy.toFixed(2)} | ${redisCells} | ${(r.volume_bytes_per_job / 2 ** 20).toFixed(1)} MiB |`,
    );
  }
}
