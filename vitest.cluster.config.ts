import { defineConfig } from 'vitest/config';

/**
 * The cluster suite (`npm run test:cluster`): replicas of `quantd serve` as real processes on one
 * real Redis (QUANTD_TEST_REDIS_URL, default redis://127.0.0.1:6379; each file under its own key
 * prefix, removed afterwards), a shared data directory, and HAProxy in front. Not part of
 * `npm test`, which needs no Redis; CI runs both.
 */
export default defineConfig({
  test: {
    include: ['test/cluster/**/*.test.ts'],
    globalSetup: ['test/setup/build.ts'],
    testTimeout: 300_000,
    hookTimeout: 120_000,
    pool: 'forks',
    fileParallelism: false,
  },
});
