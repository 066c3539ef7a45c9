"""The plan's `convert` steps: a Hugging Face checkpoint becomes a TensorRT-LLM checkpoint (config.json + rank{N}.safetensors).

Two paths (TensorRT-LLM examples/*/convert_checkpoint.py, tensorrt_llm/models/*): the wheel's model classes, driven by
`convert_worker` in a child process, or an examples/ convert_checkpoint.py from the TensorRT-LLM tree the user points to
(--trtllm-examples). Either way the checkpoint is written to a partial folder and renamed into place, then read back and
checked.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any

import specbuild
from specbuild.files import atomic
from specbuild.errors import UserError
from specbuild.files.paths import show
from specbuild.trtllm.proc import Progress, run_child
from specbuild.trtllm.steps import ConvertStep

WORKER = "specbuild.trtllm.convert_worker"


def child_env() -> dict[str, str]:
    """This environment, with specbuild importable in the child (source checkouts run with PYTHONPATH=pipeline)."""
    env = os.environ.copy()
    root = str(Path(specbuild.__file__).resolve().parent.parent)
    parts = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    installed = Path(root).name in ("site-packages", "dist-packages")
    if not installed and root not in parts:
        env["PYTHONPATH"] = os.pathsep.join([root, *parts])
    return env


def script_exists(step: ConvertStep) -> None:
    script = step.examples / step.converter.script
    if not script.is_file():
        raise UserError(
            f"--trtllm-examples: {script} does not exist — point --trtllm-examples at the examples/ folder "
            "of the TensorRT-LLM release that is installed (the NGC container has it at /app/examples; or "
            "git clone -b v<version> https://github.com/NVIDIA/TensorRT-LLM and use its examples/)"
        )


def check_checkpoint(folder: Path, world_size: int, expect: dict[str, Any], shown: str) -> None:
    """The checkpoint has config.json and one rank{N}.safetensors per rank, and the method keys the recipe asks for."""
    cfg_path = folder / "config.json"
    try:
        cfg = json.loads(cfg_path.read_text())
    except (OSError, ValueError) as e:
        raise UserError(f"the converter wrote no readable {shown}/config.json ({e}) — see the conversion log") from None
    found_world = (cfg.get("mapping") or {}).get("world_size")
    problems = []
    if found_world != world_size:
        problems.append(f"mapping.world_size is {found_world}, the recipe needs {world_size} (tp_size * pp_size)")
    missing = [f"rank{r}.safetensors" for r in range(world_size) if not (folder / f"rank{r}.safetensors").is_file()]
    if missing:
        problems.append(f"missing {', '.join(missing)}")
    for key, want in expect.items():
        if cfg.get(key) != want:
            problems.append(f"{key} is {cfg.get(key)!r}, the recipe needs {want!r}")
    if problems:
        raise UserError(
            f"the converted checkpoint {shown} does not match the recipe: "
            + "; ".join(problems)
            + " — the converter ignored an argument; with the wheel path try --trtllm-examples DIR "
            "(the example convert_checkpoint.py), and check the TensorRT-LLM version"
        )


def run_convert(
    step: ConvertStep, *, log_dir: Path, progress: Progress | None = None, notice: atomic.Notice | None = None
) -> Path:
    """Execute one convert step into step.output (atomically). Returns the folder."""
    role = step.role or "target"
    final = step.output
    log = log_dir / f"convert-{role}.log"
    with atomic.atomic_folder(final, notice) as tmp:
        if step.converter.via == "script":
            script_exists(step)
            argv = step.script_argv(sys.executable, tmp)
            rerun = shlex.join(step.command())
        else:
            spec_file = log_dir / f"convert-{role}.json"
            spec_file.parent.mkdir(parents=True, exist_ok=True)
            spec_file.write_text(json.dumps(step.worker_spec(final), indent=2) + "\n")
            argv = [sys.executable, "-m", WORKER, str(spec_file), "--output-dir", str(tmp)]
            rerun = f"python -m {WORKER} {show(spec_file)}"
        if progress:
            progress(f"{role}: {step.title()}")
        result = run_child(argv, log, progress=progress, prefix=f"{role} convert: ", env=child_env())
        if result.returncode != 0:
            raise UserError(
                f"converting the {role} checkpoint {result.failure}; last lines:\n{result.tail()}\n"
                f"full log: {show(log)}\nto rerun by hand: {rerun}"
            )
        check_checkpoint(tmp, step.world_size, step.expect, show(final))
    return final
