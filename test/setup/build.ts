/**
 * Compiles src/ to dist/ once before the tests, so the CLI tests run the real `quantd` binary
 * built from the sources under test, never a stale build.
 */
import { execFileSync } from 'node:child_process';

export default function setup(): void {
  execFileSync(process.execPath, ['node_modules/typescript/bin/tsc', '-p', 'tsconfig.build.json'], {
    stdio: 'inherit',
  });
}
