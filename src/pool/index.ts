export * from './pool.js';
export * from './pool-compute.js';
export * from './create.js';
