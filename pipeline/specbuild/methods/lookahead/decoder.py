"""Lookahead decoding (Fu et al., 2024): Jacobi iteration harvests n-grams that the target then verifies itself.

Configured by (W, N, G): window size, n-gram size, verification set size. Per sequence it keeps
    a window: N - 1 levels of W guessed tokens. Level 0 starts with the root (the last, uncached token x_L) and
              holds W - 1 guesses after it; level l, column i guesses the token at position L + i + l.
    a pool:   n-grams by first token, the G most recent continuations per token: every N-gram of the prompt and
              of the generated text (as TensorRT-LLM's LookaheadPoolManager), and those the window produces.

Each step is one target forward over one token tree (root x_L at position L):
    lookahead branch: level 0 is a chain from the root; column i of level l hangs below column i of level l - 1,
              so a column reads (level-0 prefix up to i, then the column upwards): exactly the paper's mask
    verification branch: the pool's n-grams starting with x_L (at most G, each N - 1 tokens), merged as a trie
    verify:   greedy: the longest tree path matching the target's argmax (a Jacobi guess that is already right is
              accepted too); sampled: recursive rejection sampling over the tree with the window's and the pool's
              tokens as deterministic proposals (fixed before the step's coins), so sampling is lossless
    update:   the target's argmax at each column's top token is the new top level (Jacobi step); once N - 1
              levels exist, every column plus its new token is an N-gram for the pool and the oldest level goes;
              the N-grams ending in this step's emitted tokens join the pool too
Tokens per forward: 1 + (W - 1) + (N - 2) * W + G * (N - 1) = 1 + max_draft_len(W, N, G), TensorRT-LLM's formula.
Engine `specbuild.decoding` keys: `lookahead_window_size`, `lookahead_ngram_size`, `lookahead_verification_set_size`.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

from specbuild.facts.engine_facts import SpecMode
from specbuild.errors import UserError

# (0 if N == 1 else N - 2) + (W - 1 + G) * (N - 1): TensorRT-LLM's formula, defined once with the recipe's method
from specbuild.methods.lookahead import lookahead_max_draft_len
from specbuild.reference.decoder.batch import Batch
from specbuild.reference.decoder.methods import Decoder, StepOutput
from specbuild.reference.decoder.tree import (
    RowTree,
    Tree,
    commit_paths,
    feed_trees,
    tree_from_parents,
    tree_from_sequences,
)
from specbuild.reference.decoder.verify import verify_tree


class NgramPool:
    """n-grams by first token; per token the `capacity` most recently seen distinct continuations."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self.by_first: dict[int, OrderedDict[tuple[int, ...], None]] = {}

    def add(self, ngram) -> None:
        if self.capacity <= 0:
            return
        first, rest = int(ngram[0]), tuple(int(t) for t in ngram[1:])
        seen = self.by_first.setdefault(first, OrderedDict())
        seen.pop(rest, None)
        seen[rest] = None
        while len(seen) > self.capacity:
            seen.popitem(last=False)

    def add_text(self, tokens, n: int) -> None:
        """Every n-gram of `tokens`, oldest first (so the latest occurrence is the most recent)."""
        for i in range(len(tokens) - n + 1):
            self.add(tokens[i : i + n])

    def continuations(self, first: int) -> list[tuple[int, ...]]:
        """Most recent first."""
        return list(reversed(self.by_first.get(first, ())))


@dataclass
class Window:
    """The 2D Jacobi window. levels[0][0] is a placeholder for the root; every level has W columns."""

    levels: list[list[int]]
    pool: NgramPool
    ngram: int

    @property
    def full(self) -> bool:
        return len(self.levels) == self.ngram - 1


@dataclass
class LookaheadTree:
    """One row's step tree and where the window's tokens sit in it (node index per level and column)."""

    tree: Tree
    tokens: list[int]
    window_nodes: list[list[int]] = field(default_factory=list)


def build_tree(window: Window, root: int, verification_set: int) -> LookaheadTree:
    """The step's tree: root, the lookahead branch (the window), the verification branch (a trie of n-grams)."""
    width = len(window.levels[0])
    parents, tokens = [-1], [root]
    nodes: list[list[int]] = [[0]]
    for i in range(1, width):  # level 0: a chain from the root
        parents.append(nodes[0][i - 1])
        tokens.append(window.levels[0][i])
        nodes[0].append(len(tokens) - 1)
    for level in window.levels[1:]:  # level l, column i hangs below level l - 1, column i
        below = nodes[-1]
        nodes.append([])
        for i, token in enumerate(level):
            parents.append(below[i])
            tokens.append(token)
            nodes[-1].append(len(tokens) - 1)
    candidates = window.pool.continuations(root)[:verification_set]
    if candidates:
        trie, trie_tokens = tree_from_sequences(candidates)
        offset = len(tokens) - 1  # trie node j (>= 1) becomes node offset + j
        parents += [0 if p == 0 else offset + p for p in trie.parents[1:]]
        tokens += trie_tokens[1:]
    return LookaheadTree(tree_from_parents(parents), tokens, nodes)


def jacobi_update(window: Window, step: LookaheadTree, argmax: list[int]) -> None:
    """One Jacobi iteration: the target's argmax at each top-level column becomes the next level; with N - 1
    levels, every column plus its new token is an N-gram for the pool and the oldest level is dropped."""
    top = [argmax[n] for n in step.window_nodes[-1]]
    if window.full:
        for i in range(len(top)):
            window.pool.add([level[i] for level in window.levels] + [top[i]])
        window.levels = window.levels[1:]
    window.levels.append(top)


class LookaheadDecoder(Decoder):
    name = "lookahead"
    engine_mode = SpecMode.LOOKAHEAD_DECODING
    reuses_prefix = True  # its window and n-gram pool come from the tokens, not from the cache
    follows_schedule = False  # its step is the whole (W, N, G) window (specbuild/recipe/adaptive.py says why)

    def __init__(self, engine, draft_engine=None, decoding=None):
        super().__init__(engine, draft_engine, decoding)
        self.window = self.option("lookahead_window_size", minimum=1)
        self.ngram = self.option("lookahead_ngram_size", minimum=1)
        self.verification_set = self.option("lookahead_verification_set_size", minimum=0)
        need = lookahead_max_draft_len(self.window, self.ngram, self.verification_set)
        have = engine.limits.max_draft_len
        if need > have:
            raise UserError(
                f"{engine.path}/config.json: lookahead (W, N, G) = ({self.window}, {self.ngram}, "
                f"{self.verification_set}) needs max_draft_len {need} = (0 if N == 1 else N - 2) + (W - 1 + G) * (N - 1), "
                f"but the engine has max_draft_len {have}; rebuild with max_draft_len {need} or lower W, N, G"
            )

    def _window(self, seq) -> Window:
        if "lookahead" not in seq.state:
            prompt = seq.tokens[: seq.prompt_len]
            guesses = [prompt[(len(prompt) - self.window + 1 + i) % len(prompt)] for i in range(self.window - 1)]
            pool = NgramPool(self.verification_set)
            pool.add_text(seq.tokens, self.ngram)
            seq.state["lookahead"] = Window([[seq.tokens[-1], *guesses]], pool, self.ngram)
        return seq.state["lookahead"]

    def step(self, batch: Batch) -> list[StepOutput]:
        steps: list[LookaheadTree | None] = []
        drafts = []
        for seq in batch.seqs:
            if self.ngram == 1:  # (W, 1, G): no speculation
                steps.append(None)
                drafts.append(RowTree(Tree(parents=(-1,)), [seq.tokens[-1]]))
                continue
            window = self._window(seq)
            window.levels[0][0] = seq.tokens[-1]
            step = build_tree(window, seq.tokens[-1], self.verification_set)
            budget = seq.draft_budget(max(step.tree.max_depth, 1))
            if budget < step.tree.max_depth:  # the request ends within this step: verify what fits, no update
                tree, keep = step.tree.truncated(budget)
                steps.append(None)
                drafts.append(RowTree(tree, [step.tokens[n] for n in keep]))
            else:
                steps.append(step)
                drafts.append(RowTree(step.tree, step.tokens))
        out, roots = feed_trees(batch, self.target, drafts)
        outputs, accepted = [], []
        for r, (seq, draft, step) in enumerate(zip(batch.seqs, drafts, steps)):
            logits = out.logits[r, roots[r] : roots[r] + draft.tree.size]
            acc = verify_tree(seq, draft.tree, draft.tokens, logits)
            if step is not None:
                window = seq.state["lookahead"]
                jacobi_update(window, step, logits.argmax(-1).tolist())
                # the N-grams that end in this step's new tokens: the last N - 1 tokens so far + what it emits
                window.pool.add_text(seq.tokens[-(self.ngram - 1) :] + acc.new_tokens, self.ngram)
            outputs.append(StepOutput.of(acc, drafted=draft.tree.max_depth))
            accepted.append(acc)
        commit_paths(batch, roots, accepted)
        return outputs
