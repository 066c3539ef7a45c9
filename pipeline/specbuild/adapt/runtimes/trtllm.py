"""adapt on a GPU machine through TensorRT-LLM's LLM API (PyTorch backend). Written against the LLM API's argument
classes, checked on the CPU against the test double (tests/doubles/tensorrt_llm); not run on a GPU here (docs/gpu.md).

- answers (the teacher pass and the gate): `LLM(model=<target>, speculative_config=<the head's>)` with greedy
  `SamplingParams(max_tokens, temperature=0, end_id)` (a training prompt whose request gave sampling settings: those,
  seeded), one streamed request at a time per prompt group, so that
  each request's verification steps are its streamed responses (stream_interval 1: one response per step,
  tensorrt_llm/_torch/pyexecutor/py_executor.py `_handle_responses`) and its accepted drafts are
  (answer tokens - steps - 1): the per-request counters the LLM API does not return (PR #19311 open, 2026-09);
- hidden states: a second LLM with `speculative_config: {decoding_type: SaveState, output_directory, write_interval,
  file_prefix, eagle3_layers_to_capture: layers + [-1]}` (llm_args.py `SaveHiddenStatesDecodingConfig`: batch 1, no
  CUDA graphs) over prompt + answer with max_tokens 1; it writes `<file_prefix>_<i>.pt` holding `input_ids`,
  `hidden_state` (the final post-norm state) and `aux_hidden_states` (the captured layers) per request
  (tensorrt_llm/_torch/speculative/save_hidden_state.py), read back here in request order;
- training: the same trainer, on CUDA (specbuild.adapt.train, device auto).

The engine flavour's heads (EAGLE-1/2, Medusa: trtllm-build engines) decode their gate through the LLM API only on
releases that still load them (<= 1.3.0rc20); adapt refuses that combination elsewhere with the reason."""

from __future__ import annotations

import json
from pathlib import Path

from specbuild.adapt.runtimes.base import Decoded, Progress, States
from specbuild.adapt.sampling import TeacherSampling
from specbuild.errors import UserError
from specbuild.repository.llmapi import model_yaml
from specbuild.runtimes.build import Build
from specbuild.speculation import Speculation

SAVE_STATE = "SaveState"
FILE_PREFIX = "adapt"
WRITE_INTERVAL = 1  # a file per request: request order is file order


def save_state_config(output_directory: Path, layers: tuple[int, ...] | None) -> dict:
    """The SaveState decoding config of the hidden-state pass (llm_args.py SaveHiddenStatesDecodingConfig: its
    eagle3_layers_to_capture is a set; -1 is the final post-norm state, always asked for here)."""
    config = {
        "decoding_type": SAVE_STATE,
        "output_directory": str(output_directory),
        "write_interval": WRITE_INTERVAL,
        "file_prefix": FILE_PREFIX,
    }
    config["eagle3_layers_to_capture"] = sorted({*(layers or ()), -1})
    return config


def teacher_model_yaml(build: Build, spec: Speculation, output_directory: Path | None, layers) -> dict:
    """The LLM arguments of a pass: the recipe's model.yaml for the target (its speculation with `spec`'s head), or
    with the SaveState config when `output_directory` is given. The files docs/gpu.md shows are these."""
    args = model_yaml.model_yaml(build.recipe, spec, role="target")
    args.pop("triton_config", None)
    if output_directory is not None:
        args["speculative_config"] = save_state_config(output_directory, layers)
        args["cuda_graph_config"] = None  # SaveState forces no CUDA graphs
        args["max_batch_size"] = 1  # and batch 1
    return args


def sampling_params(s: TeacherSampling | None, max_tokens: int, end_id: int | None, pad_id: int | None):
    """The LLM API's SamplingParams of one teacher request: greedy, or the request's temperature, top_p, top_k, seed
    and the penalties it sets (the fields Triton's llmapi model.py hands SamplingParams: trtllm-llmapi-path.md 5;
    repetition_penalty, not among them, only when the request sets it)."""
    from tensorrt_llm import SamplingParams

    if s is None:
        return SamplingParams(max_tokens=max_tokens, temperature=0.0, end_id=end_id, pad_id=pad_id)
    penalties = {
        name: value
        for name, value, off in (
            ("presence_penalty", s.presence_penalty, 0.0),
            ("frequency_penalty", s.frequency_penalty, 0.0),
            ("repetition_penalty", s.repetition_penalty, 1.0),
        )
        if value != off
    }
    return SamplingParams(
        max_tokens=max_tokens,
        temperature=s.temperature,
        top_p=s.top_p,
        top_k=s.top_k or None,
        seed=s.seed,
        end_id=end_id,
        pad_id=pad_id,
        **penalties,
    )


class TrtllmAdapt:
    description = "TensorRT-LLM's LLM API (GPU): answers from the target, hidden states through SaveState"

    def __init__(self, build: Build, work: Path):
        self.build = build
        self.work = Path(work)
        self._target = None

    def _llm(self, args: dict):
        try:
            from tensorrt_llm import LLM
        except ImportError as e:
            raise UserError(
                f"adapt on runtime tensorrt-llm runs on the GPU machine with TensorRT-LLM installed ({e}) — run it "
                "there (docs/gpu.md), or adapt on the CPU with a runtime: reference copy of the recipe"
            ) from None
        return LLM(**args)

    def decode(
        self,
        spec: Speculation,
        prompts: list[list[int]],
        max_tokens: int,
        *,
        end_id: int | None,
        pad_id: int | None = None,
        progress: Progress | None = None,
        sampling: list[TeacherSampling | None] | None = None,
        limits: list[int] | None = None,
    ) -> list[Decoded]:
        llm = self._llm(teacher_model_yaml(self.build, spec, None, None))
        sampling = sampling or [None] * len(prompts)
        limits = limits or [max_tokens] * len(prompts)
        out = []
        try:
            for i, prompt in enumerate(prompts):
                params = sampling_params(sampling[i], limits[i], end_id, pad_id)
                chunks = list(llm.generate_async(prompt, sampling_params=params, streaming=True))
                ids = list(chunks[-1].outputs[0].token_ids) if chunks else []
                steps = max(len(chunks) - 1, 1) if ids else 0  # the prefill's token is not a verification step
                accepted = max(len(ids) - 1 - steps, 0)
                out.append(Decoded(ids, str(chunks[-1].outputs[0].finish_reason), 0, accepted, steps, []))
                if progress and (i + 1) % 16 == 0:
                    progress(f"decoded {i + 1}/{len(prompts)}")
        finally:
            llm.shutdown()
        return out

    def states(self, rows: list[list[int]], layers: tuple[int, ...] | None) -> States:
        import torch
        from tensorrt_llm import SamplingParams

        folder = self.work / "save_state"
        folder.mkdir(parents=True, exist_ok=True)
        llm = self._llm(teacher_model_yaml(self.build, self.build.spec, folder, layers))
        try:
            llm.generate(rows, sampling_params=SamplingParams(max_tokens=1, temperature=0.0))
        finally:
            llm.shutdown()
        files = sorted(folder.glob(f"{FILE_PREFIX}_*.pt"), key=lambda p: int(p.stem.rsplit("_", 1)[1]))
        saved = [torch.load(f, map_location="cpu", weights_only=True) for f in files]
        if len(saved) != len(rows):
            raise UserError(
                f"{folder}: SaveState wrote {len(saved)} files for {len(rows)} requests — check the TensorRT-LLM "
                "release's SaveState (write_interval 1 writes one per request)"
            )
        final = [s["hidden_state"].float()[: len(r)] for s, r in zip(saved, rows)]
        captured = [s["aux_hidden_states"].float()[: len(r)] for s, r in zip(saved, rows)] if layers else None
        return States(final, captured)

    def target_model(self):
        if self._target is None:
            from transformers import AutoModelForCausalLM

            self._target = AutoModelForCausalLM.from_pretrained(str(self.build.recipe.model_dir), dtype="auto")
        return self._target

    def close(self) -> None:
        self._target = None


def describe_files(build: Build, spec: Speculation, work: Path, layers) -> str:
    """The two LLM argument files of the GPU passes, as YAML (what docs/gpu.md shows and the double checks)."""
    answers = teacher_model_yaml(build, spec, None, None)
    states = teacher_model_yaml(build, spec, work / "save_state", layers)
    return json.dumps({"answers": answers, "states": states}, indent=2, default=str)
