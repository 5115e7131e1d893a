/**
 * The quantd command line. Works offline: every command runs in this process on the kernels
 * the service uses; `--remote URL` sends the same command to a quantd server instead.
 */
import { access, constants, stat } from 'node:fs/promises';
import { dirname, resolve } from 'node:path';
import { isFloatDType, parseSpec, type FloatDType } from '../core/index.js';
import { QuantdError, exitCodeFor, isQuantdError } from '../errors/index.js';
import { removeStaleTemps } from '../format/temp-files.js';
import { describeKernels } from '../kernels/index.js';
import { BufferArena } from '../kernels/arena.js';
import { createCompute } from '../pool/index.js';
import { packageVersion } from '../package-info.js';
import {
  inspectPath,
  isDirectory,
  runModel,
  writeFileAtomic,
  type Operation,
  type OperationRequest,
} from '../service/index.js';
import { COMMAND_OPTIONS, parseCommand, specOptionsOf, type ParsedCommand } from './args.js';
import { defaultReportPath, recipeOf, runShapeOf, usesRecipe } from './model-options.js';
import { humanBytes } from './output.js';
import { renderInspection } from './inspect-render.js';
import type { Io } from './io.js';
import { guardCommand } from './output-guard.js';
import { cleanUpOnSignals } from './signals.js';
import { reportFormatter } from './report-file.js';
import { ProgressReporter } from './progress.js';

export type { Io } from './io.js';

const processIo: Io = {
  stdout: (text) => process.stdout.write(text + '\n'),
  stderr: (text) => process.stderr.write(text + '\n'),
  progress: { isTTY: process.stderr.isTTY === true, write: (text) => process.stderr.write(text) },
};

/*
 * The modules of one command are loaded when it runs (await import): the server's (Fastify,
 * grpc-js), the remote client's, the layouts' and calibration's cost a quantize run 0.3 s of
 * start-up otherwise, on a model that quantizes in about a second.
 */
const layoutCommand = (): Promise<typeof import('./layout-command.js')> => import('./layout-command.js');
/** The help texts list every layout's options: loading them loads every layout. */
const help = (): Promise<typeof import('./help.js')> => import('./help.js');
const runRemote = async (...args: Parameters<typeof import('./remote.js').runRemote>): Promise<void> =>
  (await import('./remote.js')).runRemote(...args);

/** Option names in messages as the command line spells them (--group-size, not group_size). */
function forCommandLine(err: QuantdError): QuantdError {
  const option = err.params['option'];
  // a flag of its own; not `A/B` pairs of settings nor a layout's `gguf:type`
  if (err.code !== 'OPTION_INVALID' || typeof option !== 'string' || /[/:]/.test(option)) return err;
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

/** The commands that write files: interrupted by a signal, they remove their temporary files. */
async function transform(parsed: ParsedCommand, io: Io): Promise<void> {
  const uninstall = cleanUpOnSignals(io.stderr);
  try {
    await runTransform(parsed, io);
  } finally {
    uninstall();
  }
}

async function runTransform(parsed: ParsedCommand, io: Io): Promise<void> {
  const input = onePositional(parsed, 'input file');
  const output = parsed.values['output'] as string | undefined;
  if (!output)
    throw new QuantdError('USAGE', { detail: `quantd ${parsed.command} needs -o OUT.safetensors` });
  const op = parsed.command as Operation;
  // before any work: a run must never replace its own input, nor an existing file unasked
  await guardCommand(parsed, input, output);
  // what an earlier run killed outright (SIGKILL, a power cut) left where this one writes
  await removeStaleTemps(dirname(resolve(output)));
  await removeStaleTemps(output); // a sharded output's directory (nothing when it is a file)
  for (const flag of ['imatrix', 'calibration'] as const) {
    const file = parsed.values[flag];
    if (file === undefined) continue;
    parsed.values['layout'] = (await layoutCommand()).layoutWithFile(
      flag,
      parsed.values['layout'] as string | undefined,
      file as string,
      input,
      parsed.values['remote'] !== undefined,
    );
  }
  if (parsed.values['remote'] !== undefined && parsed.values['layout'] !== undefined) {
    // a layout runs on the server too (the jobs API's `layout`), never silently here
    if (op !== 'quantize')
      throw new QuantdError('USAGE', { detail: `--layout applies to quantize, not ${op}` });
    const { layout } = (await layoutCommand()).parseLayout(parsed.values['layout'] as string);
    if (!(await isDirectory(input)) && (layout.companions?.(output, false).length ?? 0) > 0) {
      // its side files would name the server's copy (quantize_config.json's model_file_base_name)
      throw new QuantdError('FEATURE_UNSUPPORTED', {
        detail: `--layout ${layout.name} writes side files beside a single file's result, which --remote does not download: give --remote the model's folder (its result is a folder)`,
      });
    }
    return runRemote(parsed.values['remote'] as string, input, output, parsed, io);
  }
  if (parsed.values['layout'] !== undefined || op === 'dequantize') {
    if (await runLayout(parsed, op, input, output, io)) return;
  }
  const recipe = op === 'dequantize' ? undefined : recipeOf(parsed.values);
  const request: OperationRequest = {
    op,
    spec: recipe?.defaultSpec ?? parseSpec(op === 'dequantize' || recipe ? {} : specOptionsOf(parsed.values)),
    recipe,
    outDType: outDTypeOf(parsed),
    include: (parsed.values['include'] as string[] | undefined) ?? [],
    exclude: (parsed.values['exclude'] as string[] | undefined) ?? [],
  };
  const shape = runShapeOf(parsed.values);
  if (parsed.values['remote'] !== undefined) {
    return runRemote(parsed.values['remote'] as string, input, output, parsed, io);
  }
  const explicitReport = parsed.values['report'] as string | undefined;
  if (explicitReport !== undefined) await checkWritableDirectory(explicitReport);
  const formatReport = await reportFormatter(explicitReport ?? 'report.json');
  const quiet = parsed.values['quiet'] === true;
  const progress =
    io.progress && !quiet && !parsed.values['no-progress'] ? new ProgressReporter(io.progress, op) : null;
  // a small buffer cache: model runs promise peak RSS under 3 × the largest tensor + 256 MiB
  // the first tensors run in this thread while the workers load the kernels (about 50 ms)
  const handle = createCompute({ arena: new BufferArena(CLI_ARENA_BYTES), inlineUntilReady: true });
  // the workers start loading while this thread opens and plans the model
  if ((await inputBytes(input)) >= POOL_EARLY_BYTES) handle.pool?.workers();
  let result;
  try {
    result = await runModel(input, output, request, {
      compute: handle.compute,
      ...shape,
      checksum: recipe !== undefined,
      modelFolder: true,
      onProgress: (p) => progress?.update(p),
    });
  } finally {
    progress?.done();
    await handle.close();
  }
  const reportPath =
    (parsed.values['report'] as string | undefined) ??
    (recipe || result.sharded ? defaultReportPath(output, result.folder) : undefined);
  if (reportPath !== undefined) await writeFileAtomic(reportPath, formatReport(result.report));
  if (!quiet) {
    const { summary, report } = result;
    const quality =
      report.summary.tensors_quantized > 0
        ? `; SQNR ${formatDb(report.summary.sqnr_db)}, worst ${report.tensors[0]!.name} (${formatDb(report.tensors[0]!.sqnr_db)})`
        : '';
    io.stderr(
      `${op}: ${summary.transformed} tensors transformed, ${summary.passedThrough} passed through; ` +
        `${humanBytes(summary.bytesIn)} -> ${humanBytes(summary.bytesOut)} in ${report.summary.seconds.toFixed(2)} s${quality}; ` +
        `wrote ${output}${reportPath ? ` and ${reportPath}` : ''}; ${describeKernels(handle.kernels)}`,
    );
  }
}

/**
 * quantize --layout NAME writes that layout; dequantize of a file a layout recognizes reads it.
 * Returns false when the command is an ordinary qtensor one.
 */
async function runLayout(
  parsed: ParsedCommand,
  op: Operation,
  input: string,
  output: string,
  io: Io,
): Promise<boolean> {
  const text = parsed.values['layout'] as string | undefined;
  if (op === 'dequantize') {
    const layout = await (await layoutCommand()).detectLayout(input);
    if (!layout) return false;
    const handle = createCompute();
    let tensors: number;
    try {
      ({ tensors } = await layout.read(input, output, { encoding: handle.encoding() }));
    } finally {
      await handle.close();
    }
    if (!parsed.values['quiet'])
      io.stderr(`dequantize: ${tensors} tensors of a ${layout.name} file; wrote ${output}`);
    return true;
  }
  if (op !== 'quantize')
    throw new QuantdError('USAGE', { detail: `--layout applies to quantize, not ${op}` });
  const spec = Object.entries(specOptionsOf(parsed.values)).filter(([, v]) => v !== undefined);
  if (spec.length > 0 || usesRecipe(parsed.values)) {
    throw new QuantdError('USAGE', {
      detail: `--layout ${text} quantizes as its format defines; spec and recipe options (--${spec[0]?.[0].replace(/_/g, '-') ?? 'recipe'}) do not apply (give the layout's own options: --layout NAME:key=value)`,
    });
  }
  const quiet = parsed.values['quiet'] === true;
  const progress =
    io.progress && !quiet && !parsed.values['no-progress']
      ? new ProgressReporter(io.progress, 'quantize')
      : null;
  const reportPath = parsed.values['report'] as string | undefined;
  if (reportPath !== undefined) await checkWritableDirectory(reportPath);
  const formatReport = await reportFormatter(reportPath ?? 'report.json');
  const handle = createCompute();
  try {
    const { summary, report } = await (
      await layoutCommand()
    ).writeLayout(text!, input, output, {
      onProgress: (p) => progress?.update(p),
      encoding: handle.encoding(),
    });
    progress?.done();
    // the per-tensor types (and, for a GGUF mixture, each tensor's error), when asked
    if (reportPath !== undefined) await writeFileAtomic(reportPath, formatReport(report));
    if (!quiet) io.stderr(reportPath !== undefined ? `${summary} and ${reportPath}` : summary);
  } finally {
    progress?.done();
    await handle.close();
  }
  return true;
}

const CLI_ARENA_BYTES = 64 * 1024 * 1024;

/** Inputs of this size or more start the workers before planning (smaller tensors run inline). */
const POOL_EARLY_BYTES = 4 * 1024 * 1024;

/** The input's size; a directory (a model folder) counts as large, a missing file as empty. */
async function inputBytes(path: string): Promise<number> {
  try {
    const info = await stat(path);
    return info.isDirectory() ? Infinity : info.size;
  } catch {
    return 0; // runModel names the problem
  }
}

/** Fails before any work when the directory `path` goes into cannot take a new file. */
async function checkWritableDirectory(path: string): Promise<void> {
  try {
    await access(dirname(resolve(path)), constants.W_OK);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    const detail =
      code === 'ENOENT' ? 'its directory does not exist' : `its directory is not writable (${code})`;
    throw new QuantdError('OUTPUT_UNWRITABLE', { path, detail });
  }
}

const formatDb = (db: number | null): string => (db === null ? 'lossless' : `${db.toFixed(1)} dB`);

async function inspect(parsed: ParsedCommand, io: Io): Promise<void> {
  const path = onePositional(parsed, 'file');
  const inspection = await inspectPath(path, parsed.values['verify'] === true);
  io.stdout(
    parsed.values['json'] ? JSON.stringify(inspection.summary, null, 2) : renderInspection(inspection),
  );
}

/** Runs the servers until SIGTERM / SIGINT, then drains and returns. */
async function serveUntilSignalled(io: Io): Promise<void> {
  const { startServer, reachNotice } = await import('../server/serve.js');
  const server = await startServer();
  io.stdout(
    `quantd ${packageVersion()} listening: http://${server.config.host}:${server.httpPort} ` +
      `grpc ${server.config.host}:${server.grpcPort} (${describeKernels(server.handle.kernels)})`,
  );
  const reach = reachNotice(server.config);
  if (reach !== null) io.stdout(reach);
  await new Promise<void>((resolve) => {
    const stop = (signal: string): void => void server.shutdown(signal).then(resolve);
    process.once('SIGTERM', () => stop('SIGTERM'));
    process.once('SIGINT', () => stop('SIGINT'));
  });
}

/** Runs one command; returns an exit code other than 0 that is not an error's, if any. */
async function dispatch(argv: readonly string[], io: Io): Promise<number | void> {
  const [command, ...rest] = argv;
  if (command === undefined) {
    // nothing asked: the usage, as the answer to a mistake (stderr, and not a success for scripts)
    io.stderr((await help()).usage());
    return exitCodeFor('USAGE');
  }
  if (command === '--help' || command === '-h' || command === 'help') {
    const topic = rest[0];
    const { commandHelp, usage } = await help();
    io.stdout(topic !== undefined && COMMAND_OPTIONS[topic] ? commandHelp(topic) : usage());
    return;
  }
  if (command === '--version' || command === '-v') {
    io.stdout(packageVersion());
    return;
  }
  const parsed = parseCommand(command, rest);
  if (parsed.values['help']) {
    io.stdout((await help()).commandHelp(command));
    return;
  }
  switch (command) {
    case 'inspect':
      return inspect(parsed, io);
    case 'serve':
      return serveUntilSignalled(io);
    case 'calibrate':
      return parsed.values['text'] !== undefined || parsed.values['dataset'] !== undefined
        ? (await import('./calibrate-text-command.js')).calibrateText(parsed, io)
        : (await import('./calibrate-command.js')).calibrate(parsed, io);
    case 'eval':
      return (await import('./eval-command.js')).evalCommand(parsed, io);
    default:
      return transform(parsed, io);
  }
}

/** Runs one CLI invocation; returns the exit code (0, 2 for bad input, 1 for internal errors). */
export async function main(argv: readonly string[], io: Io = processIo): Promise<number> {
  try {
    return (await dispatch(argv, io)) ?? 0;
  } catch (err) {
    const error = isQuantdError(err)
      ? forCommandLine(err)
      : new QuantdError('INTERNAL', { detail: err instanceof Error ? err.message : String(err) });
    // One line, always: the CLI's error contract. QUANTD_DEBUG=1 adds the stack for developers.
    io.stderr(`error ${error.code}: ${error.message.replace(/\s*\n\s*/g, ' ')}`);
    if (process.env['QUANTD_DEBUG'] && err instanceof Error && err.stack) io.stderr(err.stack);
    return exitCodeFor(error.code);
  }
}
