import js from '@eslint/js';
import tseslint from 'typescript-eslint';
import quantd from './eslint-rules/layers.js';

export default tseslint.config(
  { ignores: ['dist/', 'node_modules/', 'build/', 'native/**/*.js', 'coverage/'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    languageOptions: {
      globals: Object.fromEntries(
        [
          'process',
          'console',
          'Buffer',
          'URL',
          'URLSearchParams',
          'AbortController',
          'AbortSignal',
          'performance',
          'fetch',
          'setTimeout',
          'clearTimeout',
          'setInterval',
          'clearInterval',
          'SharedArrayBuffer',
          'WebAssembly',
          'TextEncoder',
          'TextDecoder',
          'structuredClone',
        ].map((name) => [name, 'readonly']),
      ),
    },
    rules: {
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      'no-constant-condition': ['error', { checkLoops: false }],
      eqeqeq: ['error', 'always'],
      'prefer-const': 'error',
    },
  },
  {
    // the console runs in the browser: its globals are the DOM's, which TypeScript checks
    files: ['ui/**/*.ts'],
    rules: { 'no-undef': 'off' },
  },
  {
    // the layering of docs/architecture.md: imports go down, never up or across, and never loop
    files: ['src/**/*.ts', 'workers/**/*.ts'],
    plugins: { quantd },
    rules: { 'quantd/layers': 'error', 'quantd/no-cycle': 'error' },
  },
);
