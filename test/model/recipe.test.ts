/**
 * Recipes (docs/models.md): which rule decides a tensor, what it decides, and how every mistake
 * in a recipe is reported — RECIPE_INVALID naming the rule when the recipe is read,
 * RECIPE_RULE_FAILED naming the rule and the tensor when the model is planned.
 */
import { describe, expect, it } from 'vitest';

import { parseSpec, type StDType } from '../../src/core/index.js';
import { QuantdError, type ErrorCode } from '../../src/errors/index.js';
import { parseSafetensors, serializeSafetensors } from '../../src/format/index.js';
import {
  combineRecipe,
  decide,
  parseRecipe,
  parseRecipeText,
  planOperation,
  ruleFromText,
  unusedRules,
  type Recipe,
  type RecipeParts,
} from '../../src/service/index.js';

/** The error `fn` throws: a QuantdError of `code` whose message holds each fragment. */
function thrown(fn: () => unknown, code: ErrorCode, fragments: readonly string[] = []): QuantdError {
  let error: unknown;
  try {
    fn();
  } catch (err) {
    error = err;
  }
  expect(error, `expected ${code}`).toBeInstanceOf(QuantdError);
  const e = error as QuantdError;
  expect(e.code, e.message).toBe(code);
  for (const f of fragments) expect(e.message).toContain(f);
  return e;
}

const invalid = (value: unknown, fragments: readonly string[]): QuantdError =>
  thrown(() => parseRecipe(value), 'RECIPE_INVALID', fragments);

const MLP = 'model.layers.0.mlp.up_proj.weight';
const Q = 'model.layers.0.self_attn.q_proj.weight';
const EMBED = 'model.embed_tokens.weight';
const NORM = 'model.layers.0.input_layernorm.weight';

function quantizes(recipe: Recipe, name: string, shape: readonly number[]) {
  const d = decide(recipe, name, shape);
  if (d.action !== 'quantize') throw new Error(`${name}: passes through (${d.reason}, ${d.by})`);
  return d;
}

describe('decide: which rule, what spec', () => {
  it('the first matching rule wins, later matches do not count', () => {
    const recipe = parseRecipe({
      rules: [
        { glob: '*.mlp.*', qdtype: 'int4', scheme: 'per_group', group_size: 64 },
        { glob: '*.up_proj.*', qdtype: 'int2' },
        { glob: '*.weight', skip: true },
      ],
    });
    const d = quantizes(recipe, MLP, [256, 128]);
    expect(d.by).toBe('rule 1 (*.mlp.*)');
    expect(d.spec).toMatchObject({ qdtype: 'int4', scheme: 'per_group', groupSize: 64 });
    expect(decide(recipe, Q, [128, 128])).toEqual({
      action: 'pass',
      reason: 'skipped by rule',
      by: 'rule 3 (*.weight)',
    });
    expect(unusedRules(recipe, [MLP, Q])).toEqual(['rule 2 (*.up_proj.*)']);
  });

  it('a glob spans the whole name and * crosses dots; a regex is unanchored', () => {
    const recipe = parseRecipe({
      rules: [
        { glob: 'mlp', skip: true }, // whole name only: matches nothing here
        { regex: '^q_proj$', skip: true }, // anchored: matches nothing
        { regex: 'self_attn\\.(q|k|v)_proj', qdtype: 'int8', scheme: 'per_channel' },
        { glob: '*.mlp.*', qdtype: 'uint8' },
      ],
    });
    expect(quantizes(recipe, Q, [128, 128]).by).toBe('rule 3 (re:self_attn\\.(q|k|v)_proj)');
    expect(quantizes(recipe, MLP, [256, 128]).by).toBe('rule 4 (*.mlp.*)');
    expect(quantizes(recipe, 'mlp.o_proj', [8, 8]).by).toBe('default');
    expect(unusedRules(recipe, [Q, MLP])).toEqual(['rule 1 (mlp)', 'rule 2 (re:^q_proj$)']);
  });

  it('a rule is labelled by its name when it has one', () => {
    const recipe = parseRecipe({ rules: [{ glob: 'lm_head.weight', name: 'head stays wide' }] });
    expect(quantizes(recipe, 'lm_head.weight', [4, 4]).by).toBe('rule 1 (head stays wide)');
  });

  it('the default: a spec, "skip", or absent (the spec defaults)', () => {
    const absent = parseRecipe({});
    const d = quantizes(absent, Q, [4, 4]);
    expect(d.by).toBe('default');
    expect(d.spec).toEqual(parseSpec({}));
    expect(d.spec).toMatchObject({ qdtype: 'int8', scheme: 'per_tensor', mode: 'affine' });

    const spec = parseRecipe({ default: { qdtype: 'uint4', scheme: 'per_channel', axis: 1 } });
    expect(quantizes(spec, Q, [4, 4]).spec).toEqual(
      parseSpec({ qdtype: 'uint4', scheme: 'per_channel', axis: 1 }),
    );

    for (const skip of ['skip', null]) {
      const recipe = parseRecipe({ default: skip, rules: [{ glob: '*.mlp.*', qdtype: 'int4' }] });
      expect(decide(recipe, Q, [4, 4])).toEqual({ action: 'pass', reason: 'default is skip', by: 'default' });
      expect(quantizes(recipe, MLP, [4, 4]).by).toBe('rule 1 (*.mlp.*)');
    }
  });

  it('a rule states its whole spec: it does not inherit the default options', () => {
    const recipe = parseRecipe({
      default: { qdtype: 'int4', scheme: 'per_group', group_size: 32, mode: 'symmetric', quant_min: -7 },
      rules: [{ glob: '*.mlp.*', scheme: 'per_channel' }],
    });
    const d = quantizes(recipe, MLP, [4, 4]);
    expect(d.spec).toEqual(parseSpec({ scheme: 'per_channel' }));
    expect(d.spec).toMatchObject({ qdtype: 'int8', mode: 'affine', groupSize: null, quantMin: -128 });
  });

  it('skip_1d: 1-D tensors pass by default; the recipe or a rule may keep them', () => {
    const plain = parseRecipe({});
    expect(decide(plain, NORM, [128])).toEqual({ action: 'pass', reason: '1-D tensor', by: 'default' });
    expect(decide(plain, 'scalar', [])).toMatchObject({ action: 'pass', reason: '0-D tensor' });
    expect(quantizes(parseRecipe({ skip_1d: false }), NORM, [128]).by).toBe('default');

    const perRule = parseRecipe({ rules: [{ glob: '*layernorm*', skip_1d: false }] });
    expect(quantizes(perRule, NORM, [128]).by).toBe('rule 1 (*layernorm*)');
    expect(decide(perRule, 'model.norm.weight', [128])).toMatchObject({ action: 'pass', by: 'default' });

    const ruleKeeps = parseRecipe({ skip_1d: false, rules: [{ glob: '*layernorm*', skip_1d: true }] });
    expect(decide(ruleKeeps, NORM, [128])).toMatchObject({ action: 'pass', by: 'rule 1 (*layernorm*)' });
    expect(quantizes(ruleKeeps, 'model.norm.weight', [128]).by).toBe('default');
  });

  it('min_size: globally, and a rule may override it (in both directions)', () => {
    const recipe = parseRecipe({
      min_size: 4096,
      rules: [
        { glob: 'lm_head.weight', min_size: 0 },
        { glob: '*.mlp.*', min_size: 100_000 },
      ],
    });
    expect(decide(recipe, Q, [32, 64])).toEqual({
      action: 'pass',
      reason: '2048 elements < min_size 4096',
      by: 'default',
    });
    expect(quantizes(recipe, Q, [64, 64]).by).toBe('default'); // exactly min_size: quantized
    expect(quantizes(recipe, 'lm_head.weight', [2, 2]).by).toBe('rule 1 (lm_head.weight)');
    expect(decide(recipe, MLP, [256, 128])).toMatchObject({ action: 'pass', by: 'rule 2 (*.mlp.*)' });
    expect(parseRecipe({}).minSize).toBe(0);
  });
});

describe('RECIPE_INVALID: every mistake names where it is', () => {
  const mlp = { glob: '*.mlp.*', qdtype: 'int4', scheme: 'per_group', group_size: 128 };
  const first = { glob: '*.embed_tokens.*', skip: true };

  it('an unknown key in a rule names the rule, its pattern, and the key', () => {
    invalid({ rules: [first, { ...mlp, qdtpye: 'int4' }] }, ['rule 2 (*.mlp.*)', '"qdtpye"']);
  });

  it('an unknown key at the top level or in the default', () => {
    invalid({ rule: [] }, ['unknown key "rule"']);
    invalid({ default: { qdtype: 'int8', glob: '*' } }, ['default', 'unknown key "glob"']);
    invalid({ default: 8 }, ['default', 'must be a spec object or "skip"']);
    invalid([], ['must be a JSON object']);
    invalid({ rules: {} }, ['"rules" must be an array']);
  });

  it('a rule with both glob and regex, or neither, or one that is not an object', () => {
    invalid({ rules: [first, { glob: '*.mlp.*', regex: 'mlp', skip: true }] }, ['rule 2', 'exactly one']);
    invalid({ rules: [first, { qdtype: 'int8' }] }, ['rule 2', 'exactly one of "glob" and "regex"']);
    invalid({ rules: [first, '*.mlp.*'] }, ['rule 2', 'must be an object']);
    invalid({ rules: [first, { glob: 5 }] }, ['rule 2', 'glob must be a string']);
  });

  it('a regex that does not compile, and empty patterns', () => {
    invalid({ rules: [first, { regex: 'self_attn.(q|k', skip: true }] }, [
      'rule 2 (re:self_attn.(q|k)',
      'does not compile',
    ]);
    invalid({ rules: [first, { glob: '', skip: true }] }, ['rule 2 ()', 'glob is empty']);
    invalid({ rules: [first, { regex: '', skip: true }] }, ['rule 2 (re:)', 'regex is empty']);
  });

  it('a regex runs in linear time: ^(a+)+$ against 32 a and a ! answers at once', () => {
    // JavaScript's backtracking RegExp takes tens of seconds on this pair
    const recipe = combineRecipe({ rules: ['re:^(a+)+$:skip'] });
    const name = `${'a'.repeat(32)}!`;
    const started = performance.now();
    const d = decide(recipe, name, [64, 64]);
    const ms = performance.now() - started;
    expect(d.by).toBe('default');
    expect(ms).toBeLessThan(1000); // backtracking takes seconds to minutes; a loaded CI machine can pause 100 ms
    expect(decide(recipe, 'a'.repeat(32), [64, 64]).by).toBe('rule 1 (re:^(a+)+$)');
  });

  it('a regex RE2 cannot run (backreference, lookaround) is refused, naming the rule', () => {
    for (const regex of ['(q|k)_proj\\.\\1', 'q_proj(?=\\.weight)', '(?<!self_)attn']) {
      invalid({ rules: [first, { regex, skip: true }] }, [
        `rule 2 (re:${regex})`,
        'linear-time matching cannot run (backreferences, lookahead, lookbehind)',
      ]);
    }
  });

  it('an invalid spec option carries the underlying code', () => {
    invalid({ rules: [first, { ...mlp, qdtype: 'int3' }] }, ['rule 2 (*.mlp.*)', 'UNKNOWN_QDTYPE', 'int3']);
    invalid({ rules: [first, { ...mlp, scheme: 'per_row' }] }, ['rule 2 (*.mlp.*)', 'UNKNOWN_SCHEME']);
    invalid({ rules: [first, { ...mlp, quant_min: -9 }] }, ['rule 2 (*.mlp.*)', 'QUANT_RANGE_INVALID']);
    invalid({ rules: [first, { ...mlp, group_size: true }] }, [
      'rule 2 (*.mlp.*)',
      'group_size must be a string or a number',
    ]);
    invalid({ default: { qdtype: 'int3' } }, ['default', 'UNKNOWN_QDTYPE']);
  });

  it('skip together with spec options', () => {
    invalid({ rules: [first, { glob: '*.mlp.*', skip: true, qdtype: 'int4', scheme: 'per_group' }] }, [
      'rule 2 (*.mlp.*)',
      'cannot also set qdtype, scheme',
    ]);
  });

  it('non-boolean skip / skip_1d and bad min_size, in rules and at the top level', () => {
    invalid({ rules: [first, { ...mlp, skip_1d: 'yes' }] }, [
      'rule 2 (*.mlp.*)',
      'skip_1d must be true or false',
    ]);
    invalid({ rules: [first, { glob: '*.mlp.*', skip: 1 }] }, [
      'rule 2 (*.mlp.*)',
      'skip must be true or false',
    ]);
    invalid({ rules: [first, { ...mlp, min_size: -1 }] }, ['rule 2 (*.mlp.*)', 'min_size', '-1']);
    invalid({ rules: [first, { ...mlp, min_size: 1.5 }] }, ['rule 2 (*.mlp.*)', 'min_size']);
    invalid({ skip_1d: 'false' }, ['skip_1d must be true or false']);
    invalid({ min_size: -4096 }, ['min_size', '-4096']);
  });

  it('recipe text that is not JSON', () => {
    thrown(() => parseRecipeText('{"rules": [', 'recipe.json'), 'RECIPE_INVALID', [
      '(recipe.json)',
      'not valid JSON',
    ]);
  });

  it('the default given both in the recipe and as options', () => {
    thrown(
      () => combineRecipe({ recipe: { default: { qdtype: 'int8' } }, defaults: { qdtype: 'int4' } }),
      'RECIPE_INVALID',
      ['default', 'both in the recipe and as options'],
    );
    // options alone, or a recipe without a default, are fine
    expect(combineRecipe({ recipe: { rules: [] }, defaults: { qdtype: 'int4' } }).defaultSpec).toEqual(
      parseSpec({ qdtype: 'int4' }),
    );
  });
});

describe('the command-line / query form of rules', () => {
  it('ruleFromText: PATTERN:skip, PATTERN:key=value,..., re: for regexes', () => {
    expect(ruleFromText('*.embed_tokens.*:skip')).toEqual({ glob: '*.embed_tokens.*', skip: true });
    expect(ruleFromText('*.mlp.*:qdtype=int4,scheme=per_group,group-size=128,mode=symmetric')).toEqual({
      glob: '*.mlp.*',
      qdtype: 'int4',
      scheme: 'per_group',
      group_size: '128',
      mode: 'symmetric',
    });
    // the spec follows the last colon: a regex may hold colons
    expect(ruleFromText('re:(?:q|k)_proj:qdtype=int8,min_size=0,skip_1d=false')).toEqual({
      regex: '(?:q|k)_proj',
      qdtype: 'int8',
      min_size: 0,
      skip_1d: false,
    });
  });

  it('malformed command-line rules are RECIPE_INVALID naming the text', () => {
    for (const text of ['*.mlp.*', ':skip', 're::skip'.slice(0, 3), '*.mlp.*:qdtype', '*.mlp.*:']) {
      thrown(() => combineRecipe({ rules: [text] }), 'RECIPE_INVALID', [`rule ${JSON.stringify(text)}`]);
    }
    thrown(() => combineRecipe({ rules: ['re::skip'] }), 'RECIPE_INVALID', ['regex is empty']);
  });

  it('a command-line rule with skip_1d that is not true or false is refused, not read as false', () => {
    // Bug: ruleFromText maps every skip_1d value other than "true" to false, so a typo quietly
    // quantizes the norms and biases the user meant to keep.
    thrown(() => combineRecipe({ rules: ['*.mlp.*:qdtype=int8,skip_1d=yes'] }), 'RECIPE_INVALID', [
      'skip_1d must be true or false',
    ]);
  });

  it('a command-line rule spelling skip as skip=true means skip (not "skip must be true or false")', () => {
    // Bug: ruleFromText converts skip_1d and min_size but not skip, so `PAT:skip=true` reaches
    // parseRecipe as the string "true" and is refused with 'skip must be true or false, got "true"'.
    const recipe = combineRecipe({ rules: ['*.mlp.*:skip=true'] });
    expect(decide(recipe, MLP, [256, 128])).toMatchObject({ action: 'pass', reason: 'skipped by rule' });
  });

  it('a command-line rule with an empty min_size is refused, not read as 0', () => {
    // Bug: Number('') is 0, so `min_size=` (a value lost to shell quoting) quietly means 0.
    thrown(() => combineRecipe({ rules: ['*.mlp.*:qdtype=int8,min_size='] }), 'RECIPE_INVALID', ['min_size']);
  });

  it('a command-line rule with a min_size that is not a number is refused', () => {
    thrown(() => combineRecipe({ rules: ['*.mlp.*:qdtype=int8,min_size=lots'] }), 'RECIPE_INVALID', [
      'min_size',
    ]);
  });

  it('combineRecipe: --skip, then --rule, then the recipe; options become the default', () => {
    const parts: RecipeParts = {
      recipe: {
        rules: [
          { glob: '*.mlp.*', qdtype: 'int2' },
          { glob: 'typo.*', skip: true },
        ],
      },
      defaults: { qdtype: 'int8', scheme: 'per_channel' },
      skip: ['*.embed_tokens.*'],
      rules: ['*.up_proj.*:qdtype=int4'],
      minSize: 16,
      skip1d: false,
    };
    const recipe = combineRecipe(parts);
    expect(recipe.rules.map((r) => r.label)).toEqual([
      'rule 1 (*.embed_tokens.*)',
      'rule 2 (*.up_proj.*)',
      'rule 3 (*.mlp.*)',
      'rule 4 (typo.*)',
    ]);
    expect(quantizes(recipe, MLP, [4, 4]).spec.qdtype).toBe('int4');
    expect(quantizes(recipe, 'model.layers.0.mlp.down_proj.weight', [4, 4]).spec.qdtype).toBe('int2');
    expect(decide(recipe, EMBED, [4, 4])).toMatchObject({ action: 'pass', reason: 'skipped by rule' });
    expect(quantizes(recipe, NORM, [16]).spec).toEqual(parseSpec({ qdtype: 'int8', scheme: 'per_channel' }));
    expect(decide(recipe, NORM.replace('input', 'tiny'), [15])).toMatchObject({ action: 'pass' });
    // a rule of the recipe that fails validation is numbered after the flags' rules
    thrown(
      () => combineRecipe({ ...parts, recipe: { rules: [{ glob: '*.mlp.*', qdtype: 'int3' }] } }),
      'RECIPE_INVALID',
      ['rule 3 (*.mlp.*)', 'UNKNOWN_QDTYPE'],
    );
  });
});

function header(tensors: ReadonlyArray<readonly [string, StDType, readonly number[]]>) {
  const bytes = serializeSafetensors(
    tensors.map(([name, dtype, shape]) => ({
      name,
      dtype,
      shape,
      data: new Uint8Array(shape.reduce((a, b) => a * b, dtype === 'F32' ? 4 : dtype === 'I64' ? 8 : 2)),
    })),
    null,
  );
  return parseSafetensors(bytes, 'model.safetensors').header;
}

function plan(recipe: unknown, tensors: Parameters<typeof header>[0]) {
  const r = parseRecipe(recipe);
  return planOperation(
    header(tensors),
    {
      op: 'quantize',
      spec: r.defaultSpec ?? parseSpec({}),
      recipe: r,
      outDType: 'float32',
      include: [],
      exclude: [],
    },
    'model.safetensors',
  );
}

describe('RECIPE_RULE_FAILED: a rule that does not fit a tensor it matches', () => {
  it('a group size that does not divide the row names the rule and the tensor', () => {
    // (a group wider than the row becomes the row, as in torch: group_size 128 on K = 100 fits)
    const err = thrown(
      () =>
        plan(
          {
            rules: [
              { glob: '*.embed*', skip: true },
              { glob: '*.mlp.*', scheme: 'per_group', group_size: 32 },
            ],
          },
          [
            ['model.layers.0.mlp.up_proj.weight', 'BF16', [4, 128]],
            ['model.layers.0.mlp.gate_proj.weight', 'BF16', [4, 16]],
            ['model.layers.0.mlp.down_proj.weight', 'BF16', [4, 100]],
          ],
        ),
      'RECIPE_RULE_FAILED',
      ['rule 2 (*.mlp.*)', 'model.layers.0.mlp.down_proj.weight', 'GROUP_SIZE_INVALID'],
    );
    expect(err.message).not.toContain('up_proj');
  });

  it('an axis out of range names the rule (or the default) and the tensor', () => {
    thrown(
      () =>
        plan({ rules: [{ regex: 'q_proj', scheme: 'per_channel', axis: 2 }] }, [
          ['attn.q_proj.weight', 'F16', [8, 8]],
        ]),
      'RECIPE_RULE_FAILED',
      ['rule 1 (re:q_proj)', 'attn.q_proj.weight', 'AXIS_OUT_OF_RANGE'],
    );
    thrown(
      () => plan({ default: { scheme: 'per_channel', axis: -3 } }, [['w', 'F32', [8, 8]]]),
      'RECIPE_RULE_FAILED',
      ['default', 'w', 'AXIS_OUT_OF_RANGE'],
    );
  });

  it('a tensor that passes through is never checked against the rule', () => {
    const p = plan({ min_size: 1000, rules: [{ glob: '*', scheme: 'per_group', group_size: 128 }] }, [
      ['small', 'F32', [4, 100]],
      ['norm', 'F32', [100]],
      ['ids', 'I64', [1, 100]],
    ]);
    expect(p.steps.map((s) => s.kind)).toEqual(['copy', 'copy', 'copy']);
  });
});

describe('TENSOR_NAME_RESERVED: a model tensor named like a container metadata key', () => {
  for (const name of ['format', 'quantd.data_sha256']) {
    it(`"${name}" (even passed through) cannot go into a qtensor container`, () => {
      thrown(
        () =>
          plan({}, [
            ['w', 'F32', [4, 4]],
            [name, 'F32', [4]],
          ]),
        'TENSOR_NAME_RESERVED',
        [JSON.stringify(name).slice(1, -1)],
      );
    });
  }
});

describe('qparams under a recipe', () => {
  it('a qparams file holds qparams only: tensors the recipe passes through are not copied into it', () => {
    // Bug: planTransform drops unselected tensors from a qparams output ("qparams files hold
    // qparams only") but copies the tensors a recipe decides to pass through (skipped by a rule,
    // 1-D, under min_size), so `quantd qparams MODEL --recipe R` writes a quantd.qparams/1 file
    // holding the model's embeddings and norms as float tensors.
    const r = parseRecipe({ rules: [{ glob: 'emb', skip: true }] });
    const p = planOperation(
      header([
        ['emb', 'F32', [4, 4]],
        ['w', 'F32', [4, 4]],
        ['norm', 'F32', [4]],
        ['ids', 'I64', [4]],
      ]),
      { op: 'qparams', spec: r.defaultSpec!, recipe: r, outDType: 'float32', include: [], exclude: [] },
      'model.safetensors',
    );
    expect(p.metadata['format']).toBe('quantd.qparams/1');
    expect(p.tensors.map((t) => t.name)).toEqual(['w.scale', 'w.zero_point']);
  });
});
