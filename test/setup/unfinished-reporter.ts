/**
 * A reporter that names, at the very end of the output, every test file that did not pass or
 * skip — above all one whose worker exited before it reported (vitest then only says "Worker
 * exited unexpectedly" and counts one file fewer). The end of the output is what a CI log keeps.
 */
import type { Reporter, TestModule } from 'vitest/node';

export default class UnfinishedFiles implements Reporter {
  onTestRunEnd(modules: ReadonlyArray<TestModule>): void {
    const notPassed = modules.filter((m) => m.state() !== 'passed' && m.state() !== 'skipped');
    if (notPassed.length === 0) return;
    const lines = notPassed.map((m) => `  ${m.relativeModuleId} (${m.state()})`);
    process.stdout.write(`\ntest files that did not pass:\n${lines.join('\n')}\n`);
  }
}
