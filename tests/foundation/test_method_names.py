"""A method's name is written in its pack only (specbuild/methods/<name>/): anywhere else in the package a runtime,
a flavour or a stage asks the pack (specbuild.methods.pack_for, METHODS) instead of naming the method. A string
literal equal to a registered method's name outside its pack fails here, except in the places EXCEPTED lists with
the reason; an exception that no longer excuses anything fails too (the list only shrinks)."""

from __future__ import annotations

import ast
from pathlib import Path

from specbuild.methods import METHODS

PACKAGE = Path(__file__).resolve().parents[2] / "pipeline" / "specbuild"
# The method `none` is not checked: its name is also the value of other settings (build.quantization,
# deploy.slurm.container_runtime, serve's model_control, matplotlib's fmt), so a literal "none" says nothing of
# which one it is; the recipe and the runtimes tell no speculation by its pack (Params None, NO_SPECULATION).
# Nor is `auto` (TensorRT-LLM's AUTO): "auto" is also the value of model.dtype, prompt_format, torch_dtype and
# TensorRT-LLM's sampler_type and load_format, and nothing outside methods/auto/ tells the method by that literal.
SHARED_WORDS = {"auto"}
NAMES = {name for name, pack in METHODS.items() if pack.Params is not None and name not in SHARED_WORDS}
# Where a method's name may stand outside its pack (path prefix relative to the package -> why)
EXCEPTED = {
    "zoo/": "the zoo trains each model into the folder named after its stage (checkpoints/<zoo>/medusa, eagle, "
    "eagle3), which recipes, tests and its manifest name",
    "repository/engine/models/": "copied byte for byte into every repository (their hashes are golden, "
    "tests/golden/repositories): the BLS keeps its literal of the methods it drafts, while the parameter naming "
    "the method (speculative_method) comes from the pack",
    "standalone/": "copied byte for byte beside our Triton models, as above",
    "adapt/modelopt/worker.py": "runs in Model-Optimizer's own environment, not specbuild's: its 'eagle' is "
    "Model-Optimizer's mode name (mtsp.convert(model, [('eagle', config)]), modelopt/torch/speculative@0.47.0)",
}


def method_names(path: Path, names: set[str]) -> list[str]:
    """`file:line: 'name'` for each string literal in the file that is one of `names`."""
    tree = ast.parse(path.read_text(), filename=str(path))
    return [
        f"{path.relative_to(PACKAGE) if path.is_relative_to(PACKAGE) else path.name}:{node.lineno}: {node.value!r}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names
    ]


def _outside_packs() -> dict[str | None, list[str]]:
    """The literals outside their packs, by the exception that excuses them (None: none does)."""
    found: dict[str | None, list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        names = {n for n in NAMES if not rel.startswith(f"methods/{n}/")}
        hits = method_names(path, names)
        if hits:
            excuse = next((prefix for prefix in EXCEPTED if rel.startswith(prefix)), None)
            found.setdefault(excuse, []).extend(hits)
    return found


def test_no_method_name_outside_its_pack():
    found = _outside_packs()
    assert not found.get(None), (
        "a method named outside its pack: ask the pack (specbuild.methods.pack_for(spec), METHODS) or move the "
        "code into specbuild/methods/<name>/:\n" + "\n".join(found[None])
    )


def test_every_exception_still_excuses_something():
    found = _outside_packs()
    stale = [prefix for prefix in EXCEPTED if prefix != "standalone/" and not found.get(prefix)]
    assert not stale, f"exceptions with nothing left to excuse (remove them): {stale}"


def test_the_finder_finds_literals(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text(
        '"""medusa in a sentence is prose."""\nif method == "medusa" or x in ("eagle3", "other"):\n    pass\n'
    )
    assert method_names(probe, {"medusa", "eagle3"}) == ["probe.py:2: 'medusa'", "probe.py:2: 'eagle3'"]
    assert NAMES >= {"medusa", "eagle", "eagle3", "draft_target", "prompt_lookup", "lookahead", "mtp"}
