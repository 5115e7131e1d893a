// The console (/ui): ui/index.html and its modules, built into dist/ui with hashed assets. No
// CDN and no runtime fetch of anything but the API: the page works on a machine without internet.
import { defineConfig } from 'vite';

export default defineConfig({
  root: 'ui',
  base: '/ui/',
  logLevel: 'warn',
  build: {
    outDir: '../dist/ui',
    emptyOutDir: true,
    assetsInlineLimit: 0,
    chunkSizeWarningLimit: 1024,
  },
});
