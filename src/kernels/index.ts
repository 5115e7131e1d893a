export * from './executors.js';
export * from './loader.js';
export * from './module.js';
export * from './native.js';
export * from './tasks.js';
export * from './tensor-ops.js';
export * from './wasm.js';
