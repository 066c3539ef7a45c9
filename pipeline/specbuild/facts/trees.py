"""Speculation trees given as `choices`: each entry is a path of top-k indices from the root.

`[0]` is the target's most likely next token after the root, `[0, 1]` the second most likely token after
that one, and so on (Medusa and EAGLE-1 share this format; TensorRT-LLM's `medusa_choices`/`eagle_choices`).
"""

from __future__ import annotations

from collections import Counter

# The executor's default tree mc_sim_7b_63 (TensorRT-LLM examples/medusa/README.md): 63 nodes, depth 4.
MC_SIM_7B_63: list[list[int]] = [
    [0],
    [0, 0],
    [1],
    [0, 1],
    [2],
    [0, 0, 0],
    [1, 0],
    [0, 2],
    [3],
    [0, 3],
    [4],
    [0, 4],
    [2, 0],
    [0, 5],
    [0, 0, 1],
    [5],
    [0, 6],
    [6],
    [0, 7],
    [0, 1, 0],
    [1, 1],
    [7],
    [0, 8],
    [0, 0, 2],
    [3, 0],
    [0, 9],
    [8],
    [9],
    [1, 0, 0],
    [0, 2, 0],
    [1, 2],
    [0, 0, 3],
    [4, 0],
    [2, 1],
    [0, 0, 4],
    [0, 0, 5],
    [0, 0, 0, 0],
    [0, 1, 1],
    [0, 0, 6],
    [0, 3, 0],
    [5, 0],
    [1, 3],
    [0, 0, 7],
    [0, 0, 8],
    [0, 0, 9],
    [6, 0],
    [0, 4, 0],
    [1, 4],
    [7, 0],
    [0, 1, 2],
    [2, 0, 0],
    [3, 1],
    [2, 2],
    [8, 0],
    [0, 5, 0],
    [1, 5],
    [1, 0, 1],
    [0, 2, 1],
    [9, 0],
    [0, 6, 0],
    [0, 0, 0, 1],
    [1, 6],
    [0, 7, 0],
]


def tree_problems(choices: list[list[int]]) -> list[tuple[int | None, str]]:
    """Structural problems of a choices tree as (index in choices or None, message with the fix)."""
    problems: list[tuple[int | None, str]] = []
    if not choices:
        return [(None, "the tree is empty — give at least one path such as [0]")]
    seen: dict[tuple[int, ...], int] = {}
    for i, path in enumerate(choices):
        key = tuple(path)
        if not path:
            problems.append((i, "empty path — every path starts with a top-k index such as [0]"))
            continue
        if any(k < 0 for k in path):
            problems.append((i, f"path {list(path)} has a negative index — indices are top-k ranks (0 = most likely)"))
        if key in seen:
            problems.append((i, f"path {list(path)} repeats entry {seen[key]} — remove one of them"))
            continue
        seen[key] = i
    for i, path in enumerate(choices):
        if len(path) > 1 and tuple(path[:-1]) not in seen:
            problems.append((i, f"path {list(path)} has no parent {list(path[:-1])} — add it or remove this path"))
    return problems


def first_before_parent(choices) -> int | None:
    """Index of the first choice listed before its parent (None: every parent comes first, so each prefix of the
    list is a tree: what a draft_len_schedule cuts a static tree to)."""
    seen: set[tuple[int, ...]] = set()
    for i, path in enumerate(choices):
        if len(path) > 1 and tuple(path[:-1]) not in seen:
            return i
        seen.add(tuple(path))
    return None


def tree_depth(choices: list[list[int]]) -> int:
    return max((len(p) for p in choices), default=0)


def non_leaves_per_level(choices: list[list[int]]) -> dict[int, int]:
    """For each depth d (1-based), how many nodes at depth d have children."""
    keys = {tuple(p) for p in choices}
    parents = {k[:-1] for k in keys if len(k) > 1}
    return dict(Counter(len(p) for p in parents))


def format_choices(choices: list[list[int]]) -> str:
    """TensorRT-LLM backend parameter format: `{0}, {0, 0}, {1}` (no outer brackets; tensorrtllm_backend
    docs/model_config.md@0b9d7d5)."""
    return ", ".join("{" + ", ".join(str(k) for k in path) + "}" for path in choices)


def parse_choices(text: str) -> list[list[int]]:
    """Inverse of format_choices (accepts `{0}, {0, 0}` and `[[0], [0, 0]]`)."""
    import json

    s = text.strip()
    if not s.startswith("["):
        s = "[" + s.replace("{", "[").replace("}", "]") + "]"
    value = json.loads(s)
    if not isinstance(value, list) or not all(isinstance(p, list) for p in value):
        raise ValueError(f"not a list of paths: {text!r}")
    return [[int(k) for k in p] for p in value]
