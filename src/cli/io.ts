/** Where a CLI invocation writes: the process's streams, or a test's buffers. */
import type { ProgressSink } from './progress.js';

export interface Io {
  readonly stdout: (text: string) => void;
  readonly stderr: (text: string) => void;
  /** Where progress goes (stderr); none when absent. */
  readonly progress?: ProgressSink;
}
