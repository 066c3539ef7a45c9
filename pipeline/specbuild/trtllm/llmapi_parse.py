"""model.yaml through the installed TensorRT-LLM's own parse path, before compile writes it.

NVIDIA's llmapi model reads model.yaml with PyYAML, drops `triton_config` (and `logits_post_processors`), passes
the rest through `update_llm_args_with_extra_dict({}, ...)` (imported from tensorrt_llm.llmapi.llm_utils; defined
in llm_args.py) and builds `LLM(**args)`, whose TorchLlmArgs validation refuses what the release does not know
(triton_backend/all_models/llmapi/tensorrt_llm/1/model.py `_init_engine`, 1.0 and later). Compile does the same
up to the argument class (`TorchLlmArgs.from_kwargs`, as `LLM.__init__` does; no model is loaded), so a model.yaml
the installed release refuses stops compile with the release's own message instead of failing model load on the
GPU server.

tensorrt_llm is imported in a child process only: importing the real wheel initialises CUDA and MPI.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from specbuild.errors import UserError
from specbuild.trtllm.version import parse_version

# The child: argv[1:] are model.yaml files; one JSON line per file on stdout.
CHILD = r"""
import json, sys, traceback
import yaml
try:
    from tensorrt_llm.llmapi.llm_utils import update_llm_args_with_extra_dict
except ImportError:
    from tensorrt_llm.llmapi.llm_args import update_llm_args_with_extra_dict
from tensorrt_llm.llmapi.llm_args import TorchLlmArgs

for path in sys.argv[1:]:
    with open(path) as f:
        config = yaml.safe_load(f)
    config.pop("triton_config", None)
    config.pop("logits_post_processors", None)
    try:
        args = update_llm_args_with_extra_dict({}, config)
        build = getattr(TorchLlmArgs, "from_kwargs", TorchLlmArgs)
        build(**args)
    except Exception as e:
        lines = [ln for ln in str(e).splitlines() if ln.strip()]
        print(json.dumps({"file": path, "error": type(e).__name__ + ": " + " ".join(lines)}), flush=True)
    else:
        print(json.dumps({"file": path, "ok": True}), flush=True)
"""
TIMEOUT_S = 600


def run_parse(paths: list[Path]) -> dict[str, str | None]:
    """file -> the installed release's error (None: accepted). UserError when TensorRT-LLM cannot run at all."""
    try:
        done = subprocess.run(
            [sys.executable, "-c", CHILD, *map(str, paths)],
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
            env=os.environ.copy(),
        )
    except subprocess.TimeoutExpired:
        raise UserError(
            f"parsing model.yaml with the installed TensorRT-LLM took more than {TIMEOUT_S} s — check "
            "the installation (python -c 'import tensorrt_llm')"
        ) from None
    results: dict[str, str | None] = {}
    for line in done.stdout.splitlines():
        try:
            item = json.loads(line)
        except ValueError:
            continue  # the wheel's own prints
        if isinstance(item, dict) and "file" in item:
            results[item["file"]] = item.get("error")
    missing = [str(p) for p in paths if str(p) not in results]
    if missing:
        tail = "\n".join(done.stderr.strip().splitlines()[-8:])
        raise UserError(
            f"the installed TensorRT-LLM could not parse model.yaml (its parse functions did not run):\n"
            f"{tail}\n— fix the installation (python -c 'from tensorrt_llm.llmapi.llm_args import "
            "TorchLlmArgs') or use runtime: reference"
        )
    return results


def hint(error: str, install, recipe) -> str:
    """What to do about the installed release's refusal."""
    version = parse_version(install.version)
    if "Invalid decoding type" in error and version[:2] == (1, 3) and version[3] <= 3:
        return (
            f"TensorRT-LLM {install.version} still parses speculative_config through DecodingBaseConfig.from_dict; "
            "llm_api.release 1.3 is written for the discriminated union of 1.3.0rc7 and later (README 'LLM-API "
            'releases\') — install a later 1.3 release, or 1.2.x with llm_api.release: "1.2"'
        )
    return (
        f"model.yaml is written in llm_api.release {recipe.llm_api.release}'s spelling (README 'LLM-API "
        "releases'); the installed release refuses it as shown — change the recipe value the message names, or "
        "run the release the table covers"
    )


def check_model_yaml(text: str, install, recipe, role: str) -> None:
    """Parse one model.yaml text with the installed release; a UserError with its message when it refuses."""
    with tempfile.TemporaryDirectory(prefix="specbuild-model-yaml-") as tmp:
        path = Path(tmp) / f"{role}.model.yaml"
        path.write_text(text)
        error = run_parse([path])[str(path)]
    if error:
        where = f"{recipe.source or 'recipe'}" + ("" if role == "target" else f" ({role} repository)")
        raise UserError(
            f"{where}: TensorRT-LLM {install.version} refuses the model.yaml written for it — {error}\n"
            f"— {hint(error, install, recipe)}; nothing was written"
        )
