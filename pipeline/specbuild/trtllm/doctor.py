"""`specbuild doctor`: is this machine ready for the GPU path (engine or llm-api flavour)? Each check says ok /
warn / fail and what to do.

The machine is ready (exit 0) when no check fails; warnings (e.g. no MPI on a single-GPU machine) do not block.
Nothing here imports tensorrt_llm; `trtllm-build --help` runs as a child process.
"""

from __future__ import annotations

import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from specbuild.errors import UserError
from specbuild.facts.ngc import llmapi_line
from specbuild.methods import METHODS, describe, load
from specbuild.plan import Layout
from specbuild.runtimes.roles import resolve_roles
from specbuild.recipe.schema import Recipe
from specbuild.trtllm import gpus as gpu_mod
from specbuild.trtllm import version as version_mod
from specbuild.trtllm.help_flags import read_help
from specbuild.trtllm.llmapi_runtime import find_model_dir
from specbuild.trtllm.runtime import build_flags
from specbuild.trtllm.steps import BuildStep

if TYPE_CHECKING:
    from specbuild.runtimes.build import Build

TRITON_ROOT = Path("/opt/tritonserver")
NGC_HINT = f"the NGC container {version_mod.NGC_IMAGE} has it"


@dataclass(frozen=True)
class Check:
    name: str
    status: str  # ok | warn | fail
    detail: str
    fix: str = ""


def _gpu_check(trtllm_present: bool, recipe=None, spec=None) -> Check:
    report = gpu_mod.detect_gpus(torch_fallback=trtllm_present)
    if not report.gpus:
        return Check(
            "GPU",
            "fail",
            report.problem or "no NVIDIA GPU found",
            "run on a machine with an NVIDIA GPU (compute capability >= 8.0) and its driver; check nvidia-smi",
        )
    listed = "; ".join(f"{g.index}: {g.name} ({g.cc})" for g in report.gpus)
    old = [
        g
        for g in report.gpus
        if g.compute_capability is not None and g.compute_capability < gpu_mod.MIN_COMPUTE_CAPABILITY
    ]
    if old:
        return Check(
            "GPU",
            "fail",
            f"{listed} — compute capability below 8.0",
            "TensorRT-LLM speculative decoding needs Ampere or newer; hide older GPUs with "
            "CUDA_VISIBLE_DEVICES or use another machine",
        )
    if recipe is not None:
        has_draft = spec.has_draft_engine
        ids = list(recipe.triton.gpu_device_ids) + (recipe.draft_gpu_device_ids if has_draft else [])
        if max(ids) >= len(report.gpus):
            return Check(
                "GPU",
                "fail",
                f"{listed} — the recipe uses GPU ids {sorted(set(ids))}",
                f"run on a machine with {max(ids) + 1} GPUs or change triton.gpu_device_ids",
            )
        if recipe.build.quantization == "fp8" and any(
            g.compute_capability and g.compute_capability < gpu_mod.FP8_COMPUTE_CAPABILITY for g in report.gpus
        ):
            return Check(
                "GPU",
                "fail",
                f"{listed} — fp8 needs compute capability 8.9",
                "set build.quantization: none or int8_weight_only, or use Ada/Hopper GPUs",
            )
    unknown = [g for g in report.gpus if g.compute_capability is None]
    if unknown:
        return Check(
            "GPU",
            "warn",
            f"{listed} — the driver does not report compute capability",
            "update the NVIDIA driver (R510 or newer) so nvidia-smi can report compute_cap",
        )
    return Check("GPU", "ok", f"{len(report.gpus)} GPU(s) via {report.source}: {listed}")


def _trtllm_check() -> tuple[Check, version_mod.TrtllmInstall | None]:
    try:
        found = version_mod.installed()
    except UserError as e:
        return Check("TensorRT-LLM", "fail", str(e).split("\n")[0], "reinstall tensorrt_llm"), None
    if found is None:
        return Check(
            "TensorRT-LLM",
            "fail",
            "not installed in this Python",
            f"pip install {version_mod.PIP_SPEC} --extra-index-url https://pypi.nvidia.com on a GPU "
            f"machine ({NGC_HINT}); or use runtime: reference",
        ), None
    if not found.supported:
        return Check(
            "TensorRT-LLM",
            "fail",
            f"{found.version} is outside 0.17 <= version <= 1.3.0rc20 (the TensorRT engine "
            "path was removed after 1.3.0rc20)",
            f"pip install {version_mod.PIP_SPEC} ({NGC_HINT})",
        ), found
    return Check("TensorRT-LLM", "ok", f"{found.version} (supported: 0.17 <= version <= 1.3.0rc20)"), found


def _argvs_for(recipe, spec) -> list[list[str]]:
    layout = Layout(Path("engines"), Path("triton_repo"), Path("reports"), recipe.name)
    return [
        BuildStep(
            role=role.name,
            checkpoint=layout.checkpoint(role.name),
            output=layout.engine(role.name),
            flags=build_flags(recipe, spec, role),
        ).command()
        for role in resolve_roles(recipe, spec).values()
    ]


def specbuild_argvs() -> list[list[str]]:
    """trtllm-build commands covering every flag specbuild passes (one per method and role)."""
    out = []
    for pack in METHODS.values():
        section = {"method": pack.name}
        if pack.trtllm is not None:  # what makes its engines take every flag it adds
            section.update(load(pack, pack.trtllm).doctor_section)
        if any(f.is_required() and name not in section for name, f in pack.Config.model_fields.items()):
            continue  # a section this runtime's part does not give: not a method of the engine path
        recipe = Recipe.model_validate(
            {"name": "doctor", "runtime": "tensorrt-llm", "model": {"checkpoint": "model"}, "speculation": section}
        )
        spec = describe(recipe)
        if spec.mode is not None:  # the engine path's methods (a recipe of its own each)
            out.extend(_argvs_for(recipe, spec))
    return out


def _flags_check(recipe=None, spec=None) -> Check:
    exe = shutil.which("trtllm-build")
    if exe is None:
        return Check(
            "trtllm-build",
            "fail",
            "not on PATH",
            f"it is a console script of the TensorRT-LLM wheel: activate the environment that has it ({NGC_HINT})",
        )
    try:
        flags = read_help(exe)
    except UserError as e:
        return Check("trtllm-build", "fail", str(e).split("\n")[0], "fix the TensorRT-LLM installation")
    argvs = _argvs_for(recipe, spec) if recipe is not None else specbuild_argvs()
    problems = sorted({p for argv in argvs for p in flags.problems(argv)})
    passed = sorted({a for argv in argvs for a in argv if a.startswith("--")})
    if problems:
        return Check(
            "trtllm-build",
            "fail",
            f"{exe}: " + "; ".join(problems),
            f"install a TensorRT-LLM release specbuild supports (pip install {version_mod.PIP_SPEC})",
        )
    scope = "this recipe's commands" if recipe is not None else "every flag specbuild passes"
    return Check("trtllm-build", "ok", f"{exe} accepts {scope} ({len(passed)} flags)")


def _tritonserver() -> Path | None:
    exe = shutil.which("tritonserver")
    if exe:
        return Path(exe)
    default = TRITON_ROOT / "bin" / "tritonserver"
    return default if default.is_file() else None


def _server_checks() -> list[Check]:
    server = _tritonserver()
    checks = []
    if server is None:
        checks.append(
            Check(
                "tritonserver",
                "fail",
                "not on PATH nor in /opt/tritonserver/bin",
                f"needed to serve TensorRT-LLM engines ({NGC_HINT}); CPU-only machines serve runtime: "
                "reference through nvidia-pytriton's tritonserver",
            )
        )
    else:
        checks.append(Check("tritonserver", "ok", str(server)))
    roots = [server.resolve().parent.parent / "backends"] if server is not None else []
    roots.append(TRITON_ROOT / "backends")
    backend = next((r / "tensorrtllm" for r in roots if (r / "tensorrtllm").is_dir()), None)
    if backend is None:
        checks.append(
            Check(
                "tensorrtllm backend",
                "fail",
                f"no tensorrtllm folder in {', '.join(map(str, roots))}",
                "the C++ backend that serves the engines ships in the tritonserver:<yy.mm>-trtllm-python-py3 "
                "images; elsewhere build it from triton-inference-server/tensorrtllm_backend",
            )
        )
    else:
        checks.append(Check("tensorrtllm backend", "ok", str(backend)))
    return checks


def _mpi_check(recipe=None, spec=None) -> Check:
    exe = shutil.which("mpirun")
    if exe:
        return Check("MPI", "ok", exe)
    needs = recipe is not None and (recipe.build.tp_size * recipe.build.pp_size > 1 or spec.has_draft_engine)
    return Check(
        "MPI",
        "fail" if needs else "warn",
        "mpirun is not on PATH",
        "needed for multi-GPU engines (tp_size * pp_size > 1), launch_triton_server.py without --no-mpi and "
        f"the orchestrator launch of draft-target: apt-get install openmpi-bin ({NGC_HINT})",
    )


def _llmapi_trtllm_check(recipe=None) -> tuple[Check, version_mod.TrtllmInstall | None]:
    try:
        found = version_mod.installed()
    except UserError as e:
        return Check("TensorRT-LLM", "fail", str(e).split("\n")[0], "reinstall tensorrt_llm"), None
    if found is None:
        return Check(
            "TensorRT-LLM",
            "fail",
            "not installed in this Python",
            f"pip install {version_mod.LLMAPI_PIP_SPEC} --extra-index-url https://pypi.nvidia.com on a GPU "
            f"machine ({NGC_HINT}, 25.09 or newer); or use runtime: reference",
        ), None
    if not found.serves_llmapi:
        return Check(
            "TensorRT-LLM",
            "fail",
            f"{found.version}: the llm-api flavour needs 1.0 or newer",
            f"pip install {version_mod.LLMAPI_PIP_SPEC}, or use flavour: engine",
        ), found
    release = llmapi_line(found.version)[0] or "{}.{}".format(*found.release)
    if recipe is not None and recipe.llm_api.release != release:
        return Check(
            "TensorRT-LLM",
            "fail",
            f"{found.version} installed, the recipe writes the model.yaml of {recipe.llm_api.release}",
            f'set llm_api.release: "{release}" in the recipe',
        ), found
    return Check(
        "TensorRT-LLM", "ok", f"{found.version} (llm-api flavour: 1.0 or newer; model.yaml dialect {release})"
    ), found


def _llmapi_model_check() -> Check:
    try:
        folder = find_model_dir()
    except UserError as e:  # compile still works: launch_triton.sh takes them from the container at start
        return Check(
            "llmapi model",
            "warn",
            "NVIDIA's llmapi model.py / helpers.py not found here: repositories are "
            "written without them and their launch_triton.sh copies them at start from the container",
            str(e).split(" — ", 1)[-1],
        )
    return Check("llmapi model", "ok", f"{folder} (copied into each repository at compile time)")


def _llmapi_mpi_check(recipe=None) -> Check:
    exe = shutil.which("mpirun")
    if exe:
        return Check("MPI", "ok", exe)
    needs = recipe is not None and (recipe.build.tp_size * recipe.build.pp_size > 1 or recipe.llm_api.nodes > 1)
    return Check(
        "MPI",
        "fail" if needs else "warn",
        "mpirun is not on PATH",
        "the LLM spawns MPI workers for tensor/pipeline parallelism and trtllm-llmapi-launch runs under "
        f"srun/mpirun across nodes: apt-get install openmpi-bin ({NGC_HINT})",
    )


def run_doctor(build: Build | None = None, flavour: str | None = None) -> list[Check]:
    """The checks of the recipe's flavour (or `flavour`; default the engine flavour). `build`: the recipe
    resolved (specbuild.runtimes.build), or None to check the machine alone."""
    recipe, spec = (build.recipe, build.spec) if build is not None else (None, None)
    flavour = flavour or (recipe.flavour if recipe is not None else "engine")
    if flavour == "llm-api":
        trtllm, found = _llmapi_trtllm_check(recipe)
        checks = [_gpu_check(found is not None, recipe, spec), trtllm, _llmapi_model_check()]
        checks.extend(c for c in _server_checks() if c.name == "tritonserver")
        checks.append(_llmapi_mpi_check(recipe))
        return checks
    trtllm, found = _trtllm_check()
    checks = [_gpu_check(found is not None, recipe, spec), trtllm, _flags_check(recipe, spec)]
    checks.extend(_server_checks())
    checks.append(_mpi_check(recipe, spec))
    return checks


def ready(checks: list[Check]) -> bool:
    return all(c.status != "fail" for c in checks)


def as_dict(checks: list[Check]) -> dict:
    return {"ready": ready(checks), "checks": [asdict(c) for c in checks]}


def render(checks: list[Check], console) -> None:
    from rich.table import Table

    style = {"ok": "green", "warn": "yellow", "fail": "bold red"}
    table = Table(title="specbuild doctor: the TensorRT-LLM (GPU) path", show_lines=True)
    table.add_column("", no_wrap=True)
    table.add_column("check", no_wrap=True)
    table.add_column("found / what to do", overflow="fold")
    for c in checks:
        text = c.detail + (f"\n[dim]→[/] {c.fix}" if c.fix and c.status != "ok" else "")
        table.add_row(f"[{style[c.status]}]{c.status}[/]", c.name, text)
    console.print(table)
    if ready(checks):
        console.print("[green]ready for runtime: tensorrt-llm[/]")
    else:
        console.print(
            "[bold red]not ready for runtime: tensorrt-llm[/] — fix the failed checks above "
            "(runtime: reference works on any machine)"
        )
