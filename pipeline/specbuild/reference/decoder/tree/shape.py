"""The shape of a draft tree (Medusa, EAGLE, lookahead; a chain is a tree too).

Node 0 is the *root*: the last token already decided, whose KV entry is not yet in the cache. Nodes 1..n are
draft tokens; every node's parent comes before it, and a node at depth d sits at the root's position + d. Each
node may attend to itself and its ancestors only: that is the tree attention mask.

A static tree comes from `choices` (Medusa's `medusa_choices`, EAGLE-1's `eagle_choices`): each choice is the path
of top-k ranks from the root, e.g. `[0, 1]` = "the 2nd most likely token after the most likely token". Dynamic
trees (EAGLE-2, lookahead's n-gram trie) come from a parent list; a linear draft is `chain_tree(k)`.

Imports torch only inside functions, so that the recipe check can validate choices cheaply.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from typing import TYPE_CHECKING, Sequence

from specbuild.errors import UserError
from specbuild.facts.trees import MC_SIM_7B_63, parse_choices, tree_problems  # noqa: F401 (MC_SIM_7B_63 re-exported)
from specbuild.facts.trees import first_before_parent

if TYPE_CHECKING:  # pragma: no cover
    import torch


@dataclass(frozen=True)
class Tree:
    """Shape of a draft tree: node 0 is the root and parents[i] < i for i >= 1 (static trees are also ordered by
    depth, then by choice path, as Medusa and TensorRT-LLM order them)."""

    parents: tuple[int, ...]
    # For static trees: the choice path of each node (root: ()). For dynamic trees: ranks among siblings.
    paths: tuple[tuple[int, ...], ...] = field(default=())

    def __post_init__(self) -> None:
        if not self.parents or self.parents[0] != -1:
            raise ValueError("tree: node 0 must be the root (parent -1)")
        for i, p in enumerate(self.parents[1:], start=1):
            if not 0 <= p < i:
                raise ValueError(f"tree: node {i} has parent {p}; parents must come before their children")
        if self.paths and len(self.paths) != len(self.parents):
            raise ValueError("tree: paths and parents differ in length")

    @property
    def size(self) -> int:
        """Number of nodes including the root (= tokens in the verification forward)."""
        return len(self.parents)

    @property
    def num_draft_tokens(self) -> int:
        return len(self.parents) - 1

    @cached_property
    def depths(self) -> tuple[int, ...]:
        depths = [0] * self.size
        for i in range(1, self.size):
            depths[i] = depths[self.parents[i]] + 1
        return tuple(depths)

    @property
    def max_depth(self) -> int:
        return max(self.depths)

    @cached_property
    def children(self) -> tuple[tuple[int, ...], ...]:
        kids: list[list[int]] = [[] for _ in range(self.size)]
        for i in range(1, self.size):
            kids[self.parents[i]].append(i)
        return tuple(tuple(k) for k in kids)

    @cached_property
    def ancestors(self) -> tuple[tuple[int, ...], ...]:
        """For each node, its root-to-node path (root first, node last)."""
        result: list[tuple[int, ...]] = [(0,)]
        for i in range(1, self.size):
            result.append(result[self.parents[i]] + (i,))
        return tuple(result)

    @cached_property
    def leaves(self) -> tuple[int, ...]:
        return tuple(i for i in range(self.size) if not self.children[i])

    def candidate_paths(self) -> list[tuple[int, ...]]:
        """Root-to-leaf node paths: the candidate continuations the tree encodes (root included)."""
        return [self.ancestors[leaf] for leaf in self.leaves]

    def ancestor_matrix(self) -> "torch.Tensor":
        """(size, size) bool: [i, j] is True when node j is node i or one of its ancestors (do not modify:
        computed once per tree)."""
        return self._ancestor_matrix

    @cached_property
    def _ancestor_matrix(self) -> "torch.Tensor":
        import torch

        allowed = torch.zeros(self.size, self.size, dtype=torch.bool)
        for i, path in enumerate(self.ancestors):
            allowed[i, list(path)] = True
        return allowed

    def attention_mask(self, dtype: "torch.dtype | None" = None) -> "torch.Tensor":
        """(size, size) additive float mask: 0 where a node may attend (itself, ancestors), dtype-min elsewhere.

        Additive, not boolean: eager attention in transformers 5.x silently misreads 4D bool masks.
        """
        import torch

        dtype = dtype or torch.float32
        mask = torch.full((self.size, self.size), torch.finfo(dtype).min, dtype=dtype)
        return mask.masked_fill(self.ancestor_matrix(), 0.0)

    def position_offsets(self) -> list[int]:
        """Position of each node relative to the root's position (= its depth)."""
        return list(self.depths)

    def subtree(self, keep: Sequence[int]) -> "Tree":
        """The tree restricted to the nodes `keep` (ascending, root included, closed under parents)."""
        index = {old: new for new, old in enumerate(keep)}
        if not keep or keep[0] != 0:
            raise ValueError("subtree: the root must be kept")
        parents = [-1]
        for old in keep[1:]:
            if self.parents[old] not in index:
                raise ValueError(f"subtree: node {old} is kept but its parent {self.parents[old]} is not")
            parents.append(index[self.parents[old]])
        paths = tuple(self.paths[old] for old in keep) if self.paths else ()
        return Tree(parents=tuple(parents), paths=paths)

    def truncated(self, max_depth: int) -> tuple["Tree", list[int]]:
        """The nodes no deeper than `max_depth` (a step must not emit more tokens than a request may take),
        and the kept nodes' indices in this tree."""
        if max_depth >= self.max_depth:
            return self, list(range(self.size))
        keep = [i for i in range(self.size) if self.depths[i] <= max_depth]
        return self.subtree(keep), keep


@lru_cache(maxsize=64)
def chain_tree(num_draft_tokens: int) -> Tree:
    """A linear draft (draft-target, prompt lookup) as a tree: node i's parent is node i-1."""
    return Tree(
        parents=tuple(range(-1, num_draft_tokens)), paths=tuple(tuple([0] * d) for d in range(num_draft_tokens + 1))
    )


def tree_from_parents(parents: Sequence[int]) -> Tree:
    """A tree from a parent list (parents[0] == -1, parents[i] < i). `paths` records, for each node, its
    rank among its siblings at every level (the same shape as a static tree's choice paths)."""
    parents = tuple(int(p) for p in parents)
    ranks: list[tuple[int, ...]] = [()]
    seen_children: dict[int, int] = {}
    for i in range(1, len(parents)):
        p = parents[i]
        rank = seen_children.get(p, 0)
        seen_children[p] = rank + 1
        if not 0 <= p < i:
            raise ValueError(f"tree: node {i} has parent {p}; parents must come before their children")
        ranks.append(ranks[p] + (rank,))
    return Tree(parents=parents, paths=tuple(ranks))


def check_choices(
    choices: object,
    *,
    field_name: str = "choices",
    max_draft_len: int | None = None,
    max_depth: int | None = None,
) -> list[str]:
    """Problems with a `choices` list as the runtime receives it (empty list = valid).

    Structure as the recipe check sees it (`specbuild.facts.trees.tree_problems`: non-empty paths of non-negative top-k
    ranks, no duplicates, every parent present) plus: integer ranks, at most `max_draft_len` paths (each path is
    one draft token), no path deeper than `max_depth` (Medusa: the number of heads; EAGLE: num_eagle_layers).
    """
    if not isinstance(choices, (list, tuple)) or not choices:
        return [f"{field_name}: expected a non-empty list of paths such as [[0], [0, 0], [1]], got {choices!r}"]
    for n, choice in enumerate(choices):
        if not isinstance(choice, (list, tuple)) or not all(
            isinstance(r, int) and not isinstance(r, bool) for r in choice
        ):
            return [f"{field_name}[{n}]: expected a list of integer top-k ranks, got {choice!r}"]
    problems = [
        f"{field_name}" + (f"[{i}]" if i is not None else "") + f": {message}"
        for i, message in tree_problems([list(c) for c in choices])
    ]
    if max_draft_len is not None and len(choices) > max_draft_len:
        problems.append(
            f"{field_name}: {len(choices)} paths but max_draft_len is {max_draft_len}; "
            "each path is one draft token: remove paths or raise max_draft_len"
        )
    deepest = max((len(c) for c in choices), default=0)
    if max_depth is not None and deepest > max_depth:
        problems.append(
            f"{field_name}: a path has depth {deepest} but only {max_depth} draft levels exist "
            "(number of Medusa heads / EAGLE layers); shorten the paths"
        )
    return problems


def tree_from_choices(
    choices: Sequence[Sequence[int]],
    *,
    field_name: str = "choices",
    max_draft_len: int | None = None,
    max_depth: int | None = None,
) -> Tree:
    """The static tree of a `choices` list, ordered like Medusa/TensorRT-LLM: by depth, then by path. A string
    in the Triton parameter format (`{0}, {0, 0}`) or JSON (`[[0], [0, 0]]`) is accepted too."""
    if isinstance(choices, str):
        try:
            choices = parse_choices(choices)
        except ValueError as exc:
            raise UserError(f"{field_name}: cannot read {choices!r} as a list of paths: {exc}") from exc
    problems = check_choices(choices, field_name=field_name, max_draft_len=max_draft_len, max_depth=max_depth)
    if problems:
        raise UserError("\n".join(problems))
    paths = sorted((tuple(c) for c in choices), key=lambda p: (len(p), p))
    index = {(): 0}
    parents = [-1]
    for i, path in enumerate(paths, start=1):
        index[path] = i
        parents.append(index[path[:-1]])
    return Tree(parents=tuple(parents), paths=((),) + tuple(paths))


ROOT_ONLY = Tree(parents=(-1,), paths=((),))  # no drafts: a plain decoding step


def tree_from_choice_prefix(choices: Sequence[Sequence[int]], nodes: int, *, field_name: str = "choices") -> Tree:
    """The tree of the first `nodes` choices in their given order (adaptive speculation cuts a static tree this
    way; the choices must list each parent before its children, `specbuild.facts.trees.first_before_parent`); 0 nodes:
    the root alone."""
    if nodes <= 0:
        return ROOT_ONLY
    return tree_from_choices(list(choices)[:nodes], field_name=field_name)


def prefix_order_problem(choices: Sequence[Sequence[int]], field_name: str) -> str | None:
    """Why a draft_len_schedule cannot cut these choices to prefixes (None: it can)."""
    i = first_before_parent(choices)
    if i is None:
        return None
    return (
        f"{field_name}[{i}] = {list(choices[i])} comes before its parent; a draft_len_schedule keeps the first N "
        "choices, so list every parent before its children"
    )


def tree_from_sequences(sequences: Sequence[Sequence[int]]) -> tuple[Tree, list[int]]:
    """Merge candidate continuations of the root (n-grams, prompt-lookup matches) into a trie.

    Returns the tree and its node tokens; tokens[0] is a placeholder (-1) for the root token, which the
    caller fills in. Shared prefixes become shared nodes, so no sibling repeats a token.
    """
    index: dict[tuple[int, ...], int] = {(): 0}
    nodes_by_depth: list[list[tuple[int, ...]]] = []  # token prefixes, first-seen order, per depth
    for seq in sequences:
        for d in range(1, len(seq) + 1):
            prefix = tuple(int(t) for t in seq[:d])
            while len(nodes_by_depth) < d:
                nodes_by_depth.append([])
            if prefix not in index:
                index[prefix] = -1
                nodes_by_depth[d - 1].append(prefix)
    parents, tokens = [-1], [-1]
    for level in nodes_by_depth:
        for prefix in level:
            index[prefix] = len(parents)
            parents.append(index[prefix[:-1]])
            tokens.append(prefix[-1])
    return tree_from_parents(parents), tokens


def path_tokens(tree: Tree, tokens: Sequence[int], node: int) -> list[int]:
    """Draft tokens from the root (excluded) down to `node` (included)."""
    return [tokens[a] for a in tree.ancestors[node][1:]]
