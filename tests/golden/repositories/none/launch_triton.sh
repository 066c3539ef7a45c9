#!/usr/bin/env bash
# Start tritonserver for this repository (specbuild recipe 'trt-none', method none).
# leader mode, 1 MPI rank(s): one rank per GPU; rank 0 serves, the others run the engine's other shards.
# Overrides: TRITONSERVER, HTTP_PORT, GRPC_PORT, METRICS_PORT; arguments go to rank 0 (e.g. --log-verbose=1).
set -euo pipefail
REPO="$(cd "$(dirname "$0")" && pwd)"
TRITONSERVER="$(printenv TRITONSERVER || echo /opt/tritonserver/bin/tritonserver)"
HTTP_PORT="$(printenv HTTP_PORT || echo 8000)"
GRPC_PORT="$(printenv GRPC_PORT || echo 8001)"
METRICS_PORT="$(printenv METRICS_PORT || echo 8002)"

# shellcheck disable=SC2086
exec mpirun --allow-run-as-root \
  -n 1 "$TRITONSERVER" --model-repository="$REPO" --http-port="$HTTP_PORT" --grpc-port="$GRPC_PORT" --metrics-port="$METRICS_PORT" --disable-auto-complete-config --backend-config=python,shm-region-prefix-name=prefix0_ "$@"
