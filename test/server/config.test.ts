/**
 * JSON bodies have limits of their own (issue 37, item 1), which cannot be set past what a
 * decoded body's one string holds.
 */
import { describe, expect, it } from 'vitest';

import { loadConfig } from '../../src/config.js';
import { QuantdError } from '../../src/errors/index.js';

const MiB = 1024 ** 2;

const configError = (env: Record<string, string>): QuantdError => {
  try {
    loadConfig(env);
  } catch (err) {
    return err as QuantdError;
  }
  throw new Error(`loadConfig accepted ${JSON.stringify(env)}`);
};

describe('defaults', () => {
  it('1 / 8 / 4 MiB JSON limits', () => {
    const config = loadConfig({});
    expect(config.jsonLimit).toBe(MiB);
    expect(config.calibrationJsonLimit).toBe(8 * MiB);
    expect(config.oipJsonLimit).toBe(4 * MiB);
  });

  it('JSON limits are set in sizes, up to 256 MiB (a decoded body must fit in one string)', () => {
    const config = loadConfig({
      QUANTD_JSON_LIMIT: '1m',
      QUANTD_CALIBRATION_JSON_LIMIT: '256m',
      QUANTD_OIP_JSON_LIMIT: '65536',
    });
    expect([config.jsonLimit, config.calibrationJsonLimit, config.oipJsonLimit]).toEqual([
      MiB,
      256 * MiB,
      65536,
    ]);
    for (const key of ['QUANTD_JSON_LIMIT', 'QUANTD_CALIBRATION_JSON_LIMIT', 'QUANTD_OIP_JSON_LIMIT']) {
      for (const value of ['257m', '1g', '600m']) {
        const err = configError({ [key]: value });
        expect(err.code).toBe('CONFIG_INVALID');
        expect(err.params['key']).toBe(key);
        expect(err.message).toContain('at most 268435456 bytes');
      }
      expect(configError({ [key]: '12 parsecs' }).params['key']).toBe(key);
    }
  });
});
