"""What the drafters compute in: the dtype of the tree drafters (Medusa heads, EAGLE heads), and the drafting vocabulary
(`draft_vocab_size`: vocabulary projections over a prefix of the token ids: draft-target's draft model, Medusa heads,
EAGLE-1/2 heads)."""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from specbuild.facts.cpu import has_native_bf16
from specbuild.errors import UserError

if TYPE_CHECKING:  # pragma: no cover
    import torch

BF16_DRAFTER_MIN_HIDDEN = 512  # below this, bf16 conversions cost more than the halved weight traffic saves
DRAFT_DTYPE_KEY = "draft_dtype"
DRAFT_DTYPES = ("auto", "float32", "bfloat16", "float16", "int8")


class DraftPrecision(NamedTuple):
    """What a tree drafter computes in: its modules' dtype, and whether its larger matmuls run in int8
    (`lean.linear.Int8Linear`; then dtype is float32, what the int8 kernel takes and returns)."""

    dtype: "torch.dtype"
    int8: bool = False


def drafter_precision(
    decoding: dict, target_dtype: "torch.dtype", where: str, hidden_size: int, lean: bool = False
) -> DraftPrecision:
    """What the tree drafters (Medusa heads, EAGLE-1/2/3 heads) compute in: `draft_dtype` in the engine's decoding
    options (auto | float32 | bfloat16 | float16 | int8). Drafts only propose tokens, so this never changes the
    output (the target verifies in its own dtype); it only changes speed and acceptance.

    `auto`, for a float32 target: bfloat16 on CPUs with native bf16 matrix instructions (avx512_bf16 / amx_bf16)
    when the drafter runs on the lean path (`lean`: oneDNN-packed bf16 weights, faster at every size measured;
    EAGLE-1 on the tiny zoo, hidden 256: 1.58x autoregressive with a bf16 head vs 1.21x in float32, 2-vCPU EPYC),
    or, with transformers' modules, when the model is wide enough (hidden size >= 512) for weight traffic to
    dominate; else, on the lean path, int8 where PyTorch runs fbgemm (x86 CPUs without bf16, whose emulated bf16
    matmuls are no faster than float32: a quarter of the weight bytes, `lean.linear.Int8Linear`); else the
    target's dtype. `int8` runs on the lean path only (the drafter's modules stay float32 elsewhere)."""
    import torch

    from specbuild.reference.decoder.lean.linear import int8_available

    choice = str(decoding.get(DRAFT_DTYPE_KEY, "auto"))
    if choice not in DRAFT_DTYPES:
        raise UserError(
            f"{where}.{DRAFT_DTYPE_KEY}={choice!r}: use {', '.join(DRAFT_DTYPES[:-1])} or {DRAFT_DTYPES[-1]}"
        )
    if choice == "auto":
        if target_dtype != torch.float32:
            return DraftPrecision(target_dtype)
        if has_native_bf16() and (lean or hidden_size >= BF16_DRAFTER_MIN_HIDDEN):
            return DraftPrecision(torch.bfloat16)
        return DraftPrecision(torch.float32, int8=lean and int8_available())
    if choice == "int8":
        if not lean:
            raise UserError(
                f"{where}.{DRAFT_DTYPE_KEY}=int8: int8 drafting runs on the lean forward only (EAGLE and "
                "Medusa heads over a lean target); this drafter runs transformers' modules: "
                "use auto, float32, bfloat16 or float16"
            )
        if not int8_available():
            raise UserError(
                f"{where}.{DRAFT_DTYPE_KEY}=int8: this PyTorch has no fbgemm int8 engine "
                f"(torch.backends.quantized.engine={torch.backends.quantized.engine!r}; x86 builds have "
                "it): use auto, float32, bfloat16 or float16"
            )
        return DraftPrecision(torch.float32, int8=True)
    return DraftPrecision(getattr(torch, choice))


DRAFT_VOCAB_KEY = "draft_vocab_size"


def draft_vocab_size(decoding: dict, vocab_size: int, where: str) -> int:
    """How many token ids a drafter scores: `draft_vocab_size` in the engine's decoding options (N: ids [0, N);
    absent, 0 or the vocabulary size: all of them). See `DraftVocabHead`."""
    value = decoding.get(DRAFT_VOCAB_KEY)
    if value is None or value == "" or value == 0 or value == "0":
        return vocab_size
    try:
        n = int(value)
    except (TypeError, ValueError):
        n = -1
    if not 1 <= n <= vocab_size:
        raise UserError(
            f"{where}.{DRAFT_VOCAB_KEY}={value!r}: give a number of token ids from 1 to the vocabulary "
            f"size {vocab_size} (0 or absent: the whole vocabulary)"
        )
    return n


class DraftVocabHead:
    """A drafter's lm_head over the token ids [0, n) only: `head(hidden [..., H])` -> float32 logits [..., V] with
    -inf at ids >= n (`log_probs(hidden)`: log-softmax over the n ids, -inf elsewhere).

    The reference runtime's `draft_vocab_size` option (engine `specbuild.decoding`; draft-target's draft model and
    EAGLE-1/2's head; Medusa heads slice their projections the same way, lean/heads.py); off unless set. It reads
    n/V of the vocabulary projection's weights per draft forward, the largest part of a small drafter's weights (the
    tiny zoo: 73% of the draft model's, 53% of an EAGLE head pass's). Lossless: drafts only propose, the target
    verifies every token over its full vocabulary in its own dtype, and for sampled draft-target requests the
    proposal q is this distribution (zero outside the subset), which rejection sampling accepts exactly as any other
    q. What it costs is acceptance where the target's choice lies outside [0, n). Why a prefix of the ids: a BPE
    tokenizer numbers its tokens in merge order, so its low ids are the tokens that were frequent in its training
    text (FR-Spec, Zhao et al. 2025, ranks the draft vocabulary by corpus frequency; EAGLE-3 heads carry such a list,
    `d2t`). Measured on the tiny zoo (vocabulary 4096, 2-vCPU EPYC, bench/README.md): 2048 ids keep the acceptance
    length (draft-target 3.60, Medusa 2.23, EAGLE-1 3.57; 1024 ids: 3.34 / - / 3.36) and make a call cheaper (draft
    forward 195 -> 164 us, EAGLE head pass 353 -> 335 us, the four Medusa heads 260 -> 177 us, weights in cache),
    but end to end the difference stayed inside the run-to-run spread (draft-target 1.76x vs 1.77x, EAGLE-1 1.24x vs
    1.26x, Medusa 1.34x vs 1.43x at load 1): worth trying where the vocabulary is large next to the drafter."""

    def __init__(
        self, weight: "torch.Tensor", n: int | None = None, dtype: "torch.dtype | None" = None, int8: bool = False
    ):
        """int8: the projection as `lean.linear.Int8Linear` (`draft_dtype: int8`; dtype float32)."""
        from specbuild.reference.decoder.lean.linear import drafting_linear

        vocab = int(weight.shape[0])
        n = vocab if n is None else n
        dtype = weight.dtype if dtype is None else dtype
        w = weight.detach()[:n]
        self.vocab_size, self.n, self.dtype = vocab, n, dtype
        self.linear = drafting_linear(w.to(dtype).contiguous() if (w.dtype != dtype or n < vocab) else w, int8=int8)

    def raw(self, hidden: "torch.Tensor") -> "torch.Tensor":
        """Float32 logits of the ids [0, n) only: [..., n]."""
        return self.linear(hidden.to(self.dtype)).float()

    def _padded(self, scores: "torch.Tensor") -> "torch.Tensor":
        import torch.nn.functional as F

        if self.n == self.vocab_size:
            return scores
        return F.pad(scores, (0, self.vocab_size - self.n), value=float("-inf"))

    def __call__(self, hidden: "torch.Tensor") -> "torch.Tensor":
        return self._padded(self.raw(hidden))

    def log_probs(self, hidden: "torch.Tensor") -> "torch.Tensor":
        import torch

        return self._padded(torch.log_softmax(self.raw(hidden), dim=-1))
