import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    // timing tests run alone afterwards (vitest.solo.config.ts)
    exclude: ['test/**/*.solo.test.ts', '**/node_modules/**'],
    globalSetup: ['test/setup/build.ts'],
    testTimeout: 60_000,
    hookTimeout: 60_000,
    pool: 'forks',
  },
});
