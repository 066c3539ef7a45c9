"""A tuned recipe from a measured concurrency sweep: `specbuild validate --write-tuned-recipe PATH` (and compile's).

The performance check measures speculative / baseline output tokens per second at each concurrency level. Where
speculation stops paying (the median speedup of a level where it was on is below 1), the tuned recipe's
`adaptive.draft_len_schedule` turns it off, from the interpolated crossover on (TensorRT-LLM 1.2's meaning: a key
is the batch size its draft length starts at); below, the draft lengths stay as they were (the full length, or
the recipe's own schedule). Levels where the recipe's schedule already had speculation off say nothing about it
(their ratio is noise around 1) and are left out. The sweep measured only the lengths it ran, so a tuned
schedule only turns speculation off, never guesses a shorter length.

The recipe file is rewritten with its comments and layout kept (ruamel round trip); relative paths are rewritten
for the new file's folder.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specbuild.files.atomic import partial_path
from specbuild.standalone import draft_len_schedule
from specbuild.errors import UserError

if TYPE_CHECKING:
    from specbuild.recipe.schema import Recipe
    from specbuild.speculation import Speculation
    from specbuild.validate.checks.base import CheckResult


def measured_speedups(performance: CheckResult | None) -> list[tuple[int, float]]:
    """(concurrency, speedup) per level from the performance check's details (`speedup`: the level's median over
    its rounds, or the ratio of its totals), ascending; [] when nothing was measured against a baseline."""
    if performance is None:
        return []
    points = []
    for entry in performance.details.get("speedup") or []:
        value = entry.get("speedup")
        if value is not None and math.isfinite(value):
            points.append((int(entry["concurrency"]), float(value)))
    return sorted(points)


@dataclass(frozen=True)
class Tuning:
    schedule: dict[int, int] | None  # the tuned draft_len_schedule; None: leave the recipe's speculation as it is
    why: str  # one sentence for the user


def tuned_schedule(spec: Speculation, points: list[tuple[int, float]], max_batch_size: int) -> Tuning:
    """The schedule that turns speculation off where the sweep saw it stop paying (see the module docstring)."""
    full = spec.full_draft_length
    if not spec.speculative or full is None:
        raise UserError(
            f"no draft length to tune for speculation.method {spec.method} — "
            "--write-tuned-recipe needs a method whose draft length a draft_len_schedule scales"
        )
    if not points:
        raise UserError(
            "the performance check measured no speedup (it needs the baseline deployment: "
            "--baseline-url, and the performance check) — nothing to tune from"
        )
    current = list(spec.draft_len_schedule or [(1, full)])
    on = [(c, v) for c, v in points if draft_len_schedule.draft_length(current, c) > 0]
    shown = ", ".join(f"{v:.2f}x at {c}" for c, v in points)
    if on and on[0][0] == 1 and on[0][1] < 1.0:
        raise UserError(
            f"speculation does not pay at concurrency 1 ({on[0][1]:.2f}x): a draft_len_schedule keeps "
            "the full length at batch size 1, so no schedule helps — use a cheaper method or "
            "smaller tree, or method: none"
        )
    losing = next((i for i, (_, v) in enumerate(on) if v < 1.0), None)
    if losing is None:
        return Tuning(None, f"speculation paid wherever it was on ({shown}): the recipe stays as it is")
    c1, v1 = on[losing]
    off = c1
    if losing > 0:  # interpolate the crossover on log2(concurrency), as the performance check does
        c0, v0 = on[losing - 1]
        x = math.log2(c0) + (v0 - 1.0) / (v0 - v1) * (math.log2(c1) - math.log2(c0))
        off = min(c1, max(c0 + 1, math.ceil(2.0**x - 1e-9)))
    kept = {b: v for b, v in current if b < off}
    kept[off] = 0
    if off > max_batch_size:
        return Tuning(
            None,
            f"speculation stops paying at {off} requests, beyond build.max_batch_size "
            f"{max_batch_size}: the recipe stays as it is",
        )
    return Tuning(
        dict(sorted(kept.items())),
        f"speculation stopped paying at concurrency {c1} ({v1:.2f}x; "
        f"sweep: {shown}): off from {off} requests in flight on",
    )


def write_tuned_recipe(recipe: Recipe, out: Path, schedule: dict[int, int]) -> Path:
    """Write the recipe file again at `out`, with `adaptive.draft_len_schedule: schedule`."""
    from ruamel.yaml import YAML
    from ruamel.yaml.comments import CommentedMap

    if recipe.source is None:
        raise UserError("--write-tuned-recipe needs a recipe read from a file")
    yaml = YAML(typ="rt")
    yaml.preserve_quotes = True
    data = yaml.load(recipe.source.read_text())
    out = Path(out).expanduser().absolute()
    if out.parent.resolve() != recipe.base_dir.resolve():
        _move_relative_paths(data, type(recipe), recipe.base_dir.resolve(), out.parent.resolve(), recipe)
    entries = CommentedMap((int(k), int(v)) for k, v in sorted(schedule.items()))
    entries.fa.set_flow_style()
    section = data.get("adaptive")
    if not isinstance(section, dict):
        section = CommentedMap()
        data["adaptive"] = section
    section["draft_len_schedule"] = entries
    import io

    buf = io.StringIO()
    yaml.dump(data, buf)
    if not out.parent.is_dir():
        raise UserError(f"--write-tuned-recipe {out}: the folder {out.parent} does not exist — create it first")
    partial = partial_path(out)  # nothing half-written: the file appears complete or not at all
    try:
        partial.write_text(buf.getvalue())
        os.replace(partial, out)
    finally:
        partial.unlink(missing_ok=True)
    return out


def _move_relative_paths(data: Any, model: type, old: Path, new: Path, instance: Any) -> None:
    """Rewrite the relative path values of `data` (a recipe mapping) so they name the same files from `new`."""
    from pydantic import BaseModel

    if not isinstance(data, dict):
        return
    for name, field in model.model_fields.items():
        if name not in data:
            continue
        value = data[name]
        sub = getattr(instance, name, None)
        if isinstance(sub, BaseModel):
            _move_relative_paths(value, type(sub), old, new, sub)
        elif (
            isinstance(value, str)
            and _is_path_field(field.annotation)
            and not Path(value).is_absolute()
            and not value.startswith("~")
        ):
            data[name] = os.path.relpath(old / value, new)


def _is_path_field(annotation: Any) -> bool:
    from typing import get_args

    return annotation is Path or any(_is_path_field(a) for a in get_args(annotation))
