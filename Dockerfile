# syntax=docker/dockerfile:1
# quantd: two stages. The build stage compiles the TypeScript and the native addon (node-gyp);
# the WebAssembly module is the committed native/wasm/quantd.wasm (CI proves it is what the
# sources build, so the image build needs no clang). The runtime stage carries only what
# `quantd serve` needs and runs as the unprivileged `node` user (uid 1000).
# Node 24 is the current LTS; quantd itself runs on Node >= 20.19 for installs from source.

FROM node:24-bookworm AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 make g++ \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY package.json package-lock.json binding.gyp tsconfig.json tsconfig.build.json ./
COPY scripts ./scripts
COPY native ./native
COPY src ./src
COPY workers ./workers
COPY bin ./bin
COPY proto ./proto
COPY ui ./ui
# npm ci runs the install script (native addon) and prepare (TypeScript → dist/, the console → dist/ui)
RUN npm ci --no-audit --no-fund \
 && test -f build/Release/quantd.node \
 && npm prune --omit=dev

FROM node:24-bookworm-slim AS runtime
# Every address of the container: reached through the ports it publishes. quantd refuses to
# listen beyond loopback without bearer keys, so run it with QUANTD_API_KEYS (or, on a machine of
# your own only, QUANTD_ALLOW_UNAUTHENTICATED=1): with neither it exits naming both.
ENV NODE_ENV=production \
    QUANTD_HOST=0.0.0.0 \
    QUANTD_HTTP_PORT=8080 \
    QUANTD_GRPC_PORT=50051 \
    QUANTD_DATA_DIR=/data \
    QUANTD_LOG_LEVEL=info
WORKDIR /app
COPY --from=build /app/package.json ./
COPY --from=build /app/node_modules ./node_modules
COPY --from=build /app/dist ./dist
COPY --from=build /app/bin ./bin
COPY --from=build /app/proto ./proto
COPY --from=build /app/build/Release/quantd.node ./build/Release/quantd.node
COPY --from=build /app/native/wasm/quantd.wasm ./native/wasm/quantd.wasm
RUN mkdir -p /data && chown node:node /data
USER node
EXPOSE 8080 50051
VOLUME ["/data"]
HEALTHCHECK --interval=10s --timeout=4s --start-period=10s --retries=3 CMD ["node", "bin/healthcheck.js"]
STOPSIGNAL SIGTERM
CMD ["node", "bin/quantd.js", "serve"]
