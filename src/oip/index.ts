export * from './datatypes.js';
export * from './models.js';
export * from './infer.js';
export * from './rest.js';
