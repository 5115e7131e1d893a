import { defineConfig } from 'vitest/config';

/**
 * The reliability suite (`npm run test:reliability`): hostile clients, load far past capacity,
 * kill -9 and SIGTERM mid-job, a full disk. Each file starts its own real server and measures it,
 * so files run one at a time. The short form runs in CI; QUANTD_RELIABILITY=long runs it longer.
 */
export default defineConfig({
  test: {
    include: ['test/reliability/**/*.test.ts'],
    globalSetup: ['test/setup/build.ts'],
    testTimeout: 600_000,
    hookTimeout: 120_000,
    pool: 'forks',
    fileParallelism: false,
  },
});
