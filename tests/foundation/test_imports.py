"""Imports of specbuild modules made inside functions: each one that remains, and why.

The layers in pyproject.toml ([tool.importlinter], checked by `lint-imports` in CI) count these imports too, but
they do not say why an import hides in a function. This test does: every in-function import of a specbuild module
is listed in ALLOWED with its reason, a new one fails until it is listed, and one that is gone fails until its entry
is removed (the list only shrinks). Two reasons are checked here, from the package's module-level imports alone:
CIRCLE (the imported module already imports the importer at module level, so a module-level import would be
circular) and HEAVY (the imported module pulls an optional dependency the importer does not). The others say what
a reader needs to keep or move them; UNREVIEWED entries have no reason found yet: hoist them or give one.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

PIPELINE = Path(__file__).resolve().parents[2] / "pipeline"
# What `check` runs without (pyproject.toml: the reference, triton, deploy extras; tensorrt_llm on a GPU machine)
OPTIONAL = {"torch", "transformers", "tokenizers", "safetensors", "sentencepiece", "tritonclient", "matplotlib",
            "numpy", "kubernetes_validate", "tensorrt_llm", "pytriton", "google", "jsonschema"}

CIRCLE = "a module-level import would be circular"
HEAVY = "the imported module pulls an optional dependency (torch, numpy, ...) that the importer does not"
CORE_MODEL = "a Triton Python model: it loads the decoder when the server initialises it, not when it reads the file"
START_UP = "a command loads its own stage only when it runs (`check` runs with the core dependencies alone)"
UNREVIEWED = "no reason found: neither circular nor heavy at module level; hoist it or name the reason"

# (importer, imported), both relative to `specbuild.`
ALLOWED = {
    ("cli", "step_store"): START_UP,
    ("cli", "output.commands"): START_UP,
    ("cli", "output.console"): START_UP,
    ("cli", "output.events"): START_UP,
    ("cli", "output.steps"): START_UP,
    ("cli", "provenance"): START_UP,
    ("cli", "validate.compare"): START_UP,
    ("compile", "validate.report.terminal"): UNREVIEWED,
    ("step_cache", "validate.checks.base"): HEAVY,
    ("step_cache", "validate.result"): HEAVY,
    ("cli", "compile"): START_UP,
    ("cli", "hub"): START_UP,
    ("cli", "load"): START_UP,
    ("cli", "planning"): START_UP,
    ("cli", "plan"): START_UP,
    ("cli", "recipe.schema"): START_UP,
    ("cli", "runtimes.base"): START_UP,
    ("cli", "serve.command"): START_UP,
    ("cli", "serve.decode_cpus"): START_UP,
    ("cli", "signals"): START_UP,
    ("cli", "trtllm.doctor"): START_UP,
    ("cli", "trtllm.llmapi_runtime"): START_UP,
    ("cli", "validate"): START_UP,
    ("cli", "validate.report.json_report"): START_UP,
    ("cli", "validate.report.terminal"): START_UP,
    ("cli", "validate.tuning"): START_UP,
    ("compile", "deploy.bundle"): UNREVIEWED,
    ("compile", "paths"): UNREVIEWED,
    ("compile", "serve"): UNREVIEWED,
    ("compile", "serve.decode_cpus"): UNREVIEWED,
    ("compile", "serve.server"): UNREVIEWED,
    ("compile", "validate"): UNREVIEWED,
    ("deploy.bundle", "deploy.images"): UNREVIEWED,
    ("deploy.bundle", "deploy.kind"): UNREVIEWED,
    ("deploy.bundle", "paths"): UNREVIEWED,
    ("deploy.bundle", "recipe.deploy"): UNREVIEWED,
    ("deploy.checks", "deploy.bundle"): UNREVIEWED,
    ("deploy.checks", "deploy.kind"): UNREVIEWED,
    ("deploy.checks", "deploy.kubernetes"): UNREVIEWED,
    ("deploy.checks", "deploy.world"): UNREVIEWED,
    ("deploy.context", "deploy.kind"): UNREVIEWED,
    ("deploy.context", "repository.llmapi.configs"): UNREVIEWED,
    ("deploy.context", "repository.llmapi.model_yaml"): UNREVIEWED,
    ("deploy.images", "deploy.kind"): UNREVIEWED,
    ("deploy.launch", "deploy.kind"): UNREVIEWED,
    ("deploy.launch", "repository.engine.params"): UNREVIEWED,
    ("deploy.launch", "repository.llmapi.launch"): UNREVIEWED,
    ("deploy.repository", "repository.engine.configs"): UNREVIEWED,
    ("deploy.repository", "repository.llmapi.model_yaml"): UNREVIEWED,
    ("deploy.world", "deploy.kind"): UNREVIEWED,
    ("deploy.world", "repository.llmapi.configs"): UNREVIEWED,
    ("deploy.world", "repository.llmapi.launch"): UNREVIEWED,
    ("plan", "hub"): UNREVIEWED,
    ("reference.acceptance", "reference.sampling"): HEAVY,
    ("reference.call_costs", "reference.executor"): HEAVY,
    ("reference.core_models.engine.model", "engine_facts"): CORE_MODEL,
    ("reference.core_models.engine.model", "reference.dialect"): CORE_MODEL,
    ("reference.core_models.engine.model", "reference.engine_folder"): CORE_MODEL,
    ("reference.core_models.engine.model", "reference.executor"): HEAVY,
    ("reference.core_models.engine.model", "reference.request"): HEAVY,
    ("reference.core_models.engine.model", "serve.decode_cpus"): CORE_MODEL,
    ("reference.core_models.llm_api.model", "errors"): CORE_MODEL,
    ("reference.core_models.llm_api.model", "reference.executor"): HEAVY,
    ("reference.core_models.llm_api.model", "reference.heap"): CORE_MODEL,
    ("reference.core_models.llm_api.model", "reference.llmapi_contract"): CORE_MODEL,
    ("reference.core_models.llm_api.model", "reference.llmapi_engine"): HEAVY,
    ("reference.core_models.llm_api.model", "reference.llmapi_yaml"): CORE_MODEL,
    ("reference.core_models.llm_api.model", "reference.request"): HEAVY,
    ("reference.core_models.llm_api.model", "serve.decode_cpus"): CORE_MODEL,
    ("reference.drafters", "reference.lean.linear"): HEAVY,
    ("reference.engine_folder", "reference.engine"): HEAVY,
    ("reference.engine_folder", "reference.model"): HEAVY,
    ("validate", "validate.checks.base"): HEAVY,
    ("validate", "validate.result"): HEAVY,
    ("validate", "validate.suite"): HEAVY,
    ("validate.mix", "validate.checks.bad_input"): CIRCLE,
    ("validate.report", "validate.report.junit"): HEAVY,
    ("zoo", "zoo.build"): HEAVY,
    ("zoo.__main__", "zoo.build"): HEAVY,
    ("zoo.readme", "heads.eagle3"): HEAVY,
}


def _modules() -> dict[str, tuple[Path, str]]:
    """Every module of the package: name -> (file, the package its relative imports start from)."""
    found = {}
    for path in sorted((PIPELINE / "specbuild").rglob("*.py")):
        parts = path.relative_to(PIPELINE).with_suffix("").parts
        if "repository" in parts and "models" in parts:
            continue  # the shared Triton models import their neighbours by file name, never specbuild
        if parts[-1] == "__init__":
            found[".".join(parts[:-1])] = (path, ".".join(parts[:-1]))
        else:
            found[".".join(parts)] = (path, ".".join(parts[:-1]))
    return found


MODULES = _modules()


def _targets(node: ast.Import | ast.ImportFrom, package: str) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if node.level:
        base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
        module = ".".join(base + ([node.module] if node.module else []))
    else:
        module = node.module or ""
    submodules = [f"{module}.{a.name}" for a in node.names if f"{module}.{a.name}" in MODULES]
    return submodules if len(submodules) == len(node.names) else [module, *submodules]


def _imports() -> tuple[dict[str, set[str]], set[tuple[str, str]]]:
    """Module-level imports (outside functions and `if TYPE_CHECKING:`) and in-function (importer, specbuild module)."""
    module_level: dict[str, set[str]] = defaultdict(set)
    in_function: set[tuple[str, str]] = set()
    for name, (path, package) in MODULES.items():
        def walk(node: ast.AST, inside: bool) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                    continue
                if isinstance(child, (ast.Import, ast.ImportFrom)):
                    for target in _targets(child, package):
                        if not inside:
                            module_level[name].add(target)
                        elif target.split(".")[0] == "specbuild":
                            in_function.add((name, target))
                walk(child, inside or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))
        walk(ast.parse(path.read_text()), False)
    return module_level, in_function


MODULE_LEVEL, IN_FUNCTION = _imports()


def _loaded_with(module: str) -> set[str]:
    """What importing `module` loads at module level: its parents, specbuild modules, top-level external names."""
    def chain(name: str) -> list[str]:
        parts = name.split(".")
        return [p for p in (".".join(parts[:i]) for i in range(1, len(parts) + 1)) if p in MODULES]

    seen: set[str] = set()
    stack = chain(module)
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        for target in MODULE_LEVEL.get(name, ()):
            if target.split(".")[0] == "specbuild":
                stack.extend(chain(target))
            else:
                seen.add(target.split(".")[0])
    return seen


def _short(pair: tuple[str, str]) -> tuple[str, str]:
    return tuple(name.removeprefix("specbuild.") for name in pair)


def test_every_in_function_import_is_listed_with_its_reason():
    found = {_short(pair) for pair in IN_FUNCTION}
    new = sorted(found - ALLOWED.keys())
    gone = sorted(ALLOWED.keys() - found)
    assert not new, f"in-function imports not in ALLOWED (import at module level, or list each with its reason): {new}"
    assert not gone, f"ALLOWED lists in-function imports that are gone (remove them): {gone}"


def test_the_checked_reasons_hold():
    wrong = []
    for (importer, imported), reason in ALLOWED.items():
        importer, imported = f"specbuild.{importer}", f"specbuild.{imported}"
        if reason == CIRCLE and importer not in _loaded_with(imported):
            wrong.append((importer, imported, "not circular"))
        if reason == HEAVY and not (_loaded_with(imported) - _loaded_with(importer)) & OPTIONAL:
            wrong.append((importer, imported, "pulls no optional dependency the importer lacks"))
    assert not wrong, wrong


def test_the_analysis_sees_imports():
    """The walk finds module-level and in-function imports (an empty scan would pass the tests above vacuously)."""
    assert "specbuild.standalone.serving_metrics" in MODULE_LEVEL["specbuild.metrics"]
    assert "torch" in _loaded_with("specbuild.reference.executor")
    assert ("specbuild.cli", "specbuild.compile") in IN_FUNCTION
