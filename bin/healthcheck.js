#!/usr/bin/env node
// The container's HEALTHCHECK: exit 0 when the server answers /healthz with 200, 1 otherwise.
// Uses the server's own port (QUANTD_HTTP_PORT) on loopback; gives up after 3 s.
const port = Number(process.env.QUANTD_HTTP_PORT || 8080);
try {
  const res = await fetch(`http://127.0.0.1:${port}/healthz`, { signal: AbortSignal.timeout(3000) });
  process.exit(res.status === 200 ? 0 : 1);
} catch {
  process.exit(1);
}
