import { defineConfig } from 'vitest/config';

/**
 * Tests that measure time (event-loop responsiveness under a heavy job) run after the others,
 * one file at a time, so that the machine's other test processes do not take their CPU.
 */
export default defineConfig({
  test: {
    include: ['test/**/*.solo.test.ts'],
    globalSetup: ['test/setup/build.ts'],
    testTimeout: 180_000,
    hookTimeout: 120_000,
    pool: 'forks',
    fileParallelism: false,
  },
});
