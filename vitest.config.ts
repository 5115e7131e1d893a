import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    // timing tests run alone afterwards (vitest.solo.config.ts); the reliability suite on its own
    exclude: ['test/**/*.solo.test.ts', 'test/reliability/**', '**/node_modules/**'],
    globalSetup: ['test/setup/build.ts'],
    testTimeout: 60_000,
    hookTimeout: 60_000,
    pool: 'forks',
  },
});
