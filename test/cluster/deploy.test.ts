/**
 * The compose cluster profile's HAProxy configuration (deploy/haproxy.cfg) is one Debian's
 * HAProxy accepts (`haproxy -c`): the same HAProxy the fault test runs in front of the replicas.
 * The compose file itself is checked by test/docker.
 */
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';

const ROOT = join(import.meta.dirname, '..', '..');

describe('deploy/haproxy.cfg', () => {
  it('is valid for HAProxy', () => {
    const r = spawnSync('haproxy', ['-c', '-f', join(ROOT, 'deploy', 'haproxy.cfg')], { encoding: 'utf8' });
    expect(r.error).toBeUndefined();
    expect(r.status, `${r.stdout}${r.stderr}`).toBe(0);
  });
});
