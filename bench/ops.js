// The benchmarked operations: each prepares its input once and runs on every backend.
import {
  dequantize,
  chooseQParams,
  parseSpec,
  planLayout,
  quantize,
  quantizeValues,
  fakeQuantize,
} from '../dist/src/core/index.js';

function randomFloats(numel, seed = 1) {
  const x = new Float32Array(numel);
  let s = seed >>> 0;
  for (let i = 0; i < numel; i++) {
    // xorshift32, then a cheap approximately normal value (sum of uniforms)
    s ^= s << 13;
    s ^= s >>> 17;
    s ^= s << 5;
    const u = (s >>> 0) / 4294967296;
    x[i] = (u - 0.5) * 6 * ((i % 7) + 1);
  }
  return x;
}

function jsQuantizeOp(name, x, options, shape, { choose = false } = {}) {
  const spec = parseSpec(options);
  const layout = planLayout('x', shape, spec);
  const fixed = chooseQParams('x', x, layout, spec);
  return {
    name,
    inputBytes: x.byteLength,
    backends: [
      {
        name: 'js',
        run: () => quantize('x', x, layout, spec, choose ? chooseQParams('x', x, layout, spec) : fixed),
      },
    ],
  };
}

export function benchOps(numel) {
  const x = randomFloats(numel);
  const rows = 4096;
  const cols = numel / rows;
  const ops = [
    jsQuantizeOp('quantize per_tensor int8', x, { qdtype: 'int8' }, [numel]),
    jsQuantizeOp('choose+quantize per_tensor int8', x, { qdtype: 'int8' }, [numel], { choose: true }),
    jsQuantizeOp('quantize per_channel int8', x, { qdtype: 'int8', scheme: 'per_channel' }, [rows, cols]),
    jsQuantizeOp(
      'choose+quantize+pack per_group int4 g128',
      x,
      { qdtype: 'int4', scheme: 'per_group', group_size: 128, mode: 'symmetric' },
      [rows, cols],
      { choose: true },
    ),
  ];
  for (const qdtype of ['int8', 'int4']) {
    const spec = parseSpec({ qdtype, scheme: 'per_channel' });
    const layout = planLayout('x', [rows, cols], spec);
    const qp = chooseQParams('x', x, layout, spec);
    const codes = quantize('x', x, layout, spec, qp);
    ops.push({
      name: `dequantize ${qdtype} per_channel -> float32`,
      inputBytes: numel * 4,
      backends: [{ name: 'js', run: () => dequantize(codes, qdtype, layout, qp) }],
    });
  }
  const spec = parseSpec({ qdtype: 'uint8' });
  const layout = planLayout('x', [numel], spec);
  const qp = chooseQParams('x', x, layout, spec);
  ops.push({
    name: 'fake_quantize per_tensor uint8',
    inputBytes: numel * 4,
    backends: [{ name: 'js', run: () => fakeQuantize('x', x, layout, spec, qp) }],
  });
  void quantizeValues;
  return ops;
}
