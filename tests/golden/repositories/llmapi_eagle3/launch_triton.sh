#!/usr/bin/env bash
# Start tritonserver for this llm-api repository (specbuild recipe 'trt-llmapi-eagle3').
# single: one tritonserver process; the LLM spawns its own workers for tensor/pipeline parallelism.
# Overrides: TRITONSERVER, HTTP_PORT, GRPC_PORT, METRICS_PORT, TRTLLM_LLMAPI_LAUNCH; arguments go to tritonserver.
set -euo pipefail
REPO="$(cd "$(dirname "$0")" && pwd)"
TRITONSERVER="$(printenv TRITONSERVER || echo /opt/tritonserver/bin/tritonserver)"
HTTP_PORT="$(printenv HTTP_PORT || echo 8000)"
GRPC_PORT="$(printenv GRPC_PORT || echo 8001)"
METRICS_PORT="$(printenv METRICS_PORT || echo 8002)"

exec "$TRITONSERVER" --model-repository="$REPO" --http-port="$HTTP_PORT" --grpc-port="$GRPC_PORT" --metrics-port="$METRICS_PORT" "$@"
