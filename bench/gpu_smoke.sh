#!/usr/bin/env bash
# GPU smoke test of specbuild's TensorRT-LLM path. NOT RUN IN CI: CI machines have no GPU and no TensorRT-LLM.
#
# Run it by hand on a machine with an NVIDIA GPU (compute capability >= 8.0) and TensorRT-LLM 0.17..1.2.x, e.g.
# inside the NGC container nvcr.io/nvidia/tritonserver:<yy.mm>-trtllm-python-py3 (whose TensorRT-LLM is <= 1.2):
#
#   docker run --gpus all --rm -it -v "$PWD":/specbuild -w /specbuild \
#       nvcr.io/nvidia/tritonserver:<yy.mm>-trtllm-python-py3 bash bench/gpu_smoke.sh
#
# For each method it builds and serves one small model and runs the validation suite:
#   specbuild compile recipes/tensorrt-llm/<method>.yaml [--trtllm-examples DIR]
# and prints one JSON object per method on stdout (progress and tool output go to stderr and to
# $SMOKE_LOGS/<method>.log), then a summary object. Exit status: 0 when every method passed, 1 otherwise,
# 2 when `specbuild doctor` says the machine is not ready.
#
# Environment:
#   METHODS          methods to run (default: "none medusa eagle draft_target prompt_lookup lookahead")
#   TRTLLM_EXAMPLES  TensorRT-LLM examples/ tree for the Medusa/EAGLE example converters
#                    (default: /app/examples when it exists, as in the NGC container; else the wheel path)
#   SPECBUILD        how to call specbuild (default: "specbuild"; from a source checkout without installing:
#                    "env PYTHONPATH=$PWD/pipeline python3 -m specbuild.cli")
#   SMOKE_LOGS       where the per-method logs go (default: reports/gpu-smoke)
#   SMOKE_COMPILE_ARGS  extra arguments for every compile, e.g. "--no-validate" to stop after the repositories
set -uo pipefail

cd "$(dirname "$0")/.."
METHODS=${METHODS:-"none medusa eagle draft_target prompt_lookup lookahead"}
SPECBUILD=${SPECBUILD:-specbuild}
SMOKE_LOGS=${SMOKE_LOGS:-reports/gpu-smoke}
if [[ -z "${TRTLLM_EXAMPLES:-}" && -d /app/examples ]]; then
    TRTLLM_EXAMPLES=/app/examples
fi
mkdir -p "$SMOKE_LOGS"

echo "== specbuild doctor" >&2
if ! $SPECBUILD doctor >&2; then
    echo '{"smoke": "not-run", "reason": "specbuild doctor reports this machine is not ready for the GPU path"}'
    exit 2
fi
$SPECBUILD doctor --json > "$SMOKE_LOGS/doctor.json" 2>/dev/null || true

passed=0
failed=0
for method in $METHODS; do
    recipe="recipes/tensorrt-llm/${method}.yaml"
    log="$SMOKE_LOGS/${method}.log"
    if [[ ! -f "$recipe" ]]; then
        echo "{\"method\": \"$method\", \"status\": \"missing\", \"recipe\": \"$recipe\"}"
        failed=$((failed + 1))
        continue
    fi
    args=(compile "$recipe")
    # shellcheck disable=SC2206  # word splitting wanted
    args+=(${SMOKE_COMPILE_ARGS:-})
    if [[ -n "${TRTLLM_EXAMPLES:-}" ]]; then
        args+=(--trtllm-examples "$TRTLLM_EXAMPLES")
    fi
    echo "== $SPECBUILD ${args[*]}" >&2
    start=$(date +%s)
    $SPECBUILD "${args[@]}" 2>&1 | tee "$log" >&2
    code=${PIPESTATUS[0]}
    seconds=$(( $(date +%s) - start ))
    if [[ $code -eq 0 ]]; then
        status=passed
        passed=$((passed + 1))
    else
        status=failed
        failed=$((failed + 1))
    fi
    echo "{\"method\": \"$method\", \"status\": \"$status\", \"exit_code\": $code, \"seconds\": $seconds," \
         "\"recipe\": \"$recipe\", \"log\": \"$log\"}"
done

echo "{\"smoke\": \"done\", \"passed\": $passed, \"failed\": $failed, \"logs\": \"$SMOKE_LOGS\"}"
[[ $failed -eq 0 ]]
