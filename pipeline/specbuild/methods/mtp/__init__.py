"""MTP (multi-token prediction): the target's own next-n prediction layers draft (DeepSeek-V3 and a few others;
TensorRT-LLM tensorrt_llm/llmapi/llm_args.py MTPDecodingConfig). The LLM-API flavour, on both runtimes; the target
checkpoint must carry the layers (config.json num_nextn_predict_layers > 0, and the layers in its weights:
specbuild/heads/mtp.py has DeepSeek-V3's layout). The pack: this section, params.py, model.yaml's speculative_config
per release and its reading by the CPU rehearsal here, decoder.py (the reference runtime's MTP-Eagle, and
relaxed acceptance in the thinking phase: not lossless).

How deep it may draft depends on the checkpoint, by the rule of TensorRT-LLM's `MTPDecodingConfig.spec_dec_mode`
(`tensorrt_llm/llmapi/llm_args.py`; `update_spec_config_from_model_config` in `tensorrt_llm/_torch/speculative/
utils.py` fills in the checkpoint's count): a checkpoint with exactly one MTP layer (DeepSeek-V3/R1) runs
MTP-Eagle, which reuses that layer for every draft token, so any num_nextn_predict_layers is served (TensorRT-LLM's
curated deepseek-r1-latency.yaml uses 3); a checkpoint with more layers runs vanilla MTP, one layer per draft
token, so at most that many.
"""

from __future__ import annotations

from typing import Annotated, Any, Iterable, Iterator, Literal

from pydantic import Field, model_validator

from specbuild.facts.bounds import NonNegativeInt32, PositiveInt32
from specbuild.findings import Finding
from specbuild.methods.llm_args import DecodingBaseConfig
from specbuild.methods.mtp.params import DEFAULT_BEGIN, DEFAULT_DELTA, DEFAULT_END, DEFAULT_TOP_K
from specbuild.methods.mtp.params import MtpLayers, RelaxedThinking
from specbuild.methods.pack import MethodPack, Refusal, Rehearsed, Unservable
from specbuild.methods.suffix_automaton.enhancer import SAEnhancerConfig, SaEnhancerSection, SaOverride, sa_decoding
from specbuild.methods.suffix_automaton.enhancer import sa_model_yaml
from specbuild.section import Section
from specbuild.checkpoints.checkpoint_tensors import LAYER_INDEX, tensor_names
from specbuild.checkpoints.checkpoint_files import checkpoint_root, read_hf_config
from specbuild.speculation import Speculation


def has_mtp_layers(names: Iterable[str], num_layers: int) -> bool | None:
    """Whether the names hold multi-token-prediction layers: decoder layers numbered from `num_layers` on
    (DeepSeek-V3's `model.layers.61.*`, GLM-4.5's), or tensors named `mtp` / `nextn` (Qwen3-Next's `mtp.*`).
    None when the names show no layer numbers (nothing to tell by)."""
    names = list(names)
    if any("mtp" in n or "nextn" in n for n in names):
        return True
    found = {int(m.group(1)) for n in names if (m := LAYER_INDEX.search(n))}
    if not found:
        return None
    return max(found) >= num_layers


# Releases whose MTPDecodingConfig picks MTP-Eagle (one layer reused) for a one-layer checkpoint and vanilla MTP
# otherwise, read in llm_args.py: 1.0 (`spec_dec_mode`: num_nextn_predict_layers_from_model_config == 1 and not
# use_mtp_vanilla -> MTP_EAGLE), 1.1 (the same, plus mtp_eagle_one_model, default true), and the post-1.3.0rc3
# main source (the same rule); 1.2 lies between them. A release missing here has no known rule: check refuses
# depths beyond the checkpoint's layers there.
REUSES_SINGLE_MTP_LAYER = frozenset({"1.0", "1.1", "1.2", "1.3"})


def max_depth(checkpoint_layers: int, release: str | None) -> int | None:
    """The deepest num_nextn_predict_layers TensorRT-LLM `release` serves on a checkpoint with this many MTP
    layers (None: no limit, the one layer is reused)."""
    if checkpoint_layers == 1 and release in REUSES_SINGLE_MTP_LAYER:
        return None
    return checkpoint_layers


# num_nextn_predict_layers is deprecated from 1.3 and remapped to max_draft_len, which model.yaml then names
# (llm_args.py@0004396720054fd8e205cbf616f21f0b57c6b412, ../shared/reference/trtllm-llmapi-newest.md §3); up to 1.2
# MTPDecodingConfig's validator sets max_draft_len from num_nextn_predict_layers (llm_args.py, 1.2 era)
RELEASES_NAMING_MAX_DRAFT_LEN = ("1.3",)
NonNegativeFloat = Annotated[float, Field(ge=0.0)]


class MTPDecodingConfig(DecodingBaseConfig):
    """MTPDecodingConfig (llm_args.py) as the CPU rehearsal reads it: num_nextn_predict_layers, when given, is the
    draft length (up to 1.2 the validator copies it into max_draft_len; from 1.3 it is remapped to it)."""

    decoding_type: Literal["MTP"]
    num_nextn_predict_layers: PositiveInt32 | None = None
    use_relaxed_acceptance_for_thinking: bool = False
    relaxed_topk: PositiveInt32 = DEFAULT_TOP_K
    relaxed_delta: NonNegativeFloat = DEFAULT_DELTA
    begin_thinking_phase_token: int = DEFAULT_BEGIN
    end_thinking_phase_token: int = DEFAULT_END
    use_mtp_vanilla: bool = False
    mtp_eagle_one_model: bool = True
    use_dynamic_tree: bool = False
    dynamic_tree_max_topK: PositiveInt32 | None = None  # noqa: N815 (TensorRT-LLM's field name)
    sa_config: SAEnhancerConfig | None = None

    @model_validator(mode="after")
    def _draft_length(self) -> "MTPDecodingConfig":
        if self.num_nextn_predict_layers is not None:
            self.max_draft_len = self.num_nextn_predict_layers
        return self


class RelaxedAcceptanceConfig(Section):
    """Relaxed acceptance in a reasoning model's thinking phase (TensorRT-LLM use_relaxed_acceptance_for_thinking):
    between the begin and end thinking tokens a draft is accepted when it is among the target's top_k tokens and its
    probability is at least the top one's minus delta. NOT lossless: needs validation.require_lossless: false."""

    top_k: PositiveInt32 = DEFAULT_TOP_K
    """relaxed_topk: how far down the target's ranking an accepted draft may sit (1: the top token only)."""
    delta: NonNegativeFloat = DEFAULT_DELTA
    """relaxed_delta: how far below the top token's probability (not log-probability) an accepted draft may be."""
    begin_thinking_token: NonNegativeInt32 = DEFAULT_BEGIN
    """The token id that opens the thinking phase (DeepSeek-R1's <think>: 128798)."""
    end_thinking_token: NonNegativeInt32 = DEFAULT_END
    """The token id that closes it (DeepSeek-R1's </think>: 128799); outside it drafts are verified greedily."""


class MtpConfig(Section):
    """Draft with the target's MTP layers."""

    method: Literal["mtp"]
    max_draft_len: PositiveInt32 | None = None
    """Draft tokens per step, the chain length K (default 1). A checkpoint with one MTP layer (DeepSeek-V3/R1)
    reuses it for every draft token (MTP-Eagle), so any length; with more layers, at most that many. model.yaml
    names it max_draft_len from TensorRT-LLM 1.3, num_nextn_predict_layers before."""
    num_nextn_predict_layers: PositiveInt32 | None = None
    """The same length under its name before TensorRT-LLM 1.3 (give one of the two)."""
    relaxed_acceptance: RelaxedAcceptanceConfig | None = None
    """Accept near-greedy drafts in the thinking phase (not lossless: needs validation.require_lossless: false)."""
    sa_config: SaEnhancerSection | None = None
    """A suffix automaton beside the MTP layers (TensorRT-LLM 1.3's sa_config, beta): a match of at least
    `threshold` tokens replaces their drafts for that step."""


def draft_length(section: MtpConfig) -> int:
    return section.max_draft_len or section.num_nextn_predict_layers or 1


def length_field(section: MtpConfig) -> str:
    """The key the recipe gives the length under (messages point at it)."""
    return "num_nextn_predict_layers" if section.num_nextn_predict_layers is not None else "max_draft_len"


class MtpPack(MethodPack):
    name = "mtp"
    Config = MtpConfig
    Params = MtpLayers
    summary = "the target's own multi-token-prediction layers draft"
    decoding_types = ("MTP",)
    rehearsal_config = MTPDecodingConfig
    decoder = "decoder:MtpDecoder"
    untrained = "its drafts come from layers inside the target checkpoint (adapt does not train the target)"

    def describe(self, recipe) -> Speculation:
        section: MtpConfig = recipe.speculation
        n = draft_length(section)
        r = section.relaxed_acceptance
        relaxed = None if r is None else RelaxedThinking(r.top_k, r.delta, r.begin_thinking_token, r.end_thinking_token)
        params = MtpLayers(n, relaxed, SaOverride.of(section.sa_config))
        return Speculation(method=self.name, mode=None, max_draft_len=n, params=params)

    def checks(self, recipe) -> Iterator[Finding]:
        section: MtpConfig = recipe.speculation
        if section.max_draft_len is not None and section.num_nextn_predict_layers is not None:
            yield Finding(
                ("speculation", "num_nextn_predict_layers"),
                "and max_draft_len both give the draft length — keep one (max_draft_len: TensorRT-LLM 1.3's name)",
            )
        r = section.relaxed_acceptance
        if r is None:
            return
        if recipe.validation.require_lossless:
            yield Finding(
                ("speculation", "relaxed_acceptance"),
                "is not lossless: in the thinking phase it accepts drafts the target's greedy decoding would not "
                "choose — set validation.require_lossless: false (the report then says why the lossless check does "
                "not apply), or remove relaxed_acceptance",
            )
        if r.begin_thinking_token == r.end_thinking_token:
            yield Finding(
                ("speculation", "relaxed_acceptance", "end_thinking_token"),
                f"is the begin token too ({r.end_thinking_token}) — give the ids of the model's own begin and end "
                "thinking tokens (DeepSeek-R1: <think> 128798, </think> 128799)",
            )

    def file_checks(self, recipe) -> Iterator[Finding]:
        cfg = read_hf_config(recipe.model_dir) or {}
        section: MtpConfig = recipe.speculation
        yield from _token_findings(section, cfg.get("vocab_size"))
        have = cfg.get("num_nextn_predict_layers")
        want = draft_length(section)
        if not isinstance(have, int) or isinstance(have, bool) or have < 1:
            yield Finding(
                ("model", "checkpoint"),
                f"{recipe.model.checkpoint}/config.json has no MTP layers "
                "(num_nextn_predict_layers) — MTP needs a checkpoint trained with them (e.g. DeepSeek-V3); "
                "use eagle3, draft_target or prompt_lookup",
            )
            return
        release = recipe.llm_api.release
        limit = max_depth(have, release)
        if limit is not None and want > limit:
            why = (
                "vanilla MTP drafts one token per layer" if have > 1 else f"no rule is known for TensorRT-LLM {release}"
            )
            yield Finding(
                ("speculation", length_field(section)),
                f"is {want} but the checkpoint has {have} MTP layer(s) and {why} — set it to at most {limit}",
                also=(("speculation", "method"),),
            )
            return
        layers = cfg.get("num_hidden_layers")
        names = tensor_names(recipe.model_dir, root=checkpoint_root(recipe.model_dir))
        if isinstance(layers, int) and names is not None and has_mtp_layers(names, layers) is False:
            yield Finding(
                ("model", "checkpoint"),
                f"{recipe.model.checkpoint}/config.json names {have} MTP "
                f"layer(s) but the weights hold none (no layer {layers} or later, nothing named mtp) — "
                "exports and re-quantized copies often drop them; use a checkpoint that keeps them, or "
                "eagle3, draft_target or prompt_lookup",
            )

    # --- translations ---------------------------------------------------------------------------------------------
    def speculative_config(self, spec, release, path) -> dict[str, Any] | Refusal:
        params: MtpLayers = spec.params
        sa = sa_model_yaml(params.sa, release.line)
        if isinstance(sa, Refusal):
            return sa
        length = "max_draft_len" if release.line in RELEASES_NAMING_MAX_DRAFT_LEN else "num_nextn_predict_layers"
        out: dict[str, Any] = {"decoding_type": "MTP", length: params.num_nextn_predict_layers}
        if params.relaxed is not None:
            r = params.relaxed
            out.update(
                use_relaxed_acceptance_for_thinking=True,
                relaxed_topk=r.top_k,
                relaxed_delta=r.delta,
                begin_thinking_phase_token=r.begin_token,
                end_thinking_phase_token=r.end_token,
            )
        if sa is not None:
            out["sa_config"] = sa
        return out

    def rehearse(self, config: MTPDecodingConfig, k: int) -> Rehearsed:
        if config.use_dynamic_tree or config.dynamic_tree_max_topK is not None:
            raise Unservable(
                "use_dynamic_tree: MTP's dynamic tree is not rehearsed on the CPU (the reference runtime drafts MTP "
                "chains) — remove it"
            )
        decoding: dict[str, Any] = {
            "max_draft_len": k,
            "use_mtp_vanilla": config.use_mtp_vanilla,
            **sa_decoding(config.sa_config),
        }
        if config.use_relaxed_acceptance_for_thinking:
            decoding.update(
                use_relaxed_acceptance_for_thinking=True,
                relaxed_topk=config.relaxed_topk,
                relaxed_delta=config.relaxed_delta,
                begin_thinking_phase_token=config.begin_thinking_phase_token,
                end_thinking_phase_token=config.end_thinking_phase_token,
            )
        notes: tuple[str, ...] = ()
        if not config.mtp_eagle_one_model:
            notes = ("mtp_eagle_one_model is false (the deprecated two-model MTP-Eagle): the CPU runs the same chain",)
        return Rehearsed(decoding, notes=notes)  # the MTP layers are in the target's own checkpoint


def _token_findings(section: MtpConfig, vocab_size) -> Iterator[Finding]:
    """The thinking tokens of relaxed acceptance must be token ids of the target (else the phase never begins)."""
    r = section.relaxed_acceptance
    if r is None or not isinstance(vocab_size, int):
        return
    for key in ("begin_thinking_token", "end_thinking_token"):
        token = getattr(r, key)
        if token >= vocab_size:
            yield Finding(
                ("speculation", "relaxed_acceptance", key),
                f"{key} {token} is not a token id of the target (its vocabulary has {vocab_size}): the thinking "
                "phase would never be recognised — give the ids of the model's own begin/end thinking tokens",
                also=(("speculation", "relaxed_acceptance"),),
            )


PACK = MtpPack()
