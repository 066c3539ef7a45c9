"""Token trees for tree-based speculative decoding (Medusa, EAGLE, lookahead), and their verification.

A draft tree is verified in one target forward. Node 0 is the *root*: the last token already decided,
whose KV entry is not yet in the cache. Nodes 1..n are draft tokens; every node's parent comes before it,
and a node at depth d sits at the root's position + d. Each node may attend
to itself and its ancestors only: that is the tree attention mask.

A static tree comes from `choices` (Medusa's `medusa_choices`, EAGLE-1's `eagle_choices`): each choice is
the path of top-k ranks from the root, e.g. `[0, 1]` = "the 2nd most likely token after the most likely
token". Dynamic trees (EAGLE-2, lookahead's n-gram trie) come from a parent list.

Verification (given the target's output distribution at every node):
- `greedy_accept`: walk down from the root, following a child whose token equals the target's argmax at
  its parent; with several matching children take the one that leads furthest. The bonus token is the
  target's argmax at the last accepted node. This reproduces greedy autoregressive decoding exactly.
- `sample_accept`: recursive (multi-candidate) rejection sampling. At a node with target distribution p,
  try its children in order; child token x proposed from q is accepted with probability min(1, p(x)/q(x));
  on rejection p <- norm(max(0, p - q)) and the next sibling is tried; if all are rejected the bonus token is
  drawn from the final p. For deterministic candidates (a token chosen as a function of the context, e.g.
  a draft model's top-k or an n-gram) q is the point mass on x: accept with probability p(x), else remove x
  from p (this is simply "draw from p and see whether the draw is x", so it is valid for *any* candidates
  chosen independently of this step's coins). Each emitted token is then distributed exactly as p
  (SpecInfer, Miao et al. 2024; EAGLE; Recursive Speculative Decoding, Jeon et al. 2024).

This module imports torch only inside functions so that the recipe check can validate choices cheaply.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Sequence

from specbuild.errors import UserError
from specbuild.trees import MC_SIM_7B_63, parse_choices, tree_problems  # noqa: F401 (MC_SIM_7B_63 re-exported)

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from specbuild.reference.batch import Batch
    from specbuild.reference.model import CausalLM, ForwardOutput
    from specbuild.reference.sequence import Sequence as Seq

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
        """(size, size) bool: [i, j] is True when node j is node i or one of its ancestors."""
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


def chain_tree(num_draft_tokens: int) -> Tree:
    """A linear draft (draft-target, prompt lookup) as a tree: node i's parent is node i-1."""
    return Tree(parents=tuple(range(-1, num_draft_tokens)), paths=tuple(tuple([0] * d) for d in range(num_draft_tokens + 1)))


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

    Structure as the recipe check sees it (`specbuild.trees.tree_problems`: non-empty paths of non-negative top-k
    ranks, no duplicates, every parent present) plus: integer ranks, at most `max_draft_len` paths (each path is
    one draft token), no path deeper than `max_depth` (Medusa: the number of heads; EAGLE: num_eagle_layers).
    """
    if not isinstance(choices, (list, tuple)) or not choices:
        return [f"{field_name}: expected a non-empty list of paths such as [[0], [0, 0], [1]], got {choices!r}"]
    for n, choice in enumerate(choices):
        if not isinstance(choice, (list, tuple)) or not all(isinstance(r, int) and not isinstance(r, bool) for r in choice):
            return [f"{field_name}[{n}]: expected a list of integer top-k ranks, got {choice!r}"]
    problems = [f"{field_name}" + (f"[{i}]" if i is not None else "") + f": {message}"
                for i, message in tree_problems([list(c) for c in choices])]
    if max_draft_len is not None and len(choices) > max_draft_len:
        problems.append(f"{field_name}: {len(choices)} paths but max_draft_len is {max_draft_len}; "
                        "each path is one draft token: remove paths or raise max_draft_len")
    deepest = max((len(c) for c in choices), default=0)
    if max_depth is not None and deepest > max_depth:
        problems.append(f"{field_name}: a path has depth {deepest} but only {max_depth} draft levels exist "
                        "(number of Medusa heads / EAGLE layers); shorten the paths")
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


# --------------------------------------------------------------------------------------------------
# Verification
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Acceptance:
    """Outcome of verifying one row's tree: the accepted draft nodes (root excluded, root-to-leaf order),
    their tokens, and the bonus token the target produced after the last accepted node."""

    nodes: tuple[int, ...]
    tokens: tuple[int, ...]
    bonus: int

    @property
    def last_node(self) -> int:
        return self.nodes[-1] if self.nodes else 0

    @property
    def new_tokens(self) -> list[int]:
        """Accepted draft tokens followed by the bonus token (what the request emits this step)."""
        return [*self.tokens, self.bonus]


def greedy_accept(tree: Tree, tokens: Sequence[int], target_argmax: Sequence[int]) -> Acceptance:
    """Longest root-to-node path whose every token equals the target's argmax at its parent.

    tokens[i]: token at node i (tokens[0], the root, is ignored); target_argmax[i]: the target's argmax of
    the next-token distribution after node i's prefix.
    """
    tokens = list(tokens)
    target_argmax = list(target_argmax)

    def longest_from(node: int) -> tuple[int, ...]:
        best: tuple[int, ...] = ()
        for child in tree.children[node]:
            if tokens[child] == target_argmax[node]:
                below = (child,) + longest_from(child)
                if len(below) > len(best):
                    best = below
        return best

    nodes = longest_from(0)
    last = nodes[-1] if nodes else 0
    return Acceptance(nodes=nodes, tokens=tuple(tokens[n] for n in nodes), bonus=int(target_argmax[last]))


def _accept_or_residual(p: "torch.Tensor", token: int, q: "torch.Tensor | None") -> tuple[float, "torch.Tensor"]:
    """One step of speculative sampling for a candidate `token` drawn from q (None: chosen deterministically).

    Returns (probability of accepting `token`, distribution to use if it is rejected).
    Accept with min(1, p(x)/q(x)); residual = norm(max(0, p - q)).
    """
    import torch

    if q is None:
        accept = float(p[token])
        residual = p.clone()
        residual[token] = 0.0
    else:
        qx = float(q[token])
        if qx <= 0.0:
            raise ValueError(f"candidate token {token} has proposal probability 0: it cannot have been drawn")
        accept = min(1.0, float(p[token]) / qx)
        residual = torch.clamp(p - q, min=0.0)
    total = float(residual.sum())
    if total <= 0.0:  # only when rejection has probability 0 (p <= q everywhere, i.e. p == q)
        return accept, p
    return accept, residual / total


def sample_accept(
    tree: Tree,
    tokens: Sequence[int],
    target_probs: "torch.Tensor",
    generator: "torch.Generator | None" = None,
    proposal_probs: "torch.Tensor | None" = None,
) -> Acceptance:
    """Recursive rejection sampling down the tree; every emitted token is distributed as the target's p.

    target_probs: (tree.size, V) target next-token distributions (after temperature/top-k/top-p) at each
        node. proposal_probs: None when every candidate token is a deterministic function of the context
        (top-k drafts, n-grams); else (tree.size, V) where row c is the distribution node c's token was
        drawn from *given its earlier siblings* (for draws without replacement: the draft distribution with
        earlier siblings removed, renormalised; for i.i.d. draws: the same draft distribution).
    """
    import torch

    tokens = [int(t) for t in tokens]
    node = 0
    nodes: list[int] = []
    while True:
        p = target_probs[node].to(torch.float64)
        accepted_child = None
        for child in tree.children[node]:
            q = None if proposal_probs is None else proposal_probs[child].to(torch.float64)
            accept, residual = _accept_or_residual(p, tokens[child], q)
            if float(torch.rand((), generator=generator, dtype=torch.float64)) < accept:
                accepted_child = child
                break
            p = residual
        if accepted_child is None:
            bonus = int(torch.multinomial(p.to(torch.float32), 1, generator=generator))
            return Acceptance(nodes=tuple(nodes), tokens=tuple(tokens[n] for n in nodes), bonus=bonus)
        nodes.append(accepted_child)
        node = accepted_child


# --------------------------------------------------------------------------------------------------
# Running a tree through the reference runtime (shared by Medusa, EAGLE and lookahead)
# --------------------------------------------------------------------------------------------------


@dataclass
class RowTree:
    """One row's draft for a step: the tree and its node tokens (tokens[0] is the root: the row's last,
    not yet cached token)."""

    tree: Tree
    tokens: list[int]


def feed_trees(batch: "Batch", model: "CausalLM", drafts: Sequence[RowTree], cache: str = "target",
               capture_layers: Sequence[int] | None = None) -> tuple["ForwardOutput", list[int]]:
    """One forward of `model` over every row's uncached tokens followed by its tree's draft nodes.

    The last uncached token is the tree root; a node at depth d sits at the root's position + d and sees the
    committed context, the uncached tokens before the root, and its own ancestors (the tree attention mask).
    Returns the forward output (logits of every fed token; `captured` layer outputs with `capture_layers`) and,
    per row, the index of the root among the fed tokens: node i of row r is fed token `roots[r] + i`.
    """
    import torch

    kv = batch.cache(cache, model)
    uncached = batch.uncached(cache)
    tokens, positions, attend, roots = [], [], [], []
    for r, draft in enumerate(drafts):
        u = len(uncached[r])
        if u < 1 or uncached[r][-1] != draft.tokens[0]:
            raise RuntimeError(f"row {r}: the tree root must be the row's last, uncached token")
        root, start, size = u - 1, kv.lengths[r], draft.tree.size
        tokens.append(list(uncached[r]) + list(draft.tokens[1:]))
        positions.append(list(range(start, start + u)) + [start + root + d for d in draft.tree.depths[1:]])
        n = u + size - 1
        sees = torch.zeros(n, n, dtype=torch.bool)
        sees[:u, :u] = torch.ones(u, u, dtype=torch.bool).tril()
        sees[root:, :root] = True
        sees[root:, root:] = draft.tree.ancestor_matrix()
        attend.append(sees)
        roots.append(root)
    out = model.forward(kv, tokens, positions=positions, attend=attend, logits="all",
                        **({"capture_layers": capture_layers} if capture_layers is not None else {}))
    return out, roots


def commit_paths(batch: "Batch", roots: Sequence[int], accepted: Sequence["Acceptance"], cache: str = "target") -> None:
    """Keep, per row, the tokens fed before the root, the root, and the accepted path (compacted in place)."""
    batch.caches[cache].commit([list(range(root + 1)) + [root + n for n in acc.nodes] for root, acc in zip(roots, accepted)])


def path_tokens(tree: Tree, tokens: Sequence[int], node: int) -> list[int]:
    """Draft tokens from the root (excluded) down to `node` (included)."""
    return [tokens[a] for a in tree.ancestors[node][1:]]


def verify_tree(seq: "Seq", tree: Tree, tokens: Sequence[int], logits: "torch.Tensor") -> Acceptance:
    """Verify one row's tree against the target's logits at its nodes ([tree.size, V]).

    Greedy requests: `greedy_accept` on the request's argmax at each node. Sampled requests: recursive
    rejection sampling with deterministic proposals (every tree the runtime builds is a function of the
    context, not of this step's coins), lossless. Bad words are masked given each node's own path.
    """
    from specbuild.reference import sampling

    bad_words = bool(seq.request.bad_words)
    if seq.greedy:
        if bad_words:
            argmax = [seq.choose(logits[i], path_tokens(tree, tokens, i)) for i in range(tree.size)]
        else:
            argmax = logits.argmax(-1).tolist()
        return greedy_accept(tree, tokens, argmax)
    if bad_words:
        import torch

        probs = torch.stack([seq.distribution(logits[i], path_tokens(tree, tokens, i)) for i in range(tree.size)])
    else:
        probs = sampling.probabilities(logits, seq.sampling)
    return sample_accept(tree, tokens, probs, generator=seq.generator)


BF16_DRAFTER_MIN_HIDDEN = 512  # below this, bf16 conversions cost more than the halved weight traffic saves


def drafter_dtype(decoding: dict, target_dtype: "torch.dtype", where: str, hidden_size: int) -> "torch.dtype":
    """The dtype the tree drafters (Medusa heads, EAGLE head) compute in: `draft_dtype` in the engine's decoding
    options (`auto` | `float32` | `bfloat16` | `float16`). Drafts only propose tokens, so this never changes the
    output (the target verifies in its own dtype); it only changes speed and acceptance. `auto` picks bfloat16 for
    a float32 target on CPUs with native bf16 matrix instructions (avx512_bf16 / amx_bf16) when the model is wide
    enough (hidden size >= 512) for weight traffic to dominate (measured: an EAGLE head forward plus lm_head at
    hidden 512 is ~1.3x faster in bf16; at hidden 256 fp32 is faster), and the target's dtype otherwise."""
    import torch

    from specbuild.cpu import has_native_bf16

    choice = str(decoding.get("draft_dtype", "auto"))
    named = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
    if choice == "auto":
        wide = hidden_size >= BF16_DRAFTER_MIN_HIDDEN
        return torch.bfloat16 if target_dtype == torch.float32 and wide and has_native_bf16() else target_dtype
    if choice not in named:
        raise UserError(f"{where}.draft_dtype={choice!r}: use auto, float32, bfloat16 or float16")
    return named[choice]
