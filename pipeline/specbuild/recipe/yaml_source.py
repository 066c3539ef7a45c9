"""YAML with positions: plain Python data plus the line:col of every key and value (1-based)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specbuild.errors import Problem, RecipeError

Pos = tuple[int, int]


@dataclass
class Located:
    data: Any
    keys: dict[tuple, Pos] = field(default_factory=dict)  # path -> position of the key naming it
    values: dict[tuple, Pos] = field(default_factory=dict)  # path -> position of its value

    def where(self, path: tuple, *, key: bool = False) -> Pos | None:
        """Position of `path` (its key if asked and known, else its value), else of its nearest ancestor."""
        path = tuple(path)
        while True:
            table = (self.keys, self.values) if key else (self.values, self.keys)
            for t in table:
                if path in t:
                    return t[path]
            if not path:
                return None
            path = path[:-1]


def _plain(node: Any, path: tuple, out: Located) -> Any:
    from ruamel.yaml.comments import CommentedMap, CommentedSeq

    if isinstance(node, CommentedMap):
        result = {}
        for k in node:
            kp = path + (str(k),)
            kl, kc = node.lc.key(k)
            vl, vc = node.lc.value(k)
            out.keys[kp] = (kl + 1, kc + 1)
            out.values[kp] = (vl + 1, vc + 1)
            result[str(k)] = _plain(node[k], kp, out)
        return result
    if isinstance(node, CommentedSeq):
        result = []
        for i, item in enumerate(node):
            il, ic = node.lc.item(i)
            out.values[path + (i,)] = (il + 1, ic + 1)
            result.append(_plain(item, path + (i,), out))
        return result
    if isinstance(node, bool) or node is None:
        return node
    if isinstance(node, int):
        return int(node)
    if isinstance(node, float):
        return float(node)
    if isinstance(node, str):
        return str(node)
    return node


def load_located(path: Path) -> Located:
    from ruamel.yaml import YAML
    from ruamel.yaml.error import MarkedYAMLError, YAMLError

    name = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise RecipeError([Problem(name, None, None, "", "no such file — check the path (example recipes are in recipes/)")])
    except IsADirectoryError:
        raise RecipeError([Problem(name, None, None, "", "is a folder — give the recipe's .yaml file")])
    except UnicodeDecodeError as e:
        raise RecipeError([Problem(name, None, None, "", f"is not UTF-8 text ({e.reason}) — save the recipe as UTF-8")])
    try:
        node = YAML(typ="rt").load(text)
    except MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark else (None, None)
        what = " ".join(x for x in (e.context, e.problem) if x)
        raise RecipeError([Problem(name, line, col, "", f"YAML syntax error: {what} — fix the YAML at this place")])
    except YAMLError as e:  # pragma: no cover - unmarked YAML errors are rare
        raise RecipeError([Problem(name, None, None, "", f"YAML error: {e} — fix the YAML")])
    out = Located(None)
    from ruamel.yaml.comments import CommentedMap

    if node is None:
        raise RecipeError([Problem(name, 1, 1, "", "the recipe is empty — start from an example in recipes/")])
    if not isinstance(node, CommentedMap):
        lc = getattr(node, "lc", None)
        line, col = (lc.line + 1, lc.col + 1) if lc is not None and lc.line is not None else (1, 1)
        raise RecipeError([Problem(name, line, col, "", "a recipe is a mapping of sections (name, runtime, model, "
                                                   "speculation, build, triton, validation) — see recipes/")])
    out.values[()] = (node.lc.line + 1, node.lc.col + 1)
    out.data = _plain(node, (), out)
    return out
