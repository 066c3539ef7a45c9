"""The reference runtime's plan step: write one engine folder (reference/engine_folder.py) and read it back."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from specbuild.facts.engine_facts import EngineLimits, SpecMode
from specbuild.files.paths import show
from specbuild.plan import ROLES_DOC, ServeStep, Step, limits_dict


@dataclass(frozen=True, kw_only=True)
class ReferenceEngineStep(Step):
    kind: ClassVar[str] = "reference-engine"
    model_dir: Path
    tokenizer_dir: Path | None  # None: the tokenizer is inside model_dir (or the engine needs none: a draft)
    method: str  # the engine's decoding method ("none" for draft and baseline engines)
    mode: SpecMode
    dtype: str
    limits: EngineLimits  # what the engine's build_config must carry
    weights: dict[str, Path] = field(default_factory=dict)  # method weights the engine carries, by folder name
    decoding: dict[str, Any] = field(default_factory=dict)  # specbuild.decoding defaults
    pretrained_extra: dict[str, Any] = field(default_factory=dict)
    output: Path

    def title(self) -> str:
        return f"reference engine: {self.role} ({ROLES_DOC[self.role]})"

    def details(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "model": show(self.model_dir),
            "method": self.method,
            "dtype": f"{self.dtype} recorded; computes in float32 on the CPU",
            "limits": limits_dict(self.limits),
        }
        if self.weights:
            out["weights"] = {k: show(v) for k, v in self.weights.items()}
        if self.decoding:
            out["decoding"] = self.decoding
        out["output"] = show(self.output)
        return out


def cpu_serve_step(recipe, layout, repo_roles) -> ServeStep:
    """How the reference runtime serves either flavour: `specbuild serve` on the CPU tritonserver, loopback only."""
    t = recipe.triton
    argv = (
        "specbuild",
        "serve",
        show(layout.repository()),
        "--http-port",
        str(t.http_port),
        "--grpc-port",
        str(t.grpc_port),
        "--metrics-port",
        str(t.metrics_port),
    )
    info = {
        "server": "a system tritonserver if found, else the one bundled in nvidia-pytriton (CPU)",
        "binds": "127.0.0.1",
    }
    if len(repo_roles) > 1:
        info["baseline"] = f"served alongside from {show(layout.repository('baseline'))} on free ports"
    info["compile"] = "serves on free loopback ports, validates, then stops the server"
    return ServeStep(headline="serve the repository", argv=argv, info=info)
