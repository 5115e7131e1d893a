/**
 * Mistakes on the command line get messages that help: an unknown option names the nearest
 * known one, a --remote without a scheme means http://, `quantd COMMAND --help` is that
 * command's help, and `quantd` alone is a usage error (stderr, exit 2), not a success.
 */
import { describe, expect, it } from 'vitest';

import { exitCodeFor } from '../../src/errors/index.js';
import { expectCliError, quantdAsync } from './cli-helpers.js';
import { MODEL } from './run-cli.js';

const OUT = 'never-written.safetensors';

describe.concurrent('an unknown option', () => {
  it.each([
    [['quantize', '--qdtpye', 'int8'], 'quantd quantize: unknown option --qdtpye; did you mean --qdtype?'],
    [['quantize', '--shceme', 'per_group'], 'unknown option --shceme; did you mean --scheme?'],
    [['quantize', '--group_size', '64'], 'unknown option --group_size; did you mean --group-size?'],
    [['dequantize', '--dtpye', 'float16'], 'unknown option --dtpye; did you mean --dtype?'],
    [['inspect', '--jsno'], 'quantd inspect: unknown option --jsno; did you mean --json?'],
    [['quantize', '--frobnicate'], 'unknown option --frobnicate; quantd quantize --help lists its options'],
    [['quantize', '-z'], 'unknown option -z; quantd quantize --help lists its options'],
  ])('%j', async ([command, ...args], says) => {
    const r = await quantdAsync([command!, MODEL, ...(command === 'inspect' ? [] : ['-o', OUT]), ...args]);
    expect(expectCliError(r, 'USAGE')).toContain(says);
  });
});

describe.concurrent('--remote', () => {
  it('host:port without a scheme is http://host:port', async () => {
    const r = await quantdAsync(['quantize', MODEL, '-o', OUT, '--remote', '127.0.0.1:9', '--no-progress']);
    expectCliError(r, 'SERVER_UNREACHABLE', [
      'cannot reach the quantd server at http://127.0.0.1:9: connect ECONNREFUSED',
    ]);
  });

  it('a scheme other than http or https is OPTION_INVALID', async () => {
    const r = await quantdAsync(['quantize', MODEL, '-o', OUT, '--remote', 'ftp://host:8080']);
    expectCliError(r, 'OPTION_INVALID', [
      'option --remote must be an http:// or https:// URL (got ftp://host:8080)',
    ]);
  });
});

describe.concurrent('help', () => {
  it.each([
    [
      ['quantize', '--help'],
      ['quantd quantize IN.safetensors', '--qdtype T', '--recipe FILE', '--layout NAME', 'gguf '],
    ],
    [
      ['inspect', '-h'],
      ['quantd inspect FILE', '--verify'],
    ],
    [
      ['dequantize', '--help'],
      ['quantd dequantize IN', '--dtype D', '--force', 'gguf '],
    ],
    [
      ['help', 'qparams'],
      ['quantd qparams IN.safetensors', '--scheme S'],
    ],
  ])('quantd %j prints that command’s help only, exit 0', async (args, shows) => {
    const r = await quantdAsync(args);
    expect(r.code).toBe(0);
    expect(r.stderr).toBe('');
    for (const text of shows) expect(r.stdout).toContain(text);
    const command = args[0] === 'help' ? args[1]! : args[0]!;
    for (const other of ['quantize', 'dequantize', 'fake-quantize', 'qparams', 'inspect', 'serve']) {
      if (other !== command) expect(r.stdout).not.toContain(`quantd ${other} `);
    }
  });

  it('options a command does not take are not in its help', async () => {
    const r = await quantdAsync(['dequantize', '--help']);
    expect(r.stdout).not.toContain('--qdtype');
    expect(r.stdout).not.toContain('--recipe');
    expect((await quantdAsync(['inspect', '--help'])).stdout).not.toContain('--force');
  });

  it('quantd alone prints the usage on stderr and exits with the usage exit code', async () => {
    const r = await quantdAsync([]);
    expect(r.code).toBe(exitCodeFor('USAGE'));
    expect(r.code).toBe(2);
    expect(r.stdout).toBe('');
    expect(r.stderr).toMatch(/^quantd — /);
    for (const command of ['quantize', 'dequantize', 'fake-quantize', 'qparams', 'inspect', 'serve']) {
      expect(r.stderr).toContain(`quantd ${command} `);
    }
  });
});
