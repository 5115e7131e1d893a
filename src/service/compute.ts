/** The Compute interface and the reference Compute (defined in src/core/compute.ts). */
export * from '../core/compute.js';
