/** One encode task on the worker pool for calibration's own use (GPTQ's solve, AWQ's searches). */
import type { EncodeTask, EncoderCall } from '../../kernels/encoders.js';
import type { CalibrationContext } from './context.js';

/** Runs `call` on copies of `inputs` into outputs of the given sizes; returns them and the notes. */
export async function encodeOnPool(
  ctx: CalibrationContext,
  call: EncoderCall,
  inputs: readonly Uint8Array[],
  outputBytes: readonly number[],
): Promise<[Uint8Array[], readonly string[]]> {
  const buffer = (n: number): Uint8Array =>
    ctx.encoding.shared ? new Uint8Array(new SharedArrayBuffer(n)) : new Uint8Array(n);
  const taskInputs = inputs.map((b) => {
    const copy = buffer(b.byteLength);
    copy.set(b);
    return copy;
  });
  const outputs = outputBytes.map(buffer);
  const task: EncodeTask = { op: 'encode', call, inputs: taskInputs, outputs };
  const reply = await ctx.encoding.encode(task, ctx.signal);
  return [outputs, reply.notes];
}
