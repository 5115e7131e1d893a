/**
 * The file Piscina starts in each worker thread. Piscina loads a worker with require() first,
 * and on Node 20.19+ require() of an ES module is synchronous ESM loading, which aborted a whole
 * test process once ("v8::Module::IsGraphAsync must be used on an instantiated module", from
 * piscina's require of kernel-worker.js). This CommonJS file is what Piscina require()s; it loads
 * the ES module worker with import() only, and hands Piscina the promise of its handler, which
 * Piscina awaits (its "async loaded worker" form).
 */
export = import('./kernel-worker.js').then((worker) => worker.default);
