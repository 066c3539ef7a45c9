"""Model plumbing: a Hugging Face causal LM run over a batch of rows with their own lengths.

`CausalLM.forward(cache, tokens)` feeds `tokens[r]` (any number, possibly zero) to row r, with explicit
`position_ids` and a 4D additive float mask planned by the row-aware `KVCache`, and returns the logits and the
last hidden states (after the final norm: the features Medusa heads and EAGLE heads read). The new tokens stay
*pending* in the cache until the caller commits the ones it keeps.

Works with `LlamaForCausalLM` and any transformers decoder that accepts 4D masks and `position_ids` and caches
with plain `DynamicLayer`s (no sliding window, no linear attention).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Sequence

import torch

from specbuild.errors import UserError
from specbuild.reference.kv_cache import KVCache

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16, "float64": torch.float64}


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
    """A transformers causal LM in inference mode, fed through a `KVCache`."""

    def __init__(self, hf_model):
        self.hf = hf_model.eval()
        self.config = hf_model.config
        self.decoder = hf_model.get_decoder()
        self.lm_head = hf_model.get_output_embeddings()
        self.dtype = next(hf_model.parameters()).dtype
        self.vocab_size = int(self.lm_head.weight.shape[0])
        self.hidden_size = int(self.config.hidden_size)
        self._check_supported()

    @classmethod
    def from_pretrained(cls, path: str | Path, dtype: str = "float32", attn_implementation: str = "sdpa") -> "CausalLM":
        from transformers import AutoModelForCausalLM
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()

        if dtype not in DTYPES:
            raise UserError(f"compute dtype {dtype!r} is not supported by the reference runtime; use one of {sorted(DTYPES)}")
        try:
            hf = AutoModelForCausalLM.from_pretrained(
                str(path), dtype=DTYPES[dtype], attn_implementation=attn_implementation, local_files_only=True
            )
        except (OSError, ValueError) as exc:
            raise UserError(f"{path}: cannot load the model with transformers: {exc}") from exc
        return cls(hf)

    def _check_supported(self) -> None:
        cfg = self.config
        for key in ("final_logit_softcapping", "logit_scale"):
            if getattr(cfg, key, None) not in (None, 1.0):
                raise UserError(
                    f"{type(self.hf).__name__}: config.{key}={getattr(cfg, key)!r} is not supported by the reference "
                    "runtime (logits are computed as lm_head(final hidden state)); use a Llama-family model"
                )
        probe = KVCache(cfg, 0)
        kinds = {type(layer).__name__ for layer in probe.store.layers}
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
    ) -> ForwardOutput:
        """Feed `tokens[r]` to row r of `cache`; the tokens become pending there (see `KVCache.plan_forward`
        for `positions` and `attend`). Returns hidden states and the logits asked for, and with `capture_layers`
        the outputs of those decoder layers (0-based; -1 = the final normed hidden state) as `captured`."""
        n_new = [len(t) for t in tokens]
        physical_before = cache.physical_length
        plan = cache.plan_forward(n_new, positions=positions, attend=attend)
        input_ids = torch.zeros(len(tokens), plan.width, dtype=torch.long)
        for r, row in enumerate(tokens):
            if row:
                input_ids[r, : len(row)] = torch.as_tensor(list(row), dtype=torch.long)
        with _LayerOutputs(self.decoder, capture_layers) as layer_outputs:
            out = self.decoder(
                input_ids=input_ids,
                attention_mask=plan.additive_mask(self.dtype),
                position_ids=plan.position_ids,
                cache=cache.store,
                use_cache=True,
            )
        cache.check_appended(plan, physical_before)
        hidden = out.last_hidden_state
        return ForwardOutput(n_new, hidden, self.logits_of(hidden, n_new, logits), layer_outputs.concat(hidden))

    def lm_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Float32 logits from last hidden states of any shape [..., H]."""
        with torch.inference_mode():
            return self.lm_head(hidden).float()

    def logits_of(self, hidden: torch.Tensor, n_new: list[int], which: str) -> torch.Tensor | None:
        if which == "none":
            return None
        if which == "last":
            last = torch.tensor([max(n - 1, 0) for n in n_new], dtype=torch.long)
            hidden = hidden[torch.arange(hidden.shape[0]), last]
            return self.lm_head(hidden).float()
        if which == "all":
            return self.lm_head(hidden).float()
        raise ValueError(f"logits={which!r}")

    @torch.inference_mode()
    def full_logits(self, token_ids: Sequence[int]) -> torch.Tensor:
        """Logits of every position of one sequence, computed from scratch without a cache: [len, V]
        (the plain reference the tests compare cached decoding against)."""
        ids = torch.as_tensor([list(token_ids)], dtype=torch.long)
        hidden = self.decoder(input_ids=ids, use_cache=False).last_hidden_state
        return self.lm_head(hidden)[0].float()


class _LayerOutputs:
    """Forward hooks that keep the outputs of some decoder layers during one forward (none: a no-op).

    A layer's output is its residual stream after the MLP (hidden + residual), what TensorRT-LLM's
    `maybe_capture_hidden_states` records for EAGLE-3 and HF's `hidden_states[i + 1]` for every layer but the last
    (transformers replaces the last one with the normed output)."""

    def __init__(self, decoder, layers: Sequence[int] | None):
        self.decoder, self.layers = decoder, list(layers) if layers is not None else None
        self.outputs: dict[int, torch.Tensor] = {}
        self._handles: list = []

    def __enter__(self) -> "_LayerOutputs":
        if self.layers is None:
            return self
        blocks = self.decoder.layers
        for index in self.layers:
            if index != -1 and not 0 <= index < len(blocks):
                raise UserError(f"capture layer {index} does not exist: the model has {len(blocks)} decoder layers "
                                f"(0..{len(blocks) - 1}; -1 = the final hidden state)")
        for index in sorted({i for i in self.layers if i != -1}):
            def keep(_module, _inputs, output, index=index):
                self.outputs[index] = output[0] if isinstance(output, tuple) else output
            self._handles.append(blocks[index].register_forward_hook(keep))
        return self

    def __exit__(self, *exc) -> None:
        for handle in self._handles:
            handle.remove()

    def concat(self, final_hidden: torch.Tensor) -> torch.Tensor | None:
        if self.layers is None:
            return None
        return torch.cat([final_hidden if i == -1 else self.outputs[i] for i in self.layers], dim=-1)
