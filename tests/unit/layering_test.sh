#!/usr/bin/env bash
# The layers of the server depend one way: grpc/ -> engine/ <- cpu/, cuda/;
# kernels/ knows no server; common/, below them all, knows nothing of the
# project. Fails naming each include that points back, and
# each call outside engine/ and the backends that reaches a shared-memory
# region's bytes (the engine's CallMemory and TensorTransfers do).
set -uo pipefail
root=${1:?usage: layering_test.sh REPO_ROOT}
cd "$root"
status=0
# forbid DIRS... -- PATTERN WHY
forbid() {
  local pattern=$1 why=$2; shift 2
  local hits
  hits=$(grep -rnE "^[[:space:]]*#[[:space:]]*include[[:space:]]*[<\"]($pattern)" "$@" 2>/dev/null)
  if [ -n "$hits" ]; then
    echo "layering: $why:"
    echo "$hits" | sed 's/^/  /'
    status=1
  fi
}
forbid 'grpc|grpcpp/|.*\.pb\.h|server/grpc/|server/ops/metrics' \
  "the engine and the backends must not see gRPC, protobuf or the service" \
  server/engine server/cpu server/cuda
forbid 'server/grpc/|grpc|grpcpp/|.*\.pb\.h' \
  "operators' code must not depend on the gRPC layer or the proto (an rpc's op label comes from server/grpc/rpc_ops.h)" \
  server/ops
forbid 'server/|grpc|grpcpp/|.*\.pb\.h' "kernels/ must not know the server or gRPC" kernels
forbid 'server/' "clients must not include server code" client
forbid 'server/|client/|bench/|gpucompute/kernels/|gpucompute/client|grpc|grpcpp/|.*\.pb\.h' \
  "common/ is below every other part and must know none of them" common
# Region bytes: SharedMemoryRegion's Read, Write and dma_data.
hits=$(grep -rnE "(dma_data|region->(Read|Write))\(" server/grpc server/ops server/*.cc 2>/dev/null)
if [ -n "$hits" ]; then
  echo "layering: shared-memory region bytes are reached in server/engine/ only:"
  echo "$hits" | sed 's/^/  /'
  status=1
fi
[ $status -eq 0 ] && echo "layering: ok"
exit $status
