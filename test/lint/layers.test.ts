/**
 * The import rules of eslint-rules/layers.js, through ESLint itself with the repository's
 * configuration: an import up the layers or across sibling layers is an error, one down is not;
 * and the sources as they are break neither rule (`npm run lint` checks the same on CI).
 */
import { ESLint } from 'eslint';
import { describe, expect, it } from 'vitest';

const ROOT = new URL('../../', import.meta.url).pathname;
const eslint = new ESLint({ cwd: ROOT });

async function layerMessages(filePath: string, code: string): Promise<string[]> {
  const [result] = await eslint.lintText(code, { filePath });
  return result!.messages.filter((m) => m.ruleId?.startsWith('quantd/')).map((m) => m.message);
}

describe('quantd/layers', () => {
  it.each([
    [
      'src/core/probe.ts',
      "import type { Compute } from '../service/compute.js';\nexport type P = Compute;\n",
      /src\/service is a higher layer/,
    ],
    [
      'src/kernels/probe.ts',
      "import { JobManager } from '../jobs/manager.js';\nexport const p = JobManager;\n",
      /src\/jobs is a higher layer/,
    ],
    [
      'src/grpc/probe.ts',
      "import { asQuantdError } from '../http/problem.js';\nexport const p = asQuantdError;\n",
      /src\/http is a sibling layer/,
    ],
    [
      'workers/probe.ts',
      "import { startServer } from '../src/server/serve.js';\nexport const p = startServer;\n",
      /src\/server is a higher layer/,
    ],
  ])('%s importing up or across is an error', async (file, code, message) => {
    const messages = await layerMessages(file, code);
    expect(messages.length, messages.join('\n')).toBe(1);
    expect(messages[0]).toMatch(message);
  });

  it('an import down the layers is fine', async () => {
    expect(
      await layerMessages(
        'src/service/probe.ts',
        "import { QuantdError } from '../errors/index.js';\nexport const p = QuantdError;\n",
      ),
    ).toEqual([]);
  });

  it('the sources as they are: no rule broken', async () => {
    const results = await eslint.lintFiles(['src', 'workers']);
    const broken = results.flatMap((r) =>
      r.messages.filter((m) => m.ruleId?.startsWith('quantd/')).map((m) => `${r.filePath}: ${m.message}`),
    );
    expect(broken).toEqual([]);
  }, 120_000);
});
