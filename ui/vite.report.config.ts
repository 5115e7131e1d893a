// The self-contained HTML report (`quantd quantize … --report FILE.html`): the report view and
// Chart.js as one script and one stylesheet in dist/report, which the CLI inlines into the file.
import { defineConfig } from 'vite';

export default defineConfig({
  root: 'ui',
  logLevel: 'warn',
  build: {
    outDir: '../dist/report',
    emptyOutDir: true,
    cssCodeSplit: false,
    lib: {
      entry: 'src/standalone.ts',
      formats: ['iife'],
      name: 'quantdReport',
      fileName: () => 'report.js',
      cssFileName: 'report',
    },
  },
});
