"""YAML with positions: plain Python data plus the line:col of every key and value (1-based).

Safe and bounded by construction: the recipe is read with a size cap (`specbuild.files.safe_files`: no FIFO, device
or folder is ever read), and built from ruamel.yaml's event stream by a loop (no recursion, no object
construction), which refuses at once, with file:line:col:

- more than MAX_DEPTH levels of nesting (a recipe is 4 deep);
- more than MAX_VALUES values once aliases are expanded ("billion laughs": each alias counts the full size of
  what it repeats, so an exponential expansion is refused after a few thousand values, long before it is built);
  an alias is shared, never copied;
- tags other than the standard ones (!!str, !!int, !!float, !!bool, !!null, !!map, !!seq): no
  `!!python/object`, no custom `!tag`, no `!!binary` or `!!timestamp`;
- integers beyond the 64-bit range and non-finite floats (.inf, .nan): no recipe value is infinite;
- an alias to an anchor that is not defined before it, or to the node that contains it;
- duplicate keys, keys that are not plain values, more than one document.

Anchors, aliases and merge keys (`<<: *defaults`, `<<: [*a, *b]`) are supported: the keys of the mapping win
over merged ones, earlier merged mappings over later ones (YAML merge-key spec). Errors inside a value that
came from an alias or a merge are located at the alias or the merge key. Scalars follow YAML 1.2 (ruamel's
resolver): `yes`/`no` are strings; an unquoted date stays a string.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specbuild.errors import Problem, RecipeError
from specbuild.files.safe_files import UnreadableFile, read_text

Pos = tuple[int, int]

MAX_RECIPE_BYTES = 64 * 1024  # recipes are ~1 KiB; a 256-node tree is ~8 KiB
MAX_DEPTH = 32
MAX_VALUES = 10_000  # scalars, lists and mappings, aliases expanded
INT64_MAX = 2**63 - 1

_YAML = "tag:yaml.org,2002:"
_SCALAR_TAGS = {_YAML + t for t in ("str", "int", "float", "bool", "null")}
_MAP_TAG, _SEQ_TAG, _MERGE_TAG = _YAML + "map", _YAML + "seq", _YAML + "merge"
_MERGE = "\0<<"  # the key of a merge (a plain `<<`), never a key of the data


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


class _Refused(Exception):
    def __init__(self, pos: Pos | None, message: str, path: tuple = ()):
        super().__init__(message)
        self.pos, self.message, self.path = pos, message, path


def _pos(mark) -> Pos:
    return (mark.line + 1, mark.column + 1)


def _field(path: tuple) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out if len(out) <= 80 else f"{out[:40]}…{out[-30:]}"


def _shown_tag(tag: str) -> str:
    return "!!" + tag[len(_YAML) :] if tag.startswith(_YAML) else tag


def _shown(text: str) -> str:
    return text if len(text) <= 40 else f"{text[:20]}…{text[-8:]} ({len(text)} characters)"


def _check_tag(tag: str | None, allowed: set[str], pos: Pos, path: tuple) -> None:
    if tag is None or tag == "!" or tag in allowed:
        return
    raise _Refused(
        pos,
        f"the YAML tag {_shown(_shown_tag(tag))} is not allowed in a recipe (only plain values: "
        "strings, numbers, booleans, null, lists and mappings) — remove the tag",
        path,
    )


@dataclass
class _Node:
    """A list or mapping being built."""

    value: Any
    path: tuple
    pos: Pos
    anchor: str | None
    size: int = 1  # values in it, itself included, aliases expanded
    height: int = 1  # levels of nesting, itself included
    key: tuple[str, Pos] | None = None  # mapping: the key waiting for its value
    merges: list[tuple[Any, Pos]] = field(default_factory=list)


class _Builder:
    def __init__(self) -> None:
        from ruamel.yaml.resolver import VersionedResolver

        self.resolver = VersionedResolver()
        self.out = Located(None)
        self.stack: list[_Node] = []
        self.anchors: dict[str, tuple[Any, int, int]] = {}  # name -> (value, size, height) of complete nodes
        self.open_anchors: set[str] = set()
        self.total = 0
        self.done = False

    # -- helpers -----------------------------------------------------------------------------------------------
    def _child_path(self) -> tuple:
        if not self.stack:
            return ()
        parent = self.stack[-1]
        if isinstance(parent.value, list):
            return parent.path + (len(parent.value),)
        return parent.path + (parent.key[0],) if parent.key is not None else parent.path

    def _count(self, n: int, pos: Pos, what: str) -> None:
        self.total += n
        if self.total > MAX_VALUES:
            raise _Refused(
                pos,
                f"{what} makes the recipe hold more than {MAX_VALUES} values — a recipe is a short "
                "list of settings (aliases that repeat aliases grow exponentially: write the values "
                "out instead)",
                self._child_path(),
            )

    def _depth(self, height: int, pos: Pos) -> None:
        if len(self.stack) + height > MAX_DEPTH:
            raise _Refused(
                pos,
                f"the recipe is nested more than {MAX_DEPTH} levels deep — a recipe is a few levels "
                "deep (see recipes/)",
                self._child_path(),
            )

    # -- events ------------------------------------------------------------------------------------------------
    def start(self, event, value: Any) -> None:
        pos = _pos(event.start_mark)
        if self.stack and isinstance(self.stack[-1].value, dict) and self.stack[-1].key is None:
            raise _Refused(
                pos,
                "a key must be a plain value (a word), not a list or mapping — write `key: value`",
                self._child_path(),
            )
        self._count(1, pos, "this value")
        self._depth(1, pos)
        if event.anchor:
            self.open_anchors.add(event.anchor)
        self.stack.append(_Node(value, self._child_path(), pos, event.anchor))

    def end(self) -> None:
        node = self.stack.pop()
        if node.merges:
            self._merge(node)
        if node.anchor:
            self.open_anchors.discard(node.anchor)
            self.anchors[node.anchor] = (node.value, node.size, node.height)
        self.put(node.value, node.pos, node.size, node.height)

    def scalar(self, event) -> None:
        pos = _pos(event.start_mark)
        path = self._child_path()
        self._count(1, pos, "this value")
        self._depth(0, pos)
        parent = self.stack[-1] if self.stack else None
        is_key = parent is not None and isinstance(parent.value, dict) and parent.key is None
        tag = event.tag
        _check_tag(tag, _SCALAR_TAGS, pos, path)
        if tag is None:
            from ruamel.yaml.nodes import ScalarNode

            tag = self.resolver.resolve(ScalarNode, event.value, event.implicit)
        if is_key:
            parent.key = (_MERGE if tag == _MERGE_TAG else str(event.value), pos)
            return
        value = _scalar(event.value, tag, pos, path)
        if event.anchor:
            self.anchors[event.anchor] = (value, 1, 0)
        self.put(value, pos, 1, 0)

    def alias(self, event) -> None:
        pos = _pos(event.start_mark)
        name = event.anchor
        if name in self.open_anchors:
            raise _Refused(
                pos,
                f"the alias *{name} refers to the node that contains it — a recipe cannot contain itself",
                self._child_path(),
            )
        if name not in self.anchors:
            raise _Refused(
                pos, f"the alias *{name} has no anchor &{name} before it — define the anchor first", self._child_path()
            )
        value, size, height = self.anchors[name]
        parent = self.stack[-1] if self.stack else None
        if parent is not None and isinstance(parent.value, dict) and parent.key is None:
            if isinstance(value, (dict, list)):
                raise _Refused(pos, "a key must be a plain value (a word), not a list or mapping", self._child_path())
            self._count(1, pos, f"the alias *{name}")
            parent.key = (str(value), pos)
            return
        self._count(size, pos, f"the alias *{name}")
        self._depth(height, pos)
        self.put(value, pos, size, height)

    def put(self, value: Any, pos: Pos, size: int, height: int) -> None:
        if not self.stack:
            self.out.data = value
            self.out.values[()] = pos
            self.done = True
            return
        parent = self.stack[-1]
        parent.size += size
        parent.height = max(parent.height, height + 1)
        if isinstance(parent.value, list):
            self.out.values[parent.path + (len(parent.value),)] = pos
            parent.value.append(value)
            return
        key, key_pos = parent.key
        parent.key = None
        if key == _MERGE:
            parent.merges.append((value, pos))
            return
        if key in parent.value:
            first = self.out.keys[parent.path + (key,)]
            raise _Refused(
                key_pos,
                f"YAML syntax error: duplicate key '{_shown(key)}' (first at line {first[0]}) — keep one of them",
            )
        self.out.keys[parent.path + (key,)] = key_pos
        self.out.values[parent.path + (key,)] = pos
        parent.value[key] = value

    def _merge(self, node: _Node) -> None:
        for value, pos in node.merges:
            sources = value if isinstance(value, list) else [value]
            if not sources or not all(isinstance(s, dict) for s in sources):
                raise _Refused(
                    pos,
                    "a merge key (<<) takes a mapping or a list of mappings (e.g. <<: *defaults)",
                    node.path + ("<<",),
                )
            for source in sources:
                for k, v in source.items():
                    if k not in node.value:
                        node.value[k] = v
                        self.out.keys[node.path + (k,)] = pos
                        self.out.values[node.path + (k,)] = pos


def _scalar(text: str, tag: str, pos: Pos, path: tuple) -> Any:
    where = _field(path)
    if tag == _YAML + "null":
        if text not in ("", "~", "null", "Null", "NULL"):
            raise _Refused(pos, f"!!null takes no value, not {_shown(text)!r}", path)
        return None
    if tag == _YAML + "bool":
        low = text.lower()
        if low not in ("true", "false"):
            raise _Refused(pos, f"{_shown(text)!r} is not a boolean — write true or false", path)
        return low == "true"
    if tag == _YAML + "int":
        digits = text.replace("_", "")
        sign = -1 if digits.startswith("-") else 1
        body = digits.lstrip("+-")
        base = {"0x": 16, "0o": 8, "0b": 2}.get(body[:2].lower(), 10)
        if base != 10:
            body = body[2:]
        if len(body) > 64 or not body:  # beyond int64 in any base (and int() of a huge string is slow)
            raise _Refused(pos, f"the integer {_shown(text)} is beyond the 64-bit range — give a realistic value", path)
        try:
            value = sign * int(body, base)
        except ValueError:
            raise _Refused(pos, f"{_shown(text)!r} is not an integer — write digits only", path) from None
        if not -INT64_MAX - 1 <= value <= INT64_MAX:
            raise _Refused(pos, f"the integer {_shown(text)} is beyond the 64-bit range — give a realistic value", path)
        return value
    if tag == _YAML + "float":
        try:
            value = float(text.replace("_", ""))
        except ValueError:
            low = text.lower().lstrip("+-")
            value = math.inf if low == ".inf" else math.nan if low == ".nan" else None
            if value is None:
                raise _Refused(pos, f"{_shown(text)!r} is not a number", path) from None
        if not math.isfinite(value):
            raise _Refused(
                pos,
                f"{_shown(text)} is not a finite number — recipe values are never infinite or NaN: "
                f"give a number{' for ' + where if where else ''} (or quote it if you mean text)",
                path,
            )
        return value
    return text  # str, and implicit timestamps or other resolutions of a plain scalar: text as written


def _build(text: str) -> Located:
    from ruamel.yaml import YAML
    from ruamel.yaml import events as ev

    builder = _Builder()
    documents = 0
    for event in YAML(typ="rt").parse(text):
        if isinstance(event, ev.ScalarEvent):
            builder.scalar(event)
        elif isinstance(event, ev.MappingStartEvent):
            _check_tag(event.tag, {_MAP_TAG}, _pos(event.start_mark), builder._child_path())
            builder.start(event, {})
        elif isinstance(event, ev.SequenceStartEvent):
            _check_tag(event.tag, {_SEQ_TAG}, _pos(event.start_mark), builder._child_path())
            builder.start(event, [])
        elif isinstance(event, (ev.MappingEndEvent, ev.SequenceEndEvent)):
            builder.end()
        elif isinstance(event, ev.AliasEvent):
            builder.alias(event)
        elif isinstance(event, ev.DocumentStartEvent):
            documents += 1
            if documents > 1:
                raise _Refused(
                    _pos(event.start_mark),
                    "the recipe holds more than one YAML document (---) — keep one recipe per file",
                )
    return builder.out


def load_located(path: Path) -> Located:
    from ruamel.yaml.error import MarkedYAMLError, YAMLError

    name = str(path)
    try:
        text = read_text(path, what="recipe", max_bytes=MAX_RECIPE_BYTES)
    except UnreadableFile as e:
        reason = e.reason
        if reason.startswith("no such file"):
            reason = "no such file — check the path (example recipes are in recipes/)"
        elif reason.startswith("is a folder"):
            reason = "is a folder — give the recipe's .yaml file"
        raise RecipeError([Problem(name, None, None, "", reason)]) from None
    try:
        out = _build(text)
    except _Refused as e:
        line, col = e.pos if e.pos else (None, None)
        raise RecipeError([Problem(name, line, col, _field(e.path), e.message)]) from None
    except MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark else (None, None)
        what = " ".join(x for x in (e.context, e.problem) if x)
        raise RecipeError(
            [Problem(name, line, col, "", f"YAML syntax error: {what} — fix the YAML at this place")]
        ) from None
    except YAMLError as e:  # unmarked YAML errors: a character YAML does not allow (ReaderError: its offset)
        position = getattr(e, "position", None)
        if isinstance(position, int) and hasattr(e, "character"):
            line = text.count("\n", 0, position) + 1
            col = position - (text.rfind("\n", 0, position) + 1) + 1
            raise RecipeError(
                [
                    Problem(
                        name,
                        line,
                        col,
                        "",
                        f"YAML syntax error: the control character "
                        f"#x{ord(e.character) if isinstance(e.character, str) else e.character:04x} is "
                        "not allowed in YAML — remove it",
                    )
                ]
            ) from None
        raise RecipeError([Problem(name, None, None, "", f"YAML error: {e} — fix the YAML")]) from None
    if out.data is None:
        line, col = out.values.get((), (1, 1))
        if not text.strip() or all(ln.lstrip().startswith("#") or not ln.strip() for ln in text.splitlines()):
            line, col = 1, 1
        raise RecipeError([Problem(name, line, col, "", "the recipe is empty — start from an example in recipes/")])
    if not isinstance(out.data, dict):
        line, col = out.values.get((), (1, 1))
        raise RecipeError(
            [
                Problem(
                    name,
                    line,
                    col,
                    "",
                    "a recipe is a mapping of sections (name, runtime, model, "
                    "speculation, build, triton, validation) — see recipes/",
                )
            ]
        )
    return out
