"""adapt on the reference runtime (CPU): heads decode through the reference executor, exactly as the served core runs
them, and the target's hidden states come from the runtime's own forward (reference/decoder/model.py).

- engine flavour: each head gets its engine folders, written by the runtime's own engine steps (the target, and the
  draft model's engine for draft-target) under the work folder, and loaded as the served core loads them;
- llm-api flavour: each head gets the model.yaml the repository would carry, read by the CPU rehearsal and made
  into in-memory engines (reference/llmapi_engine.py), as its served model does.

Requests are greedy unless the teacher pass asks a record's sampling settings (SamplingConfig seeded per request, the
penalties in the flavour's order: the C++ sampling kernel's for engines, TorchSampler's for the llm-api core), with
the end id the served preprocessing sends, the whole part at once (the executor batches up to build.max_batch_size);
acceptance counters are the executor's own (RequestStats), per request."""

from __future__ import annotations

import hashlib
from pathlib import Path

import torch

from specbuild.adapt.runtimes.base import Decoded, Progress, States
from specbuild.adapt.sampling import TeacherSampling
from specbuild.plan import Layout
from specbuild.runtimes.roles import resolve_roles
from specbuild.reference.decoder.executor import Executor, Request, SamplingConfig
from specbuild.reference.decoder.model import CausalLM
from specbuild.reference.engine_folder import load_engine
from specbuild.reference.llmapi_engine import build_engines
from specbuild.reference.llmapi_yaml import read_model_yaml
from specbuild.repository.llmapi import model_yaml
from specbuild.runtimes.build import Build
from specbuild.speculation import Speculation

STATES_BATCH = 8  # rows per forward of the hidden-state pass


class _ReferenceBase:
    penalties_before_temperature = False  # the served core's order (reference/decoder/sampling.py)

    def __init__(self, build: Build, work: Path):
        self.build = build
        self.work = Path(work)
        self._engines: dict[str, tuple] = {}
        self._target: CausalLM | None = None

    def _key(self, spec: Speculation) -> str:
        head = getattr(spec.params, "path", None)
        return hashlib.sha256(str(head).encode()).hexdigest()[:16]

    def _engines_for(self, spec: Speculation, progress: Progress | None) -> tuple:
        raise NotImplementedError

    def engines(self, spec: Speculation, progress: Progress | None = None) -> tuple:
        key = self._key(spec)
        if key not in self._engines:
            self._engines[key] = self._engines_for(spec, progress)
        return self._engines[key]

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
        target, draft = self.engines(spec, progress)
        executor = Executor(target, draft)
        sampling = sampling or [None] * len(prompts)
        limits = limits or [max_tokens] * len(prompts)
        requests = [
            Request(
                input_ids=list(p),
                max_new_tokens=limit,
                sampling=self.sampling_config(s),
                end_id=end_id,
                pad_id=pad_id,
            )
            for p, s, limit in zip(prompts, sampling, limits)
        ]
        ids = [executor.enqueue(r) for r in requests]
        outputs: dict[int, list[int]] = {rid: [] for rid in ids}
        done: dict[int, Decoded] = {}
        with torch.inference_mode():
            while executor.has_work():
                for event in executor.step():
                    outputs[event.request_id] += event.new_tokens
                    if event.finished:
                        stats = event.stats
                        done[event.request_id] = Decoded(
                            outputs[event.request_id],
                            str(event.finish_reason),
                            stats.total_draft_tokens,
                            stats.total_accepted_draft_tokens,
                            stats.steps,
                            list(stats.accepted_per_step),
                        )
                        if progress and len(done) % 16 == 0:
                            progress(f"decoded {len(done)}/{len(ids)}")
        return [done[rid] for rid in ids]

    def sampling_config(self, s: TeacherSampling | None) -> SamplingConfig:
        if s is None:
            return SamplingConfig()
        return SamplingConfig(
            temperature=s.temperature,
            top_k=s.top_k,
            top_p=s.top_p,
            seed=s.seed,
            repetition_penalty=s.repetition_penalty,
            presence_penalty=s.presence_penalty,
            frequency_penalty=s.frequency_penalty,
            penalties_before_temperature=self.penalties_before_temperature,
        )

    def target_lm(self) -> CausalLM:
        if self._target is None:
            recipe = self.build.recipe
            self._target = CausalLM.from_pretrained(recipe.model_dir, dtype="float32")
        return self._target

    def target_model(self):
        return self.target_lm().hf

    def states(self, rows: list[list[int]], layers: tuple[int, ...] | None) -> States:
        """One forward of the runtime's target over each whole row (prompt + answer), STATES_BATCH rows at a time."""
        model = self.target_lm()
        final: list[torch.Tensor] = []
        captured: list[torch.Tensor] = []
        with torch.inference_mode():
            for start in range(0, len(rows), STATES_BATCH):
                chunk = rows[start : start + STATES_BATCH]
                cache = model.new_cache(len(chunk))
                out = model.forward(cache, chunk, logits="none", capture_layers=layers or None)
                for r, row in enumerate(chunk):
                    final.append(out.hidden[r, : len(row)].float().clone())
                    if layers:
                        captured.append(out.captured[r, : len(row)].float().clone())
        return States(final, captured if layers else None)

    def close(self) -> None:
        self._engines.clear()
        self._target = None


class ReferenceEngineAdapt(_ReferenceBase):
    description = "the reference runtime (CPU; engine folders, as compile builds them)"

    def _engines_for(self, spec: Speculation, progress: Progress | None) -> tuple:
        build = self.build
        recipe, runtime = build.recipe, build.runtime
        key = self._key(spec)
        root = self.work / "engines" / key
        layout = Layout(root, root / "repo", root / "report", recipe.name)
        roles = resolve_roles(recipe, spec)  # this spec's (the adapted head's), not the build's
        steps = [
            s for s in runtime.engine_steps(recipe, spec, roles, layout, build.options) if s.role in ("target", "draft")
        ]
        runtime.build_engines(steps, recipe, layout, progress=progress)
        target = load_engine(layout.engine("target"))
        draft = load_engine(layout.engine("draft")) if any(s.role == "draft" for s in steps) else None
        return target, draft


class ReferenceLlmApiAdapt(_ReferenceBase):
    description = "the reference runtime (CPU; the llm-api rehearsal reading model.yaml)"
    penalties_before_temperature = True  # TorchSampler's order, as the llm-api core asks it

    def _engines_for(self, spec: Speculation, progress: Progress | None) -> tuple:
        recipe = self.build.recipe
        folder = self.work / "model_yaml" / self._key(spec)
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / model_yaml.FILE
        path.write_text(model_yaml.dump(model_yaml.model_yaml(recipe, spec, role="target")))
        return build_engines(read_model_yaml(path))
