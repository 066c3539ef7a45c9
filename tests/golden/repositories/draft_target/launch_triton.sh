#!/usr/bin/env bash
# Start tritonserver for this repository (specbuild recipe 'trt-draft-target', method draft_target).
# orchestrator mode, 1 MPI rank(s): rank 0 orchestrates and spawns one worker per engine.
# Overrides: TRITONSERVER, HTTP_PORT, GRPC_PORT, METRICS_PORT; arguments go to rank 0 (e.g. --log-verbose=1).
set -euo pipefail
REPO="$(cd "$(dirname "$0")" && pwd)"
TRITONSERVER="$(printenv TRITONSERVER || echo /opt/tritonserver/bin/tritonserver)"
HTTP_PORT="$(printenv HTTP_PORT || echo 8000)"
GRPC_PORT="$(printenv GRPC_PORT || echo 8001)"
METRICS_PORT="$(printenv METRICS_PORT || echo 8002)"
export TRTLLM_ORCHESTRATOR=1
export TRTLLM_ORCHESTRATOR_SPAWN_PROCESSES=1
POOL_ARGS="--pinned-memory-pool-byte-size=0 --enable-peer-access=false"
for ((gpu = 0; gpu < $(nvidia-smi --list-gpus | wc -l); gpu++)); do
  POOL_ARGS="$POOL_ARGS --cuda-memory-pool-byte-size=$gpu:0"
done

# shellcheck disable=SC2086
exec mpirun --allow-run-as-root \
  -n 1 "$TRITONSERVER" --model-repository="$REPO" --http-port="$HTTP_PORT" --grpc-port="$GRPC_PORT" --metrics-port="$METRICS_PORT" --disable-auto-complete-config --backend-config=python,shm-region-prefix-name=prefix0_ $POOL_ARGS "$@"
