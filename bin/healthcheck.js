#!/usr/bin/env node
// The container's HEALTHCHECK: exit 0 when the server answers /healthz with 200, 1 otherwise.
// It asks the server where the server listens: QUANTD_HTTP_PORT on QUANTD_HOST (loopback when the
// server listens on every address, 0.0.0.0 or ::); gives up after 3 s.
const port = Number(process.env.QUANTD_HTTP_PORT || 8080);
const configured = (process.env.QUANTD_HOST || '127.0.0.1').trim();
const host =
  configured === '0.0.0.0' || configured === ''
    ? '127.0.0.1'
    : configured === '::'
      ? '[::1]'
      : configured.includes(':') && !configured.startsWith('[')
        ? `[${configured}]`
        : configured;
try {
  const res = await fetch(`http://${host}:${port}/healthz`, { signal: AbortSignal.timeout(3000) });
  process.exit(res.status === 200 ? 0 : 1);
} catch {
  process.exit(1);
}
