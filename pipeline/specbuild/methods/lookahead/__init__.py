"""Lookahead decoding: a Jacobi window of W guesses grows an n-gram pool; up to G matching n-grams are verified.

The engine's max_draft_len must equal (0 if N == 1 else N - 2) + (W - 1 + G) * (N - 1)
(examples/lookahead/README.md; a mismatch aborts tritonserver, tensorrtllm_backend #710). The pack: this section,
params.py, the engine flavour's parameters here, decoder.py (reference).
"""

from __future__ import annotations

from typing import Any, Iterator, Literal

from specbuild.facts.bounds import NonNegativeInt32, PositiveInt32
from specbuild.facts.engine_facts import SpecMode
from specbuild.findings import Finding
from specbuild.methods.lookahead.params import LookaheadWindow
from specbuild.methods.pack import MethodPack, ParameterProblem, Refusal
from specbuild.section import Section
from specbuild.speculation import Speculation

# The `tensorrt_llm` model's lookahead parameters (inflight_batcher_llm/tensorrt_llm/config.pbtxt@2a9abd95), and the
# engine folder's keys of the same names
LOOKAHEAD_KEYS = ("lookahead_window_size", "lookahead_ngram_size", "lookahead_verification_set_size")


def lookahead_max_draft_len(window_size: int, ngram_size: int, verification_set_size: int) -> int:
    w, n, g = window_size, ngram_size, verification_set_size
    return (0 if n == 1 else n - 2) + (w - 1 + g) * (n - 1)


class LookaheadConfig(Section):
    """Server-level lookahead configuration (W, N, G)."""

    method: Literal["lookahead"]
    window_size: PositiveInt32 = 4
    """W: Jacobi window size (tokens guessed ahead per step)."""
    ngram_size: PositiveInt32 = 4
    """N: n-gram size kept in the pool."""
    verification_set_size: NonNegativeInt32 = 4
    """G: n-grams verified per step."""
    max_draft_len: PositiveInt32 | None = None
    """Derived from (W, N, G); if given it must equal the derived value."""

    @property
    def derived_max_draft_len(self) -> int:
        return lookahead_max_draft_len(self.window_size, self.ngram_size, self.verification_set_size)


class LookaheadPack(MethodPack):
    name = "lookahead"
    Config = LookaheadConfig
    Params = LookaheadWindow
    summary = "Jacobi iteration grows an n-gram pool that is verified in the same forward"
    decoding_mode = "lookahead"
    decoding_types = ("Lookahead",)
    decoder = "decoder:LookaheadDecoder"
    trtllm = "trtllm:PART"

    def describe(self, recipe) -> Speculation:
        spec: LookaheadConfig = recipe.speculation
        window = LookaheadWindow(spec.window_size, spec.ngram_size, spec.verification_set_size)
        return Speculation(
            method=self.name, mode=SpecMode.LOOKAHEAD_DECODING, max_draft_len=spec.derived_max_draft_len, params=window
        )

    def checks(self, recipe) -> Iterator[Finding]:
        spec: LookaheadConfig = recipe.speculation
        derived = spec.derived_max_draft_len
        w, n, g = spec.window_size, spec.ngram_size, spec.verification_set_size
        if spec.max_draft_len is not None and spec.max_draft_len != derived:
            yield Finding(
                ("speculation", "max_draft_len"),
                f"is {spec.max_draft_len} but (W={w}, N={n}, G={g}) gives "
                f"(N-2) + (W-1+G)*(N-1) = {derived}; the engine and the server must agree — set "
                f"max_draft_len: {derived} or remove it",
            )
        if derived == 0 or n < 2:
            yield Finding(
                ("speculation", "ngram_size"),
                f"(W={w}, N={n}, G={g}) drafts nothing; the smallest useful "
                "setting is window_size 2, ngram_size 2, verification_set_size 1 — or use method: none",
            )

    # --- translations ---------------------------------------------------------------------------------------------
    def core_parameters(self, spec) -> dict[str, str]:
        return {key: str(value) for key, value in self.decoding(spec).items()}

    def decoding(self, spec) -> dict[str, Any]:
        w = spec.params
        return dict(zip(LOOKAHEAD_KEYS, (w.window_size, w.ngram_size, w.verification_set_size)))

    def decoding_overrides(self, get, get_bool, get_int) -> dict[str, Any]:
        """The (W, N, G) of a core whose decoding_mode says lookahead (all three, as the C++ backend requires)."""
        if (get("decoding_mode") or "").lower() != self.decoding_mode:
            return {}
        values = {key: get_int(key) for key in LOOKAHEAD_KEYS}
        if any(v is None for v in values.values()):
            raise ParameterProblem(
                "decoding_mode is lookahead but lookahead parameters are not specified — set "
                + ", ".join(LOOKAHEAD_KEYS)
            )
        return values

    def speculative_config(self, spec, release, path) -> Refusal:
        # tensorrt_llm/llmapi/llm_args.py, main after 1.3.0rc3
        return Refusal(
            "Lookahead's supports_backend returns False for pytorch", "flavour: engine, or method: prompt_lookup"
        )


PACK = LookaheadPack()
