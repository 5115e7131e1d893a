/**
 * Ctrl-C and SIGTERM during a command: the temporary files of its atomic writes (and a sharded
 * run's staging directory) are removed synchronously before the process exits, so an interrupted
 * run leaves nothing behind — a half-written temporary file can be as large as the model. Exit
 * codes follow the shell's convention, 128 + the signal's number: 130 for SIGINT, 143 for SIGTERM.
 */
import { QuantdError } from '../errors/index.js';
import { removeLiveTempsSync } from '../format/temp-files.js';

const EXIT_CODES = { SIGINT: 130, SIGTERM: 143 } as const;

/** Installs the handlers for one command; returns the function that removes them again. */
export function cleanUpOnSignals(stderr: (text: string) => void): () => void {
  const handlers = Object.entries(EXIT_CODES).map(([signal, code]) => {
    const handler = (): void => {
      // A command following a job on a server (--remote) listens for Ctrl-C itself, to cancel
      // the job there and end normally; it writes no temporary file meanwhile.
      if (signal === 'SIGINT' && process.listenerCount('SIGINT') > 1) return;
      removeLiveTempsSync();
      const error = new QuantdError('CANCELLED', { detail: ` by ${signal}` });
      stderr(`error ${error.code}: ${error.message}`);
      process.exit(code);
    };
    process.on(signal, handler);
    return [signal, handler] as const;
  });
  return () => {
    for (const [signal, handler] of handlers) process.removeListener(signal, handler);
  };
}
