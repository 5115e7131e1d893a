/**
 * `quantd eval [QUANTIZED] --reference MODEL --text FILE`: perplexity of the reference (a float
 * Hugging Face folder) and of a quantized model quantd wrote (GGUF, an ONNX decoder, or a model
 * folder in any safetensors layout), the KL divergence between their next-token distributions,
 * top-1 agreement and each layer's output error, on windows of a text. Without QUANTIZED, the
 * reference's perplexity alone. A table on stderr; the JSON report with --report FILE or --json.
 */
import { availableParallelism } from 'node:os';

import { QuantdError } from '../errors/index.js';
import { writeFileAtomic } from '../format/file-io.js';
import { createCompute } from '../pool/index.js';
import { evaluate, type EvalReport } from '../service/eval/evaluate.js';
import { readHfFolder } from '../service/layouts/gguf-hf/folder.js';
import { decoderSpec } from '../service/decoder/spec.js';
import { loadTokenizer } from '../service/load-tokenizer.js';
import type { ParsedCommand } from './args.js';
import type { Io } from './io.js';
import { ProgressReporter } from './progress.js';

function positiveInt(values: ParsedCommand['values'], flag: string, fallback?: number): number | undefined {
  const raw = values[flag] as string | undefined;
  if (raw === undefined) return fallback;
  const n = /^\d+$/.test(raw) ? Number(raw) : NaN;
  if (!Number.isSafeInteger(n) || n < 1) {
    throw new QuantdError('OPTION_INVALID', {
      option: flag,
      detail: 'must be a positive integer',
      value: raw,
    });
  }
  return n;
}

const fixed = (x: number, digits: number): string => x.toFixed(digits);

export function renderEval(r: EvalReport): string {
  const s = r.summary;
  const lines = [
    `reference  ${r.reference.run}: PPL ${fixed(s.reference.perplexity, 4)} (NLL ${fixed(s.reference.nll.mean, 5)} ± ${fixed(s.reference.nll.se, 5)})`,
  ];
  const q = s.quantized;
  if (q !== undefined && r.quantized !== null) {
    lines.push(
      `quantized  ${r.quantized.run}: PPL ${fixed(q.perplexity, 4)} (NLL ${fixed(q.nll.mean, 5)} ± ${fixed(q.nll.se, 5)})`,
      `PPL ratio  ${fixed(q.perplexityRatio, 5)}; NLL difference ${q.nllDifference.mean >= 0 ? '+' : ''}${fixed(q.nllDifference.mean, 5)} ± ${fixed(q.nllDifference.se, 5)} (z ${fixed(q.nllDifference.z, 1)}, paired over windows)`,
      `KL divergence  mean ${fixed(q.kld.mean, 6)} ± ${fixed(q.kld.se, 6)}, median ${fixed(q.kld.median, 6)}, p99 ${fixed(q.kld.p99, 5)}, max ${fixed(q.kld.max, 5)}`,
      `top-1 agreement  ${fixed(100 * q.top1Agreement, 2)} %`,
    );
  }
  if (r.layers !== null) {
    lines.push(
      `layer output error (relative RMS): ${r.layers.map((l) => `${l.layer} ${l.relative_rmse.toPrecision(3)}`).join(', ')}`,
    );
  }
  lines.push(
    `${s.windows} windows of ${r.text.seq_len} tokens from ${r.text.path} (${s.tokens} tokens scored), ${fixed(r.seconds, 1)} s`,
  );
  return lines.join('\n');
}

export async function evalCommand(parsed: ParsedCommand, io: Io): Promise<void> {
  const reference = parsed.values['reference'] as string | undefined;
  const text = parsed.values['text'] as string | undefined;
  if (reference === undefined || text === undefined) {
    throw new QuantdError('USAGE', {
      detail: 'quantd eval needs --reference MODEL_FOLDER (the float model) and --text FILE (.txt or .jsonl)',
    });
  }
  if (parsed.positionals.length > 1) {
    throw new QuantdError('USAGE', {
      detail: 'quantd eval takes at most one model to compare with the reference',
    });
  }
  const quantized = parsed.positionals[0] ?? null;
  const seqLen = positiveInt(parsed.values, 'seq-len', 512)!;
  const folder = await readHfFolder(reference);
  const spec = decoderSpec(folder.config, `${reference}/config.json`);
  if (seqLen > spec.h.context) {
    throw new QuantdError('OPTION_INVALID', {
      option: 'seq-len',
      detail: `is longer than the model's context (max_position_embeddings ${spec.h.context})`,
      value: String(seqLen),
    });
  }
  const tokenizer = await loadTokenizer(reference);
  const quiet = parsed.values['quiet'] === true;
  const progress =
    io.progress && !quiet && !parsed.values['no-progress'] ? new ProgressReporter(io.progress, 'eval') : null;
  const handle = createCompute();
  let report: EvalReport;
  try {
    report = await evaluate(
      quantized,
      reference,
      text,
      spec.h.layers,
      {
        seqLen,
        maxWindows: positiveInt(parsed.values, 'windows'),
        layerWindows: positiveInt(parsed.values, 'layer-windows', 4),
        threads: positiveInt(parsed.values, 'threads', availableParallelism()),
        onProgress: (done, total) =>
          progress?.update({
            tensorsDone: done,
            tensorsTotal: total,
            bytesDone: 0,
            bytesTotal: 0,
            unit: 'windows',
          }),
      },
      { compute: handle.compute, encoding: handle.encoding(), tokenizer },
    );
  } finally {
    progress?.done();
    await handle.close();
  }
  const json = `${JSON.stringify(report, null, 2)}\n`;
  const reportPath = parsed.values['report'] as string | undefined;
  if (reportPath !== undefined) await writeFileAtomic(reportPath, json);
  if (parsed.values['json'] === true) io.stdout(json.trimEnd());
  if (!quiet) io.stderr(renderEval(report));
}
