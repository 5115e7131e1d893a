export * from './catalogue.js';
export * from './quantd-error.js';
export * from './abort.js';
