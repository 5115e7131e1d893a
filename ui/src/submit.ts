/**
 * Submitting a job: a model from the data directory (its path) or a file uploaded from this
 * computer, and what to do with it — a preset, custom spec options, or a recipe. The API checks
 * everything; its answer is shown beside the field it names (problem `params.option`), or above
 * the form.
 */
import { ApiError, call, sendJson } from './api';
import { h } from './dom';
import type { Job } from './types';

interface Preset {
  readonly label: string;
  readonly params: Readonly<Record<string, string>>;
}

export const PRESETS: readonly Preset[] = [
  {
    label: 'int8 per_channel (symmetric)',
    params: { qdtype: 'int8', scheme: 'per_channel', mode: 'symmetric' },
  },
  { label: 'int8 per_tensor', params: { qdtype: 'int8', scheme: 'per_tensor' } },
  { label: 'int4 per_group g128', params: { qdtype: 'int4', scheme: 'per_group', group_size: '128' } },
  { label: 'int4 per_group g32', params: { qdtype: 'int4', scheme: 'per_group', group_size: '32' } },
  { label: 'uint8 per_tensor (affine)', params: { qdtype: 'uint8', scheme: 'per_tensor', mode: 'affine' } },
  // layouts: files other tools load (no quality report; op quantize, no other option)
  { label: 'GGUF Q8_0 (llama.cpp)', params: { layout: 'gguf:type=Q8_0' } },
  { label: 'GGUF Q4_K (llama.cpp)', params: { layout: 'gguf:type=Q4_K' } },
  { label: 'GPTQ 4-bit g128 (vLLM, transformers)', params: { layout: 'gptq' } },
  { label: 'bitsandbytes NF4', params: { layout: 'nf4' } },
  { label: 'Custom options (below)', params: {} },
];

/** The field an error is about, for codes that name no `option`; MODEL: the chosen model field. */
const FIELD_OF_CODE: Readonly<Record<string, string>> = {
  UNKNOWN_QDTYPE: 'qdtype',
  UNKNOWN_SCHEME: 'scheme',
  UNKNOWN_MODE: 'mode',
  MODE_UNSUPPORTED: 'mode',
  GROUP_SIZE_INVALID: 'group_size',
  AXIS_OUT_OF_RANGE: 'axis',
  RECIPE_INVALID: 'recipe',
  RECIPE_RULE_FAILED: 'recipe',
  FILE_NOT_FOUND: 'MODEL',
  FILE_UNREADABLE: 'MODEL',
  PATH_FORBIDDEN: 'MODEL',
  FILE_NOT_SAFETENSORS: 'MODEL',
  SAFETENSORS_INVALID: 'MODEL',
  SAFETENSORS_TRUNCATED: 'MODEL',
  HF_MODEL_INVALID: 'MODEL',
};

/** The spec options the custom fields offer; the names are the API's. */
const CUSTOM = ['qdtype', 'scheme', 'mode', 'group_size', 'axis', 'include', 'exclude'] as const;

export function renderSubmit(container: HTMLElement, done: (job: Job) => void): void {
  const problem = h('div', { className: 'message', role: 'alert', id: 'submit-problem' });
  const errors = new Map<string, HTMLElement>();
  const field = (name: string, label: string, control: HTMLElement, hint?: string): HTMLElement => {
    const error = h('span', { className: 'field-error', id: `error-${name}` });
    errors.set(name, error);
    control.setAttribute('aria-describedby', `error-${name}`);
    return h(
      'div',
      { className: 'field', 'data-field': name },
      h('label', { for: control.id }, label),
      control,
      hint && h('small', {}, hint),
      error,
    );
  };
  const fromPath = h('input', {
    type: 'radio',
    name: 'source',
    value: 'path',
    id: 'source-path',
    checked: true,
  });
  const fromFile = h('input', { type: 'radio', name: 'source', value: 'file', id: 'source-file' });
  const path = h('input', {
    type: 'text',
    id: 'input',
    name: 'input',
    placeholder: 'models/llama/model.safetensors',
  });
  const file = h('input', { type: 'file', id: 'file', name: 'file', accept: '.safetensors' });
  const op = h(
    'select',
    { id: 'op', name: 'op' },
    ...['quantize', 'qparams', 'fake-quantize', 'dequantize'].map((o) => h('option', { value: o }, o)),
  );
  const preset = h(
    'select',
    { id: 'preset', name: 'preset' },
    ...PRESETS.map((p, i) => h('option', { value: String(i) }, p.label)),
  );
  const custom = Object.fromEntries(
    CUSTOM.map((name) => [name, h('input', { type: 'text', id: name, name })]),
  ) as Record<(typeof CUSTOM)[number], HTMLInputElement>;
  const recipe = h('textarea', {
    id: 'recipe',
    name: 'recipe',
    rows: 5,
    placeholder: '{"default": "int8 per_channel", "rules": [...]}',
  });
  const submit = h('button', { type: 'submit' }, 'Submit job');
  const form = h(
    'form',
    { id: 'submit-form', novalidate: true },
    problem,
    h(
      'fieldset',
      {},
      h('legend', {}, 'Model'),
      h(
        'div',
        { className: 'choice' },
        fromPath,
        h('label', { for: 'source-path' }, 'A path in the server’s data directory'),
      ),
      field('input', 'Path', path, 'a .safetensors file, a shard index or a model folder'),
      h(
        'div',
        { className: 'choice' },
        fromFile,
        h('label', { for: 'source-file' }, 'Upload a .safetensors file'),
      ),
      field('file', 'File', file),
    ),
    h(
      'fieldset',
      {},
      h('legend', {}, 'What to do'),
      field('op', 'Operation', op),
      field('preset', 'Preset', preset),
      h(
        'details',
        {},
        h('summary', {}, 'Custom options'),
        ...CUSTOM.map((name) => field(name, name, custom[name])),
      ),
      field('recipe', 'Recipe (JSON, optional: per-tensor rules instead of one spec)', recipe),
    ),
    submit,
  );
  const clearErrors = (): void => {
    problem.textContent = '';
    for (const [name, error] of errors) {
      error.textContent = '';
      container.querySelector(`#${name}`)?.removeAttribute('aria-invalid');
    }
  };
  const show = (err: unknown): void => {
    if (!(err instanceof ApiError)) {
      problem.textContent = String(err);
      return;
    }
    let option = typeof err.params['option'] === 'string' ? err.params['option'] : FIELD_OF_CODE[err.code];
    if (option === 'MODEL') option = fromFile.checked ? 'file' : 'input';
    const at = option !== undefined ? errors.get(option) : undefined;
    if (at) {
      at.textContent = `${err.code}: ${err.detail}`;
      const control = container.querySelector<HTMLElement>(`#${option}`);
      const details = control?.closest('details');
      if (details) details.open = true;
      control?.setAttribute('aria-invalid', 'true');
      control?.focus();
    } else {
      problem.textContent = `${err.code}: ${err.detail}`;
    }
  };
  form.addEventListener('submit', (event) => {
    event.preventDefault();
    clearErrors();
    const params: Record<string, string> = { ...PRESETS[Number(preset.value)]!.params };
    for (const name of CUSTOM) if (custom[name].value.trim() !== '') params[name] = custom[name].value.trim();
    let recipeValue: unknown;
    if (recipe.value.trim() !== '') {
      try {
        recipeValue = JSON.parse(recipe.value);
      } catch (err) {
        errors.get('recipe')!.textContent = `not JSON: ${(err as Error).message}`;
        recipe.setAttribute('aria-invalid', 'true');
        recipe.focus();
        return;
      }
    }
    submit.disabled = true;
    const sending = fromFile.checked
      ? upload(file, op.value, params, recipe.value.trim())
      : sendJson<Job>('/v1/jobs', 'POST', {
          input: path.value,
          op: op.value,
          params,
          ...(recipeValue !== undefined && { recipe: recipeValue }),
        });
    sending.then(done, show).finally(() => {
      submit.disabled = false;
    });
  });
  container.replaceChildren(h('h2', {}, 'Submit a job'), form);
}

async function upload(
  input: HTMLInputElement,
  op: string,
  params: Record<string, string>,
  recipe: string,
): Promise<Job> {
  const chosen = input.files?.[0];
  if (!chosen) throw new ApiError(400, 'USAGE', 'choose a file to upload', { option: 'file' });
  const query = new URLSearchParams({ op, ...params, ...(recipe !== '' && { recipe }) });
  const response = await call(`/v1/jobs?${query}`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/x-safetensors' },
    body: chosen,
  });
  return (await response.json()) as Job;
}
