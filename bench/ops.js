// The benchmarked operations: each prepares its input once and runs on every backend. A backend
// is a Compute (src/service/compute.ts): the TypeScript reference, or kernel tasks run inline
// on the native or WebAssembly kernels, or on the worker pool.
import { chooseQParams, parseSpec, planLayout, quantize } from '../dist/src/core/index.js';
import { referenceCompute } from '../dist/src/service/index.js';

/** Deterministic floats with a spread of magnitudes (xorshift32). */
export function randomFloats(numel, seed = 1) {
  const x = new Float32Array(numel);
  let s = seed >>> 0;
  for (let i = 0; i < numel; i++) {
    s ^= s << 13;
    s ^= s >>> 17;
    s ^= s << 5;
    x[i] = ((s >>> 0) / 4294967296 - 0.5) * 6 * ((i % 7) + 1);
  }
  return x;
}

const bytesOf = (x) => new Uint8Array(x.buffer, x.byteOffset, x.byteLength);

/** bfloat16 bytes of x (truncated: the bench needs representative data, not exact rounding), shared like x. */
function bf16Bytes(x) {
  const bits = new Uint32Array(x.buffer, x.byteOffset, x.length);
  const Buffer = x.buffer instanceof SharedArrayBuffer ? SharedArrayBuffer : ArrayBuffer;
  const out = new Uint16Array(new Buffer(x.length * 2));
  for (let i = 0; i < x.length; i++) out[i] = bits[i] >>> 16;
  return new Uint8Array(out.buffer);
}

function input(x, shape, spec) {
  return { name: 'x', dtype: 'float32', data: bytesOf(x), layout: planLayout('x', shape, spec) };
}

/**
 * Ops over a tensor of `numel` float32 elements. Each op: name, bytes of float32 it processes,
 * and run(compute) → Promise.
 */
export function benchOps(numel, { shared = false } = {}) {
  const x = randomFloats(numel);
  if (shared) {
    // inputs as the service's sources hand them to the pool: in shared memory
    const copy = new Float32Array(new SharedArrayBuffer(x.byteLength));
    copy.set(x);
    return benchOpsOn(copy);
  }
  return benchOpsOn(x);
}

function benchOpsOn(x) {
  const numel = x.length;
  const rows = 4096;
  const cols = numel / rows;
  const op = (name, options, shape, fn) => {
    const spec = parseSpec(options);
    const inp = input(x, shape, spec);
    const qp = chooseQParams('x', x, inp.layout, spec);
    return { name, inputBytes: numel * 4, run: (compute) => fn(compute, inp, spec, qp) };
  };
  // Each run hands its outputs back, as the service does once it has written them out.
  const done = (c, ...views) => views.forEach((v) => c.release?.(v));
  const given = async (c, inp, spec, qp) => done(c, (await c.quantize(inp, spec, qp)).data);
  const chosen = async (c, inp, spec) => done(c, (await c.quantize(inp, spec)).data);
  const ops = [
    op('quantize per_tensor int8', { qdtype: 'int8' }, [numel], given),
    op('quantize per_channel int8', { qdtype: 'int8', scheme: 'per_channel' }, [rows, cols], given),
    op('choose+quantize per_tensor int8', { qdtype: 'int8' }, [numel], chosen),
    op('choose+quantize per_channel int8', { qdtype: 'int8', scheme: 'per_channel' }, [rows, cols], chosen),
    op(
      'choose+quantize+pack per_group int4 g128',
      { qdtype: 'int4', scheme: 'per_group', group_size: 128, mode: 'symmetric' },
      [rows, cols],
      chosen,
    ),
    op('fake_quantize per_tensor uint8', { qdtype: 'uint8' }, [numel], async (c, inp, spec, qp) => {
      const r = await c.fakeQuantize(inp, spec, 'float32', qp);
      done(c, r.data, r.mask);
    }),
  ];
  // what model runs do: int4 g128 with the quality statistics, and from bfloat16 (half the bytes in)
  const g128 = { qdtype: 'int4', scheme: 'per_group', group_size: 128, mode: 'symmetric' };
  const measured = async (c, inp, spec) =>
    done(c, (await c.quantize(inp, spec, undefined, undefined, { quality: true })).data);
  ops.push(op('choose+quantize+pack+quality per_group int4 g128', g128, [rows, cols], measured));
  {
    const spec = parseSpec(g128);
    const bf16 = bf16Bytes(x);
    const inp = { name: 'x', dtype: 'bfloat16', data: bf16, layout: planLayout('x', [rows, cols], spec) };
    ops.push({
      name: 'choose+quantize+pack+quality per_group int4 g128, bfloat16 in',
      inputBytes: numel * 2,
      run: (c) => measured(c, inp, spec),
    });
  }
  for (const qdtype of ['int8', 'int4']) {
    const spec = parseSpec({ qdtype, scheme: 'per_channel' });
    const layout = planLayout('x', [rows, cols], spec);
    const qp = chooseQParams('x', x, layout, spec);
    const codes = quantize('x', x, layout, spec, qp);
    ops.push({
      name: `dequantize ${qdtype} per_channel -> float32`,
      inputBytes: numel * 4, // counted in float32 bytes, as the targets are
      run: async (c) =>
        done(c, await c.dequantize({ name: 'x', data: codes, spec, layout, qparams: qp }, 'float32')),
    });
  }
  return ops;
}

export { referenceCompute };
