/**
 * `quantd eval`: what a quantization does to the model. The reference (a float model folder) and
 * the quantized model run on the same windows of a text, each on a real engine (./models.ts);
 * their logits give both perplexities, the KL divergence of the quantized model's next-token
 * distribution from the reference's, and top-1 agreement (src/core/eval-metrics.ts); where both
 * run as decoders built here, each layer's output is compared too (relative RMS error).
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';

import type { Compute } from '../../core/compute.js';
import { scoreWindow, summarize, type EvalSummary, type WindowScore } from '../../core/eval-metrics.js';
import { throwIfAborted } from '../../errors/index.js';
import type { Encoding } from '../../kernels/encoders.js';
import { openLogitSource, type LogitSource } from './models.js';
import { readText, windowsOf, type TextTokenizer } from './text.js';

export interface EvalOptions {
  /** Tokens per window (default 512, llama-perplexity's context). */
  readonly seqLen: number;
  /** Evaluate at most this many windows (the first ones). */
  readonly maxWindows?: number | undefined;
  /** Windows whose layer outputs are compared (default 4; 0: none). */
  readonly layerWindows?: number | undefined;
  readonly threads?: number | undefined;
  readonly signal?: AbortSignal | undefined;
  readonly onProgress?: ((done: number, total: number) => void) | undefined;
}

export interface EvalResources {
  readonly compute: Compute;
  readonly encoding: Encoding;
  readonly tokenizer: TextTokenizer;
}

export interface LayerError {
  readonly layer: number;
  /** sqrt(Σ (h_q − h_ref)² / Σ h_ref²) over the compared windows' positions. */
  readonly relative_rmse: number;
}

export interface EvalReport {
  readonly reference: { readonly path: string; readonly run: string };
  readonly quantized: { readonly path: string; readonly run: string } | null;
  readonly text: { readonly path: string; readonly tokens: number; readonly seq_len: number };
  readonly summary: EvalSummary;
  readonly layers: readonly LayerError[] | null;
  readonly seconds: number;
}

/** Per-layer sums of squared differences and squared reference values. */
async function compareLayers(
  reference: LogitSource,
  quantized: LogitSource,
  windows: readonly Int32Array[],
  layers: number,
): Promise<LayerError[] | null> {
  if (!reference.hidden || !quantized.hidden || windows.length === 0) return null;
  const diff = new Float64Array(layers);
  const norm = new Float64Array(layers);
  for (const ids of windows) {
    const [r, q] = [await reference.hidden(ids, layers), await quantized.hidden(ids, layers)];
    for (let l = 0; l < layers; l++) {
      const a = r[l]!;
      const b = q[l]!;
      for (let i = 0; i < a.length; i++) {
        diff[l]! += (b[i]! - a[i]!) ** 2;
        norm[l]! += a[i]! ** 2;
      }
    }
  }
  return Array.from({ length: layers }, (_, l) => ({
    layer: l,
    relative_rmse: norm[l]! > 0 ? Math.sqrt(diff[l]! / norm[l]!) : 0,
  }));
}

export async function evaluate(
  quantizedPath: string | null,
  referencePath: string,
  textPath: string,
  layerCount: number,
  options: EvalOptions,
  resources: EvalResources,
): Promise<EvalReport> {
  const started = performance.now();
  const text = await readText(textPath);
  const { windows: all, tokens } = windowsOf(text, textPath, resources.tokenizer, options.seqLen);
  const windows = options.maxWindows === undefined ? all : all.slice(0, options.maxWindows);
  const work = await mkdtemp(join(tmpdir(), 'quantd-eval-'));
  const sources: LogitSource[] = [];
  try {
    const ctx = {
      reference: referencePath,
      work,
      compute: resources.compute,
      encoding: resources.encoding,
      window: options.seqLen,
      purpose: 'evaluate a model',
      ...(options.threads !== undefined && { threads: options.threads }),
      ...(options.signal !== undefined && { signal: options.signal }),
    };
    const reference = await openLogitSource(referencePath, ctx);
    sources.push(reference);
    const quantized = quantizedPath === null ? null : await openLogitSource(quantizedPath, ctx);
    if (quantized) sources.push(quantized);
    const scores: WindowScore[] = [];
    for (const [i, ids] of windows.entries()) {
      throwIfAborted(options.signal);
      const from = options.seqLen >> 1;
      const r = await reference.logits(ids, from);
      const q = quantized ? await quantized.logits(ids, from) : null;
      scores.push(scoreWindow(ids, r, reference.vocab, q, quantized?.vocab ?? 0, from));
      options.onProgress?.(i + 1, windows.length);
    }
    const layerWindows = windows.slice(0, options.layerWindows ?? 4);
    const layers = quantized ? await compareLayers(reference, quantized, layerWindows, layerCount) : null;
    return {
      reference: { path: referencePath, run: reference.describe },
      quantized: quantized ? { path: quantizedPath!, run: quantized.describe } : null,
      text: { path: basename(textPath), tokens, seq_len: options.seqLen },
      summary: summarize(scores),
      layers,
      seconds: (performance.now() - started) / 1000,
    };
  } finally {
    for (const s of sources) await s.close().catch(() => undefined);
    await rm(work, { recursive: true, force: true });
  }
}
