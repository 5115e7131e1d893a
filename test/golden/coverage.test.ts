/**
 * The golden vectors cover what the issue asks of them: every op × scheme × mode × qdtype
 * combination, random and adversarial data, shapes of rank 1 to 5 and every per-channel axis.
 * A generator change that silently drops a family fails here.
 */
import { describe, expect, it } from 'vitest';
import { MODES, QDTYPES, QDTYPE_INFO, SCHEMES } from '../../src/core/index.js';
import { loadGolden, type GoldenCase } from './vectors.js';

const quantizeCases: GoldenCase[] = ['per_tensor', 'per_channel', 'per_token', 'per_group'].flatMap(
  (f) => loadGolden(f).cases,
);
const dequantizeCases = loadGolden('dequantize').cases;

function validModes(qdtype: string, scheme: string): string[] {
  const info = QDTYPE_INFO[qdtype as keyof typeof QDTYPE_INFO];
  return MODES.filter((mode) => {
    if (info.float8) return mode === 'symmetric';
    if (mode === 'float_qparams') return scheme === 'per_channel';
    if (scheme === 'per_token' && mode === 'symmetric') return info.signed;
    return true;
  });
}

describe('golden coverage', () => {
  const combos = QDTYPES.flatMap((q) =>
    SCHEMES.flatMap((s) => validModes(q, s).map((m) => [q, s, m] as const)),
  );
  it.each(combos)('quantize and dequantize %s %s %s', (qdtype, scheme, mode) => {
    const match = (c: GoldenCase): boolean =>
      c.spec?.['qdtype'] === qdtype && c.spec['scheme'] === scheme && c.spec['mode'] === mode;
    expect(quantizeCases.filter(match).length).toBeGreaterThan(0);
    expect(dequantizeCases.filter(match).length).toBeGreaterThan(0);
  });

  it('per_token covers torch int8 in both modes', () => {
    for (const mode of ['symmetric', 'affine']) {
      const n = quantizeCases.filter((c) => c.spec?.['scheme'] === 'per_token' && c.spec['mode'] === mode);
      expect(n.length).toBeGreaterThan(20);
    }
  });

  it('has adversarial data for every integer qdtype per tensor', () => {
    for (const qdtype of QDTYPES) {
      const ids = quantizeCases.filter((c) => c.spec?.['qdtype'] === qdtype).map((c) => c.id);
      const kinds = QDTYPE_INFO[qdtype].float8
        ? ['zeros', 'signed_zeros', 'denormals', 'equal_pos', 'equal_neg', 'huge', 'edges']
        : ['zeros', 'signed_zeros', 'denormals', 'equal_pos', 'equal_neg', 'halves', 'tiny_range'];
      for (const kind of kinds)
        expect(
          ids.some((id) => id.includes(kind)),
          `${qdtype} ${kind}`,
        ).toBe(true);
    }
  });

  it('has length-1 and prime-length tensors and ranks 1 to 5', () => {
    const shapes = quantizeCases.map((c) => c.input!.shape);
    for (const n of [1, 7, 13, 101, 1009]) {
      expect(shapes.some((s) => s.length === 1 && s[0] === n)).toBe(true);
    }
    for (let rank = 1; rank <= 5; rank++) expect(shapes.some((s) => s.length === rank)).toBe(true);
  });

  it('covers every axis of a rank-5 tensor per channel', () => {
    const axes = new Set(
      quantizeCases
        .filter((c) => c.spec?.['scheme'] === 'per_channel' && c.input!.shape.length === 5)
        .map((c) => c.spec!['axis']),
    );
    expect([...axes].sort()).toEqual([0, 1, 2, 3, 4]);
  });

  it('covers float16 and bfloat16 inputs and all three dequantize output dtypes', () => {
    const inputs = new Set(quantizeCases.map((c) => c.input!.dtype));
    expect([...inputs].sort()).toEqual(['BF16', 'F16', 'F32']);
    const outs = new Set(dequantizeCases.map((c) => c.out_dtype));
    expect([...outs].sort()).toEqual(['bfloat16', 'float16', 'float32']);
  });

  it('covers fake-quantize per tensor and per channel, int and float zero points', () => {
    const ids = loadGolden('fake_quantize').cases.map((c) => c.id);
    for (const part of ['per_tensor', 'per_channel/uint4', 'float_qparams', 'halves']) {
      expect(
        ids.some((id) => id.includes(part)),
        part,
      ).toBe(true);
    }
  });
});
