"""The reference runtime in the llm-api flavour: the CPU rehearsal of TensorRT-LLM's LLM-API deployment.

The repository is the one NVIDIA documents (tensorrt_llm/config.pbtxt + 1/model.yaml, triton/llmapi/), with
specbuild's model.py in place of NVIDIA's: it reads the same model.yaml, loads the Hugging Face checkpoints
itself (no engine build, as the LLM does) and speaks the same tensor contract, decoding with the reference
runtime's executor (reference/core_models/llm_api/model.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

from specbuild.repository.llmapi.flavour import LlmApiFlavour
from specbuild.findings import Finding
from specbuild.plan import ServeStep
from specbuild.reference.checks import decoder_refusal, reference_findings
from specbuild.reference.steps import cpu_serve_step

# Releases whose model.yaml spelling of the draft length per batch size the rehearsal reads (llmapi_yaml.py)
REHEARSED_SCHEDULE_RELEASES = ("1.0", "1.1", "1.2")

MODEL = Path(__file__).resolve().parent / "core_models" / "llm_api" / "model.py"


class ReferenceLlmApiRuntime(LlmApiFlavour):
    name = "reference"
    summary = "specbuild's CPU model with the LLM-API contract (model.yaml), served by the CPU tritonserver"
    model_files_label = "specbuild's reference model (CPU) reading the same model.yaml"
    bundle_refusal = (
        "the reference runtime serves on CPU with `specbuild serve`; bundles run TensorRT-LLM in "
        "NVIDIA's tritonserver image (runtime: tensorrt-llm)"
    )

    def checks(self, recipe, spec, options) -> Iterator[Finding]:
        yield from self.flavour_checks(recipe, spec)
        yield from reference_findings(recipe, spec)
        refusal = decoder_refusal(spec)
        if refusal is not None:
            yield Finding(("speculation", "method"), refusal)
        a = recipe.llm_api
        if spec.draft_len_schedule and a.release not in REHEARSED_SCHEDULE_RELEASES:
            yield Finding(
                ("adaptive", "draft_len_schedule"),
                f"the CPU rehearsal reads draft_len_schedule as "
                "TensorRT-LLM 1.2 does (a key is the batch size its length starts at); for "
                f"{a.release} model.yaml carries the later spelling (a key is the largest batch size of its "
                "length), which it does not rehearse — rehearse with llm_api.release: 1.2",
                also=(("llm_api", "release"),),
            )
        for key, value in (("instances", a.instances), ("nodes", a.nodes)):
            if value != 1:
                yield Finding(
                    ("llm_api", key),
                    f"is {value} but the reference runtime serves one CPU process — set "
                    f"{key}: 1, or runtime: tensorrt-llm",
                )

    def model_files(self) -> dict[str, Path]:
        return {"model.py": MODEL}

    def serve_step(self, recipe, spec, layout, repo_roles) -> ServeStep:
        return cpu_serve_step(recipe, layout, repo_roles)

    def launcher(self, repository: Path) -> Path | None:
        return None  # specbuild starts the CPU tritonserver itself (the script is there for the GPU layout)
