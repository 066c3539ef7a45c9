#!/usr/bin/env bash
# Start tritonserver for this llm-api repository (specbuild recipe 'trt-llmapi-auto').
# single: one tritonserver process; the LLM spawns its own workers for tensor/pipeline parallelism.
# Overrides: TRITONSERVER, HTTP_PORT, GRPC_PORT, METRICS_PORT, TRTLLM_LLMAPI_LAUNCH, LLMAPI_MODEL_DIR; arguments go to tritonserver.
set -euo pipefail
REPO="$(cd "$(dirname "$0")" && pwd)"
TRITONSERVER="$(printenv TRITONSERVER || echo /opt/tritonserver/bin/tritonserver)"
HTTP_PORT="$(printenv HTTP_PORT || echo 8000)"
GRPC_PORT="$(printenv GRPC_PORT || echo 8001)"
METRICS_PORT="$(printenv METRICS_PORT || echo 8002)"

# NVIDIA's model.py + helpers.py: when compile had none to copy, take the container's
if [ ! -f "$REPO/tensorrt_llm/1/model.py" ]; then
  LLMAPI_MODEL_DIR="$(printenv LLMAPI_MODEL_DIR || echo /app/all_models/llmapi/tensorrt_llm/1)"
  for f in model.py helpers.py; do
    if [ ! -f "$LLMAPI_MODEL_DIR/$f" ]; then
      echo "launch_triton.sh: $LLMAPI_MODEL_DIR/$f not found: this repository takes the llmapi model of NVIDIA from the container it runs in - run it in nvcr.io/nvidia/tritonserver:<yy.mm>-trtllm-python-py3, or set LLMAPI_MODEL_DIR to the tensorrt_llm/1 folder of triton_backend/all_models/llmapi/" >&2
      exit 2
    fi
  done
  RUN_REPO="$(mktemp -d -t specbuild-llmapi.XXXXXX)"
  cp -R "$REPO/." "$RUN_REPO/"
  for f in model.py helpers.py; do cp "$LLMAPI_MODEL_DIR/$f" "$RUN_REPO/tensorrt_llm/1/"; done
  REPO="$RUN_REPO"
fi

exec "$TRITONSERVER" --model-repository="$REPO" --http-port="$HTTP_PORT" --grpc-port="$GRPC_PORT" --metrics-port="$METRICS_PORT" "$@"
