/**
 * Hostile HTTP requests for every route: the op routes, the jobs API, the Open Inference
 * Protocol under /v2, the probes, and routes that do not exist; with broken bodies, bad and
 * unknown headers, Content-Type and Content-Encoding mismatches, gzip bombs within the caps, and
 * request heads no client library would write.
 */
import { gzipSync, deflateSync } from 'node:zlib';

import type { Prng } from './prng.js';
import type { RawRequest } from './raw-http.js';
import {
  OP_DTYPES,
  floatBytes,
  hostileDtype,
  hostileName,
  hostileNumber,
  hostileShape,
  hostileWord,
} from './hostile-values.js';
import { safetensorsMutant, validSafetensors } from './safetensors-mutants.js';

export interface HttpCase extends RawRequest {
  /** What was sent, in a few words, for a failure message. */
  readonly label: string;
  readonly method: string;
  readonly path: string;
}

const OPS = ['quantize', 'dequantize', 'fake-quantize', 'qparams'];
const OPTION_KEYS = [
  'qdtype',
  'scheme',
  'mode',
  'axis',
  'group_size',
  'quant_min',
  'quant_max',
  'eps',
  'range_search',
  'include',
  'exclude',
  'dtype',
  'recipe',
  'rule',
  'skip',
  'min_size',
  'keep_1d',
  'layout',
  'timeout',
  'unknown_option',
];
const CONTENT_TYPES = [
  'application/x-safetensors',
  'application/octet-stream',
  'application/json',
  'text/plain',
  'multipart/form-data; boundary=x',
  'application/x-safetensors; charset=ÿ',
  '',
  'x/y/z',
  ';;;',
];
const ENCODINGS = ['gzip', 'deflate', 'br', 'identity', 'x-unknown', 'gzip, gzip', 'GZIP', ''];
const ACCEPTS = [
  'application/json',
  'application/x-safetensors',
  'text/html',
  '*/*',
  'x',
  'application/*;q=0',
];
/** Globs a backtracking matcher takes minutes over on a long name, and extglobs. */
const EVIL_GLOBS = [
  '*a*a*a*a*a*a*a*b',
  '*n*n*n*n*n*n*n*!',
  '!(foo)*',
  '{a,{b,{c,d}}}*',
  '[',
  '**/**/**/**/x',
];
const RECIPES = [
  '{"rules":[{"glob":"*n*n*n*n*n*n*n*!","skip":true}]}',
  '{"rules":[{"regex":"^(a+)+$","skip":true}]}',
  '{"rules":[{"regex":"(a)\\\\1","skip":true}]}',
  '{"default":{"qdtype":"int4","scheme":"per_group","group_size":3}}',
  '{"rules":[{"glob":"*","qdtype":"int2"}],"min_size":-1}',
  '{"rules":',
  '[]',
  'null',
];

/** UTF-8 percent-encoding that, unlike encodeURIComponent, takes lone surrogates too. */
function percentEncoded(text: string): string {
  let out = '';
  for (const byte of Buffer.from(text, 'utf8')) {
    const c = String.fromCharCode(byte);
    out += /[A-Za-z0-9\-_.~]/.test(c) ? c : `%${byte.toString(16).padStart(2, '0').toUpperCase()}`;
  }
  return out;
}

function query(r: Prng): string {
  const pairs: string[] = [];
  for (let i = r.int(5); i > 0; i--) {
    const key = r.pick(OPTION_KEYS);
    let value: string;
    if (key === 'recipe') value = r.pick(RECIPES);
    else if (['include', 'exclude', 'skip'].includes(key) && r.chance(0.5)) value = r.pick(EVIL_GLOBS);
    else if (key === 'rule')
      value = r.pick(['re:^(a+)+$:skip', 're:(?=x):skip', '*:qdtype=int4', 'x:y=z', 're::skip']);
    else value = r.chance(0.5) ? hostileWord(r) : String(hostileNumber(r));
    const encoded = r.chance(0.1) ? r.pick(['%zz', '%ff%fe', '%00', value]) : percentEncoded(value);
    pairs.push(`${key}=${encoded}`);
  }
  return pairs.length ? `?${pairs.join('&')}` : '';
}

function segment(r: Prng): string {
  const name = r.chance(0.3)
    ? r.pick(['quantize', 'dequantize', 'fake_quantize', 'choose_qparams'])
    : hostileName(r);
  return r.chance(0.8) ? percentEncoded(name).slice(0, 12_000) : name.slice(0, 300);
}

interface Draft {
  method: string;
  path: string;
  headers: [string, string][];
  body: Buffer;
  label: string;
}

function opRequest(r: Prng): Draft {
  const path = `/v1/${r.pick(OPS)}${query(r)}`;
  if (r.chance(0.6)) {
    return {
      method: 'POST',
      path,
      headers: [['Content-Type', 'application/x-safetensors']],
      body: safetensorsMutant(r),
      label: 'op safetensors',
    };
  }
  const shape = r.chance(0.7) ? Array.from({ length: 1 + r.int(2) }, () => 1 + r.int(6)) : hostileShape(r);
  const n = shape.every((d) => Number.isInteger(d) && d > 0 && d < 64)
    ? shape.reduce((a, b) => a * b, 1)
    : r.int(64);
  const body = floatBytes(r, r.chance(0.8) ? n : r.int(64), r.chance(0.3));
  return {
    method: 'POST',
    path,
    headers: [
      ['Content-Type', 'application/octet-stream'],
      ['X-Tensor-Dtype', r.chance(0.7) ? 'float32' : r.pick([...OP_DTYPES, hostileDtype(r)])],
      [
        'X-Tensor-Shape',
        r.chance(0.8) ? shape.join(',') : r.pick(['', 'a,b', '-1', '1,,2', hostileName(r).slice(0, 200)]),
      ],
    ],
    body,
    label: 'op raw tensor',
  };
}

function jobRequest(r: Prng): Draft {
  const id = r.chance(0.3) ? 'x'.repeat(201 + r.int(100)) : segment(r);
  switch (r.int(7)) {
    case 0:
      return {
        method: 'POST',
        path: `/v1/jobs${query(r)}`,
        headers: [['Content-Type', 'application/x-safetensors']],
        body: safetensorsMutant(r),
        label: 'job upload',
      };
    case 1: {
      const request: Record<string, unknown> = {
        input: r.pick([
          '../../etc/passwd',
          '/etc/passwd',
          'models/none.safetensors',
          '',
          hostileName(r),
          'jobs',
        ]),
      };
      if (r.chance(0.5))
        request['recipe'] = r.chance(0.5) ? JSON.parse(r.pick(RECIPES.slice(0, 4))) : hostileWord(r);
      if (r.chance(0.5))
        request['params'] = { [r.pick(OPTION_KEYS)]: r.chance(0.5) ? hostileWord(r) : hostileNumber(r) };
      if (r.chance(0.2)) request[hostileName(r).slice(0, 50)] = 1;
      const json = r.chance(0.9) ? JSON.stringify(request) : JSON.stringify(request).slice(0, r.int(40));
      return {
        method: 'POST',
        path: '/v1/jobs',
        headers: [['Content-Type', 'application/json']],
        body: Buffer.from(json),
        label: 'job path',
      };
    }
    case 2:
      return { method: 'GET', path: `/v1/jobs/${id}`, headers: [], body: Buffer.alloc(0), label: 'job get' };
    case 3:
      return {
        method: 'GET',
        path: `/v1/jobs/${id}/result`,
        headers: [],
        body: Buffer.alloc(0),
        label: 'job result',
      };
    case 4:
      return {
        method: 'GET',
        path: `/v1/jobs/${id}/result/${segment(r)}`,
        headers: [],
        body: Buffer.alloc(0),
        label: 'job result file',
      };
    case 5:
      return {
        method: 'GET',
        path: `/v1/jobs/${id}/report`,
        headers: [],
        body: Buffer.alloc(0),
        label: 'job report',
      };
    default:
      return {
        method: 'DELETE',
        path: `/v1/jobs/${id}`,
        headers: [],
        body: Buffer.alloc(0),
        label: 'job delete',
      };
  }
}

function inferJson(r: Prng): unknown {
  const shape = r.chance(0.7) ? [2, 3] : hostileShape(r);
  const data = r.chance(0.7)
    ? [0.5, -1.25, 2, 3, 0, -0.75]
    : r.pick([[], ['a'], [[1, 2], [3]], null, 'AAAA', Array.from({ length: 10 }, () => hostileNumber(r))]);
  const input: Record<string, unknown> = {
    name: r.chance(0.8) ? 'input' : hostileName(r),
    datatype: r.pick(['FP32', 'FP16', 'BF16', 'INT8', 'UINT8', 'BYTES', 'FP64', 'x', hostileName(r)]),
    shape,
    data,
  };
  if (r.chance(0.2)) input['parameters'] = { binary_data_size: hostileNumber(r) };
  const request: Record<string, unknown> = {
    inputs: r.chance(0.9) ? [input] : r.pick([[], {}, 'x', [input, input]]),
  };
  if (r.chance(0.6)) {
    request['parameters'] = { [r.pick(OPTION_KEYS)]: r.chance(0.5) ? hostileWord(r) : hostileNumber(r) };
  }
  if (r.chance(0.2)) request['outputs'] = [{ name: hostileName(r), parameters: { binary_data: true } }];
  if (r.chance(0.1)) request['id'] = hostileName(r);
  return request;
}

function oipRequest(r: Prng): Draft {
  const model = segment(r);
  const base = r.chance(0.3) ? `/v2/models/${model}/versions/${segment(r)}` : `/v2/models/${model}`;
  switch (r.int(5)) {
    case 0:
      return {
        method: 'GET',
        path: r.pick([
          '/v2',
          '/v2/health/live',
          '/v2/health/ready',
          base,
          `${base}/ready`,
          `/v2/${segment(r)}`,
        ]),
        headers: [],
        body: Buffer.alloc(0),
        label: 'oip get',
      };
    default: {
      // JSON numbers have no NaN: JSON.stringify writes null, and some requests say NaN outright
      let text = JSON.stringify(inferJson(r));
      if (r.chance(0.1)) text = text.replace(/\d+(\.\d+)?/, r.pick(['NaN', 'Infinity', '1e999', '-']));
      if (r.chance(0.1)) text = text.slice(0, r.int(text.length));
      let body = Buffer.from(text);
      const headers: [string, string][] = [['Content-Type', 'application/json']];
      if (r.chance(0.15)) {
        // the binary data extension: a JSON head and raw bytes after it
        const extra = floatBytes(r, 6, true);
        headers.push([
          'Inference-Header-Content-Length',
          r.chance(0.6)
            ? String(body.byteLength)
            : r.pick(['-1', 'x', '99999999', String(body.byteLength + 3)]),
        ]);
        body = Buffer.concat([body, extra]);
      }
      if (r.chance(0.2)) {
        const coding = r.pick(['gzip', 'deflate']);
        const bomb = r.chance(0.4);
        // a bomb: a few KiB that inflate past the body limit (QUANTD_BODY_LIMIT below)
        const plain = bomb ? Buffer.alloc(r.pick([9, 32, 64]) << 20) : body;
        body = coding === 'gzip' ? gzipSync(plain) : deflateSync(plain);
        if (r.chance(0.2)) body = body.subarray(0, r.int(body.byteLength));
        headers.push(['Content-Encoding', coding]);
      }
      return {
        method: 'POST',
        path: `${base}/infer${r.chance(0.1) ? query(r) : ''}`,
        headers,
        body,
        label: 'oip infer',
      };
    }
  }
}

function otherRequest(r: Prng): Draft {
  const method = r.pick(['GET', 'HEAD', 'OPTIONS', 'PUT', 'PATCH', 'DELETE', 'POST', 'TRACE', 'FOO']);
  const path = r.pick([
    '/healthz',
    '/readyz',
    '/metrics',
    '/docs',
    '/docs/json',
    '/',
    `/${segment(r)}`,
    `/v1/${segment(r)}`,
    '/v1/quantize',
    '/v1/jobs',
    '//v1//quantize',
    '/v1/quantize/../jobs',
    `/v1/jobs/${'a'.repeat(3000)}`,
  ]);
  const body = r.chance(0.5) ? r.bytes(r.int(200)) : Buffer.alloc(0);
  return { method, path, headers: [['Content-Type', r.pick(CONTENT_TYPES)]], body, label: `other ${method}` };
}

/** Headers added to any request: unknown, misleading, or badly formed. */
function chaos(r: Prng, draft: Draft): void {
  const set = (name: string, value: string): void => {
    draft.headers = draft.headers.filter(([k]) => k.toLowerCase() !== name.toLowerCase());
    draft.headers.push([name, value]);
  };
  switch (r.int(10)) {
    case 0:
      set('Content-Type', r.pick(CONTENT_TYPES));
      break;
    case 1:
      set('Content-Encoding', r.pick(ENCODINGS));
      break;
    case 2:
      set('Accept', r.pick(ACCEPTS));
      break;
    case 3:
      set('Expect', r.pick(['100-continue', 'x-teapot']));
      break;
    case 4:
      set('X-Request-Id', hostileName(r).slice(0, 500));
      break;
    case 5:
      set('Authorization', r.pick(['Bearer x', 'Basic ÿÿ', '']));
      break;
    case 6:
      set(`X-${r.int(1000)}`, 'v'.repeat(r.int(8000)));
      break;
    case 7:
      set('X-Tensor-Shape', hostileShape(r).join(','));
      break;
    case 8:
      set('Accept-Encoding', r.pick(['gzip', 'br', 'x', '*;q=0']));
      break;
    default:
      set('Accept', 'application/json');
  }
}

/** A request whose framing or head is broken (the parser, not a route, must answer it). */
function brokenHead(r: Prng, draft: Draft): HttpCase {
  const { method, path, body } = draft;
  const base = `${method} ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close`;
  switch (r.int(8)) {
    case 0:
      return {
        ...draft,
        head: r.bytes(1 + r.int(200)),
        body: Buffer.alloc(0),
        label: 'garbage request line',
      };
    case 1:
      return {
        ...draft,
        head: `${base}\r\nContent-Length: ${body.byteLength}\r\nContent-Length: ${body.byteLength + 1}`,
        label: 'two Content-Lengths',
      };
    case 2:
      return {
        ...draft,
        head: `${base}\r\nContent-Length: ${r.pick(['x', '-1', '1e3', '0x10', ' '])}`,
        body: Buffer.alloc(0),
        label: 'bad Content-Length',
      };
    case 3:
      return {
        ...draft,
        head: `${base}\r\nTransfer-Encoding: chunked`,
        body: Buffer.from(`${r.pick(['zz', '-1', 'fffffffffffffffff', '5'])}\r\nhello\r\n0\r\n\r\n`),
        label: 'broken chunked body',
      };
    case 4:
      return {
        ...draft,
        head: Buffer.concat([Buffer.from(`${base}\r\nX-Bad: `), Buffer.from([0x00, 0x7f, 0xff, 0x0a, 0x41])]),
        body: Buffer.alloc(0),
        label: 'control bytes in a header',
      };
    case 5:
      return {
        ...draft,
        head: `${method} ${path} HTTP/9.9\r\nConnection: close`,
        body: Buffer.alloc(0),
        label: 'HTTP/9.9',
      };
    case 6:
      return {
        ...draft,
        head: `${base}\r\nTransfer-Encoding: chunked\r\nContent-Length: 3`,
        body: Buffer.from('0\r\n\r\n'),
        label: 'chunked and Content-Length',
      };
    default:
      return {
        ...draft,
        head: `${base}\r\n${'X-Long: '.concat('h'.repeat(20_000))}`,
        body: Buffer.alloc(0),
        label: 'header past the size limit',
      };
  }
}

function framed(draft: Draft): HttpCase {
  const lines = [`${draft.method} ${draft.path} HTTP/1.1`, 'Host: 127.0.0.1', 'Connection: close'];
  for (const [k, v] of draft.headers) lines.push(`${k}: ${v}`);
  if (draft.body.byteLength > 0 || draft.method === 'POST')
    lines.push(`Content-Length: ${draft.body.byteLength}`);
  return { ...draft, head: Buffer.from(lines.join('\r\n'), 'utf8') };
}

/**
 * A valid file with one long tensor name and a pattern that a backtracking matcher takes
 * minutes over on that name: a glob to include or skip, or a regex rule.
 */
function patternBomb(r: Prng): Draft {
  const name = `${'n'.repeat(r.pick([33, 2_000, 10_000]))}`;
  const pattern = r.pick([
    'include=*n*n*n*n*n*n*n*!',
    'skip=*n*n*n*n*n*n*n*!',
    `rule=${percentEncoded('re:^(n+)+$:qdtype=int4')}`,
    `recipe=${percentEncoded('{"rules":[{"regex":"^(n|nn)+$","skip":true}]}')}`,
  ]);
  return {
    method: 'POST',
    path: `/v1/${r.pick(['quantize', 'jobs'])}?${pattern}`,
    headers: [['Content-Type', 'application/x-safetensors']],
    body: validSafetensors(r, name),
    label: 'pattern bomb',
  };
}

/** One hostile HTTP request. */
export function httpCase(r: Prng): HttpCase {
  const draft = r.chance(0.02)
    ? patternBomb(r)
    : r.pick([opRequest, opRequest, jobRequest, oipRequest, oipRequest, otherRequest])(r);
  if (r.chance(0.3)) chaos(r, draft);
  if (r.chance(0.05)) return brokenHead(r, draft);
  return framed(draft);
}

/** A valid request (its answer must be 2xx), to check that the server still works. */
export function validOpCase(r: Prng): HttpCase {
  return framed({
    method: 'POST',
    path: '/v1/quantize?qdtype=int8',
    headers: [['Content-Type', 'application/x-safetensors']],
    body: validSafetensors(r),
    label: 'valid quantize',
  });
}
