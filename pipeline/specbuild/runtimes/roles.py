"""The engines a build makes, one per role (target, draft, baseline), each resolved once when the build is
(specbuild.runtimes.build.resolve_build): the limits its engine carries, what it is made from, and the method's part
of it. The runtimes' engine steps read these; nothing derives an engine's limits again but the repository writer,
which reads built engines back against the same rule (repository/engine/engine_check.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specbuild.facts.engine_facts import EngineLimits, expected_limits
from specbuild.methods import pack_for
from specbuild.speculation import NO_SPECULATION
from specbuild.standalone import draft_len_schedule

if TYPE_CHECKING:
    from specbuild.methods.pack import Recipe
    from specbuild.speculation import Speculation


@dataclass(frozen=True)
class Role:
    """One engine of a build. Only the target carries speculation; the draft and the baseline are plain builds."""

    name: str  # target | draft | baseline
    limits: EngineLimits  # the build_config its engine carries (as trtllm-build writes it)
    model_dir: Path  # the checkpoint it is made from (the draft: the draft model's)
    tokenizer_dir: Path | None  # the tokenizer it serves with (None: the draft, which has none of its own)
    method: str  # the method its engine decodes with (no speculation for the draft and the baseline)
    weights: dict[str, Path] = field(default_factory=dict)  # method weights beside the model, by folder name
    pretrained: dict[str, Any] = field(default_factory=dict)  # the method's pretrained_config keys
    decoding: dict[str, Any] = field(default_factory=dict)  # the engine folder's specbuild.decoding keys


def role_names(recipe: Recipe, spec: Speculation) -> list[str]:
    """The engines a compile builds: the target, the draft model's engine, the baseline."""
    out = ["target"]
    if spec.has_draft_engine:
        out.append("draft")
    if recipe.builds_baseline:
        out.append("baseline")
    return out


def resolve_roles(recipe: Recipe, spec: Speculation) -> dict[str, Role]:
    """Every role of `role_names`, resolved (the method's keys asked of its pack once)."""
    pack = pack_for(spec)
    decoding = pack.decoding(spec)
    if spec.draft_len_schedule:  # the draft length per number of requests in flight (read by every method)
        decoding[draft_len_schedule.PARAMETER] = draft_len_schedule.as_text(spec.draft_len_schedule)
    out = {}
    for name in role_names(recipe, spec):
        limits = expected_limits(recipe, spec, name)
        if name == "target":
            out[name] = Role(
                name,
                limits,
                recipe.model_dir,
                recipe.tokenizer_dir,
                spec.method,
                weights=spec.weights,
                pretrained=pack.pretrained_config(spec),
                decoding=decoding,
            )
        elif name == "draft":
            assert spec.draft_checkpoint is not None  # role_names has a draft for a draft engine only
            out[name] = Role(name, limits, spec.draft_checkpoint, None, NO_SPECULATION.method)
        else:
            out[name] = Role(name, limits, recipe.model_dir, recipe.tokenizer_dir, NO_SPECULATION.method)
    return out


__all__ = ["Role", "resolve_roles", "role_names"]
