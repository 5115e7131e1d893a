/**
 * A request as transports receive it — operation name plus options in snake_case (the CLI's
 * options; HTTP query parameters, gRPC fields) — turned into an OperationRequest. Unknown options are
 * rejected rather than ignored: a misspelt `qdtpye=int4` must not quietly give int8.
 */
import { SPEC_OPTION_NAMES, parseEnumOption, parseSpec, type SpecOptions } from '../core/index.js';
import { QuantdError } from '../errors/index.js';
import { OPERATION_OPTION_ROWS, OUTPUT_DTYPE_ROW, RECIPE_OPTION_NAMES } from './options.js';
import type { Operation, OperationRequest } from './plan.js';
import { combineRecipe, type Recipe } from './recipe.js';

export type RequestParams = Readonly<Record<string, string | number | readonly string[] | undefined>>;

/** The option names an operation takes (options.ts), in the order messages list them. */
function optionsOf(op: Operation): string[] {
  return OPERATION_OPTION_ROWS[op].map((row) => row.name);
}

/** One value of a parameter; repeated parameters are an error except include/exclude. */
function single(params: RequestParams, key: string): string | number | undefined {
  const value = params[key];
  if (Array.isArray(value)) {
    if (value.length > 1) {
      throw new QuantdError('OPTION_INVALID', {
        option: key,
        detail: 'is given more than once',
        value: value.join(', '),
      });
    }
    return value[0];
  }
  return value as string | number | undefined;
}

function list(params: RequestParams, key: string): string[] {
  const value = params[key];
  if (value === undefined || value === '') return [];
  const items = Array.isArray(value) ? value : [String(value)];
  return items.filter((v) => v !== '');
}

export function operationRequest(op: Operation, params: RequestParams): OperationRequest {
  const allowed = optionsOf(op);
  for (const key of Object.keys(params)) {
    if (params[key] !== undefined && !allowed.includes(key)) {
      throw new QuantdError('OPTION_INVALID', {
        option: key,
        detail: `is not an option of ${op} (options: ${allowed.join(', ')})`,
        value: String(params[key]),
      });
    }
  }
  const specOptions: SpecOptions = {};
  for (const key of SPEC_OPTION_NAMES) {
    const value = single(params, key);
    if (value !== undefined && value !== '') (specOptions as Record<string, string | number>)[key] = value;
  }
  const dtype = parseEnumOption(
    OUTPUT_DTYPE_ROW,
    String(single(params, 'dtype') ?? OUTPUT_DTYPE_ROW.default),
  );
  const recipe = op === 'dequantize' ? undefined : recipeOf(params, specOptions);
  return {
    op,
    spec: recipe?.defaultSpec ?? parseSpec(op === 'dequantize' || recipe ? {} : specOptions),
    recipe,
    outDType: dtype,
    include: list(params, 'include'),
    exclude: list(params, 'exclude'),
  };
}

function flag(params: RequestParams, key: string): boolean | undefined {
  const value = single(params, key);
  if (value === undefined || value === '') return undefined;
  if (String(value) === 'true' || String(value) === '1') return true;
  if (String(value) === 'false' || String(value) === '0') return false;
  throw new QuantdError('OPTION_INVALID', {
    option: key,
    detail: 'must be true or false',
    value: String(value),
  });
}

/** The recipe the parameters describe, or undefined when they name none. */
function recipeOf(params: RequestParams, defaults: SpecOptions): Recipe | undefined {
  if (!RECIPE_OPTION_NAMES.some((k) => params[k] !== undefined && params[k] !== '')) return undefined;
  const text = single(params, 'recipe');
  const minSize = single(params, 'min_size');
  const keep1d = flag(params, 'keep_1d');
  if (minSize !== undefined && !/^\d+$/.test(String(minSize))) {
    throw new QuantdError('OPTION_INVALID', {
      option: 'min_size',
      detail: 'must be a whole number',
      value: String(minSize),
    });
  }
  return combineRecipe({
    recipe: text === undefined || text === '' ? undefined : parseRecipeJson(String(text)),
    defaults,
    rules: list(params, 'rule'),
    skip: list(params, 'skip'),
    ...(minSize !== undefined && { minSize: Number(minSize) }),
    ...(keep1d !== undefined && { skip1d: !keep1d }),
  });
}

function parseRecipeJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch (err) {
    throw new QuantdError('RECIPE_INVALID', {
      where: '(parameter recipe)',
      detail: `is not valid JSON: ${(err as Error).message}`,
    });
  }
}
