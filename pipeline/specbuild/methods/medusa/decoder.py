"""Medusa (Cai et al., 2024): K extra heads on the target's last hidden state draft a static token tree.

Each step, for every sequence:
    draft:   from the hidden state h that produced the root token (the last, uncached token), head k scores the
             token k + 1 places after the root; the tree from `medusa_choices` takes, at a node with choice
             path (r_1, .., r_d), the r_d-th most likely token of head d - 1
    verify:  one target forward over [root, tree nodes] with the tree attention mask
    accept:  greedy requests: the longest path whose tokens equal the target's argmax (TensorRT-LLM's Medusa
             acceptance), bonus = the target's argmax after it. Sampled requests: recursive rejection sampling
             over the tree (the candidates are deterministic top-k tokens), lossless. Optional
             `medusa_acceptance: typical` (Medusa-2's typical acceptance) is LOSSY: faster, but the output
             distribution is not the target's.
    then:    the accepted path stays in the KV cache (compacted), the rest is dropped; the hidden state at the
             last accepted node feeds the heads next step.

Engine `specbuild.decoding` keys: `medusa_choices` (default mc_sim_7b_63), `medusa_acceptance`
(`rejection` | `typical`, for sampled requests only), `typical_posterior_threshold` (0.09),
`typical_posterior_alpha` (0.3), `draft_dtype` (auto | float32 | bfloat16 | float16 | int8; auto: bfloat16 heads
on CPUs with native bf16, int8 matmuls on other x86 CPUs, see `drafters.drafter_precision`; lossless either way), `draft_vocab_size` (N: the heads score only the token ids [0, N), see
`drafters.DraftVocabHead`; default the whole vocabulary; lossless). Heads come from the engine's `medusa` folder (FasterDecoding layout).
"""

from __future__ import annotations

from functools import lru_cache

import torch

from specbuild.facts.engine_facts import SpecMode
from specbuild.errors import UserError
from specbuild.heads.medusa import load_medusa_heads
from specbuild.reference.decoder.batch import Batch
from specbuild.reference.decoder.drafters import draft_vocab_size
from specbuild.reference.decoder.lean.heads import LeanMedusaHeads
from specbuild.reference.decoder.methods import Decoder, StepOutput, next_token
from specbuild.reference.decoder.tree import (
    MC_SIM_7B_63,
    Acceptance,
    RowTree,
    Tree,
    commit_paths,
    drafter_precision,
    feed_trees,
    path_tokens,
    prefix_order_problem,
    tree_from_choice_prefix,
    tree_from_choices,
)
from specbuild.reference.decoder.verify import verify_tree, with_log_probs
from specbuild.facts.trees import parse_choices

ACCEPTANCE_MODES = ("rejection", "typical")


def typical_accept(
    tree: Tree, tokens, probs: torch.Tensor, threshold: float, alpha: float, generator: torch.Generator
) -> Acceptance:
    """Medusa-2 typical acceptance (lossy): a node is acceptable when its token's probability under the
    target at its parent exceeds min(threshold, alpha * exp(-entropy)); take the longest acceptable path,
    then sample the bonus token from the target at its end."""
    entropy = -(probs * torch.log(probs.clamp_min(1e-30))).sum(-1)
    bar = torch.minimum(torch.full_like(entropy, threshold), alpha * torch.exp(-entropy))

    def longest_from(node: int) -> tuple[int, ...]:
        best: tuple[int, ...] = ()
        for child in tree.children[node]:
            if float(probs[node, tokens[child]]) > float(bar[node]):
                below = (child,) + longest_from(child)
                if len(below) > len(best):
                    best = below
        return best

    nodes = longest_from(0)
    last = nodes[-1] if nodes else 0
    bonus = int(torch.multinomial(probs[last], 1, generator=generator))
    return Acceptance(nodes=nodes, tokens=tuple(tokens[n] for n in nodes), bonus=bonus)


class MedusaDecoder(Decoder):
    name = "medusa"
    engine_mode = SpecMode.MEDUSA
    reuses_prefix = True  # the heads read the last fed position's hidden state: a reused prefix needs nothing more
    drafting = "draft"

    def __init__(self, engine, draft_engine=None, decoding=None):
        super().__init__(engine, draft_engine, decoding)
        if "medusa" not in engine.folders:
            raise UserError(
                f"{engine.path}/config.json: specbuild.files has no 'medusa' entry (the Medusa heads); "
                "rebuild the engine with the recipe's medusa heads folder"
            )
        self.draft_precision = drafter_precision(
            self.decoding,
            self.target.dtype,
            self.where(),
            self.target.hidden_size,
            lean=self.target.implementation == "lean",
        )
        self.draft_dtype = self.draft_precision.dtype
        self.heads = load_medusa_heads(engine.folders["medusa"], dtype=self.draft_dtype, target_model=self.target.hf)
        # `draft_vocab_size` N: the heads score only the token ids [0, N) (top-k over them are token ids)
        n = draft_vocab_size(self.decoding, self.target.vocab_size, self.where())
        # on the lean path every head is evaluated at once (batched matmuls); else the heads module itself
        self.evaluate_heads = lambda hidden: self.heads(hidden[:, None])[:, :, 0, :n]  # [B, H] -> [K, B, N]
        if self.target.implementation == "lean":
            self.evaluate_heads = LeanMedusaHeads(self.heads, vocab=n, int8=self.draft_precision.int8)
        where = self.where("medusa_choices")
        choices = self.decoding.get("medusa_choices") or MC_SIM_7B_63
        self.tree = tree_from_choices(
            choices, field_name=where, max_draft_len=engine.limits.max_draft_len or None, max_depth=self.heads.num_heads
        )
        # adaptive speculation: the tree at N nodes is the first N choices (in their order)
        self.choices = parse_choices(choices) if isinstance(choices, str) else [list(c) for c in choices]
        if self.schedule is not None and prefix_order_problem(self.choices, where):
            raise UserError(prefix_order_problem(self.choices, where))
        self.acceptance = str(self.decoding.get("medusa_acceptance", "rejection"))
        if self.acceptance not in ACCEPTANCE_MODES:
            raise UserError(
                f"{self.where('medusa_acceptance')}={self.acceptance!r}; use one of {', '.join(ACCEPTANCE_MODES)}"
            )
        self.typical_threshold = float(self.decoding.get("typical_posterior_threshold", 0.09))
        self.typical_alpha = float(self.decoding.get("typical_posterior_alpha", 0.3))
        self._ranks = max(path[-1] for path in self.tree.paths[1:]) + 1  # how many top-k tokens a head supplies
        if n < self._ranks:
            raise UserError(
                f"{self.where('draft_vocab_size')}={n} is below the "
                f"{self._ranks} candidates a head supplies in medusa_choices; raise it"
            )

    # ---------------------------------------------------------------- prefill: first token + the heads' input
    def prefill(self, batch: Batch) -> list[StepOutput]:
        out = batch.feed("target", self.target, logits="last")
        batch.caches["target"].commit_all()
        outputs = []
        for r, seq in enumerate(batch.seqs):
            seq.state["medusa_hidden"] = out.hidden[r, out.n_new[r] - 1]
            outputs.append(next_token(seq, out.logits[r], counts_as_step=False))
        return outputs

    # ---------------------------------------------------------------- one step: draft, verify, accept
    def step(self, batch: Batch) -> list[StepOutput]:
        drafts = self.draft(batch)
        out, roots = feed_trees(batch, self.target, drafts)
        outputs, accepted = [], []
        for r, (seq, draft) in enumerate(zip(batch.seqs, drafts)):
            logits = out.logits[r, roots[r] : roots[r] + draft.tree.size]
            acc = self.accept(seq, draft, logits)
            seq.state["medusa_hidden"] = out.hidden[r, roots[r] + acc.last_node]
            outputs.append(StepOutput.of(acc, drafted=draft.tree.max_depth))
            accepted.append(acc)
        commit_paths(batch, roots, accepted)
        return outputs

    @torch.inference_mode()
    def draft(self, batch: Batch) -> list[RowTree]:
        """Every row's tree: node (r_1..r_d) holds the r_d-th best token of head d - 1."""
        hidden = torch.stack([seq.state["medusa_hidden"] for seq in batch.seqs]).to(self.draft_dtype)  # [B, H]
        top = self.evaluate_heads(hidden).topk(self._ranks, dim=-1).indices  # [K, B, ranks]
        drafts = []
        nodes = self.capped(self.tree.num_draft_tokens)
        for r, seq in enumerate(batch.seqs):
            tree, heads, ranks = self._tree_for_budget(seq.draft_budget(self.tree.max_depth), nodes)
            nodes_r = top[heads, r, ranks].tolist() if tree.size > 1 else []
            drafts.append(RowTree(tree, [seq.tokens[-1], *nodes_r]))
        return drafts

    @lru_cache(maxsize=None)
    def _tree_for_budget(self, max_depth: int, nodes: int) -> tuple[Tree, torch.Tensor, torch.Tensor]:
        """The tree of the first `nodes` choices cut at `max_depth`, with each node's head index (depth - 1) and
        top-k rank."""
        tree = self.tree if nodes >= self.tree.num_draft_tokens else tree_from_choice_prefix(self.choices, nodes)
        tree, _ = tree.truncated(max_depth)
        heads = torch.tensor([len(p) - 1 for p in tree.paths[1:]], dtype=torch.long)
        ranks = torch.tensor([p[-1] for p in tree.paths[1:]], dtype=torch.long)
        return tree, heads, ranks

    def accept(self, seq, draft: RowTree, logits: torch.Tensor) -> Acceptance:
        if not seq.greedy and self.acceptance == "typical":
            tree, tokens = draft.tree, draft.tokens
            probs = torch.stack([seq.distribution(logits[i], path_tokens(tree, tokens, i)) for i in range(tree.size)])
            acc = typical_accept(
                draft.tree, draft.tokens, probs, self.typical_threshold, self.typical_alpha, seq.generator
            )
            return with_log_probs(seq, tree, tokens, logits, acc)
        return verify_tree(seq, draft.tree, draft.tokens, logits)
