"""The engine values a repository must agree with, read from each engine folder's config.json.

A Triton config that disagrees with its engine fails at load time or, worse, serves silently wrong (a lookahead
(W, N, G) that does not give the engine's max_draft_len aborts tritonserver, tensorrtllm_backend #710). The
repository writer calls `check_engines` before it writes anything.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from specbuild.facts.engine_facts import CONFIG, expected_limits, limit_mismatches, read_engine_config
from specbuild.errors import UserError
from specbuild.methods.lookahead import LookaheadWindow
from specbuild.speculation import StaticTree

if TYPE_CHECKING:
    from specbuild.recipe.schema import Recipe
    from specbuild.runtimes.base import Runtime
    from specbuild.speculation import Speculation

# build_config keys the Triton configs depend on
CHECKED = ("max_batch_size", "max_beam_width", "max_draft_len", "speculative_decoding_mode")


def engine_problems(
    recipe: Recipe, spec: Speculation, runtime: Runtime, role: str, engine_dir: Path, config: dict
) -> list[str]:
    """Differences between an engine's config.json and what the recipe expects of the engine with this role
    (`spec`, `runtime`: what the recipe resolved to, specbuild.runtimes.build)."""
    where = Path(engine_dir) / CONFIG
    problems = [f"{where}: {m}" for m in limit_mismatches(config, expected_limits(recipe, spec, role), CHECKED)]
    if not runtime.owns_engine(config):
        built_by = (config.get("specbuild") or {}).get("runtime", "tensorrt-llm")
        problems.append(
            f"{where}: the engine was built for the {built_by} runtime but the recipe says runtime: {recipe.runtime}"
        )
    if role == "target":
        engine_len = int((config["build_config"]).get("max_draft_len", 0) or 0)
        if isinstance(w := spec.params, LookaheadWindow) and engine_len != spec.max_draft_len:
            problems.append(
                f"{where}: build_config.max_draft_len is {engine_len} but lookahead (W={w.window_size}, "
                f"N={w.ngram_size}, G={w.verification_set_size}) needs (N-2) + (W-1+G)*(N-1) = "
                f"{spec.max_draft_len}; tritonserver would abort at load (#710)"
            )
        if isinstance(spec.tree, StaticTree) and len(spec.tree.choices) > engine_len:
            problems.append(
                f"{where}: the tree has {len(spec.tree.choices)} nodes but the engine's max_draft_len is {engine_len}"
            )
    return problems


def check_engines(
    recipe: Recipe, spec: Speculation, runtime: Runtime, engines: dict[str, tuple[str, Path]]
) -> dict[str, dict]:
    """Read and check each core model's engine. `engines`: model name -> (engine role, engine folder).
    Returns the configs by model name; raises one UserError listing every mismatch."""
    configs, problems = {}, []
    for model, (role, folder) in engines.items():
        config = read_engine_config(folder)
        configs[model] = config
        problems += engine_problems(recipe, spec, runtime, role, folder, config)
    if problems:
        raise UserError(
            "the engines do not match the recipe; nothing was written:\n  "
            + "\n  ".join(problems)
            + "\n  rebuild the engines from this recipe (specbuild compile) or fix the recipe"
        )
    return configs
