export * from './json-keys.js';
export * from './safetensors.js';
export * from './safetensors-file.js';
export * from './qtensor.js';
