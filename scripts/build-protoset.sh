#!/usr/bin/env bash
# Builds proto/quantd.protoset, the FileDescriptorSet that gRPC server reflection serves, from the
# .proto files under proto/ with protoc itself (Debian: apt-get install protobuf-compiler), so
# that every descriptor is the one protoc makes: each file under its own name, map entries named
# FieldEntry, proto3 `optional` with its presence flag and synthetic oneof, fully qualified type
# names, and the comments (source info) that `grpcurl describe` shows. The output is committed, so
# neither the build nor the server needs protoc; CI rebuilds it and fails if it differs
# (`npm run check:protoset`). Run it after changing a .proto file.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-proto/quantd.protoset}"
# sorted, so the set's order does not depend on the file system's
mapfile -t files < <(cd proto && find . -name '*.proto' -printf '%P\n' | LC_ALL=C sort)
protoc --proto_path=proto --include_imports --include_source_info \
  --descriptor_set_out="$out" "${files[@]}"
echo "built $out ($(wc -c < "$out") bytes, ${#files[@]} files) with $(protoc --version)"
