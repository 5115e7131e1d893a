#!/usr/bin/env node
// The quantd command. The TypeScript sources are compiled to dist/ by `npm ci` (prepare) or
// `npm run build`; say so plainly if that has not happened.
let cli;
try {
  cli = await import('../dist/src/cli/main.js');
} catch (err) {
  if (err && err.code === 'ERR_MODULE_NOT_FOUND' && String(err.message).includes('dist/src/cli/main.js')) {
    process.stderr.write('error INTERNAL: quantd is not built; run `npm run build` (or `npm ci`) first\n');
    process.exit(1);
  }
  throw err;
}
process.exitCode = await cli.main(process.argv.slice(2));
