"""Model plumbing: a causal LM run over a batch of rows with their own lengths, through a `KVCache`.

`CausalLM.forward(cache, tokens)` feeds `tokens[r]` (any number, possibly zero) to row r at explicit positions,
with the visibility the cache plans (chains, or token trees through `attend`), and returns the logits and the last
hidden states (after the final norm: the features Medusa heads and EAGLE heads read); `capture_layers` also
returns chosen decoder layers' outputs (EAGLE-3's features). The new tokens stay *pending* in the cache until the
caller commits the ones it keeps.

Two implementations, same results (to float32 rounding) and the same cache:
- lean (`specbuild.reference.decoder.lean`): plain modules over the checkpoint's weights, for Llama-architecture models;
- transformers: the model's own decoder fed a 4D additive mask and `position_ids`, for any other decoder that
  accepts them and caches with plain full-attention layers (no sliding window, no linear attention).
`forward="auto"` (default) picks lean when the model allows it; the environment variable
SPECBUILD_REFERENCE_FORWARD (auto | lean | transformers) overrides the default, e.g. to compare both.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Literal, Sequence

import torch

from specbuild.errors import UserError
from specbuild.reference.decoder.kv_cache import KVCache
from specbuild.reference.decoder.lean.llama import LeanLlama, unsupported

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16, "float64": torch.float64}
FORWARDS = ("auto", "lean", "transformers")
FORWARD_ENV = "SPECBUILD_REFERENCE_FORWARD"


@dataclass
class ForwardOutput:
    """Result of one forward. Row r's real tokens are at [0, n_new[r]); the rest of the width is padding."""

    n_new: list[int]
    hidden: torch.Tensor  # [B, S, H] last hidden states (after the final norm)
    logits: torch.Tensor | None  # [B, S, V] for logits="all"; [B, V] (each row's last real token) for "last"
    # [B, S, n*H] with capture_layers=(l_1..l_n): each listed decoder layer's output (residual stream, before the
    # final norm; -1 = the final hidden state after it), concatenated in the given order (EAGLE-3's features)
    captured: torch.Tensor | None = None

    def tail(self, row: int, n: int) -> torch.Tensor:
        """Logits of the last `n` real tokens of a row: [n, V] (needs logits="all")."""
        end = self.n_new[row]
        return self.logits[row, end - n : end]

    def hidden_tail(self, row: int, n: int) -> torch.Tensor:
        end = self.n_new[row]
        return self.hidden[row, end - n : end]


class CausalLM:
    """A causal LM in inference mode, fed through a `KVCache`."""

    def __init__(self, hf_model, forward: str = "auto"):
        self.hf = hf_model.eval()
        self.config = hf_model.config
        self.decoder = hf_model.get_decoder()
        self.lm_head = hf_model.get_output_embeddings()
        self.dtype = next(hf_model.parameters()).dtype
        self.vocab_size = int(self.lm_head.weight.shape[0])
        self.hidden_size = int(self.config.hidden_size)
        self.num_layers = int(self.config.num_hidden_layers)
        self._check_supported()
        choice = _forward_choice(forward)
        reason = unsupported(hf_model)
        if choice == "lean" and reason:
            raise UserError(
                f"{type(hf_model).__name__}: the lean forward cannot run this model ({reason}); "
                f"use forward='auto' or {FORWARD_ENV}=transformers"
            )
        self.lean = LeanLlama(hf_model) if choice != "transformers" and reason is None else None
        self.implementation = "lean" if self.lean is not None else "transformers"
        self._lm_head = self.lean.lm_head if self.lean is not None else self.lm_head
        self.forwards = 0  # forward calls so far (benchmarks count target forwards with it)

    @classmethod
    def from_pretrained(
        cls, path: str | Path, dtype: str = "float32", attn_implementation: str = "sdpa", forward: str = "auto"
    ) -> "CausalLM":
        from transformers import AutoModelForCausalLM
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()

        if dtype not in DTYPES:
            raise UserError(
                f"compute dtype {dtype!r} is not supported by the reference runtime; use one of {sorted(DTYPES)}"
            )
        # a checkpoint with multi-token-prediction layers (DeepSeek-V3's layout): transformers reports their tensors as
        # unused weights of the main model (its DeepSeek-V3 class ignores layer 61 only); they are read by the MTP
        # method (heads/mtp.py), so the report is quieted and any other unused tensor is named below instead
        mtp_prefixes = _mtp_prefixes(Path(path))
        verbosity = hf_logging.get_verbosity()
        if mtp_prefixes:
            hf_logging.set_verbosity_error()
        try:
            hf, loading = AutoModelForCausalLM.from_pretrained(
                str(path),
                dtype=DTYPES[dtype],
                attn_implementation=attn_implementation,
                local_files_only=True,
                output_loading_info=True,
            )
        except (OSError, ValueError) as exc:
            raise UserError(f"{path}: cannot load the model with transformers: {exc}") from exc
        finally:
            hf_logging.set_verbosity(verbosity)
        unused = sorted(k for k in loading.get("unexpected_keys") or () if not k.startswith(mtp_prefixes))
        if mtp_prefixes and unused:
            hf_logging.get_logger(__name__).warning(
                "%s: %d tensor(s) of the checkpoint are not used (%s)", path, len(unused), ", ".join(unused[:3])
            )
        missing = sorted(loading.get("missing_keys") or ())
        if missing:  # transformers initialises these at random and only warns
            raise UserError(
                f"{path}: the weights lack {len(missing)} tensor(s) that its config.json needs "
                f"({', '.join(missing[:3])}{', ...' if len(missing) > 3 else ''}) — the checkpoint is "
                "incomplete, or config.json belongs to another model"
            )
        return cls(hf, forward=forward)

    def _check_supported(self) -> None:
        from transformers import DynamicCache

        cfg = self.config
        for key in ("final_logit_softcapping", "logit_scale"):
            if getattr(cfg, key, None) not in (None, 1.0):
                raise UserError(
                    f"{type(self.hf).__name__}: config.{key}={getattr(cfg, key)!r} is not supported by the reference "
                    "runtime (logits are computed as lm_head(final hidden state)); use a Llama-family model"
                )
        kinds = {type(layer).__name__ for layer in DynamicCache(config=cfg).layers}
        if kinds - {"DynamicLayer"}:
            raise UserError(
                f"{type(self.hf).__name__}: cache layer types {sorted(kinds)} are not supported by the reference runtime "
                "(sliding-window or linear-attention layers); use a model with full attention in every layer"
            )

    def new_cache(self, n_rows: int) -> KVCache:
        return KVCache(self.config, n_rows)

    def embed(self, token_ids: torch.Tensor) -> torch.Tensor:
        return self.hf.get_input_embeddings()(token_ids)

    @torch.inference_mode()
    def forward(
        self,
        cache: KVCache,
        tokens: Sequence[Sequence[int]],
        *,
        positions: Sequence[Sequence[int]] | None = None,
        attend: Sequence[torch.Tensor | None] | None = None,
        logits: Literal["all", "last", "none"] = "all",
        capture_layers: Sequence[int] | None = None,
        head: Callable[[torch.Tensor], torch.Tensor] | None = None,
    ) -> ForwardOutput:
        """Feed `tokens[r]` to row r of `cache`; the tokens become pending there (see `KVCache.plan_forward`
        for `positions` and `attend`). Returns hidden states, the logits asked for, and the outputs of the
        decoder layers in `capture_layers` (residual included, before the final norm; -1 = the final normed hidden
        state), concatenated in that order. head: what turns hidden states into float32 logits instead of the
        model's lm_head (a drafter's `drafters.DraftVocabHead`)."""
        wanted = tuple(capture_layers or ())
        if any(not (0 <= i < self.num_layers or i == -1) for i in wanted):
            bad = next(i for i in wanted if not (0 <= i < self.num_layers or i == -1))
            raise UserError(
                f"capture layer {bad} does not exist: the model has {self.num_layers} decoder layers "
                f"(0..{self.num_layers - 1}; -1 = the final hidden state)"
            )
        capture_layers = tuple(dict.fromkeys(i for i in wanted if i != -1))
        n_new = [len(t) for t in tokens]
        plan = cache.plan_forward(n_new, positions=positions, attend=attend)
        input_ids = _input_ids(tokens, plan.width)
        if self.lean is not None:
            hidden, captured = self.lean.forward(input_ids, plan, cache, capture_layers)
        else:
            hidden, captured = self._transformers_forward(input_ids, plan, cache, capture_layers)
        cache.check_appended(plan)
        self.forwards += 1
        if wanted and wanted != capture_layers:  # -1 or a repeated layer: assemble in the order asked
            h = hidden.shape[-1]
            parts = (
                {i: captured[..., k * h : (k + 1) * h] for k, i in enumerate(capture_layers)}
                if captured is not None
                else {}
            )
            parts[-1] = hidden
            captured = torch.cat([parts[i] for i in wanted], dim=-1)
        return ForwardOutput(n_new, hidden, self.logits_of(hidden, n_new, logits, head), captured if wanted else None)

    def _transformers_forward(self, input_ids, plan, cache: KVCache, capture_layers: tuple[int, ...]):
        outputs: dict[int, torch.Tensor] = {}

        def keep(index):
            def hook(module, args, output):
                outputs[index] = output[0] if isinstance(output, tuple) else output

            return hook

        handles = [self.decoder.layers[i].register_forward_hook(keep(i)) for i in set(capture_layers)]
        try:
            out = self.decoder(
                input_ids=input_ids,
                attention_mask=plan.additive_mask(self.dtype),
                position_ids=plan.position_ids,
                cache=cache.store,
                use_cache=True,
            )
        finally:
            for handle in handles:
                handle.remove()
        captured = torch.cat([outputs[i] for i in capture_layers], dim=-1) if capture_layers else None
        return out.last_hidden_state, captured

    def lm_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Float32 logits from last hidden states of any shape [..., H]."""
        with torch.inference_mode():
            return self._lm_head(hidden).float()

    def logits_of(
        self,
        hidden: torch.Tensor,
        n_new: list[int],
        which: str,
        head: Callable[[torch.Tensor], torch.Tensor] | None = None,
    ) -> torch.Tensor | None:
        lm_head = head if head is not None else lambda h: self._lm_head(h).float()
        if which == "none":
            return None
        if which == "last":
            if len(n_new) == 1:
                hidden = hidden[:, max(n_new[0] - 1, 0)]
            else:
                last = torch.tensor([max(n - 1, 0) for n in n_new], dtype=torch.long)
                hidden = hidden[torch.arange(hidden.shape[0]), last]
            return lm_head(hidden)
        if which == "all":
            return lm_head(hidden)
        raise ValueError(f"logits={which!r}")

    @torch.inference_mode()
    def full_logits(self, token_ids: Sequence[int]) -> torch.Tensor:
        """Logits of every position of one sequence, computed from scratch by transformers without a cache:
        [len, V] (the plain reference the tests compare cached decoding against)."""
        ids = torch.as_tensor([list(token_ids)], dtype=torch.long)
        hidden = self.decoder(input_ids=ids, use_cache=False).last_hidden_state
        return self.lm_head(hidden)[0].float()


def _mtp_prefixes(folder: Path) -> tuple[str, ...]:
    """The tensor-name prefixes of a checkpoint's MTP layers (`model.layers.{L+k}.`), from its config.json (() when
    it names none, or cannot be read: loading then reports what it finds)."""
    try:
        config = json.loads((folder / "config.json").read_text())
        layers, count = int(config["num_hidden_layers"]), int(config.get("num_nextn_predict_layers") or 0)
    except (OSError, ValueError, KeyError, TypeError):
        return ()
    return tuple(f"model.layers.{layers + k}." for k in range(max(count, 0)))


def _forward_choice(forward: str) -> str:
    if forward not in FORWARDS:
        raise ValueError(f"forward={forward!r}: use one of {', '.join(FORWARDS)}")
    if forward != "auto":
        return forward
    choice = os.environ.get(FORWARD_ENV, "auto").strip() or "auto"
    if choice not in FORWARDS:
        raise UserError(f"environment variable {FORWARD_ENV}={choice!r}: use one of {', '.join(FORWARDS)}")
    return choice


def _input_ids(tokens: Sequence[Sequence[int]], width: int) -> torch.Tensor:
    """[B, width] token ids, each row padded with 0."""
    if len(tokens) == 1 and len(tokens[0]) == width:
        return torch.tensor([list(tokens[0])], dtype=torch.long)
    return torch.tensor([list(row) + [0] * (width - len(row)) for row in tokens], dtype=torch.long)
