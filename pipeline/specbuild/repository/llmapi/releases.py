"""How each TensorRT-LLM release parses model.yaml's `speculative_config`, and the spellings specbuild writes for it.

NVIDIA's llmapi model hands everything but `triton_config` to `update_llm_args_with_extra_dict({}, yaml)` and then
to `LLM(**args)` (`triton_backend/all_models/llmapi/tensorrt_llm/1/model.py`, 1.0 and later). Two parse paths
exist for `speculative_config` (`tensorrt_llm/llmapi/llm_args.py`):

- `from_dict`: `update_llm_args_with_extra_dict` calls `DecodingBaseConfig.from_dict`, a fixed map from
  `decoding_type` to a config class; any other string raises `ValueError("Invalid decoding type: …")`. The map's
  key for draft/target is `DraftTarget`, although the class's own ClassVar says `Draft_Target` (llm_args.py at
  1.0 and 1.1). Read in llm_args.py of the 1.0 and 1.1 era and of a 1.3.0rc3 tree (still `from_dict` there).
- `union`: the dict goes to pydantic unchanged; `speculative_config` is a discriminated union on `decoding_type`
  whose tags are each class's Literal (`Draft_Target`, `Eagle3`, `Eagle`, `NGram`, `MTP`, …). Read in llm_args.py
  of main after 1.3.0rc3 (its imports match the 1.3.0rc7 docs' source) and in the API reference of 1.3.0rc27 and
  1.3.0rc29 (every config's signature carries `decoding_type: Literal[...]`).

No copy of llm_args.py taken at a release tag was available: the 1.0 and 1.1 sources are dated by their content,
and no 1.2.x source was read at all. For 1.2 specbuild writes what both neighbours accept (1.1's `from_dict` and
1.3.0rc3's), and `check` says which rules are unknown. On a machine with TensorRT-LLM, compile hands every
model.yaml to the installed release's own parse functions (specbuild.trtllm.llmapi_parse), which settles what this
table cannot.
"""

from __future__ import annotations

from dataclasses import dataclass

from specbuild.methods.pack import Release

FROM_DICT, UNION = "from_dict", "union"


@dataclass(frozen=True)
class ReleaseRules:
    """What specbuild writes into `speculative_config` for one release line, and what is known of it."""

    release: str
    parse_path: str  # FROM_DICT | UNION (see the module docstring): which spelling of decoding_type it reads
    draft_field: str  # the key naming the draft model / EAGLE-3 head
    source: str  # the upstream text the rules were read from
    unknown: tuple[str, ...] = ()  # rules of this release not read in its own source: `check` prints them

    def for_packs(self) -> Release:
        """What a method pack's model.yaml part is told of the release (specbuild.methods.pack.Release)."""
        return Release(self.release, self.parse_path == UNION, self.draft_field)


RULES: dict[str, ReleaseRules] = {
    "1.0": ReleaseRules(
        "1.0",
        FROM_DICT,
        "speculative_model_dir",
        "tensorrt_llm/llmapi/llm_args.py of the 1.0 era (DecodingBaseConfig.from_dict: MTP, Medusa, Eagle, "
        "Lookahead, NGram, DraftTarget, UserProvided, AUTO; `Eagle` is EAGLE-3 on the PyTorch backend; only "
        "speculative_model_dir)",
        unknown=("the llm_args.py read is dated to 1.0 by its content, not taken at the v1.0.0 tag",),
    ),
    "1.1": ReleaseRules(
        "1.1",
        FROM_DICT,
        "speculative_model_dir",
        "tensorrt_llm/llmapi/llm_args.py of the 1.1 era (from_dict adds SaveState to 1.0's map; no Eagle3, no "
        "Draft_Target; only speculative_model_dir)",
        unknown=("the llm_args.py read is dated to 1.1 by its content, not taken at the v1.1.0 tag",),
    ),
    "1.2": ReleaseRules(
        "1.2",
        FROM_DICT,
        "speculative_model_dir",
        "neighbours only: 1.1's llm_args.py and a 1.3.0rc3 tree both parse through DecodingBaseConfig.from_dict and "
        "accept Eagle, DraftTarget, NGram, MTP and speculative_model_dir (an alias of speculative_model at "
        "1.3.0rc3)",
        unknown=(
            "the 1.2.x llm_args.py itself was not read: whether it knows Eagle3 and speculative_model is "
            "unknown, so model.yaml uses Eagle + speculative_model_dir and DraftTarget, which both 1.1 and "
            "1.3.0rc3 accept",
        ),
    ),
    "1.3": ReleaseRules(
        "1.3",
        UNION,
        "speculative_model",
        "tensorrt_llm/llmapi/llm_args.py of main after 1.3.0rc3 (SpeculativeConfig = Annotated[Union[...], "
        "Field(discriminator='decoding_type')], DraftTargetDecodingConfig.decoding_type Literal['Draft_Target']; "
        "update_llm_args_with_extra_dict no longer converts speculative_config) and the 1.3.0rc27/rc29 API "
        "reference",
        unknown=(
            "written for 1.3.0rc7 and later: 1.3.0rc0-rc3 still parse through from_dict and refuse "
            "Draft_Target, and which of rc4-rc6 changed is not known; no final 1.3 source was read",
        ),
    ),
}


def rules(release: str) -> ReleaseRules:
    return RULES[release]


def schedule_unknown(release: str) -> str | None:
    """What is unknown about the recipe's draft-length schedule at `release` (None: nothing)."""
    if release == "1.2":
        return (
            "draft_len_schedule was read only in llm_args.py after 1.3.0rc3; whether 1.2.x's DecodingBaseConfig "
            "has it is not known (an unknown key fails model load), so the schedule is written as "
            "max_concurrency, which 1.1 and that later source both have"
        )
    return None
