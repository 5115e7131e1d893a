/**
 * Errors as a server's clients see them: no absolute path of the server's file system. Where a
 * server keeps its files is its own business (and a map for an attacker), so an error that
 * names one — FILE_UNREADABLE, STORAGE_FULL, OUTPUT_UNWRITABLE, a system message quoted in a
 * detail — says it relative to the data directory (`jobs/ID/result/model.safetensors`, `.` for
 * the directory itself), or by the file's name when it lies elsewhere. The CLI does not use
 * this: on the command line the paths are the user's own, and shown in full.
 *
 * The HTTP and gRPC transports apply it where they turn an error into an answer.
 */
import { realpathSync } from 'node:fs';
import { resolve, sep } from 'node:path';
import { QuantdError, type ErrorParams } from '../errors/index.js';

/** Errors about the server's own files, and their parameters that hold a path. */
const SERVER_FILE_ERRORS: ReadonlySet<string> = new Set([
  'FILE_UNREADABLE',
  'STORAGE_FULL',
  'OUTPUT_UNWRITABLE',
]);
const PATH_PARAMS: ReadonlySet<string> = new Set(['path', 'source', 'file']);

/** An absolute path quoted in a system message: `open '/srv/data/x'`. */
const QUOTED_ABSOLUTE = /'(\/[^']*)'/g;

/** The last component of an absolute path (a path of `/` only stays as it is). */
function nameOf(path: string): string {
  const trimmed = path.replace(/\/+$/, '');
  const name = trimmed.slice(trimmed.lastIndexOf('/') + 1);
  return name === '' ? path : name;
}

/** The rewriting of every error a server sends, for a server whose data directory is `dataDir`. */
export function errorsForClients(dataDir: string): (error: QuantdError) => QuantdError {
  const roots = new Set([resolve(dataDir)]);
  try {
    roots.add(realpathSync(dataDir)); // inputs are resolved through symlinks
  } catch {
    // not there yet: the server creates it
  }
  // longest first, so that a root inside another is taken whole
  const ordered = [...roots].sort((a, b) => b.length - a.length);
  const relativeText = (text: string): string => {
    let out = text;
    for (const root of ordered) {
      out = out.split(root + sep).join('');
      out = out.replace(new RegExp(`(^|[\\s'"(])${escapeRegex(root)}(?=$|[\\s'",:;)])`, 'g'), '$1.');
    }
    return out.replace(QUOTED_ABSOLUTE, (_m, path: string) => `'${nameOf(path)}'`);
  };
  return (error) => {
    let changed = false;
    const params: Record<string, ErrorParams[string]> = {};
    const aboutServerFiles = SERVER_FILE_ERRORS.has(error.code);
    for (const [key, value] of Object.entries(error.params)) {
      let shown = value;
      if (typeof value === 'string') {
        shown = relativeText(value);
        // outside the data directory: the file's name is all a client needs
        if (aboutServerFiles && PATH_PARAMS.has(key) && shown.startsWith('/')) shown = nameOf(shown);
      }
      changed ||= shown !== value;
      params[key] = shown;
    }
    return changed ? new QuantdError(error.code, params) : error;
  };
}

function escapeRegex(text: string): string {
  return text.replace(/[\\^$.|?*+()[\]{}]/g, '\\$&');
}
