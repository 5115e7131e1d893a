/**
 * The quantd command line. Works offline: every command runs in this process on the kernels
 * the service uses; `--remote URL` sends the same command to a quantd server instead.
 */
import { readFileSync } from 'node:fs';
import { stat } from 'node:fs/promises';
import { isFloatDType, parseSpec, type FloatDType } from '../core/index.js';
import { QuantdError, exitCodeFor, isQuantdError } from '../errors/index.js';
import { SafetensorsFileReader } from '../format/index.js';
import { describeKernels } from '../kernels/index.js';
import { createCompute } from '../pool/index.js';
import { packageVersion, startServer } from '../server/serve.js';
import { runFileOperation, summarizeFile, type Operation } from '../service/index.js';
import { USAGE, parseCommand, specOptionsOf, type ParsedCommand } from './args.js';
import { humanBytes, renderSummary } from './output.js';

export interface Io {
  readonly stdout: (text: string) => void;
  readonly stderr: (text: string) => void;
}

const processIo: Io = {
  stdout: (text) => process.stdout.write(text + '\n'),
  stderr: (text) => process.stderr.write(text + '\n'),
};

function version(): string {
  const pkg = new URL('../../../package.json', import.meta.url);
  return (JSON.parse(readFileSync(pkg, 'utf8')) as { version: string }).version;
}

/** Option names in messages as the command line spells them (--group-size, not group_size). */
function forCommandLine(err: QuantdError): QuantdError {
  const option = err.params['option'];
  if (err.code !== 'OPTION_INVALID' || typeof option !== 'string' || option.includes('/')) return err;
  return new QuantdError(err.code, { ...err.params, option: `--${option.replace(/_/g, '-')}` });
}

function onePositional(parsed: ParsedCommand, what: string): string {
  if (parsed.positionals.length !== 1) {
    throw new QuantdError('USAGE', {
      detail: `quantd ${parsed.command} takes one ${what}, got ${parsed.positionals.length === 0 ? 'none' : parsed.positionals.join(' ')}`,
    });
  }
  return parsed.positionals[0]!;
}

function outDTypeOf(parsed: ParsedCommand): FloatDType {
  const value = (parsed.values['dtype'] as string | undefined) ?? 'float32';
  if (!isFloatDType(value)) throw new QuantdError('UNKNOWN_DTYPE', { value });
  return value;
}

async function transform(parsed: ParsedCommand, io: Io): Promise<void> {
  const input = onePositional(parsed, 'input file');
  const output = parsed.values['output'] as string | undefined;
  if (!output)
    throw new QuantdError('USAGE', { detail: `quantd ${parsed.command} needs -o OUT.safetensors` });
  if (parsed.values['remote'] !== undefined) {
    throw new QuantdError('FEATURE_UNSUPPORTED', {
      detail: '--remote needs the HTTP service, which this build does not include yet; run without it',
    });
  }
  const op = parsed.command as Operation;
  const spec = parseSpec(op === 'dequantize' ? {} : specOptionsOf(parsed.values));
  const request = {
    op,
    spec,
    outDType: outDTypeOf(parsed),
    include: (parsed.values['include'] as string[] | undefined) ?? [],
    exclude: (parsed.values['exclude'] as string[] | undefined) ?? [],
  };
  const started = performance.now();
  const handle = createCompute();
  let summary;
  try {
    summary = await runFileOperation(input, output, request, handle.compute);
  } finally {
    await handle.close();
  }
  if (!parsed.values['quiet']) {
    const seconds = ((performance.now() - started) / 1000).toFixed(2);
    io.stderr(
      `${op}: ${summary.transformed} tensors transformed, ${summary.passedThrough} passed through; ` +
        `${humanBytes(summary.bytesIn)} -> ${humanBytes(summary.bytesOut)} in ${seconds} s; wrote ${output}; ` +
        describeKernels(handle.kernels),
    );
  }
}

async function inspect(parsed: ParsedCommand, io: Io): Promise<void> {
  const path = onePositional(parsed, 'file');
  const reader = await SafetensorsFileReader.open(path);
  try {
    const summary = summarizeFile(reader.header, path, (await stat(path)).size);
    io.stdout(parsed.values['json'] ? JSON.stringify(summary, null, 2) : renderSummary(summary));
  } finally {
    await reader.close();
  }
}

/** Runs the servers until SIGTERM / SIGINT, then drains and returns. */
async function serveUntilSignalled(io: Io): Promise<void> {
  const server = await startServer();
  io.stdout(
    `quantd ${packageVersion()} listening: http://${server.config.host}:${server.httpPort} ` +
      `grpc ${server.config.host}:${server.grpcPort} (${describeKernels(server.handle.kernels)})`,
  );
  await new Promise<void>((resolve) => {
    const stop = (signal: string): void => void server.shutdown(signal).then(resolve);
    process.once('SIGTERM', () => stop('SIGTERM'));
    process.once('SIGINT', () => stop('SIGINT'));
  });
}

async function dispatch(argv: readonly string[], io: Io): Promise<void> {
  const [command, ...rest] = argv;
  if (command === undefined || command === '--help' || command === '-h' || command === 'help') {
    io.stdout(USAGE);
    return;
  }
  if (command === '--version' || command === '-v') {
    io.stdout(version());
    return;
  }
  const parsed = parseCommand(command, rest);
  if (parsed.values['help']) {
    io.stdout(USAGE);
    return;
  }
  switch (command) {
    case 'inspect':
      return inspect(parsed, io);
    case 'serve':
      return serveUntilSignalled(io);
    default:
      return transform(parsed, io);
  }
}

/** Runs one CLI invocation; returns the exit code (0, 2 for bad input, 1 for internal errors). */
export async function main(argv: readonly string[], io: Io = processIo): Promise<number> {
  try {
    await dispatch(argv, io);
    return 0;
  } catch (err) {
    const error = isQuantdError(err)
      ? forCommandLine(err)
      : new QuantdError('INTERNAL', { detail: err instanceof Error ? err.message : String(err) });
    // One line, always: the contract of DESIGN §4. QUANTD_DEBUG=1 adds the stack for developers.
    io.stderr(`error ${error.code}: ${error.message.replace(/\s*\n\s*/g, ' ')}`);
    if (process.env['QUANTD_DEBUG'] && err instanceof Error && err.stack) io.stderr(err.stack);
    return exitCodeFor(error.code);
  }
}
