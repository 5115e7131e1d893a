/**
 * Compiles src/ to dist/ once before the tests, so the CLI tests run the real `quantd` binary
 * built from the sources under test, never a stale build; and builds the console (ui/ →
 * dist/ui, dist/report) for the same reason.
 */
import { execFileSync } from 'node:child_process';

export default function setup(): void {
  execFileSync(process.execPath, ['node_modules/typescript/bin/tsc', '-p', 'tsconfig.build.json'], {
    stdio: 'inherit',
  });
  for (const config of ['ui/vite.config.ts', 'ui/vite.report.config.ts']) {
    execFileSync(process.execPath, ['node_modules/vite/bin/vite.js', 'build', '-c', config], {
      stdio: 'inherit',
    });
  }
}
