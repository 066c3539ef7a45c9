"""The engine values a repository must agree with, read from each engine folder's config.json.

A Triton config that disagrees with its engine fails at load time or, worse, serves silently wrong (a lookahead
(W, N, G) that does not give the engine's max_draft_len aborts tritonserver, tensorrtllm_backend #710). The
repository writer calls `check_engines` before it writes anything.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from specbuild.errors import UserError
from specbuild.methods import method_for

if TYPE_CHECKING:
    from specbuild.recipe.schema import Recipe

# build_config keys the Triton configs depend on, and the recipe field that sets each.
CHECKED = {
    "max_batch_size": "build.max_batch_size",
    "max_beam_width": "build.max_beam_width",
    "max_draft_len": "speculation.max_draft_len",
    "speculative_decoding_mode": "speculation.method",
}


def read_engine_config(engine_dir: Path) -> dict:
    path = Path(engine_dir) / "config.json"
    try:
        config = json.loads(path.read_text())
    except FileNotFoundError:
        raise UserError(f"{path}: no engine config — build the engines first (specbuild compile), or point "
                        "--engines-dir at the folder that holds them") from None
    except (OSError, ValueError) as e:
        raise UserError(f"{path}: unreadable engine config ({e}) — rebuild the engine") from None
    if not isinstance(config.get("build_config"), dict):
        raise UserError(f"{path}: no build_config section — this is not a TensorRT-LLM/specbuild engine folder; "
                        "rebuild the engine")
    return config


def engine_problems(recipe: Recipe, role: str, engine_dir: Path, config: dict) -> list[str]:
    """Differences between an engine's config.json and what the recipe expects of the engine with this role."""
    from specbuild.plan import engine_limits

    expected = engine_limits(recipe, role)
    build = config["build_config"]
    where = Path(engine_dir) / "config.json"
    problems = []
    for key, field in CHECKED.items():
        want = expected[key]
        have = build.get(key, 0 if key == "max_draft_len" else None)
        if have is None or int(have) != int(want):
            problems.append(f"{where}: build_config.{key} is {have} but the recipe ({field}) needs {want}")
    runtime = (config.get("specbuild") or {}).get("runtime", "tensorrt-llm")
    if runtime != recipe.runtime:
        problems.append(f"{where}: the engine was built for the {runtime} runtime but the recipe says runtime: "
                        f"{recipe.runtime}")
    if role == "target":
        problems += method_engine_problems(recipe, where, build)
    return problems


def method_engine_problems(recipe: Recipe, where: Path, build: dict) -> list[str]:
    """Checks of the method's server-side settings against the engine (lookahead W/N/G, tree sizes)."""
    spec = recipe.speculation
    method = method_for(recipe)
    engine_len = int(build.get("max_draft_len", 0))
    problems = []
    if method.name == "lookahead":
        from specbuild.methods.lookahead import lookahead_max_draft_len

        w, n, g = spec.window_size, spec.ngram_size, spec.verification_set_size
        need = lookahead_max_draft_len(w, n, g)
        if need != engine_len:
            problems.append(f"{where}: build_config.max_draft_len is {engine_len} but lookahead (W={w}, N={n}, G={g}) "
                            f"needs (N-2) + (W-1+G)*(N-1) = {need}; tritonserver would abort at load (#710)")
    tree = getattr(spec, "tree", None) if method.name == "eagle" else getattr(spec, "choices", None)
    if method.name in ("medusa", "eagle") and tree is not None and len(tree) > engine_len:
        problems.append(f"{where}: the tree has {len(tree)} nodes but the engine's max_draft_len is {engine_len}")
    return problems


def check_engines(recipe: Recipe, engines: dict[str, tuple[str, Path]]) -> dict[str, dict]:
    """Read and check each core model's engine. `engines`: model name -> (engine role, engine folder).
    Returns the configs by model name; raises one UserError listing every mismatch."""
    configs, problems = {}, []
    for model, (role, folder) in engines.items():
        config = read_engine_config(folder)
        configs[model] = config
        problems += engine_problems(recipe, role, folder, config)
    if problems:
        raise UserError("the engines do not match the recipe; nothing was written:\n  " + "\n  ".join(problems)
                        + "\n  rebuild the engines from this recipe (specbuild compile) or fix the recipe")
    return configs
