import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    // timing tests run alone afterwards (vitest.solo.config.ts); the reliability and cluster
    // suites on their own (the cluster's needs Redis and HAProxy, which npm test never does)
    exclude: ['test/**/*.solo.test.ts', 'test/reliability/**', 'test/cluster/**', '**/node_modules/**'],
    globalSetup: ['test/setup/build.ts'],
    testTimeout: 60_000,
    hookTimeout: 60_000,
    pool: 'forks',
    // the default output, then the files that did not pass named at the end (what CI logs keep)
    reporters: ['default', './test/setup/unfinished-reporter.ts'],
  },
});
