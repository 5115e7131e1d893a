/**
 * The optional inference engines for the tests that run a model: a test file that needs one
 * skips when it is not installed, except under CI (CI=1), where a missing engine fails the test
 * (CI installs them: they are optional dependencies of the package).
 */
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);

function installed(name: string): boolean {
  try {
    require.resolve(name);
    return true;
  } catch {
    return false;
  }
}

export const HAVE_ONNXRUNTIME = installed('onnxruntime-node') || Boolean(process.env['CI']);
export const HAVE_LLAMA_CPP = installed('node-llama-cpp') || Boolean(process.env['CI']);
