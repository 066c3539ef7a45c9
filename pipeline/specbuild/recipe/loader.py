"""Load a recipe: YAML with positions -> typed schema -> rules -> files. Every problem gets file:line:col."""

from __future__ import annotations

import difflib
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

from pydantic import BaseModel, ValidationError

from specbuild.errors import Problem, RecipeError, UserError
from specbuild.methods import METHODS
from specbuild.methods.unbuilt import unbuilt_reason
from specbuild.findings import Finding
from specbuild.recipe.checks import general_findings
from specbuild.recipe.files import file_findings
from specbuild.recipe.schema import Recipe
from specbuild.recipe.yaml_source import Located, load_located
from specbuild.runtimes.base import BuildOptions
from specbuild.runtimes.build import Build, resolve_build


def format_path(path: tuple) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _is_field_name(part: Any) -> bool:
    return isinstance(part, int) or (isinstance(part, str) and part.replace("_", "a").isalnum())


def _clean_loc(loc: tuple, data: Any) -> tuple:
    """Drop pydantic's union/tag markers so the path matches the YAML."""
    parts = list(loc)
    if len(parts) > 1 and parts[0] == "speculation" and parts[1] in METHODS:
        parts.pop(1)
    keep = [p for i, p in enumerate(parts) if _is_field_name(p) or i == len(parts) - 1]
    return tuple(keep)


def _error_path(err: dict, data: Any) -> tuple:
    path = _clean_loc(tuple(err["loc"]), data)
    if err["type"] == "union_tag_invalid":  # the discriminator's value is at fault
        return path + ("method",)
    return path


def _model_at(path: tuple, data: Any) -> type[BaseModel] | None:
    """The schema class holding the fields at `path` (the speculation class follows the recipe's method)."""
    model: Any = Recipe
    node = data
    for part in path:
        if isinstance(part, int):
            node = node[part] if isinstance(node, list) and part < len(node) else None
            continue
        if model is None:
            return None
        field = model.model_fields.get(part)
        node = node.get(part) if isinstance(node, dict) else None
        if field is None:
            return None
        if part == "speculation":
            method = node.get("method") if isinstance(node, dict) else None
            model = METHODS[method].Config if method in METHODS else None
            continue
        model = _section_class(field.annotation)
    return model


def _section_class(annotation: Any) -> type[BaseModel] | None:
    import typing

    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _section_class(arg)
        if found is not None:
            return found
    return None


def _did_you_mean(word: str, options: list[str]) -> str:
    match = difflib.get_close_matches(word, options, n=1, cutoff=0.6)
    return f"did you mean '{match[0]}'?" if match else f"allowed: {', '.join(options)}"


def _message(err: dict, path: tuple, data: Any) -> str:
    kind, value = err["type"], err.get("input")
    if kind == "extra_forbidden":
        model = _model_at(path[:-1], data)
        options = sorted(model.model_fields) if model else []
        return f"unknown key '{path[-1]}' — {_did_you_mean(str(path[-1]), options)}"
    if kind == "missing":
        model = _model_at(path[:-1], data)
        field = model.model_fields.get(path[-1]) if model else None
        what = f" ({field.description})" if field is not None and field.description else ""
        return f"required key '{path[-1]}' is missing{what} — add it"
    if kind == "union_tag_invalid":
        tag = err.get("ctx", {}).get("tag", value)
        if unbuilt_reason(tag) is not None:  # TensorRT-LLM has it; specbuild cannot build it (the reason)
            return f"'{tag}' {unbuilt_reason(tag)}"
        options = sorted(METHODS)
        close = difflib.get_close_matches(str(err.get("ctx", {}).get("tag", value)), options, n=1, cutoff=0.6)
        return f"unknown method '{value if not isinstance(value, dict) else value.get('method')}' — " + (
            f"did you mean '{close[0]}'? (one of {', '.join(options)})" if close else f"use one of {', '.join(options)}"
        )
    if kind == "union_tag_not_found":
        return f"'method' is missing — add method: one of {', '.join(sorted(METHODS))}"
    if kind == "literal_error":
        expected = err.get("ctx", {}).get("expected", "")
        options = [o.strip().strip("'") for o in expected.replace(" or ", ", ").split(",") if o.strip()]
        return f"'{value}' is not allowed — {_did_you_mean(str(value), options)} (one of {', '.join(options)})"
    if kind == "string_pattern_mismatch" and path == ("name",):
        return (
            f"'{value}' is not a safe folder name — use letters, digits, '.', '_' and '-', start with a letter "
            "or digit, at most 64 characters"
        )
    if kind in ("model_type", "model_attributes_type", "dict_type"):
        return f"must be a mapping of keys, not {type(value).__name__} {value!r} — indent its keys under it"
    shown = repr(value) if not isinstance(value, (dict, list)) else type(value).__name__
    return f"{err['msg']} (got {shown}) — fix the value (see `specbuild schema`)"


def _problems_from_validation(e: ValidationError, src: Located, name: str) -> list[Problem]:
    problems: dict[str, Problem] = {}
    for err in e.errors():
        path = _error_path(err, src.data)
        # A value that failed every member of a union: report once, on the value.
        if err["type"] in ("is_instance_of", "list_type", "path_type") and format_path(path) in problems:
            continue
        on_key = err["type"] in ("extra_forbidden", "missing", "union_tag_not_found")
        pos_path = path[:-1] if err["type"] == "missing" else path
        line, col = src.where(pos_path, key=on_key) or (None, None)
        p = Problem(name, line, col, format_path(path), _message(err, path, src.data))
        problems.setdefault(format_path(path), p)
    return list(problems.values())


def _locate(findings: list[Finding], src: Located, name: str) -> list[Problem]:
    out = []
    for f in findings:
        written = [p for p in (f.path, *f.also) if p in src.values]
        path = written[0] if written else f.path
        line, col = src.where(path) or (None, None)
        out.append(Problem(name, line, col, format_path(path), ("warning: " if f.warning else "") + f.message))
    return out


def _sorted(problems: list[Problem]) -> list[Problem]:
    return sorted(problems, key=lambda p: (p.line or 0, p.col or 0))


class UnknownMethod(RecipeError):
    """A recipe whose speculation.method is unknown but close to a known one: its schema problems, and the recipe
    read with that method in its place (`stand_in`), so that the rules can judge the rest of the file too
    (`with_findings`) instead of the unknown name hiding every other problem."""

    def __init__(self, problems: list[Problem], stand_in: Recipe, method: str, src: Located, name: str):
        super().__init__(problems)
        self.stand_in, self.method, self.src, self.name = stand_in, method, src, name

    def with_findings(self, findings: list[Finding]) -> RecipeError:
        """Every problem of the file: the schema's and the rules' findings on the stand-in (warnings left out: they
        are for a recipe that loads), those of the speculation section marked as read with the stand-in method."""
        located = _locate([f for f in findings if not f.warning], self.src, self.name)
        return RecipeError(_sorted(_merged(self.problems, located, self.method)))


def _close_methods(e: ValidationError, data: Any) -> list[str]:
    """The known methods close to an unknown speculation.method, closest first (none: the method is known, or no
    name is close)."""
    for err in e.errors():
        if err["type"] == "union_tag_invalid" and _clean_loc(tuple(err["loc"]), data)[:1] == ("speculation",):
            tag = str(err.get("ctx", {}).get("tag", ""))
            if unbuilt_reason(tag) is not None:  # refused by name: no stand-in judges the rest as another method
                return []
            return difflib.get_close_matches(tag, sorted(METHODS), n=len(METHODS), cutoff=0.6)
    return []


def _foreign_keys(e: ValidationError, data: Any) -> bool:
    """Whether the speculation section holds keys the stand-in method does not have (then it is not the one meant)."""
    return any(
        err["type"] == "extra_forbidden" and _clean_loc(tuple(err["loc"]), data)[:1] == ("speculation",)
        for err in e.errors()
    )


def _merged(problems: list[Problem], more: list[Problem], method: str) -> list[Problem]:
    """`problems` and those of `more` at other fields; a speculation field's marked as read with `method`."""
    seen = {p.field for p in problems}
    out = list(problems)
    for p in more:
        if p.field in seen:
            continue
        seen.add(p.field)
        if p.field.startswith("speculation"):
            p = replace(p, message=f"{p.message} (read as method '{method}', the closest known name)")
        out.append(p)
    return out


def read_recipe(path: str | Path) -> tuple[Recipe, Located]:
    """The recipe as its schema types it, with the YAML positions its findings are located at. Raises RecipeError
    listing every schema problem (all located); UnknownMethod when the method's name is unknown but close to a known
    one and the rest of the file reads with that one in its place (the caller judges it: UnknownMethod.with_findings),
    its speculation section's problems under that method included either way."""
    path = Path(path)
    src = load_located(path)
    try:
        recipe = Recipe.model_validate(src.data)
    except ValidationError as e:
        name = str(path)
        problems = _problems_from_validation(e, src, name)
        for method in _close_methods(e, src.data):  # the closest one whose keys the section has stands in
            data = {**src.data, "speculation": {**src.data["speculation"], "method": method}}
            try:
                stand_in = Recipe.model_validate(data)
            except ValidationError as again:
                if _foreign_keys(again, src.data):
                    continue
                more = _problems_from_validation(again, src, name)
                raise RecipeError(_sorted(_merged(problems, more, method))) from None
            stand_in._source = path.resolve()
            raise UnknownMethod(_sorted(problems), stand_in, method, src, name) from None
        raise RecipeError(_sorted(problems)) from None
    recipe._source = path.resolve()
    return recipe, src


def judge(recipe: Recipe, findings: list[Finding], src: Located, path: str | Path) -> Recipe:
    """Locate the findings in the recipe's file `path`: the warnings are kept on the recipe; any problem raises
    RecipeError listing every one (with the warnings, marked as such)."""
    name = str(Path(path))
    problems = _locate([f for f in findings if not f.warning], src, name)
    recipe.warnings.extend(_sorted(_locate([f for f in findings if f.warning], src, name)))
    if problems:
        raise RecipeError(_sorted(problems + recipe.warnings))
    return recipe


def recipe_findings(build: Build, check_files: bool = True) -> list[Finding]:
    """The recipe's own rules (recipe/checks.py) and, with `check_files`, those of the files it names."""
    findings = list(general_findings(build))
    if check_files:
        findings += file_findings(build)
    return findings


def stand_in_findings(error: UnknownMethod, findings_of: Callable[[Build], list[Finding]], options) -> RecipeError:
    """The RecipeError listing every problem of a file whose method is unknown: the rules (`findings_of`) run on its
    stand-in (UnknownMethod); its schema problems alone when the stand-in does not resolve."""
    try:
        found = findings_of(resolve_build(error.stand_in, options))
    except UserError:
        return RecipeError(error.problems)
    return error.with_findings(found)


def load_recipe(path: str | Path, *, check_files: bool = True, options: BuildOptions | None = None) -> Recipe:
    """Load and check a recipe by its own rules, its method's and its runtime's. Raises RecipeError listing every
    problem found (all located). `options` are the command-line options that change what the recipe builds
    (`plan` and `compile` must get the same ones). The commands load with specbuild.load.load_build, which adds
    the deployment bundle's rules and keeps what the recipe resolved to."""
    try:
        recipe, src = read_recipe(path)
    except UnknownMethod as e:
        raise stand_in_findings(e, lambda build: recipe_findings(build, check_files), options) from None
    build = resolve_build(recipe, options)  # (its recipe: this one, or a copy with the installed release)
    return judge(build.recipe, recipe_findings(build, check_files), src, path)
