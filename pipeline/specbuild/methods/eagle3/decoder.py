"""EAGLE-3 (Li et al., 2025) as TensorRT-LLM's one-model worker runs it: a one-layer head drafting from features
fused from several target layers, with its own vocabulary; a chain by default, a dynamic tree on request.

The head keeps its own KV cache of entries (x_p, x_{p+1}) at position p: x_p = fc(target layer outputs at p) for
verified positions, the head's own output `out` for drafted ones. Each step, for every sequence (root = the last,
uncached token x_L at position L):
    catch up:  entries for the positions verified last step (TensorRT-LLM's first draft pass over the K+1 verified
               positions, cut back to the accepted ones: `kv_lens -= K - accepted`); the last entry's output scores
               the root's children
    draft:     chain: K-1 more passes of one token each (position + 1, hidden = the previous pass's out); dynamic
               tree: each depth expands the top-K nodes by cumulative draft log-probability into their top-K children,
               then the `max_total_draft_tokens` best of the K + K*K*(D-1) drafted nodes are kept (TensorRT-LLM's
               `DynamicTreeDraftingLoopWrapper` history + final resampling)
               drafts are draft-vocabulary ids; a token is `i + d2t[i]` (`ChainDrafter.sample`)
    verify:    one target forward over [root, drafts] capturing the chosen layers at every position; greedy: the
               longest prefix (path) matching the target's argmax, plus its bonus token; sampled: recursive rejection
               sampling with deterministic candidates (the head's argmax / top-k), which keeps the target's
               distribution exactly
    then:      the accepted path is compacted in the target cache; its captured features are the next catch-up
Prefill: one target forward over the prompt capturing the layers; the head reads the prompt shifted left by one with
the first sampled token last (`prepare_1st_drafter_inputs`) and drafts from its last entry.

Engine `specbuild.decoding` keys (the lead maps recipe / model.yaml `speculative_config` fields onto them):
    max_draft_len            K: chain length, or tree depth (default: the engine's max_draft_len; must be >= 1)
    eagle3_layers_to_capture target decoder layers (0-based; -1 = the final normed output), a list or "1,7,12";
                             used as a set in ascending order as TensorRT-LLM does. Default: the layers the head's
                             config.json records (eagle_config.eagle_aux_hidden_state_layer_ids), else TensorRT-LLM's
                             {1, L//2-1, L-4} (refused for targets of 2..5 layers). Their number must match the head's fc.
    use_dynamic_tree         false (chain) | true; also `eagle_use_dynamic_tree`
    dynamic_tree_max_top_k   K of the dynamic tree (also `dynamic_tree_max_topK`, `eagle_dynamic_tree_max_top_k`); giving
                             it turns the dynamic tree on (TensorRT-LLM after 1.2)
    max_total_draft_tokens   dynamic tree size, max_draft_len <= n <= top_k * max_draft_len (default top_k * max_draft_len)
    draft_dtype              auto | float32 | bfloat16 | float16 | int8 (the head's compute dtype, or int8 matmuls
                             on the lean path: drafters.drafter_precision; lossless either way)
The head folder is the engine's `eagle3` sub-folder (`specbuild.heads.eagle3`).

Sources: TensorRT-LLM `tensorrt_llm/_torch/speculative/eagle3.py` (`Eagle3OneModelWorker`, `Eagle3OneModelSpecMetadata`:
default capture layers, `maybe_capture_hidden_states`), `tensorrt_llm/_torch/speculative/drafting_loops.py`
(`ChainDrafter`, `DynamicTreeDraftingLoopWrapper`), `tensorrt_llm/llmapi/llm_args.py` (`Eagle3DecodingConfig`).
"""

from __future__ import annotations

import json

import torch

from specbuild.errors import UserError
from specbuild.methods.suffix_automaton.enhancer import SaEnhancer
from specbuild.heads.eagle3 import load_eagle3_head, trtllm_default_layers
from specbuild.reference.decoder.batch import Batch
from specbuild.reference.decoder.kv_cache import KVCache
from specbuild.reference.decoder.lean.heads import LeanEagle3Head
from specbuild.reference.decoder.methods import StepOutput, next_token
from specbuild.methods.eagle.decoder import CACHE, TOP_K_KEYS, EagleDecoder, _flag
from specbuild.reference.decoder.tree import RowTree, commit_paths, drafter_precision, feed_trees, tree_from_choices
from specbuild.reference.decoder.verify import verify_tree

DYNAMIC_KEYS = ("use_dynamic_tree", "eagle_use_dynamic_tree")
LAYERS_KEY = "eagle3_layers_to_capture"


def parse_layers(value, where: str) -> tuple[int, ...]:
    """A capture-layer list from the decoding options: a list of ints, or a string ("1,7,12" / "[1, 7, 12]")."""
    if isinstance(value, str):
        text = value.strip()
        try:
            value = (
                json.loads(text) if text.startswith("[") else [int(v) for v in text.replace(" ", "").split(",") if v]
            )
        except ValueError as exc:
            raise UserError(f"{where}.{LAYERS_KEY}={value!r}: expected layer indices such as [1, 7, 12]") from exc
    if (
        not isinstance(value, (list, tuple, set))
        or not value
        or not all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    ):
        raise UserError(
            f"{where}.{LAYERS_KEY}={value!r}: expected a non-empty list of layer indices such as [1, 7, 12]"
        )
    return tuple(sorted(set(value)))


class Eagle3Decoder(EagleDecoder):
    """EAGLE-3 on the reference runtime; drafting, tree growth and verification are EAGLE-1/2's (`Eagle`), with the
    head's features fused from captured target layers and its draft vocabulary mapped back through d2t."""

    name = "eagle3"
    schedule_caps_depth = True  # a scheduled length is the chain length / tree depth (TensorRT-LLM's max_draft_len)

    def __init__(self, engine, draft_engine=None, decoding=None):
        super(EagleDecoder, self).__init__(engine, draft_engine, decoding)  # Decoder.__init__: EAGLE-1's loads its head
        where = self.where()
        if "eagle3" not in engine.folders:
            raise UserError(
                f"{engine.path}/config.json: specbuild.files has no 'eagle3' entry (the EAGLE-3 head); "
                "rebuild the engine with the recipe's EAGLE-3 head folder"
            )
        lean = self.target.implementation == "lean"
        self.draft_precision = drafter_precision(
            self.decoding, self.target.dtype, where, self.target.hidden_size, lean=lean
        )
        self.draft_dtype, int8 = self.draft_precision
        self.head = load_eagle3_head(engine.folders["eagle3"], target_model=self.target.hf, dtype=self.draft_dtype)
        # the head runs on the same path as the target: lean modules, or Eagle3HeadModule's own
        self.lean_head = LeanEagle3Head(self.head, int8=int8) if lean else None
        self.head_logits = self.lean_head.logits if lean else self.head.logits
        self._draft_ids = self.head.draft_to_target
        num_layers = int(self.target.config.num_hidden_layers)
        if LAYERS_KEY in self.decoding and self.decoding[LAYERS_KEY] is not None:
            self.layers = parse_layers(self.decoding[LAYERS_KEY], where)
        else:
            self.layers = self.head.layers or trtllm_default_layers(num_layers)
            if self.layers is None:
                raise UserError(
                    f"{where}.{LAYERS_KEY} is not set and the target has {num_layers} decoder layers: "
                    "TensorRT-LLM's default {1, L//2-1, L-4} needs more than 5; set the layers the head "
                    "was trained on"
                )
        bad = [i for i in self.layers if not -1 <= i < num_layers]
        if bad:
            raise UserError(
                f"{where}.{LAYERS_KEY}={list(self.layers)}: layer(s) {bad} do not exist in the target "
                f"({num_layers} decoder layers: 0..{num_layers - 1}, or -1 for the final output)"
            )
        self.feature_name = "target_layers:" + ",".join(str(i) for i in self.layers)  # KV reuse keeps these
        if len(self.layers) != self.head.num_captured:
            raise UserError(
                f"{where}.{LAYERS_KEY}={list(self.layers)}: {len(self.layers)} layers, but the head at "
                f"{engine.folders['eagle3']} fuses {self.head.num_captured} (its fc input is "
                f"{self.head.num_captured} x hidden); capture the layers it was trained on"
            )

        # sa_config: a suffix automaton's long matches override the drafted chains (methods/suffix_automaton)
        self.sa = SaEnhancer.from_decoding(self.decoding, engine.limits.max_batch_size, self.where())
        limit = engine.limits.max_draft_len
        self.depth = self.option("max_draft_len", limit if limit > 0 else None, minimum=1)
        top_k_key = next((k for k in TOP_K_KEYS if self.decoding.get(k) is not None), None)
        self.dynamic = any(_flag(self.decoding.get(k, False)) for k in DYNAMIC_KEYS) or top_k_key is not None
        if self.dynamic:
            if top_k_key is None:
                raise UserError(f"{where}.use_dynamic_tree needs dynamic_tree_max_top_k (K > 0)")
            self.top_k = self.option(top_k_key, minimum=1)
            if self.top_k > self.head.draft_vocab_size:
                raise UserError(
                    f"{where}.{top_k_key}={self.top_k} exceeds the head's draft vocabulary "
                    f"({self.head.draft_vocab_size} tokens)"
                )
            most = self.top_k * self.depth
            self.max_draft_len = self.option("max_total_draft_tokens", most, minimum=self.depth)
            if self.max_draft_len > most:
                raise UserError(
                    f"{where}.max_total_draft_tokens={self.max_draft_len} must be <= dynamic_tree_max_top_k"
                    f" x max_draft_len = {most}"
                )
        else:
            chain = [[0] * d for d in range(1, self.depth + 1)]
            self.max_draft_len = self.depth
            self.tree = tree_from_choices(chain, field_name=f"{where}.max_draft_len")
            self.choices = chain
            self._trees = {}

    # ---------------------------------------------------------------- prefill: first token, head over the prompt
    def prefill(self, batch: Batch) -> list[StepOutput]:
        cache = batch.cache("target", self.target)
        out = self.target.forward(cache, batch.uncached("target"), logits="last", capture_layers=self.layers)
        cache.commit_all()
        outputs, features, tokens = [], [], []
        for r, seq in enumerate(batch.seqs):
            outputs.append(next_token(seq, out.logits[r], counts_as_step=False))
            first = outputs[-1].tokens[0]
            features.append(self.prompt_features(seq, out.captured[r, : out.n_new[r]]))
            tokens.append(seq.tokens[1:] + [first])  # entry p = (x_p, x_{p+1}): the prompt shifted left by one
        self.start_head(batch, features, tokens, CACHE)
        return outputs

    # ---------------------------------------------------------------- one step
    def step(self, batch: Batch) -> list[StepOutput]:
        if self.scheduled_length == 0:
            return self.plain_step(batch, capture_layers=self.layers)
        drafts = self.draft_and_rollback(batch)
        if self.sa is not None:
            drafts = self.sa.override(batch.seqs, drafts, RowTree.chain)
        out, roots = feed_trees(batch, self.target, drafts, capture_layers=self.layers)
        outputs, accepted = [], []
        for r, (seq, draft) in enumerate(zip(batch.seqs, drafts)):
            acc = verify_tree(seq, draft.tree, draft.tokens, out.logits[r, roots[r] : roots[r] + draft.tree.size])
            # captured target states at the root and the accepted nodes: the head's next entries
            self.keep_features(seq, out.captured[r, [roots[r] + n for n in (0, *acc.nodes)]])
            outputs.append(StepOutput.of(acc, drafted=draft.tree.max_depth))
            accepted.append(acc)
        commit_paths(batch, roots, accepted)
        return outputs

    # ---------------------------------------------------------------- the head
    def draft_logprobs(self, out: torch.Tensor) -> torch.Tensor:
        """Draft log-probabilities (float32) over the *target* vocabulary: the head's V_d log-probs placed at their
        target ids (i + d2t[i]); tokens outside the draft vocabulary get -inf, so top-k picks mapped ids."""
        logprobs = torch.log_softmax(self.head_logits(out).float(), dim=-1)
        full = torch.full((*logprobs.shape[:-1], self.head.vocab_size), float("-inf"))
        full[..., self._draft_ids] = logprobs
        return full

    def head_forward(self, kv: KVCache, features, tokens, positions, attend=None) -> torch.Tensor:
        """Run the head on per-row entries (hidden inputs [n_r, n*H_t] captured or [n_r, H] drafted, the next tokens,
        positions) through `kv`; returns each entry's `out` [B, S, H] (row r's entries first)."""
        n_new = [len(t) for t in tokens]
        plan = kv.plan_forward(n_new, positions=positions, attend=attend)
        width = next((f.shape[-1] for f in features if f is not None and len(f)), self.head.hidden_size)
        hidden = torch.zeros(len(tokens), plan.width, width, dtype=self.draft_dtype)
        ids = torch.zeros(len(tokens), plan.width, dtype=torch.long)
        for r, n in enumerate(n_new):
            if n:
                hidden[r, :n] = features[r]
                ids[r, :n] = torch.as_tensor(tokens[r], dtype=torch.long)
        with torch.inference_mode():
            embeds = self.target.embed(ids).to(self.draft_dtype)  # the target's embedding (shared, not stored)
            if self.lean_head is not None:
                out = self.lean_head.forward(hidden, embeds, plan, kv)
            else:
                out = self.head(
                    hidden,
                    embeds,
                    plan.position_ids,
                    attention_mask=plan.additive_mask(self.draft_dtype),
                    cache=kv.store,
                )
        kv.check_appended(plan)
        return out
