/**
 * A calibration recipe: which observer watches which activation tensor.
 *
 *   { "observers": [ { "match": "*.mlp.down_proj.input", "observer": { "kind": "histogram" } },
 *                    { "regex": "\\.input$", "observer": { "kind": "moving_average_min_max" } },
 *                    { "match": "*_proj.input", "statistics": "linear" } ] }
 *
 * Rules are tried in order and the first that matches a tensor's name gives its observer, its
 * linear-layer statistics (`"statistics": "linear"`: the input Hessian and mean |x| that GPTQ
 * reads, core/linear-stats.ts), or both; a batch's tensors that no rule matches are ignored (and
 * reported). Globs and regexes match in
 * linear time (name-patterns.ts), as in quantize recipes.
 */
import { observerConfig, type ObserverConfig, type ObserverOptions } from '../../core/observers/index.js';
import { QuantdError, isQuantdError } from '../../errors/index.js';
import { UnusablePattern, linearGlob, linearRegex } from '../name-patterns.js';
import { binsProblem, OFFLINE_LIMITS, type CalibrationLimits } from './limits.js';

export interface CalibrationRule {
  /** As the recipe writes it: `match GLOB` or `regex RE`. */
  readonly label: string;
  readonly test: (name: string) => boolean;
  /** Its observer, if any. */
  readonly config: ObserverConfig | null;
  /** Whether it gathers linear-layer statistics. */
  readonly statistics: boolean;
}

export interface CalibrationRecipe {
  /** The recipe as given (what a session persists and exports). */
  readonly json: unknown;
  readonly rules: readonly CalibrationRule[];
}

export const MAX_CALIBRATION_RULES = 256;

function invalid(where: string, detail: string): QuantdError {
  return new QuantdError('RECIPE_INVALID', { where, detail });
}

/** `limits`: a server's (a histogram's bins are checked here, before any session exists). */
export function parseCalibrationRecipe(
  value: unknown,
  limits: CalibrationLimits = OFFLINE_LIMITS,
): CalibrationRecipe {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    throw invalid('(top level)', 'a calibration recipe is a JSON object {"observers": [ … ]}');
  }
  const unknown = Object.keys(value).filter((k) => k !== 'observers');
  if (unknown.length > 0) throw invalid('(top level)', `unknown field ${unknown[0]}`);
  const list = (value as { observers?: unknown }).observers;
  if (!Array.isArray(list) || list.length === 0) {
    throw invalid(
      'observers',
      'must be a non-empty array of {"match" | "regex", "observer" and/or "statistics"} rules',
    );
  }
  if (list.length > MAX_CALIBRATION_RULES) {
    throw invalid('observers', `holds ${list.length} rules; at most ${MAX_CALIBRATION_RULES}`);
  }
  const rules = list.map((rule: unknown, i): CalibrationRule => {
    const where = `observers[${i}]`;
    if (rule === null || typeof rule !== 'object' || Array.isArray(rule))
      throw invalid(where, 'must be an object');
    const r = rule as { match?: unknown; regex?: unknown; observer?: unknown; statistics?: unknown };
    const extra = Object.keys(r).filter((k) => !['match', 'regex', 'observer', 'statistics'].includes(k));
    if (extra.length > 0) throw invalid(where, `unknown field ${extra[0]}`);
    if ((r.match === undefined) === (r.regex === undefined)) {
      throw invalid(where, 'needs exactly one of "match" (a glob) and "regex"');
    }
    const kind = r.match !== undefined ? 'match' : 'regex';
    const pattern = r.match ?? r.regex;
    if (typeof pattern !== 'string' || pattern === '')
      throw invalid(where, `${kind} must be a non-empty string`);
    let test: (name: string) => boolean;
    try {
      test = kind === 'regex' ? linearRegex(pattern) : linearGlob(pattern);
    } catch (err) {
      if (err instanceof UnusablePattern)
        throw invalid(where, `${kind} ${JSON.stringify(pattern)} ${err.message}`);
      throw err;
    }
    if (r.statistics !== undefined && r.statistics !== 'linear') {
      throw invalid(
        `${where}.statistics`,
        'must be "linear" (the input Hessian and mean |x| of a linear layer)',
      );
    }
    if (r.observer === undefined && r.statistics === undefined) {
      throw invalid(where, 'needs "observer", "statistics" or both');
    }
    let config: ObserverConfig | null = null;
    try {
      if (r.observer !== undefined) config = observerConfig(r.observer as ObserverOptions);
    } catch (err) {
      if (isQuantdError(err)) throw invalid(`${where}.observer`, err.message);
      throw err;
    }
    const tooLarge = config && binsProblem(config, limits);
    if (tooLarge) throw invalid(`${where}.observer`, tooLarge);
    return { label: `${kind} ${pattern}`, test, config, statistics: r.statistics === 'linear' };
  });
  return { json: value, rules };
}

/** The rule that gives `name` its observer, if any. */
export function ruleFor(recipe: CalibrationRecipe, name: string): CalibrationRule | undefined {
  return recipe.rules.find((rule) => rule.test(name));
}
