"""MTP (DeepSeek-V3's multi-token prediction) as TensorRT-LLM's one-model MTP-Eagle worker runs it: the target's own
MTP layer drafts a chain, the target verifies it.

The MTP layer (`specbuild.heads.mtp`: enorm/hnorm/eh_proj, a decoder layer, shared_head.norm; the target's embedding
and lm_head) keeps its own KV cache of entries (h_p, x_{p+1}) at position p, h_p being the target's final hidden
state (after its final norm) for verified positions and the layer's own output for drafted ones. Each step, for
every sequence (root = the last, uncached token x_L at position L):
    catch up:  entries for the positions verified last step (TensorRT-LLM's first MTP pass over the verified
               window, cut back to the accepted ones); the last entry's output scores the root's child
    draft:     K-1 more passes of one token each at positions L, L+1, ... (the layer's own output as h: MTP-Eagle
               reuses the one layer for every draft token), each draft the argmax of lm_head(out)
    verify:    one target forward over [root, drafts]; greedy: the longest prefix matching the target's argmax plus
               its bonus token; sampled: rejection sampling with the deterministic drafts, which keeps the target's
               distribution exactly; relaxed acceptance (below: greedy requests, not lossless) when asked
    then:      the accepted path is compacted in the target cache; the target's hidden states at the root and the
               accepted drafts are the next catch-up
Prefill: one target forward over the prompt; the layer reads the prompt shifted left by one with the first token last
(TensorRT-LLM's context phase: input tokens BCDE with hidden states H_A..H_D). The chain, catch-up, KV reuse and
draft-length schedule are EAGLE's (`methods/eagle/decoder.py`), the layer taking the place of the EAGLE head.

TensorRT-LLM picks MTP-Eagle for a checkpoint with one MTP layer unless `use_mtp_vanilla` (`MTPDecodingConfig.
spec_dec_mode`, tensorrt_llm/llmapi/llm_args.py); vanilla MTP runs min(max_draft_len, N) layers, one per draft token,
over windows of the target's past hidden states (`MTPWorker`). With one layer and one draft both are the same pass;
this runtime runs MTP-Eagle, and vanilla MTP only where it is that same pass.

Engine `specbuild.decoding` keys (the llm-api rehearsal maps model.yaml's speculative_config onto them):
    max_draft_len                      K, the chain length (also `num_nextn_predict_layers`, its name before 1.3;
                                       default the engine's max_draft_len)
    use_mtp_vanilla                    false | true (true: K and the checkpoint's layer count must be 1)
    use_relaxed_acceptance_for_thinking, relaxed_topk, relaxed_delta, begin_thinking_phase_token,
    end_thinking_phase_token           relaxed acceptance (`RelaxedAcceptance` below)
    draft_dtype                        auto | float32 | bfloat16 | float16 (the layer's compute dtype; lossless)

Sources: TensorRT-LLM `tensorrt_llm/_torch/speculative/mtp.py`@23ee85ee014dc8089415f2901ca8b7afa8d66f14
(`MTPEagleWorker.forward`, `prepare_drafter_inputs`: the first pass over the accepted tokens with the target's hidden
states, later passes one token at position + 1 with the layer's output; `MTPWorker.sample_and_accept_draft_tokens`:
greedy acceptance by token equality), `tensorrt_llm/_torch/models/modeling_speculative.py` (`MTPForCausalLM`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import torch

from specbuild.errors import UserError
from specbuild.methods.suffix_automaton.enhancer import SaEnhancer
from specbuild.heads.mtp import load_mtp_layers, mtp_layer_count
from specbuild.reference.decoder.acceptance import Acceptance
from specbuild.reference.decoder.batch import Batch
from specbuild.reference.decoder.drafters import DraftVocabHead, drafter_precision, draft_vocab_size
from specbuild.reference.decoder.kv_cache import KVCache
from specbuild.reference.decoder.methods import Decoder, StepOutput
from specbuild.methods.eagle.decoder import EagleDecoder, _flag
from specbuild.methods.mtp.params import DEFAULT_BEGIN, DEFAULT_DELTA, DEFAULT_END, DEFAULT_TOP_K
from specbuild.reference.decoder.tree import RowTree, commit_paths, feed_trees, tree_from_choices
from specbuild.reference.decoder.tree.shape import path_tokens
from specbuild.reference.decoder.verify import verify_tree, with_log_probs

DEPTH_KEYS = ("max_draft_len", "num_nextn_predict_layers")


# ====================================================================== relaxed acceptance
# MTP's relaxed acceptance in the thinking phase (TensorRT-LLM `MTPDecodingConfig.use_relaxed_acceptance_for_thinking`):
# NOT lossless — inside a reasoning model's thinking span a draft is accepted when it is *nearly* the target's choice.
#
# The rule, as TensorRT-LLM implements it (`cpp/tensorrt_llm/kernels/speculativeDecoding/mtpKernels.cu`
# @b35ac1b64368513d215c57d2ed01d62d910df8da `mtpRelaxedAcceptanceKernel`; its inputs from
# `tensorrt_llm/_torch/speculative/mtp.py`@23ee85ee014dc8089415f2901ca8b7afa8d66f14 `MTPWorker.sample_and_accept_draft_tokens`
# and `process_generation_logits`, `torch.topk(torch.softmax(logits), relaxed_topk)`):
#
#     per request, a delta: relaxed_delta while in the thinking phase, 0 outside it
#     for the drafts d_1..d_K in order, at target position i (its softmax *probabilities* p, their top-k values v_0 >= v_1
#     >= ... and ids c_0, c_1, ...):
#         threshold = v_0 - delta
#         d_i is accepted when d_i == c_j for some j < relaxed_topk with j == 0 or v_j >= threshold
#         (the scan over j stops at the first j > 0 with v_j < threshold); the first rejected draft ends the chain
#     the new token after the accepted drafts is c_0 at that position (the target's argmax)
#     then the accepted drafts and that token are scanned in order: begin_thinking_phase_token sets delta to
#     relaxed_delta, end_thinking_phase_token sets it to 0 (the last one seen wins)
#     a new request starts with delta = relaxed_delta when its prompt holds at least one begin_thinking_phase_token
#     (the context phase counts begin tokens only: a prompt that also closes the span still starts relaxed), else 0
#
# So delta is a margin in probability (not log-probability), relaxed_topk bounds how far down the ranking a draft may sit,
# and with delta 0 (outside thinking) only the argmax or a token tied with it is accepted: greedy decoding up to ties.
# Inside thinking the output is no longer the target's greedy output: an accepted draft may be the target's second
# choice. Greedy requests only (TensorRT-LLM's MTP worker takes the argmax; sampled requests here verify losslessly).
# Defaults (`tensorrt_llm/llmapi/llm_args.py` MTPDecodingConfig): relaxed_topk 1, relaxed_delta 0.0, tokens 128798 /
# 128799 (DeepSeek-R1's `<think>` / `</think>`).


SWITCH = "use_relaxed_acceptance_for_thinking"
DEFAULTS = {
    "relaxed_topk": DEFAULT_TOP_K,
    "relaxed_delta": DEFAULT_DELTA,
    "begin_thinking_phase_token": DEFAULT_BEGIN,
    "end_thinking_phase_token": DEFAULT_END,
}
DELTA = "mtp_relaxed_delta"  # seq.state key: the request's current delta


def relaxed_accept(drafts: Sequence[int], probs: torch.Tensor, delta: float, top_k: int) -> Acceptance:
    """The relaxed rule on one chain: drafts d_1..d_K, the target's probabilities at the K+1 positions [K+1, V]."""
    top = torch.topk(probs.float(), min(top_k, probs.shape[-1]), dim=-1)
    values, ids = top.values.tolist(), top.indices.tolist()
    accepted = 0
    while accepted < len(drafts):
        threshold = values[accepted][0] - delta
        hit = False
        for j, (value, token) in enumerate(zip(values[accepted], ids[accepted])):
            if j > 0 and threshold > value:
                break
            if drafts[accepted] == token:
                hit = True
                break
        if not hit:
            break
        accepted += 1
    return Acceptance(nodes=tuple(range(1, accepted + 1)), tokens=tuple(drafts[:accepted]), bonus=int(ids[accepted][0]))


@dataclass(frozen=True)
class RelaxedAcceptance:
    """The options of relaxed acceptance and the per-request thinking state it keeps in `seq.state`."""

    top_k: int
    delta: float
    begin: int
    end: int

    @classmethod
    def from_decoding(cls, decoding: Mapping, where: str, vocab_size: int) -> "RelaxedAcceptance | None":
        """The engine's decoding options (TensorRT-LLM's field names); None when relaxed acceptance is off."""
        if not _flag(decoding.get(SWITCH, False)):
            return None
        values = {k: decoding.get(k, default) for k, default in DEFAULTS.items()}
        try:
            top_k = int(values["relaxed_topk"])
            delta = float(values["relaxed_delta"])
            begin, end = int(values["begin_thinking_phase_token"]), int(values["end_thinking_phase_token"])
        except (TypeError, ValueError) as exc:
            raise UserError(f"{where}: relaxed acceptance options {values}: {exc}") from None
        if top_k < 1:
            raise UserError(f"{where}.relaxed_topk={top_k} must be >= 1 (TensorRT-LLM: a positive integer)")
        if not delta >= 0.0:
            raise UserError(
                f"{where}.relaxed_delta={delta} must be >= 0 (TensorRT-LLM: non-negative): a margin in probability "
                "below the target's top token"
            )
        for key, token in (("begin_thinking_phase_token", begin), ("end_thinking_phase_token", end)):
            if not 0 <= token < vocab_size:
                raise UserError(
                    f"{where}.{key}={token} is not a token id of the target (vocabulary of {vocab_size}): the "
                    "thinking phase would never be recognised — give the ids of the model's own begin/end "
                    "thinking tokens (DeepSeek-R1: <think> 128798, </think> 128799)"
                )
        return cls(top_k=top_k, delta=delta, begin=begin, end=end)

    def start(self, seq, prompt: Sequence[int]) -> None:
        """A new request: relaxed from the start when its prompt holds a begin token (TensorRT-LLM's context rule)."""
        seq.state[DELTA] = self.delta if self.begin in prompt else 0.0

    def observe(self, seq, new_tokens: Sequence[int]) -> None:
        """The tokens a step emitted, in order: a begin token opens the thinking phase, an end token closes it."""
        for token in new_tokens:
            if token == self.begin:
                seq.state[DELTA] = self.delta
            elif token == self.end:
                seq.state[DELTA] = 0.0

    def accept(self, seq, drafts: Sequence[int], logits: torch.Tensor) -> Acceptance:
        """One greedy row's chain verified by the relaxed rule with its current delta (logits: [K+1, V], already
        processed with the request's bad words / penalties where it has any)."""
        return relaxed_accept(drafts, torch.softmax(logits.float(), dim=-1), seq.state.get(DELTA, 0.0), self.top_k)


class MtpDecoder(EagleDecoder):
    """MTP-Eagle on the reference runtime: EAGLE's chain drafting (`EagleDecoder`, static chain) with the target's
    MTP layer as the head."""

    name = "mtp"
    schedule_caps_depth = True  # a scheduled length is the chain length (TensorRT-LLM's max_draft_len)

    def __init__(self, engine, draft_engine=None, decoding=None):
        Decoder.__init__(self, engine, draft_engine, decoding)  # EagleDecoder.__init__ loads an EAGLE-1 head
        where = self.where()
        model_dir = engine.folders["model"]
        count = mtp_layer_count(self.target.config)
        if count == 0:
            raise UserError(
                f"{model_dir}/config.json: num_nextn_predict_layers is not a positive integer: the target has no "
                "multi-token-prediction layers (MTP needs a checkpoint trained with them, e.g. DeepSeek-V3)"
            )
        self.draft_precision = drafter_precision(self.decoding, self.target.dtype, where, self.target.hidden_size)
        self.draft_dtype, _ = self.draft_precision
        limit = engine.limits.max_draft_len
        key = next((k for k in DEPTH_KEYS if self.decoding.get(k) is not None), DEPTH_KEYS[0])
        self.depth = self.option(key, limit if limit > 0 else None, minimum=1)
        vanilla = _flag(self.decoding.get("use_mtp_vanilla", False)) or count > 1
        if vanilla and (self.depth > 1 or count > 1):
            raise UserError(
                f"{where}: vanilla MTP (use_mtp_vanilla, or a checkpoint with {count} MTP layers) drafts each token "
                "with its own layer over a window of past target hidden states; the reference runtime runs "
                "MTP-Eagle (one layer reused for every draft, TensorRT-LLM's mode for one-layer checkpoints such as "
                "DeepSeek-V3/R1) and vanilla MTP only with one layer and max_draft_len 1 — use such a checkpoint, "
                "or runtime: tensorrt-llm"
            )
        self.head = load_mtp_layers(model_dir, self.target.hf, self.draft_dtype)[0]
        self.head.config._attn_implementation = self.target.config._attn_implementation or "sdpa"
        self.lean_head = None
        self.rotary = self.target.hf.get_decoder().rotary_emb
        vocab = draft_vocab_size(self.decoding, self.target.vocab_size, where)
        self.draft_vocab = vocab
        self.draft_head = DraftVocabHead(self.target.lm_head.weight, vocab, self.draft_dtype)  # the shared lm_head
        # sa_config: a suffix automaton's long matches override the drafted chains (methods/suffix_automaton)
        self.sa = SaEnhancer.from_decoding(self.decoding, engine.limits.max_batch_size, self.where())
        self.relaxed = RelaxedAcceptance.from_decoding(self.decoding, where, self.target.vocab_size)
        chain = [[0] * d for d in range(1, self.depth + 1)]
        self.dynamic = False
        self.max_draft_len = self.depth
        self.tree = tree_from_choices(chain, field_name=f"{where}.max_draft_len")
        self.choices = chain
        self._trees = {}

    # ---------------------------------------------------------------- prefill and step
    def prefill(self, batch: Batch) -> list[StepOutput]:
        outputs = super().prefill(batch)
        if self.relaxed is not None:
            for seq, out in zip(batch.seqs, outputs):
                self.relaxed.start(seq, seq.tokens)
                self.relaxed.observe(seq, out.tokens)
        return outputs

    def join(self, batch: Batch) -> None:
        super().join(batch)
        if self.relaxed is not None:
            for seq in batch.seqs:
                self.relaxed.start(seq, seq.tokens)

    def plain_step(self, batch: Batch, capture_layers=None) -> list[StepOutput]:
        outputs = super().plain_step(batch, capture_layers)
        if self.relaxed is not None:
            for seq, out in zip(batch.seqs, outputs):
                self.relaxed.observe(seq, out.tokens)
        return outputs

    def step(self, batch: Batch) -> list[StepOutput]:
        if self.scheduled_length == 0:
            return self.plain_step(batch)
        drafts = self.draft_and_rollback(batch)
        if self.sa is not None:
            drafts = self.sa.override(batch.seqs, drafts, RowTree.chain)
        out, roots = feed_trees(batch, self.target, drafts)
        outputs, accepted = [], []
        for r, (seq, draft) in enumerate(zip(batch.seqs, drafts)):
            logits = out.logits[r, roots[r] : roots[r] + draft.tree.size]
            if self.relaxed is not None and seq.greedy:
                acc = self._relaxed(seq, draft, logits)
            else:
                acc = verify_tree(seq, draft.tree, draft.tokens, logits)
            self.keep_features(seq, out.hidden[r, [roots[r] + n for n in (0, *acc.nodes)]])
            outputs.append(StepOutput.of(acc, drafted=draft.tree.max_depth))
            accepted.append(acc)
        commit_paths(batch, roots, accepted)
        return outputs

    def _relaxed(self, seq, draft, logits: torch.Tensor):
        """Relaxed acceptance of one greedy row's chain (then its thinking state follows the emitted tokens)."""
        if seq.context_dependent:  # bad words, min_tokens, penalties: given each node's own context
            logits = seq.processed(logits, [path_tokens(draft.tree, draft.tokens, i) for i in range(draft.tree.size)])
        acc = self.relaxed.accept(seq, list(draft.tokens[1:]), logits)
        self.relaxed.observe(seq, acc.new_tokens)
        return with_log_probs(seq, draft.tree, draft.tokens, logits, acc)

    # ---------------------------------------------------------------- the MTP layer
    def head_forward(self, kv: KVCache, features, tokens, positions, attend=None) -> torch.Tensor:
        """Run the MTP layer on per-row entries (hidden states [n_r, H], the next tokens, positions) through `kv`;
        returns each entry's output [B, S, H] (after shared_head.norm; lm_head of it scores the token after next)."""
        n_new = [len(t) for t in tokens]
        plan = kv.plan_forward(n_new, positions=positions, attend=attend)
        hidden = torch.zeros(len(tokens), plan.width, self.head.hidden_size, dtype=self.draft_dtype)
        ids = torch.zeros(len(tokens), plan.width, dtype=torch.long)
        for r, n in enumerate(n_new):
            if n:
                hidden[r, :n] = features[r]
                ids[r, :n] = torch.as_tensor(tokens[r], dtype=torch.long)
        with torch.inference_mode():
            embeds = self.target.embed(ids).to(self.draft_dtype)  # the target's embedding (shared)
            cos, sin = self.rotary(embeds, plan.position_ids)
            out = self.head(
                hidden, embeds, (cos, sin), plan.additive_mask(self.draft_dtype), plan.position_ids, kv.store
            )
        kv.check_appended(plan)
        return out
