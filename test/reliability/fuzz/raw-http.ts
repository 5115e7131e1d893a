/**
 * HTTP/1.1 over a raw socket: the fuzzer must send what no HTTP client library agrees to send
 * (bytes outside ASCII in headers, conflicting lengths, broken chunking, garbage request lines).
 * Each request has a connection of its own ("Connection: close"), so whatever one does cannot
 * spill into the next.
 */
import net from 'node:net';

export interface RawRequest {
  /** The request line and headers (without the final blank line), as bytes or text. */
  readonly head: string | Buffer;
  readonly body: Buffer;
}

export interface RawAnswer {
  /** 0: the connection closed (or timed out) with no status line. */
  readonly status: number;
  readonly headers: Map<string, string>;
  readonly body: Buffer;
  readonly timedOut: boolean;
}

export function sendRaw(port: number, request: RawRequest, timeoutMs: number): Promise<RawAnswer> {
  return new Promise((resolve) => {
    const socket = net.connect({ port, host: '127.0.0.1' });
    const chunks: Buffer[] = [];
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      socket.destroy();
    }, timeoutMs);
    socket.on('data', (c: Buffer) => chunks.push(c));
    socket.on('error', () => {});
    socket.on('close', () => {
      clearTimeout(timer);
      resolve({ ...parseAnswer(Buffer.concat(chunks)), timedOut });
    });
    const head = typeof request.head === 'string' ? Buffer.from(request.head, 'latin1') : request.head;
    socket.write(Buffer.concat([head, Buffer.from('\r\n\r\n'), request.body]));
  });
}

function parseAnswer(raw: Buffer): Omit<RawAnswer, 'timedOut'> {
  // interim answers (100 Continue) come before the real one
  while (/^HTTP\/1\.[01] 1\d\d /.test(raw.subarray(0, 16).toString('latin1'))) {
    const interimEnd = raw.indexOf('\r\n\r\n');
    if (interimEnd < 0) break;
    raw = raw.subarray(interimEnd + 4);
  }
  const end = raw.indexOf('\r\n\r\n');
  if (end < 0) return { status: 0, headers: new Map(), body: Buffer.alloc(0) };
  const lines = raw.subarray(0, end).toString('latin1').split('\r\n');
  const status = Number(/^HTTP\/1\.[01] (\d{3})/.exec(lines[0] ?? '')?.[1] ?? 0);
  const headers = new Map<string, string>();
  for (const line of lines.slice(1)) {
    const colon = line.indexOf(':');
    if (colon > 0) headers.set(line.slice(0, colon).trim().toLowerCase(), line.slice(colon + 1).trim());
  }
  let body = raw.subarray(end + 4);
  if (headers.get('transfer-encoding')?.toLowerCase() === 'chunked') body = unchunk(body);
  return { status, headers, body };
}

function unchunk(raw: Buffer): Buffer {
  const parts: Buffer[] = [];
  let at = 0;
  for (;;) {
    const eol = raw.indexOf('\r\n', at);
    if (eol < 0) break;
    const size = parseInt(raw.subarray(at, eol).toString('latin1'), 16);
    if (!Number.isFinite(size) || size === 0) break;
    parts.push(raw.subarray(eol + 2, eol + 2 + size));
    at = eol + 2 + size + 2;
  }
  return Buffer.concat(parts);
}
