"""Every method × runtime × flavour is decided: the runtime either translates a described recipe of the method into
its dialect (the Triton parameters or model.yaml it writes for the target differ from those of the same recipe
without speculation), or refuses the method with the reason (a check finding at speculation.method that names the
method, says why and what to do instead). No cell is neither.

The recipes are the examples under recipes/ (the runtime's folder first, the flavour's file first), retargeted to
the cell's runtime and flavour; a method without an example gets its section from SECTIONS below."""

from __future__ import annotations

from pathlib import Path

import pytest
from ruamel.yaml import YAML

from specbuild.methods import METHODS, describe
from specbuild.plan import Layout
from specbuild.recipe.schema import Recipe
from specbuild.runtimes import REGISTRY, get_runtime
from specbuild.runtimes.base import BuildOptions

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "recipes"
# Methods no example recipe shows (none today: MTP's are recipes/*/llmapi_mtp.yaml): their speculation section, put
# into the llm-api EAGLE-3 example
SECTIONS: dict[str, dict] = {}
WHERE = ("speculation", "method")


def _example(method: str, runtime: str, flavour: str) -> Path | None:
    names = [f"{method}.yaml", f"llmapi_{method}.yaml"]
    if flavour == "llm-api":
        names.reverse()
    folders = [runtime] + sorted(p.name for p in EXAMPLES.iterdir() if p.is_dir() and p.name != runtime)
    found = [EXAMPLES / folder / name for name in names for folder in folders if (EXAMPLES / folder / name).exists()]
    return found[0] if found else None


def _recipe(method: str, runtime: str, flavour: str, *, speculation: dict | None = None) -> Recipe:
    path = _example(method, runtime, flavour)
    if path is None:
        path = _example("eagle3", runtime, "llm-api")
        speculation = speculation or SECTIONS[method]
    data = YAML(typ="safe").load(path.read_text())
    data.update(runtime=runtime, flavour=flavour)
    if speculation is not None:
        data["speculation"] = speculation
    recipe = Recipe.model_validate(data)
    recipe._source = path.resolve()  # relative checkpoints resolve beside the example
    return recipe


def _served(recipe: Recipe, tmp_path: Path) -> dict:
    """What `plan` shows of the target's repository: the Triton parameters, or model.yaml, the runtime writes."""
    layout = Layout(tmp_path / "engines", tmp_path / "repo", tmp_path / "reports", recipe.name)
    return get_runtime(recipe.runtime, recipe.flavour).repository_info(recipe, describe(recipe), layout, "target")


CELLS = [(method, runtime, flavour) for method in METHODS for runtime, flavour in REGISTRY]


def test_every_method_has_a_recipe():
    missing = [m for m in METHODS if _example(m, "reference", "engine") is None and m not in SECTIONS]
    assert not missing, f"no example recipe and no section in SECTIONS for {missing}"


@pytest.mark.parametrize("method,runtime,flavour", CELLS, ids=lambda v: str(v))
def test_cell_is_a_translation_or_a_refusal(method, runtime, flavour, tmp_path):
    recipe = _recipe(method, runtime, flavour)
    spec = describe(recipe)
    assert spec.method == method
    findings = list(get_runtime(runtime, flavour).checks(recipe, spec, BuildOptions()))
    refusals = [f for f in findings if f.path == WHERE]
    if refusals:
        for f in refusals:  # the reason, then what to do instead
            assert method in f.message.lower(), f"a refusal that does not name {method}: {f.message}"
            assert " — " in f.message, f"a refusal without a remedy: {f.message}"
        return
    translated = _served(recipe, tmp_path)
    plain = _served(_recipe(method, runtime, flavour, speculation={"method": "none"}), tmp_path)
    if spec.speculative:
        assert translated != plain, f"{runtime}/{flavour} neither refuses nor translates {method}"
    else:
        assert translated == plain
