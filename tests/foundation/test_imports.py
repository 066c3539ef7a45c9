"""Imports of specbuild modules made inside functions: each one that remains, and why; and no import circle.

The layers in pyproject.toml ([tool.importlinter], checked by `lint-imports` in CI) count these imports too, but
they do not say why an import hides in a function. This test does: every in-function import of a specbuild module
is listed in ALLOWED with its reason, a new one fails until it is listed, and one that is gone fails until its entry
is removed (the list only shrinks). Three reasons remain, each checked here from the package's module-level
imports: HEAVY (the imported module pulls an optional dependency the importer does not), START_UP (the command
line loads a command's stage when that command runs) and CORE_MODEL (a Triton Python model loads the decoder when
the server initialises it). And no module reaches itself through imports, in-function ones included.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

PIPELINE = Path(__file__).resolve().parents[2] / "pipeline"
# What `check` runs without (pyproject.toml: the reference, triton, deploy extras; tensorrt_llm on a GPU machine)
OPTIONAL = {
    "torch",
    "transformers",
    "tokenizers",
    "safetensors",
    "sentencepiece",
    "tritonclient",
    "matplotlib",
    "numpy",
    "kubernetes_validate",
    "tensorrt_llm",
    "pytriton",
    "google",
    "jsonschema",
}

HEAVY = "the imported module pulls an optional dependency (torch, numpy, ...) that the importer does not"
CORE_MODEL = "a Triton Python model: it loads the decoder when the server initialises it, not when it reads the file"
START_UP = (
    "a command loads its own stage only when it runs: loading every stage costs each command about a second "
    "(pydantic schemas, rich), and `check` runs with the core dependencies alone"
)

# (importer, imported), both relative to `specbuild.`
ALLOWED = {
    ("cli", "adapt.run"): START_UP,
    ("cli", "cache.step_store"): START_UP,
    ("cli", "output.commands"): START_UP,
    ("cli", "output.console"): START_UP,
    ("cli", "output.events"): START_UP,
    ("cli", "output.steps"): START_UP,
    ("cli", "cache.provenance"): START_UP,
    ("cli", "validate.compare"): START_UP,
    ("cli", "compile"): START_UP,
    ("cli", "checkpoints.hub"): START_UP,
    ("cli", "load"): START_UP,
    ("cli", "planning"): START_UP,
    ("cli", "plan"): START_UP,
    ("cli", "recipe.schema"): START_UP,
    ("cli", "runtimes.base"): START_UP,
    ("cli", "serve.command"): START_UP,
    ("cli", "serve.decode_cpus"): START_UP,
    ("cli", "processes.signals"): START_UP,
    ("cli", "trtllm.doctor"): START_UP,
    ("cli", "trtllm.llmapi_runtime"): START_UP,
    ("cli", "validate"): START_UP,
    ("cli", "validate.report.json_report"): START_UP,
    ("cli", "validate.report.terminal"): START_UP,
    ("cli", "validate.tuning"): START_UP,
    ("reference.decoder.acceptance", "reference.decoder.sampling"): HEAVY,
    ("reference.call_costs", "reference.decoder.executor"): HEAVY,
    ("reference.core_models.engine.model", "facts.engine_facts"): CORE_MODEL,
    ("reference.core_models.engine.model", "reference.dialect"): CORE_MODEL,
    ("reference.core_models.engine.model", "reference.engine_folder"): CORE_MODEL,
    ("reference.core_models.engine.model", "reference.decoder.executor"): HEAVY,
    ("reference.core_models.engine.model", "reference.decoder.request"): HEAVY,
    ("reference.core_models.engine.model", "serve.decode_cpus"): CORE_MODEL,
    ("reference.core_models.llm_api.model", "errors"): CORE_MODEL,
    ("reference.core_models.llm_api.model", "reference.decoder.executor"): HEAVY,
    ("reference.core_models.llm_api.model", "reference.decoder.heap"): CORE_MODEL,
    ("reference.core_models.llm_api.model", "reference.llmapi_contract"): CORE_MODEL,
    ("reference.core_models.llm_api.model", "reference.llmapi_engine"): HEAVY,
    ("reference.core_models.llm_api.model", "reference.llmapi_yaml"): CORE_MODEL,
    ("reference.core_models.llm_api.model", "reference.decoder.request"): HEAVY,
    ("reference.core_models.llm_api.model", "serve.decode_cpus"): CORE_MODEL,
    ("reference.decoder.drafters", "reference.decoder.lean.linear"): HEAVY,
    ("reference.engine_folder", "reference.decoder.engine"): HEAVY,
    ("reference.engine_folder", "reference.decoder.model"): HEAVY,
    ("compile", "adapt.run"): HEAVY,
    ("compile", "validate.suite"): HEAVY,
    ("validate", "validate.suite"): HEAVY,
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
        if reason == HEAVY and not (_loaded_with(imported) - _loaded_with(importer)) & OPTIONAL:
            wrong.append((importer, imported, "pulls no optional dependency the importer lacks"))
        if reason == START_UP and importer != "specbuild.cli":
            wrong.append((importer, imported, "only the command line loads stages when a command runs"))
        if reason == CORE_MODEL and not importer.startswith("specbuild.reference.core_models."):
            wrong.append((importer, imported, "not a Triton core model"))
    assert not wrong, wrong


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one node (Tarjan): each is an import circle."""
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(node: str) -> None:
        order[node] = low[node] = len(order)
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if nxt not in order:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], order[nxt])
        if low[node] == order[node]:
            group = []
            while (member := stack.pop()) != node:
                group.append(member)
            if group:
                found.append(sorted([node, *group]))

    for node in sorted(edges):
        if node not in order:
            visit(node)
    return found


def _import_graph() -> dict[str, set[str]]:
    """module -> the specbuild modules it imports, module-level and in-function (`import a.b` counts as one of the
    module a.b, or of the package a when a.b names something in it)."""

    def owner(name: str) -> str | None:
        while name not in MODULES:
            if "." not in name:
                return None
            name = name.rsplit(".", 1)[0]
        return name

    edges: dict[str, set[str]] = {name: set() for name in MODULES}
    pairs = [(m, t) for m, targets in MODULE_LEVEL.items() for t in targets] + sorted(IN_FUNCTION)
    for importer, target in pairs:
        if target.split(".")[0] == "specbuild" and (to := owner(target)) not in (None, importer):
            edges[importer].add(to)
    return edges


def test_no_import_circle():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]  # the finder finds one
    assert circles(_import_graph()) == []


def test_the_analysis_sees_imports():
    """The walk finds module-level and in-function imports (an empty scan would pass the tests above vacuously)."""
    assert "specbuild.standalone.serving_metrics" in MODULE_LEVEL["specbuild.facts.metrics"]
    assert "torch" in _loaded_with("specbuild.reference.decoder.executor")
    assert ("specbuild.cli", "specbuild.compile") in IN_FUNCTION
