"""What the tree methods (Medusa, EAGLE-1) share: the `choices` tree must be well formed and fit, and the C++
backend's text form of a tree parameter."""

from __future__ import annotations

import json
from typing import Iterator

from specbuild.findings import Finding
from specbuild.methods.pack import ParameterProblem
from specbuild.facts.trees import tree_problems


def choices_findings(
    choices: list[list[int]], max_draft_len: int, where: tuple = ("speculation",)
) -> Iterator[Finding]:
    for index, message in tree_problems(choices):
        path = where + ("choices",) + ((index,) if index is not None else ())
        yield Finding(path, message)
    if len(choices) > max_draft_len:
        yield Finding(
            where + ("choices",),
            also=(where + ("max_draft_len",),),
            message=f"the tree has {len(choices)} nodes but max_draft_len is {max_draft_len} — "
            f"raise max_draft_len to at least {len(choices)} or use a smaller tree",
        )


def rank_findings(choices: list[list[int]], vocab_size, field: tuple = ("speculation", "choices")) -> Iterator[Finding]:
    """A path's top-k ranks must be below the vocabulary size (rank r is the (r+1)-th most likely token)."""
    if not isinstance(vocab_size, int) or vocab_size < 1:
        return
    for i, path in enumerate(choices):
        if path and max(path) >= vocab_size:
            yield Finding(
                field + (i,),
                f"path {list(path)} asks for rank {max(path)} but the vocabulary has "
                f"{vocab_size} tokens (ranks 0..{vocab_size - 1}) — lower it",
            )
            return


def choices_parameter(text: str) -> list[list[int]]:
    """`{0}, {0, 0}, {1}` (the C++ backend's format of medusa_choices and eagle_choices) -> [[0], [0, 0], [1]]."""
    try:
        value = json.loads("[" + text.replace("{", "[").replace("}", "]") + "]")
        return [[int(k) for k in path] for path in value]
    except (ValueError, TypeError):
        raise ParameterProblem(f"choices {text!r} are not in the '{{0}}, {{0, 0}}' format") from None
