"""AUTO (TensorRT-LLM's `AUTO` decoding type, AutoDecodingConfig: no fields of its own): TensorRT-LLM picks a
draft-model-free method itself. When the executor is made, an AUTO config is replaced by
`suggest_spec_config(max_batch_size)` (tensorrt_llm/_torch/pyexecutor/py_executor_creator.py@bab0f2e
`create_py_executor`; the heuristic in heuristic.py): n-gram speculation, off above 32 requests in flight. Nothing
of the AUTO config is kept (the NGram config is made afresh), so neither a draft_len_schedule nor an acceptance-rate
switch written beside it would act.

The LLM-API flavour only (the engine path has no such decoding type), at release lines 1.0, 1.1 and 1.3 (`AUTO` in
from_dict's map of the 1.0 and 1.1 era and in the union of main after 1.3.0rc3; 1.2.x's map was not read, so 1.2 is
refused with the reason, as specbuild writes at 1.2 only what both neighbours are known to accept). The pack: this section, params.py, heuristic.py
(stdlib only), model.yaml's speculative_config and the CPU rehearsal's reading here; decoder.py (reference: prompt
lookup, as the NGram config runs).
"""

from __future__ import annotations

from typing import Any, Iterator, Literal

from specbuild.findings import Finding
from specbuild.methods.auto.heuristic import AutoChoice, suggest
from specbuild.methods.auto.params import AutoNgram
from specbuild.methods.llm_args import DecodingBaseConfig
from specbuild.methods.pack import MethodPack, Refusal
from specbuild.section import Section
from specbuild.speculation import Speculation

# The release lines known to read `decoding_type: AUTO`: from_dict's map of the 1.0 and 1.1 era (releases.py), the
# union of main after 1.3.0rc3 (AutoDecodingConfig); 1.2.x lies between them unread
RELEASES = ("1.0", "1.1", "1.3")
# Where the heuristic's choice is made (cited in what check and the rehearsal say)
SOURCE = "tensorrt_llm/_torch/speculative/auto_heuristic.py@f00d21a, py_executor_creator.py@bab0f2e"


class AutoConfig(Section):
    """Let TensorRT-LLM pick a draft-model-free method (today: n-gram, off above 32 requests in flight)."""

    method: Literal["auto"]


class AutoDecodingConfig(DecodingBaseConfig):
    """AutoDecodingConfig (llm_args.py@0004396) as the CPU rehearsal validates it: the base fields only."""

    decoding_type: Literal["AUTO"]


def ngram_config(choice: AutoChoice) -> dict[str, Any]:
    """The NGram speculative_config `suggest_spec_config` returns, as model.yaml would spell it."""
    return {
        "decoding_type": "NGram",
        "max_draft_len": choice.max_draft_len,
        "max_matching_ngram_size": choice.max_matching_ngram_size,
        "max_concurrency": choice.max_concurrency,
        "is_keep_all": choice.is_keep_all,
        "is_use_oldest": choice.is_use_oldest,
        "is_public_pool": choice.is_public_pool,
    }


class AutoPack(MethodPack):
    name = "auto"
    Config = AutoConfig
    Params = AutoNgram
    summary = "TensorRT-LLM picks n-gram speculation from max_batch_size, off above 32 requests in flight"
    decoding_types = ("AUTO",)
    two_model_drafter = True  # what runs is NGram's drafter
    overlap_off = True  # as for NGram (the prompt_lookup pack)
    rehearsal_config = AutoDecodingConfig
    decoder = "decoder:AutoDecoder"

    def describe(self, recipe) -> Speculation:
        mbs = recipe.build.max_batch_size
        choice = suggest(mbs)
        return Speculation(
            method=self.name, mode=None, max_draft_len=choice.max_draft_len, params=AutoNgram(mbs, choice)
        )

    def checks(self, recipe) -> Iterator[Finding]:
        adaptive = recipe.adaptive
        for key in ("draft_len_schedule", "disable_below"):
            if getattr(adaptive, key) is not None:
                yield Finding(
                    ("adaptive", key),
                    f"AUTO's config is replaced by the NGram config of TensorRT-LLM's heuristic when the executor is "
                    f"made ({SOURCE}), which keeps none of it — remove adaptive.{key}, or use prompt_lookup, "
                    "which follows it",
                    also=(("speculation", "method"),),
                )

    # --- translations ---------------------------------------------------------------------------------------------
    def speculative_config(self, spec, release, path) -> dict[str, Any] | Refusal:
        if release.line not in RELEASES:
            return Refusal(
                f"whether release {release.line}'s from_dict map has AUTO is not known (it is in 1.0's and 1.1's "
                "maps and in the union of main after 1.3.0rc3; the 1.3.0rc3 map was not read in full, and no "
                "1.2.x source at all: specbuild.repository.llmapi.releases)",
                f"llm_api.release: 1.1 or 1.3, or prompt_lookup with what AUTO picks ({spec.params.choice.describe()})",
            )
        return {"decoding_type": "AUTO"}  # AutoDecodingConfig has no fields of its own to write

    def served_in_place(self, config: AutoDecodingConfig, max_batch_size: int) -> dict[str, Any]:
        return ngram_config(suggest(max_batch_size))

    def runs(self, spec) -> str | None:
        auto: AutoNgram = spec.params
        return (
            f"AUTO runs {auto.choice.describe()} (TensorRT-LLM's heuristic for build.max_batch_size "
            f"{auto.max_batch_size}: {SOURCE})"
        )

    def llmapi_checks(self, recipe, spec) -> Iterator[Finding]:
        auto: AutoNgram = spec.params
        yield Finding(  # not a problem: what AUTO will run, said by check (a warning refuses nothing)
            ("build", "max_batch_size"),
            f"AUTO runs {auto.choice.describe()} (TensorRT-LLM's heuristic for build.max_batch_size "
            f"{auto.max_batch_size}: {SOURCE}); set method: prompt_lookup to choose the n-gram size yourself",
            also=(("speculation", "method"),),
            warning=True,
        )


PACK = AutoPack()
