"""EAGLE (Li et al., 2024): a one-layer draft head that extrapolates the target's features, drafting a token tree.

The head reads (feature f_p, next token x_{p+1}) at position p and predicts the feature f_{p+1}; the target's
lm_head turns a feature into draft logits. It keeps its own KV cache of such entries, one per position.

Each step, for every sequence (root = the last, uncached token x_L at position L):
    catch up:  feed the head the entries it lacks, (f_p, x_{p+1}) for the positions verified last step, using
               the target's true features; the last entry's output f^_L scores the root's children
    draft:     grow the tree level by level, each level one head forward over the nodes that get children:
               a node y at depth d is the head entry (f^ of its parent, y) at position L - 1 + d, attending to
               the head's cache and to its own ancestors' entries (a tree mask in the head's cache)
               EAGLE-1 (static): the tree of `eagle_choices`; node (r_1..r_d) = the r_d-th best child
               EAGLE-2 (dynamic, `use_dynamic_tree`): each depth expands the top-K nodes by cumulative draft
               log-probability into their top-K children; finally the `min(K + K*K*(D-1), max_draft_len)`
               best nodes of the K + K*K*(D-1) drafted are kept (re-ranking; a child never outranks its parent)
    verify:    the head's tree entries are dropped; one target forward over [root, tree] with the tree mask
    accept:    greedy: longest path matching the target's argmax. Sampled: recursive rejection sampling over the
               tree; every candidate is a deterministic function of the context (top-k of the head), so this is
               lossless (the EAGLE reference code's qx = 1 rule)
    then:      the accepted path is compacted in the target cache; the target's features at the root and the
               accepted nodes are what the head catches up on next step
KV reuse: a finished row keeps the target's features at its positions beside its KV (`kept_extras`); a request
that reuses the prefix starts with them queued for the head, as if it had prefilled the prompt itself. While the
schedule says 0 a step is a plain one, which is also the prefill of admitted rows with a short uncached tail
(`join`), as autoregressive decoding's is.
D = `num_eagle_layers` (engine decoding or pretrained_config, default 4). Engine `specbuild.decoding` keys:
`eagle_choices` (default mc_sim_7b_63), `eagle_use_dynamic_tree` (false), `eagle_dynamic_tree_max_top_k` (K,
default 10; `use_dynamic_tree` / `dynamic_tree_max_top_k` / `dynamic_tree_max_topK` are accepted too), `draft_dtype` (auto | float32 |
bfloat16 | float16 | int8; auto: a bfloat16 head on CPUs with native bf16, int8 matmuls on other x86 CPUs, see
`drafters.drafter_precision`; lossless either way), `draft_vocab_size` (N: the head
scores only the token ids [0, N), see `drafters.DraftVocabHead`; default the whole vocabulary; lossless, the target
verifies over its full vocabulary).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from specbuild.facts.engine_facts import SpecMode
from specbuild.errors import UserError
from specbuild.heads.eagle import load_eagle_head
from specbuild.reference.decoder.batch import Batch
from specbuild.reference.decoder.kv_cache import KVCache
from specbuild.reference.decoder.lean.heads import LeanEagleHead
from specbuild.reference.decoder.drafters import DraftVocabHead, draft_vocab_size
from specbuild.reference.decoder.methods import REUSED_EXTRAS, Decoder, StepOutput, next_token
from specbuild.reference.decoder.tree import (
    MC_SIM_7B_63,
    RowTree,
    Tree,
    commit_paths,
    drafter_precision,
    feed_trees,
    prefix_order_problem,
    tree_from_choice_prefix,
    tree_from_choices,
    tree_from_parents,
)
from specbuild.reference.decoder.verify import verify_tree
from specbuild.speculation import dynamic_tree_size
from specbuild.facts.trees import parse_choices

TOP_K_KEYS = ("dynamic_tree_max_top_k", "eagle_dynamic_tree_max_top_k", "dynamic_tree_max_topK")
DYNAMIC_KEYS = ("use_dynamic_tree", "eagle_use_dynamic_tree")
# seq.state keys: the target's features the head has not caught up on (queued), and those of every position the
# target cache holds (their history, kept with the KV when KV reuse is on)
QUEUED, HISTORY = "eagle_features", "eagle_history"
CACHE = "eagle"  # the head's KV cache in the batch (EAGLE-3's head uses the same name: one head per batch)


def _flag(value) -> bool:
    """A boolean option that may arrive as a Triton parameter string ("true"/"false")."""
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value)


@dataclass
class _Growing:
    """One row's tree while it is drafted. Node 0 is the root."""

    root_feature: torch.Tensor
    root_position: int
    tokens: list[int]
    parents: list[int] = field(default_factory=lambda: [-1])
    depths: list[int] = field(default_factory=lambda: [0])
    scores: list[float] = field(default_factory=lambda: [0.0])  # cumulative draft log-probability
    feature_out: dict[int, torch.Tensor] = field(default_factory=dict)  # node -> head output (its children's f^)
    logprobs: dict[int, torch.Tensor] = field(default_factory=dict)  # node -> draft log-probs of its children
    pending: dict[int, int] = field(default_factory=dict)  # node -> index among the head cache's pending entries

    def add(self, parent: int, token: int, score: float) -> int:
        self.tokens.append(token)
        self.parents.append(parent)
        self.depths.append(self.depths[parent] + 1)
        self.scores.append(score)
        return len(self.tokens) - 1

    def input_feature(self, node: int) -> torch.Tensor:
        parent = self.parents[node]
        return self.root_feature if parent == 0 else self.feature_out[parent]


class EagleDecoder(Decoder):
    name = "eagle"
    engine_mode = SpecMode.EAGLE
    reuses_prefix = True
    drafting = "draft_and_rollback"  # the head's catch-up and the tree it drafts
    feature_name = "target_hidden"  # what the head reads at each position: the target's final hidden state
    # What a scheduled draft length caps: the tree's node count (EAGLE-1: the first N choices; EAGLE-2: the N best
    # nodes, drafted at most N deep), or its depth (EAGLE-3: TensorRT-LLM's max_draft_len is the chain length)
    schedule_caps_depth = False

    def __init__(self, engine, draft_engine=None, decoding=None):
        super().__init__(engine, draft_engine, decoding)
        if "eagle" not in engine.folders:
            raise UserError(
                f"{engine.path}/config.json: specbuild.files has no 'eagle' entry (the EAGLE head); "
                "rebuild the engine with the recipe's eagle head folder"
            )
        where = self.where()
        self.draft_precision = drafter_precision(
            self.decoding, self.target.dtype, where, self.target.hidden_size, lean=self.target.implementation == "lean"
        )
        self.draft_dtype, int8 = self.draft_precision
        self.head = load_eagle_head(engine.folders["eagle"], target_model=self.target.hf, dtype=self.draft_dtype)
        # the head runs on the same path as the target: lean modules, or the transformers layers of EagleHeadModule
        self.lean_head = None
        if self.target.implementation == "lean" and LeanEagleHead.unsupported(self.head) is None:
            self.lean_head = LeanEagleHead(self.head, int8=int8)
        # the head drafts through the target's lm_head (its first `draft_vocab_size` rows), in the drafting precision
        self.draft_vocab = draft_vocab_size(self.decoding, self.target.vocab_size, where)
        self.draft_head = DraftVocabHead(self.target.lm_head.weight, self.draft_vocab, self.draft_dtype, int8=int8)
        pretrained = engine.config.get("pretrained_config", {})
        self.depth = int(self.decoding.get("num_eagle_layers", pretrained.get("num_eagle_layers", 4)))
        self.max_draft_len = engine.limits.max_draft_len  # build_config.max_draft_len: the nodes a tree may have
        if self.max_draft_len < 1:
            raise UserError(
                f"{engine.path}/config.json: build_config.max_draft_len is {self.max_draft_len}, but an EAGLE engine "
                "verifies up to that many tree nodes — rebuild the engine from its recipe"
            )
        self.dynamic = any(_flag(self.decoding.get(k, False)) for k in DYNAMIC_KEYS)
        if self.dynamic:
            self.top_k = int(next((self.decoding[k] for k in TOP_K_KEYS if k in self.decoding), 10))
            if self.top_k < 1:
                raise UserError(f"{where}.dynamic_tree_max_top_k={self.top_k} must be >= 1")
        else:
            choices = self.decoding.get("eagle_choices") or MC_SIM_7B_63
            self.tree = tree_from_choices(
                choices, field_name=f"{where}.eagle_choices", max_draft_len=self.max_draft_len, max_depth=self.depth
            )
            self.choices = parse_choices(choices) if isinstance(choices, str) else [list(c) for c in choices]
            if self.schedule is not None and prefix_order_problem(self.choices, f"{where}.eagle_choices"):
                raise UserError(prefix_order_problem(self.choices, f"{where}.eagle_choices"))
            self._trees: dict[tuple[int, int], Tree] = {}

    # ---------------------------------------------------------------- prefill: first token, head over the prompt
    def prefill(self, batch: Batch) -> list[StepOutput]:
        out = batch.feed("target", self.target, logits="last")
        batch.caches["target"].commit_all()
        outputs, features, tokens = [], [], []
        for r, seq in enumerate(batch.seqs):
            outputs.append(next_token(seq, out.logits[r], counts_as_step=False))
            first = outputs[-1].tokens[0]
            features.append(self.prompt_features(seq, out.hidden[r, : out.n_new[r]]))
            tokens.append(seq.tokens[1:] + [first])  # entry p = (f_p, x_{p+1})
        self.start_head(batch, features, tokens)
        return outputs

    def prompt_features(self, seq, fed: torch.Tensor) -> torch.Tensor:
        """The target's features at every prompt position: a reused prefix's (KV reuse) and the fed tail's; they
        start the row's feature history."""
        reused = self.reused_features(seq)
        features = fed.clone() if reused is None else torch.cat([reused.to(fed.dtype), fed])
        seq.state[HISTORY] = [features]
        return features

    def reused_features(self, seq) -> torch.Tensor | None:
        """The target's features at the positions KV reuse took from a finished request (None: nothing reused)."""
        return seq.state.pop(REUSED_EXTRAS, {}).get(self.feature_name)

    # ---------------------------------------------------------------- KV reuse and joining the running batch
    def prefix_extras(self) -> tuple[str, ...]:
        return (self.feature_name,)

    def kept_extras(self, seq, length: int) -> dict:
        history = seq.state.get(HISTORY) or []
        if sum(len(f) for f in history) < length:
            return {}
        return {self.feature_name: torch.cat(history)[:length]}

    def joins_running_batch(self) -> bool:
        return self.scheduled_length == 0  # a plain step feeds every row's uncached tokens: the joining rows' prefill

    def join(self, batch: Batch) -> None:
        """The joining rows' head cache starts empty; the features of their reused prefix wait for the catch-up,
        and those of their tail are queued by the plain step that prefills it."""
        batch.caches[CACHE] = KVCache(self.head.config, len(batch.seqs))
        for seq in batch.seqs:
            reused = self.reused_features(seq)
            seq.state["eagle_root_feature"] = None
            seq.state[QUEUED] = [] if reused is None else [reused]
            seq.state[HISTORY] = list(seq.state[QUEUED])

    def start_head(
        self, batch: Batch, features: list[torch.Tensor], tokens: list[list[int]], cache: str = CACHE
    ) -> None:
        """The head's entries over the prompts (f_p, x_{p+1}), after the target's prefill. With speculation off
        (a scheduled draft length of 0) they wait for the catch-up before the next drafting step instead, so that a
        deployment whose schedule turned drafting off does no head work at all."""
        kv = batch.caches[cache] = KVCache(self.head.config, len(batch.seqs))
        if self.scheduled_length == 0:
            for r, seq in enumerate(batch.seqs):
                seq.state["eagle_root_feature"] = None
                seq.state[QUEUED] = [features[r]]
            return
        fhat = self.head_forward(kv, features, tokens, [list(range(len(t))) for t in tokens])
        kv.commit_all()
        for r, seq in enumerate(batch.seqs):
            seq.state["eagle_root_feature"] = fhat[r, len(tokens[r]) - 1]
            seq.state[QUEUED] = []

    # ---------------------------------------------------------------- one step
    def step(self, batch: Batch) -> list[StepOutput]:
        if self.scheduled_length == 0:
            return self.plain_step(batch)
        drafts = self.draft_and_rollback(batch)
        out, roots = feed_trees(batch, self.target, drafts)
        outputs, accepted = [], []
        for r, (seq, draft) in enumerate(zip(batch.seqs, drafts)):
            acc = verify_tree(seq, draft.tree, draft.tokens, out.logits[r, roots[r] : roots[r] + draft.tree.size])
            # target features at the root and the accepted nodes: the head's next entries
            self.keep_features(seq, out.hidden[r, [roots[r] + n for n in (0, *acc.nodes)]])
            outputs.append(StepOutput.of(acc, drafted=draft.tree.max_depth))
            accepted.append(acc)
        commit_paths(batch, roots, accepted)
        return outputs

    def plain_step(self, batch: Batch, capture_layers=None) -> list[StepOutput]:
        """A scheduled draft length of 0 (speculation off): an autoregressive step that leaves the head alone;
        the target's features at the fed positions wait for the head's next catch-up."""
        cache = batch.cache("target", self.target)
        out = self.target.forward(cache, batch.uncached("target"), logits="last", capture_layers=capture_layers)
        cache.commit_all()
        features = out.hidden if capture_layers is None else out.captured
        outputs = []
        for r, seq in enumerate(batch.seqs):
            self.keep_features(seq, features[r, : out.n_new[r]])
            outputs.append(next_token(seq, out.logits[r]))
        return outputs

    def draft_and_rollback(self, batch: Batch) -> list[RowTree]:
        """This step's trees, drafted by the head after it caught up (its tree entries dropped again)."""
        self.catch_up(batch)
        drafts = self.draft(batch)
        batch.caches[CACHE].rollback()
        return drafts

    @staticmethod
    def keep_features(seq, features: torch.Tensor) -> None:
        """Queue the target's features at newly verified positions for the head's next catch-up (and keep a copy
        in the row's history: a view would hold the whole forward's output)."""
        seq.state[QUEUED].append(features)
        seq.state[HISTORY].append(features.clone())

    @staticmethod
    def queued_features(seq) -> torch.Tensor | None:
        """The target's features the head has not caught up on yet, [n, H] in position order (None: none)."""
        waiting = seq.state[QUEUED]
        if not waiting:
            return None
        return waiting[0] if len(waiting) == 1 else torch.cat(waiting)

    @torch.inference_mode()
    def catch_up(self, batch: Batch) -> None:
        """Feed the head the entries (f_p, x_{p+1}) verified since its last catch-up; keep them."""
        kv = batch.caches[CACHE]
        features = [self.queued_features(seq) for seq in batch.seqs]
        if all(f is None for f in features):
            return
        tokens = [
            seq.tokens[kv.lengths[r] + 1 : kv.lengths[r] + 1 + (0 if f is None else len(f))]
            for r, (seq, f) in enumerate(zip(batch.seqs, features))
        ]
        positions = [list(range(kv.lengths[r], kv.lengths[r] + len(t))) for r, t in enumerate(tokens)]
        fhat = self.head_forward(kv, features, tokens, positions)
        kv.commit_all()
        for r, seq in enumerate(batch.seqs):
            if len(tokens[r]):
                seq.state["eagle_root_feature"] = fhat[r, len(tokens[r]) - 1]
            seq.state[QUEUED] = []

    # ---------------------------------------------------------------- drafting
    @torch.inference_mode()
    def draft(self, batch: Batch) -> list[RowTree]:
        kv = batch.caches[CACHE]
        rows = [
            _Growing(root_feature=seq.state["eagle_root_feature"], root_position=kv.lengths[r], tokens=[seq.tokens[-1]])
            for r, seq in enumerate(batch.seqs)
        ]
        # adaptive speculation: this step's length caps the depth (EAGLE-3) or the node count (EAGLE-1/2)
        cap = self.scheduled_length
        nodes = None if cap is None or self.schedule_caps_depth else cap
        limit = self.depth if cap is None else min(self.depth, cap)
        depth = [min(limit, seq.draft_budget(limit)) for seq in batch.seqs]
        roots = torch.stack([g.root_feature for g in rows])
        root_logprobs = self.draft_logprobs(roots)
        for g, lp in zip(rows, root_logprobs):
            g.logprobs[0] = lp
        if self.dynamic:
            return self._grow_dynamic(kv, rows, depth, nodes)
        return self._grow_static(kv, rows, depth, nodes)

    def _grow_static(
        self, kv: KVCache, rows: list[_Growing], depth: list[int], nodes: int | None = None
    ) -> list[RowTree]:
        """EAGLE-1: fill the `eagle_choices` tree (its first `nodes` choices) level by level; only nodes with
        children get a head entry."""
        trees = [self._static_tree(d, nodes) for d in depth]
        for d in range(1, max(depth, default=0) + 1):
            expand: list[list[int]] = []
            for g, tree in zip(rows, trees):
                level = [n for n in range(1, tree.size) if tree.depths[n] == d]
                ranked: dict[int, list[int]] = {}  # parent -> its children's candidate tokens, best first
                for n in level:
                    parent, rank = tree.parents[n], tree.paths[n][-1]
                    if parent not in ranked:
                        most = max(tree.paths[c][-1] for c in tree.children[parent]) + 1
                        ranked[parent] = torch.topk(g.logprobs[parent], most).indices.tolist()
                    token = ranked[parent][rank]
                    added = g.add(parent, token, g.scores[parent] + float(g.logprobs[parent][token]))
                    assert added == n  # static trees list nodes by depth: growing index == tree index
                expand.append([n for n in level if tree.children[n]])
            if any(expand):
                self._expand(kv, rows, expand)
        return [RowTree(tree, g.tokens) for g, tree in zip(rows, trees)]

    def _static_tree(self, max_depth: int, nodes: int | None = None) -> Tree:
        nodes = self.tree.num_draft_tokens if nodes is None else min(nodes, self.tree.num_draft_tokens)
        key = (max_depth, nodes)
        if key not in self._trees:
            tree = self.tree if nodes == self.tree.num_draft_tokens else tree_from_choice_prefix(self.choices, nodes)
            self._trees[key] = tree.truncated(max_depth)[0]
        return self._trees[key]

    def _grow_dynamic(
        self, kv: KVCache, rows: list[_Growing], depth: list[int], nodes: int | None = None
    ) -> list[RowTree]:
        """EAGLE-2: expand the top-K nodes of each depth (by cumulative draft log-prob), then re-rank (keeping at
        most `nodes` of them)."""
        k = self.top_k
        frontier: list[list[int]] = [[] for _ in rows]
        for r, g in enumerate(rows):
            if depth[r] >= 1:
                top = torch.topk(g.logprobs[0], min(k, g.logprobs[0].shape[0]))
                frontier[r] = [g.add(0, int(t), float(s)) for s, t in zip(top.values, top.indices)]
        for d in range(1, max(depth, default=0)):
            expand = [frontier[r] if d < depth[r] else [] for r in range(len(rows))]
            if not any(expand):
                break
            self._expand(kv, rows, expand)
            for r, g in enumerate(rows):
                children = []
                for node in expand[r]:
                    top = torch.topk(g.logprobs[node], min(k, g.logprobs[node].shape[0]))
                    children += [
                        g.add(node, int(t), g.scores[node] + float(s)) for s, t in zip(top.values, top.indices)
                    ]
                if children:
                    frontier[r] = sorted(children, key=lambda n: -g.scores[n])[:k]
        most = self.max_draft_len if nodes is None else min(nodes, self.max_draft_len)
        return [self._rerank(g, dynamic_tree_size(k, d, most)) for g, d in zip(rows, depth)]

    @staticmethod
    def _rerank(g: _Growing, size: int) -> RowTree:
        """Keep the `size` best drafted nodes by cumulative log-prob (a parent scores >= its children; ties go
        to the shallower node), as a depth-ordered tree."""
        ranked = sorted(range(1, len(g.tokens)), key=lambda n: (-g.scores[n], g.depths[n], n))[:size]
        kept = sorted(ranked, key=lambda n: (g.depths[n], n))
        index = {0: 0}
        for i, n in enumerate(kept, start=1):
            index[n] = i
        parents = [-1] + [index[g.parents[n]] for n in kept]
        return RowTree(tree_from_parents(parents), [g.tokens[0]] + [g.tokens[n] for n in kept])

    def _expand(self, kv: KVCache, rows: list[_Growing], expand: list[list[int]]) -> None:
        """One head forward over the given nodes of every row (pending entries in the head cache, tree mask):
        stores each node's output feature and its children's draft log-probs."""
        features, tokens, positions, attend = [], [], [], []
        for r, (g, nodes) in enumerate(zip(rows, expand)):
            before = kv.n_pending(r)
            sees = torch.zeros(len(nodes), before + len(nodes), dtype=torch.bool)
            for j, n in enumerate(nodes):
                ancestor = g.parents[n]
                while ancestor > 0:
                    sees[j, g.pending[ancestor]] = True
                    ancestor = g.parents[ancestor]
                sees[j, before + j] = True
                g.pending[n] = before + j
            features.append(torch.stack([g.input_feature(n) for n in nodes]) if nodes else None)
            tokens.append([g.tokens[n] for n in nodes])
            positions.append([g.root_position - 1 + g.depths[n] for n in nodes])
            attend.append(sees)
        fhat = self.head_forward(kv, features, tokens, positions, attend)
        logprobs = self.draft_logprobs(fhat)
        for r, (g, nodes) in enumerate(zip(rows, expand)):
            for j, n in enumerate(nodes):
                g.feature_out[n] = fhat[r, j]
                g.logprobs[n] = logprobs[r, j]

    def draft_logprobs(self, features: torch.Tensor) -> torch.Tensor:
        """Draft log-probabilities (float32) of the token after each predicted feature: the target's lm_head."""
        return self.draft_head.log_probs(features)

    def head_forward(self, kv: KVCache, features, tokens, positions, attend=None) -> torch.Tensor:
        """Run the EAGLE head on per-row entries (features [n_r, H], next tokens, positions) through `kv`;
        returns the predicted features [B, S, H] (row r's entries first)."""
        n_new = [len(t) for t in tokens]
        plan = kv.plan_forward(n_new, positions=positions, attend=attend)
        hidden = self.head.config.hidden_size
        if len(tokens) == 1 and n_new[0] == plan.width:
            feats = features[0].to(self.draft_dtype)[None]
            ids = torch.tensor([list(tokens[0])], dtype=torch.long)
        else:
            feats = torch.zeros(len(tokens), plan.width, hidden, dtype=self.draft_dtype)
            ids = torch.zeros(len(tokens), plan.width, dtype=torch.long)
            for r, n in enumerate(n_new):
                if n:
                    feats[r, :n] = features[r]
                    ids[r, :n] = torch.as_tensor(tokens[r], dtype=torch.long)
        with torch.inference_mode():
            if self.lean_head is not None:
                out = self.lean_head.forward(feats, ids, plan, kv)
            else:
                out = self.head(
                    feats,
                    ids,
                    plan.position_ids,
                    attention_mask=plan.additive_mask(feats.dtype),
                    past_key_values=kv.store,
                )
        kv.check_appended(plan)
        return out
