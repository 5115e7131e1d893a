export * from './config.js';
export * from './fake-quantize-module.js';
export * from './fused-fake-quantize.js';
export * from './histogram.js';
export * from './min-max.js';
export * from './observer.js';
export * from './qparams.js';
export * from './torch-float.js';
