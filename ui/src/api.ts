/**
 * The console's one way to the API: fetch with the API key the user entered (kept in
 * sessionStorage: once per tab session, gone when the tab closes), problem+json turned into
 * ApiError with its catalogue code, and the live job stream read from GET /v1/jobs/events.
 * EventSource cannot send an Authorization header, so the stream is read with fetch.
 */
import type { Job, JobEvent } from './types';

const KEY_ITEM = 'quantd.apiKey';

export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    readonly detail: string,
    readonly params: Record<string, unknown> = {},
  ) {
    super(`${code}: ${detail}`);
  }
}

export const apiKey = (): string | null => sessionStorage.getItem(KEY_ITEM);
export const setApiKey = (key: string | null): void =>
  key === null || key === '' ? sessionStorage.removeItem(KEY_ITEM) : sessionStorage.setItem(KEY_ITEM, key);

/** Told when the server answers 401 (no key, or a wrong one): the shell asks for a key. */
let onUnauthorized: (error: ApiError) => void = () => {};
export const whenUnauthorized = (listener: (error: ApiError) => void): void => {
  onUnauthorized = listener;
};

function headersWith(init: HeadersInit | undefined): Headers {
  const headers = new Headers(init);
  const key = apiKey();
  if (key !== null) headers.set('Authorization', `Bearer ${key}`);
  return headers;
}

async function errorOf(response: Response): Promise<ApiError> {
  let problem: { code?: string; detail?: string; title?: string; params?: Record<string, unknown> } = {};
  try {
    problem = (await response.json()) as typeof problem;
  } catch {
    // not a problem document (a proxy's page): the status says what there is to say
  }
  return new ApiError(
    response.status,
    problem.code ?? `HTTP_${response.status}`,
    problem.detail ?? problem.title ?? response.statusText,
    problem.params ?? {},
  );
}

/** A request to the API; a response other than 2xx rejects with its ApiError. */
export async function call(path: string, init: RequestInit = {}): Promise<Response> {
  const response = await fetch(path, { ...init, headers: headersWith(init.headers) });
  if (response.ok) return response;
  const error = await errorOf(response);
  if (response.status === 401) onUnauthorized(error);
  throw error;
}

export const getJson = async <T>(path: string): Promise<T> => (await call(path)).json() as Promise<T>;

export function sendJson<T>(path: string, method: string, body: unknown): Promise<T> {
  return call(path, {
    method,
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify(body),
  }).then((r) => r.json() as Promise<T>);
}

/**
 * Saves a result file. Without a key the browser fetches it itself, straight to disk, whatever
 * its size; with one (a plain link cannot send the Authorization header) the file is fetched
 * here and handed over as a blob, which holds it in the browser's memory first — for results of
 * many gigabytes, use curl or `quantd … --remote` instead.
 */
export async function download(path: string, fallbackName: string): Promise<void> {
  const link = document.createElement('a');
  if (apiKey() === null) {
    link.href = path;
    link.download = fallbackName;
    link.click();
    return;
  }
  const response = await call(path);
  const disposition = response.headers.get('Content-Disposition') ?? '';
  const url = URL.createObjectURL(await response.blob());
  link.href = url;
  link.download = /filename="([^"]+)"/.exec(disposition)?.[1] ?? fallbackName;
  link.click();
  setTimeout(() => URL.revokeObjectURL(url), 10_000);
}

/**
 * Follows GET /v1/jobs/events until `signal` aborts, reconnecting after a dropped stream (the
 * first event of each connection is a snapshot, so nothing is missed). `onStatus` tells whether
 * the stream is live, for the page to say so.
 */
export async function followJobs(
  onSnapshot: (jobs: Job[]) => void,
  onEvent: (event: JobEvent) => void,
  onStatus: (live: boolean, error?: ApiError) => void,
  signal: AbortSignal,
): Promise<void> {
  let delay = 500;
  while (!signal.aborted) {
    try {
      const response = await call('/v1/jobs/events', { signal, headers: { Accept: 'text/event-stream' } });
      onStatus(true);
      delay = 500;
      await readEvents(response, signal, (event, data) => {
        if (event === 'snapshot') onSnapshot((JSON.parse(data) as { jobs: Job[] }).jobs);
        else if (event === 'job') onEvent({ job: JSON.parse(data) as Job });
        else if (event === 'removed') onEvent({ removed: (JSON.parse(data) as { id: string }).id });
      });
    } catch (err) {
      if (signal.aborted) return;
      onStatus(false, err instanceof ApiError ? err : undefined);
      if (err instanceof ApiError && err.status === 401) return; // the shell asks for a key
    }
    if (signal.aborted) return;
    onStatus(false);
    await new Promise((resolve) => setTimeout(resolve, delay));
    delay = Math.min(delay * 2, 10_000);
  }
}

/** Parses a text/event-stream body: `event:` and `data:` lines, events ended by a blank line. */
async function readEvents(
  response: Response,
  signal: AbortSignal,
  onEvent: (event: string, data: string) => void,
): Promise<void> {
  const reader = response.body!.pipeThrough(new TextDecoderStream()).getReader();
  signal.addEventListener('abort', () => void reader.cancel(), { once: true });
  let buffer = '';
  for (;;) {
    const { done, value } = await reader.read();
    if (done) return;
    buffer += value;
    let end: number;
    while ((end = buffer.indexOf('\n\n')) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      let event = 'message';
      const data: string[] = [];
      for (const line of block.split('\n')) {
        if (line.startsWith('event:')) event = line.slice(6).trim();
        else if (line.startsWith('data:')) data.push(line.slice(5).trimStart());
      }
      if (data.length > 0) onEvent(event, data.join('\n'));
    }
  }
}
