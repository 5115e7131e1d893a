/**
 * A job's options → the OperationRequest it runs. The options are those of /v1/quantize (the spec
 * options, include, exclude, dtype) plus `op` and the recipe parameters of docs/models.md: a recipe
 * object (`recipe`, JSON text in a query), and `rule=PATTERN:SPEC`, `skip=GLOB`, `min_size=N`,
 * `keep_1d=true`. With any recipe parameter the spec options are the recipe's default, as on the
 * command line. Everything is checked here, when the job is submitted, and again (the same code)
 * when it runs.
 *
 * `layout=NAME:key=value,...` makes it a layout job instead (src/service/layouts: GGUF, GPTQ, AWQ,
 * NF4/FP4, ONNX): op quantize only, and no other option — a layout quantizes as its format defines
 * and takes its own options — as on the command line (`quantize --layout`).
 */
import { parseSpec } from '../core/index.js';
import { QuantdError } from '../errors/index.js';
import {
  OPERATIONS,
  RECIPE_OPTION_NAMES,
  SPEC_OPTIONS,
  combineRecipe,
  operationRequest,
  type Operation,
  type OperationRequest,
  type RequestParams,
} from '../service/index.js';
import type { InteropLayout, LayoutOptions } from '../service/layouts/index.js';
import { parseLayoutChecked } from '../service/layouts/parse.js';
import type { JobParams, Submission } from './store.js';

/** The recipe parameters of the option table but `recipe`, which a submission carries parsed. */
const RECIPE_PARAMS: readonly string[] = RECIPE_OPTION_NAMES.filter((name) => name !== 'recipe');

function invalid(option: string, detail: string, value: unknown): QuantdError {
  return new QuantdError('OPTION_INVALID', {
    option,
    detail,
    value: typeof value === 'string' ? value : JSON.stringify(value),
  });
}

function one(params: JobParams, key: string): string | number | boolean | undefined {
  const value = params[key];
  if (Array.isArray(value)) {
    if (value.length > 1) throw invalid(key, 'is given more than once', value.join(', '));
    return value[0];
  }
  return value as string | number | boolean | undefined;
}

function strings(params: JobParams, key: string): string[] {
  const value = params[key];
  if (value === undefined) return [];
  const items = Array.isArray(value) ? value : [value];
  for (const item of items) {
    if (typeof item !== 'string') throw invalid(key, 'must be a string or a list of strings', value);
  }
  return (items as string[]).filter((v) => v !== '');
}

/** The operation of a job: `op` (default quantize). */
export function operationOf(value: unknown): Operation {
  if (value === undefined) return 'quantize';
  if (typeof value !== 'string' || !(OPERATIONS as readonly string[]).includes(value)) {
    throw invalid('op', `must be one of ${OPERATIONS.join(', ')}`, value);
  }
  return value as Operation;
}

/** Checks that `params` holds only option values (strings, numbers, booleans, lists of strings). */
export function paramsOf(value: unknown, where = 'params'): JobParams {
  if (value === undefined) return {};
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw invalid(where, 'must be an object of options', value);
  }
  for (const [key, v] of Object.entries(value)) {
    const ok =
      typeof v === 'string' ||
      (typeof v === 'number' && Number.isFinite(v)) ||
      typeof v === 'boolean' ||
      (Array.isArray(v) && v.every((x) => typeof x === 'string'));
    if (!ok) throw invalid(key, 'must be a string, a number, a boolean or a list of strings', v);
  }
  return value as JobParams;
}

/** A recipe given as JSON text (the query form). */
export function recipeFromText(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch (err) {
    throw new QuantdError('RECIPE_INVALID', {
      where: '(recipe parameter)',
      detail: `is not valid JSON: ${(err as Error).message}`,
    });
  }
}

/**
 * The submission of a query-form job (POST /v1/jobs?OPTIONS with the model as the body): `op`
 * and `recipe` (JSON text) are taken out, the rest are options.
 */
export function submissionFromQuery(query: Readonly<Record<string, unknown>>): Submission {
  const params = { ...paramsOf(query, 'query') } as Record<string, JobParams[string]>;
  const op = operationOf(one(params, 'op'));
  delete params['op'];
  const recipeText = one(params, 'recipe');
  delete params['recipe'];
  const recipe = recipeText === undefined ? undefined : recipeFromText(String(recipeText));
  return recipe === undefined ? { op, params } : { op, params, recipe };
}

function wholeNumber(key: string, value: unknown): number {
  const n = typeof value === 'number' ? value : /^\d+$/.test(String(value).trim()) ? Number(value) : NaN;
  if (!Number.isSafeInteger(n) || n < 0) throw invalid(key, 'must be a whole number', value);
  return n;
}

function flag(key: string, value: unknown): boolean {
  if (value === true || value === 'true' || value === '1' || value === '') return true;
  if (value === false || value === 'false' || value === '0') return false;
  throw invalid(key, 'must be true or false', value);
}

/** The OperationRequest of a submission; throws the catalogue error of the first bad option. */
export function jobRequest(submission: Submission): OperationRequest {
  const { op, params, recipe } = submission;
  const rest: Record<string, string | number | readonly string[]> = {};
  for (const [key, value] of Object.entries(params)) {
    if (RECIPE_PARAMS.includes(key)) continue;
    if (typeof value === 'boolean') throw invalid(key, 'must be a string or a number', value);
    rest[key] = value;
  }
  const base = operationRequest(op, rest as RequestParams);
  const rules = strings(params, 'rule');
  const skip = strings(params, 'skip');
  const minSize = one(params, 'min_size');
  const keep1d = one(params, 'keep_1d');
  const usesRecipe =
    recipe !== undefined ||
    rules.length > 0 ||
    skip.length > 0 ||
    minSize !== undefined ||
    keep1d !== undefined;
  if (!usesRecipe) return base;
  if (op === 'dequantize') {
    throw invalid(
      recipe !== undefined ? 'recipe' : 'rule',
      'does not apply to dequantize (it reads each tensor’s spec from the container)',
      recipe ?? rules[0] ?? skip[0] ?? minSize ?? keep1d,
    );
  }
  const defaults: Record<string, string | number> = {};
  for (const key of SPEC_OPTIONS) {
    const value = one(params, key);
    if (value !== undefined && value !== '') defaults[key] = value as string | number;
  }
  const combined = combineRecipe({
    recipe,
    defaults,
    rules,
    skip,
    ...(minSize !== undefined && { minSize: wholeNumber('min_size', minSize) }),
    ...(keep1d !== undefined && flag('keep_1d', keep1d) && { skip1d: false }),
  });
  return { ...base, spec: combined.defaultSpec ?? parseSpec({}), recipe: combined };
}

/** What a job runs: a whole-model operation (runModel), or an interop layout's writer. */
export type JobPlan =
  | { readonly kind: 'model'; readonly request: OperationRequest }
  | {
      readonly kind: 'layout';
      /** The `layout` parameter as given: NAME[:key=value,...]. */
      readonly text: string;
      readonly layout: InteropLayout;
      readonly options: LayoutOptions;
    };

/** Whether a submission names a layout (the `layout` parameter). */
export function isLayoutJob(submission: Submission): boolean {
  return submission.params['layout'] !== undefined;
}

/**
 * The plan of a submission; throws the catalogue error of the first bad option. A layout job:
 * op quantize, `layout` one non-empty string, no recipe and no other option (each refused by
 * name), and the layout's own options valid (parseLayoutChecked).
 */
export function jobPlan(submission: Submission): JobPlan {
  if (!isLayoutJob(submission)) return { kind: 'model', request: jobRequest(submission) };
  const { op, params, recipe } = submission;
  const text = one(params, 'layout');
  if (typeof text !== 'string' || text.trim() === '') {
    throw invalid('layout', 'must be a layout name with its options, NAME[:key=value,...]', text ?? '');
  }
  if (op !== 'quantize') {
    throw invalid('op', `must be quantize with layout (a layout writes a quantized model; got ${op})`, op);
  }
  const notApplicable = (key: string, value: unknown): QuantdError =>
    invalid(
      key,
      `does not apply with layout=${text}: a layout quantizes as its format defines; give its own options as layout=NAME:key=value`,
      value,
    );
  if (recipe !== undefined) throw notApplicable('recipe', recipe);
  for (const [key, value] of Object.entries(params)) {
    if (key === 'layout' || value === '' || (Array.isArray(value) && value.length === 0)) continue;
    throw notApplicable(key, Array.isArray(value) ? value.join(', ') : value);
  }
  const { layout, options } = parseLayoutChecked(text);
  for (const key of ['imatrix', 'calibration']) {
    const file = options[key];
    if (file !== undefined && (/[/\\]/.test(file) || file === '.' || file === '..')) {
      // a job reads no file but its input: the matrix or statistics travel in the model folder
      throw invalid(
        'layout',
        `${key} must name a file of the model folder (a plain file name; upload it with the folder)`,
        file,
      );
    }
  }
  return { kind: 'layout', text, layout, options };
}

/** The files a plan's layout options name beside the model's weights (calibration=, imatrix=). */
export function namedFiles(plan: JobPlan): string[] {
  if (plan.kind !== 'layout') return [];
  return ['imatrix', 'calibration'].flatMap((key) => plan.options[key] ?? []);
}
