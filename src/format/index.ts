export * from './json-members.js';
export * from './safetensors.js';
export * from './safetensors-file.js';
export * from './qtensor.js';
