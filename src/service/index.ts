export * from './compute.js';
export * from './execute.js';
export * from './given-qparams.js';
export * from './plan.js';
export * from './selection.js';
export * from './files.js';
export * from './inspect.js';
export * from './request.js';
