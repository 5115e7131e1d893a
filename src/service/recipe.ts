/**
 * Recipes: how each tensor of a model is quantized. A default spec plus ordered rules; the first
 * rule whose glob or regex matches a tensor's name decides (skip it, or quantize with the rule's
 * spec), and tensors no rule matches get the default. Small tensors (`min_size` elements) and
 * 1-D tensors (norms, biases: `skip_1d`) pass through unless their rule says otherwise.
 *
 * A rule states its whole spec: options it leaves out take the spec defaults (int8, per_tensor,
 * affine), not the recipe default's, so that reading a rule tells exactly what it does.
 *
 * Everything is checked when the recipe is read — unknown keys, bad globs and regexes, invalid
 * specs — with errors that name the rule. Whether a rule fits the tensors it matches (group size
 * divides the row, axis in range) is checked when the model is planned, before any data is read.
 */
import { SPEC_OPTION_NAMES, numelOf, parseSpec, type QuantSpec, type SpecOptions } from '../core/index.js';
import { QuantdError, isQuantdError } from '../errors/index.js';
import { UnusablePattern, firstMatch, linearGlob, linearRegex, patternListProblem } from './name-patterns.js';

/** The spec keys a recipe's default and rules take: the spec option table's names. */
export const SPEC_OPTIONS = SPEC_OPTION_NAMES;

export interface RecipeRule {
  /** How reports and errors name it: `rule 2 ("*.mlp.*")`. */
  readonly label: string;
  readonly kind: 'glob' | 'regex';
  readonly pattern: string;
  readonly test: (name: string) => boolean;
  /** null: the tensors it matches pass through. */
  readonly spec: QuantSpec | null;
  readonly options: SpecOptions;
  readonly minSize: number | undefined;
  readonly skip1d: boolean | undefined;
}

export interface Recipe {
  /** null: tensors no rule matches pass through. */
  readonly defaultSpec: QuantSpec | null;
  readonly defaultOptions: SpecOptions;
  readonly rules: readonly RecipeRule[];
  /** The first rule matching a name (../name-patterns.ts, firstMatch), if any. */
  readonly ruleFor: (name: string) => RecipeRule | undefined;
  readonly minSize: number;
  readonly skip1d: boolean;
}

/** What a recipe decides for one tensor. */
export type Decision =
  | { readonly action: 'quantize'; readonly spec: QuantSpec; readonly by: string }
  | { readonly action: 'pass'; readonly reason: string; readonly by: string };

/** The keys a rule takes: the pattern, skip, its label, the size rules, and the spec options. */
export const RULE_KEYS = ['glob', 'regex', 'skip', 'name', 'min_size', 'skip_1d', ...SPEC_OPTIONS] as const;
/** The keys a recipe object takes (OpenAPI documents exactly these: src/http/openapi.ts). */
export const RECIPE_KEYS = ['default', 'rules', 'min_size', 'skip_1d'] as const;

function invalid(where: string, detail: string): QuantdError {
  return new QuantdError('RECIPE_INVALID', { where, detail });
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function checkKeys(where: string, value: Record<string, unknown>, allowed: readonly string[]): void {
  for (const key of Object.keys(value)) {
    if (!allowed.includes(key)) {
      throw invalid(where, `unknown key ${JSON.stringify(key)} (keys: ${allowed.join(', ')})`);
    }
  }
}

/** A spec from JSON options, with a spec error re-thrown as naming `where`. */
function specFrom(where: string, options: SpecOptions): QuantSpec {
  try {
    return parseSpec(options);
  } catch (err) {
    if (isQuantdError(err)) throw invalid(where, `${err.code}: ${err.message}`);
    throw err;
  }
}

function specOptionsOf(where: string, value: Record<string, unknown>): SpecOptions {
  const options: Record<string, string | number> = {};
  for (const key of SPEC_OPTIONS) {
    const v = value[key];
    if (v === undefined) continue;
    if (typeof v !== 'string' && typeof v !== 'number') {
      throw invalid(where, `${key} must be a string or a number, got ${JSON.stringify(v)}`);
    }
    options[key] = v;
  }
  return options;
}

function sizeOf(where: string, value: unknown): number | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 0) {
    throw invalid(where, `min_size must be a whole number of elements >= 0, got ${JSON.stringify(value)}`);
  }
  return value;
}

function flagOf(where: string, key: string, value: unknown): boolean | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== 'boolean')
    throw invalid(where, `${key} must be true or false, got ${JSON.stringify(value)}`);
  return value;
}

/**
 * A name matcher for a glob (whole name, `*` crosses dots) or a regex (RE2 syntax, unanchored
 * like grep); both match in linear time (name-patterns.ts).
 */
function matcherOf(where: string, kind: 'glob' | 'regex', pattern: string): (name: string) => boolean {
  if (pattern === '') throw invalid(where, `${kind} is empty`);
  try {
    return kind === 'regex' ? linearRegex(pattern) : linearGlob(pattern);
  } catch (err) {
    if (err instanceof UnusablePattern)
      throw invalid(where, `${kind} ${JSON.stringify(pattern)} ${err.message}`);
    throw err;
  }
}

function ruleOf(value: unknown, index: number): RecipeRule {
  const position = `rule ${index + 1}`;
  if (!isObject(value)) throw invalid(position, `must be an object, got ${JSON.stringify(value)}`);
  const { glob, regex } = value;
  const kind = glob !== undefined ? 'glob' : 'regex';
  const pattern = glob ?? regex;
  const name = value['name'];
  // the label, as far as the rule allows one, names it in every error that follows
  const shown =
    typeof name === 'string'
      ? name
      : typeof pattern === 'string'
        ? `${kind === 'regex' ? 're:' : ''}${pattern}`
        : '';
  const label = typeof name === 'string' || typeof pattern === 'string' ? `${position} (${shown})` : position;
  checkKeys(label, value, RULE_KEYS);
  if ((glob === undefined) === (regex === undefined)) {
    throw invalid(label, 'needs exactly one of "glob" and "regex"');
  }
  if (typeof pattern !== 'string') throw invalid(label, `${kind} must be a string`);
  if (name !== undefined && typeof name !== 'string') throw invalid(label, 'name must be a string');
  const test = matcherOf(label, kind, pattern);
  const skip = flagOf(label, 'skip', value['skip']) ?? false;
  const options = specOptionsOf(label, value);
  if (skip && Object.keys(options).length > 0) {
    throw invalid(label, `skips its tensors, so it cannot also set ${Object.keys(options).join(', ')}`);
  }
  return {
    label,
    kind,
    pattern,
    test,
    spec: skip ? null : specFrom(label, options),
    options,
    minSize: sizeOf(label, value['min_size']),
    skip1d: flagOf(label, 'skip_1d', value['skip_1d']),
  };
}

/** Parses and validates a recipe object (parsed JSON). */
export function parseRecipe(value: unknown): Recipe {
  if (!isObject(value)) throw invalid('', `must be a JSON object, got ${JSON.stringify(value)}`);
  checkKeys('', value, RECIPE_KEYS);
  const rules = value['rules'] ?? [];
  if (!Array.isArray(rules)) throw invalid('', '"rules" must be an array');
  // the rules' patterns are compiled together (firstMatch): bounded as a list, before any is
  const patterns = rules.map((r: unknown) => {
    const rule = isObject(r) ? r : {};
    const pattern = rule['glob'] ?? rule['regex'];
    return typeof pattern === 'string' ? pattern : '';
  });
  const problem = patternListProblem(patterns);
  if (problem !== null) throw invalid('', `its rules (skip= and rule= included) ${problem}`);
  let defaultSpec: QuantSpec | null;
  let defaultOptions: SpecOptions = {};
  const d = value['default'];
  if (d === 'skip' || d === null) {
    defaultSpec = null;
  } else if (d === undefined || isObject(d)) {
    const options = d ?? {};
    checkKeys('default', options, SPEC_OPTIONS);
    defaultOptions = specOptionsOf('default', options);
    defaultSpec = specFrom('default', defaultOptions);
  } else {
    throw invalid('default', `must be a spec object or "skip", got ${JSON.stringify(d)}`);
  }
  const parsed = rules.map(ruleOf);
  const first = firstMatch(parsed);
  return {
    defaultSpec,
    defaultOptions,
    rules: parsed,
    ruleFor: (name) => parsed[first(name)],
    minSize: sizeOf('', value['min_size']) ?? 0,
    skip1d: flagOf('', 'skip_1d', value['skip_1d']) ?? true,
  };
}

/** Parses recipe JSON text (a file or a request parameter). */
export function parseRecipeText(text: string, source = 'recipe'): Recipe {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (err) {
    throw invalid(`(${source})`, `is not valid JSON: ${(err as Error).message}`);
  }
  return parseRecipe(value);
}

/**
 * A rule in command-line form: `PATTERN:skip` or `PATTERN:key=value,key=value`; a pattern
 * starting with `re:` is a regex, anything else a glob. The spec follows the last colon.
 */
export function ruleFromText(text: string): Record<string, unknown> {
  const at = text.lastIndexOf(':');
  if (at <= 0 || (text.startsWith('re:') && at === 2)) {
    throw invalid(`rule ${JSON.stringify(text)}`, 'must look like PATTERN:skip or PATTERN:key=value,...');
  }
  const pattern = text.slice(0, at);
  const body = text.slice(at + 1).trim();
  const rule: Record<string, unknown> = pattern.startsWith('re:')
    ? { regex: pattern.slice(3) }
    : { glob: pattern };
  if (body === 'skip') return { ...rule, skip: true };
  for (const pair of body.split(',')) {
    const eq = pair.indexOf('=');
    if (eq <= 0) throw invalid(`rule ${JSON.stringify(text)}`, `${JSON.stringify(pair)} is not key=value`);
    const key = pair.slice(0, eq).trim().replace(/-/g, '_');
    const raw = pair.slice(eq + 1).trim();
    rule[key] = typedValue(key, raw);
  }
  return rule;
}

/**
 * A command-line value as JSON would give it: exact true/false for flags, digits for min_size;
 * anything else stays a string, for parseRecipe to accept (spec options) or reject with the rule.
 */
function typedValue(key: string, raw: string): unknown {
  if (key === 'skip' || key === 'skip_1d') return raw === 'true' ? true : raw === 'false' ? false : raw;
  if (key === 'min_size') return /^\d+$/.test(raw) ? Number(raw) : raw;
  return raw;
}

export interface RecipeParts {
  /** A recipe object (parsed JSON), if any. */
  readonly recipe?: unknown;
  /** Default spec options from flags or query parameters (not together with recipe.default). */
  readonly defaults?: SpecOptions;
  /** Rules in command-line form; they come before the recipe's rules (they override it). */
  readonly rules?: readonly string[];
  /** Globs to pass through: `GLOB:skip` rules, before all others. */
  readonly skip?: readonly string[];
  readonly minSize?: number;
  readonly skip1d?: boolean;
}

/** One recipe from a recipe object plus command-line / query-parameter additions. */
export function combineRecipe(parts: RecipeParts): Recipe {
  const base: Record<string, unknown> = isObject(parts.recipe) ? { ...parts.recipe } : {};
  if (parts.recipe !== undefined && !isObject(parts.recipe)) parseRecipe(parts.recipe); // throws
  const defaults = parts.defaults ?? {};
  if (Object.keys(defaults).length > 0) {
    if (base['default'] !== undefined) {
      throw invalid('default', 'is given both in the recipe and as options; give it in one place');
    }
    base['default'] = defaults;
  }
  const extra = [
    ...(parts.skip ?? []).map((glob) => ({ glob, skip: true })),
    ...(parts.rules ?? []).map(ruleFromText),
  ];
  base['rules'] = [...extra, ...(Array.isArray(base['rules']) ? (base['rules'] as unknown[]) : [])];
  if (parts.minSize !== undefined) base['min_size'] = parts.minSize;
  if (parts.skip1d !== undefined) base['skip_1d'] = parts.skip1d;
  return parseRecipe(base);
}

/** The decision for one float tensor of this shape. */
export function decide(recipe: Recipe, name: string, shape: readonly number[]): Decision {
  const rule = recipe.ruleFor(name);
  const by = rule?.label ?? 'default';
  const spec = rule ? rule.spec : recipe.defaultSpec;
  if (spec === null) return { action: 'pass', reason: rule ? 'skipped by rule' : 'default is skip', by };
  const minSize = rule?.minSize ?? recipe.minSize;
  const skip1d = rule?.skip1d ?? recipe.skip1d;
  if (skip1d && shape.length <= 1) return { action: 'pass', reason: `${shape.length}-D tensor`, by };
  const numel = numelOf(shape);
  if (numel < minSize) return { action: 'pass', reason: `${numel} elements < min_size ${minSize}`, by };
  return { action: 'quantize', spec, by };
}

/** The rules no tensor of `names` matched first (likely typos), by label. */
export function unusedRules(recipe: Recipe, names: readonly string[]): string[] {
  const used = new Set<RecipeRule>();
  for (const name of names) {
    const rule = recipe.ruleFor(name);
    if (rule) used.add(rule);
  }
  return recipe.rules.filter((r) => !used.has(r)).map((r) => r.label);
}
