"""The recipe: one typed schema, one layer deep. `specbuild schema` prints it as JSON Schema."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Callable, Literal, Union

from pydantic import Discriminator, Field, PrivateAttr, Tag, ValidationError, field_validator, model_validator
from pydantic.fields import FieldInfo
from pydantic_core import PydanticCustomError

from specbuild.checkpoints import hub
from specbuild.facts.bounds import NonNegativeInt32, PositiveFinite, PositiveInt32
from specbuild.recipe.adapt import AdaptSection
from specbuild.recipe.deploy import DeploySection
from specbuild.methods import METHODS, on_register
from specbuild.section import Section
from specbuild.methods.none import NoneConfig
from specbuild.runtimes import registry as runtimes
from specbuild.recipe import llm_release
from specbuild.recipe.llm_api import LlmApiSection
from specbuild.checkpoints.hub import Checkpoint

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"


def _sections() -> Any:
    """The union of the registered packs' sections, told apart by `method`."""
    return Annotated[Union[tuple(m.Config for m in METHODS.values())], Field(discriminator="method")]


# The method union and the runtime names come from their registries (specbuild.methods, specbuild.runtimes); a
# type checker, which cannot build the union, sees any method's section.
if TYPE_CHECKING:
    from specbuild.findings import Finding

    SpeculationSection = Any
else:
    SpeculationSection = _sections()
RuntimeName = Literal[runtimes.NAMES]
FlavourName = Literal[runtimes.FLAVOURS]

Fraction = Annotated[float, Field(gt=0.0, le=1.0)]
Port = Annotated[int, Field(ge=1, le=65535)]


class ModelSection(Section):
    """The target model."""

    checkpoint: Path
    """Hugging Face checkpoint folder of the target (config.json + weights), relative to the recipe file; or a model
    id with an optional revision (meta-llama/Llama-3.1-8B-Instruct@main) found in the local Hugging Face hub cache
    (HF_HUB_CACHE or HF_HOME; `specbuild download` fetches it). A folder of that name wins."""
    tokenizer: Path | None = None
    """Tokenizer folder (or model id); defaults to the checkpoint."""
    dtype: Literal["float16", "bfloat16", "float32"] = "float16"
    """Engine dtype. The reference runtime records it and computes in float32 on the CPU."""
    trust_remote_code: bool = False
    """Allow custom modelling code shipped with the checkpoint (off by default)."""


class BuildSection(Section):
    """Engine limits and build options (trtllm-build flags; the reference runtime honours the limits)."""

    max_batch_size: PositiveInt32 = 8
    """Most sequences decoded together. Keep it small for speculation (trtllm-build's default 2048 is not)."""
    max_input_len: PositiveInt32 = 512
    """Longest prompt in tokens."""
    max_seq_len: PositiveInt32 = 1024
    """Longest prompt + output in tokens (the build adds max_draft_len itself)."""
    max_num_tokens: PositiveInt32 | None = None
    """Tokens per engine step; default 8192, raised to max_batch_size * (max_draft_len + 1) when smaller."""
    max_beam_width: PositiveInt32 = 1
    """Beam search width; speculation needs 1."""
    tp_size: PositiveInt32 = 1
    """Tensor parallelism (fixed at checkpoint conversion)."""
    pp_size: PositiveInt32 = 1
    """Pipeline parallelism (fixed at checkpoint conversion; EAGLE needs 1)."""
    gemm_plugin: Literal["auto", "float16", "bfloat16", "float32", "disable"] | None = None
    """GEMM plugin dtype; default the model dtype (passed explicitly: defaults drift between versions)."""
    use_paged_context_fmha: bool = True
    """Paged context FMHA; needed for KV-cache reuse (draft-target, prompt lookup) and forced on for EAGLE."""
    kv_cache_type: Literal["paged", "continuous"] = "paged"
    """KV-cache layout."""
    tokens_per_block: PositiveInt32 = 32
    """KV-cache block size in tokens."""
    quantization: Literal["none", "fp8", "int8_weight_only", "int4_weight_only"] = "none"
    """Weight quantization at conversion (TensorRT-LLM only)."""
    workers: PositiveInt32 = 1
    """Parallel conversion/build workers (capped by the GPUs present)."""


class TritonSection(Section):
    """How the Triton model repository serves the engines."""

    streaming: bool = False
    """Decoupled models that stream tokens as they are accepted (generate_stream, gRPC stream)."""
    stream_interval: PositiveInt32 = 1
    """Streaming: a response on a request's first decoding iteration, every N-th and its last, each with the tokens
    since the one before (TensorRT-LLM LLM API's stream_interval; 1 = one response per iteration). Fewer, larger
    responses cost the server less per token. The llm-api flavour writes it into model.yaml; the reference core
    honours it; the engine path's C++ tensorrtllm backend has no such option (tensorrt-llm runtime: refused)."""
    preprocessing_instances: PositiveInt32 = 1
    """Instances of the preprocessing model."""
    postprocessing_instances: PositiveInt32 = 1
    """Instances of the postprocessing model."""
    bls_instances: PositiveInt32 = 1
    """Instances of tensorrt_llm_bls (the BLS loop is serial per instance)."""
    max_queue_delay_microseconds: NonNegativeInt32 = 0
    """Dynamic-batching queue delay."""
    max_queue_size: NonNegativeInt32 = 0
    """Requests allowed to wait (0 = unlimited)."""
    kv_cache_free_gpu_mem_fraction: Fraction = 0.9
    """GPU memory for the KV cache; split in half when draft and target share a GPU."""
    gpu_device_ids: list[NonNegativeInt32] = Field(default_factory=lambda: [0])
    """GPUs of the target engine (tp_size * pp_size of them)."""
    draft_gpu_device_ids: list[NonNegativeInt32] | None = None
    """GPUs of the draft engine (draft-target); default the target's."""
    exclude_input_in_output: bool = False
    """What a request that does not say gets: false (upstream's default) returns the prompt followed by the
    generated text; true only the generated text. Requests override it with their exclude_input_in_output input
    (draft-target and prompt-lookup core models always include the input; the BLS strips it when asked)."""
    legacy_tensor_names: bool | None = None
    """Tensor names: null (default) follows the installed tensorrtllm backend (<= 0.19: min_length, random_seed;
    0.20+: min_tokens, seed; the reference runtime: the current names); true or false forces them."""
    http_port: Port = 8000
    grpc_port: Port = 8001
    metrics_port: Port = 8002


class SamplingCheck(Section):
    """Distribution check at temperature > 0 (reference runtime): speculative vs baseline first tokens."""

    temperature: PositiveFinite = 1.0
    top_k: NonNegativeInt32 = 0
    top_p: Fraction = 1.0
    trials: PositiveInt32 = 200
    """Seeds per deployment."""
    tokens: PositiveInt32 = 2
    """Leading generated tokens whose joint distribution is compared."""
    significance: Fraction = 0.001
    """The test fails when p < significance."""


class DisableBelowSection(Section):
    """Turn speculation off for good when it stops paying: TensorRT-LLM's acceptance-rate gate
    (speculative_config.acceptance_rate_threshold / acceptance_rate_window_size, LLM API 1.3; rules:
    specbuild/recipe/adaptive.py)."""

    acceptance_rate: Fraction
    """Accepted / drafted tokens below which speculation is switched off, in (0, 1]: once the average of the last
    `window` speculating iterations' rates (each the batch's accepted over drafted tokens) drops below it, the
    server decodes without drafts until it restarts."""
    window: Annotated[int, Field(ge=1, le=1_000_000)]
    """How many iterations with drafts the rolling average spans (none is judged before the first `window`)."""


class AdaptiveSection(Section):
    """Adaptive speculation under load: the draft length follows the number of requests in flight, as TensorRT-LLM's
    LLM API does with speculative_config.draft_len_schedule, and speculation can switch itself off on poor
    acceptance (disable_below) (rules: specbuild/recipe/adaptive.py)."""

    draft_len_schedule: dict[int, int] | None = None
    """Batch size -> draft length from that many requests in flight on, e.g. {1: 4, 4: 2, 8: 0}: 4 drafts for 1-3
    requests, 2 for 4-7, none (plain decoding) from 8. Key 1 gives the method's full length; for token trees the
    length caps the node count (the first N choices, in their order). `specbuild validate --write-tuned-recipe`
    writes one from the measured sweep."""
    disable_below: DisableBelowSection | None = None
    """{acceptance_rate: R, window: N}: switch speculation off for good once the rolling acceptance rate over the
    last N speculating iterations drops below R (LLM-API flavour, TensorRT-LLM 1.3; the engine path has no such
    switch)."""


class ChatMessage(Section):
    """One turn of a chat prompt (OpenAI style)."""

    role: Annotated[str, Field(min_length=1)]
    """system, user, assistant, or another role the target's chat template knows."""
    content: str


class ChatPrompt(Section):
    """A prompt given as chat messages, rendered by the target's chat template (validation.prompt_format)."""

    messages: Annotated[list[ChatMessage], Field(min_length=1)]
    id: str | None = None
    category: str | None = None
    """What kind of traffic it is (acceptance is reported and gated per category); default chat."""
    kind: str | None = None
    """The older name of category."""


# Which member of a union a value is read as, chosen by its shape, so that a wrong value gets that member's error
# only (the tags, not field names, drop out of the located path)
PromptItem = Annotated[
    Union[Annotated[str, Tag("text-prompt")], Annotated[ChatPrompt, Tag("chat-prompt")]],
    Discriminator(lambda v: "chat-prompt" if isinstance(v, (dict, ChatPrompt)) else "text-prompt"),
]
Prompts = Annotated[
    Union[Annotated[Path, Tag("prompt-file")], Annotated[list[PromptItem], Tag("prompt-list")]],
    Discriminator(lambda v: "prompt-list" if isinstance(v, list) else "prompt-file"),
]


class RegressionSection(Section):
    """Tolerances of `specbuild validate --against OLD/report.json` (a comparison with an earlier run)."""

    max_acceptance_drop: Annotated[float, Field(ge=0.0, lt=1.0)] = 0.05
    """A category fails when all of the bootstrap interval of its AL change, (new - old) / old, lies below
    -max_acceptance_drop."""
    max_speedup_drop: Annotated[float, Field(ge=0.0, lt=1.0)] = 0.1
    """A concurrency level fails when every new round's speedup is below every earlier round's by more than this
    share (judged only when the rounds agree)."""


class SpikeSection(Section):
    """The spike-and-recovery check (recipes whose adaptive.draft_len_schedule turns drafting off): acceptance at
    concurrency 1, a spike past the schedule's off point, then back at concurrency 1 until acceptance is back."""

    prompts: Annotated[int, Field(ge=2, le=64)] = 4
    """Requests before the spike (the first prompts of the set, one at a time); recovery is judged over windows of
    as many requests, the same prompts in the same order."""
    concurrency: PositiveInt32 | None = None
    """Requests in flight during the spike (default: twice the schedule's off point, at most
    build.max_batch_size, at least the off point)."""
    requests: Annotated[int, Field(ge=1, le=10000)] = 16
    """Requests sent during the spike (at least `concurrency`)."""
    recovery_requests: Annotated[int, Field(ge=2, le=10000)] = 12
    """At most this many requests at concurrency 1 after the spike for acceptance to be back; fails otherwise."""
    max_acceptance_drop: Annotated[float, Field(ge=0.0, lt=1.0)] | None = None
    """Acceptance is back when a window's AL is at least (1 - this) x the pre-spike AL. None: when the window's
    95% bootstrap interval reaches the pre-spike interval."""


AcceptanceLength = Annotated[float, Field(ge=1.0, allow_inf_nan=False)]
DEFAULT_CATEGORY = "default"  # min_acceptance_length's key for the categories it does not name
# a number, or one per category; chosen by the value's shape (the tags drop out of the located path)
AcceptanceGate = Annotated[
    Union[
        Annotated[AcceptanceLength, Tag("whole-set")],
        Annotated[dict[Annotated[str, Field(min_length=1)], AcceptanceLength], Tag("per-category")],
    ],
    Discriminator(lambda v: "per-category" if isinstance(v, dict) else "whole-set"),
]


class ValidationSection(Section):
    """What `specbuild validate` checks and the gates that decide its exit code."""

    prompts: Prompts | None = None
    """A dataset file (.txt one prompt per line; .jsonl one record per line, .json an array of records: text
    {prompt}, OpenAI chat {messages}, ShareGPT {conversations}, or OpenAI request bodies as request logs hold them,
    each with an optional id and category) or an inline list (text, or {messages: [{role, content}, ...]});
    default the bundled multi-category set (writing, coding, math, extraction, summarising, multi-turn chat,
    long-context)."""
    prompt_format: Literal["auto", "chat", "raw"] = "auto"
    """How prompts reach the target. auto: through the target's chat template when its tokenizer has one
    (model.tokenizer, else the checkpoint: chat_template.jinja or tokenizer_config.json), a text prompt as one user
    message; as they are otherwise. chat: always through the template (refused without one). raw: as they are (chat
    messages are then refused). The report says which was used."""
    max_tokens: PositiveInt32 = 32
    """Tokens generated per request."""
    concurrency: list[PositiveInt32] = Field(default_factory=lambda: [1, 2, 4])
    """Concurrency levels of the performance sweep."""
    require_lossless: bool = True
    """Greedy output must equal the baseline's token for token (builds and serves a baseline)."""
    min_acceptance_length: AcceptanceGate | None = None
    """Gate: mean acceptance length (bonus token included, pooled per verification step) at least this, judged on
    its bootstrap interval over the requests. A number gates the whole prompt set; a mapping gates each category,
    e.g. {default: 2.0, coding: 2.5} (default: every category the mapping does not name; without it those are not
    gated)."""

    @field_validator("min_acceptance_length", mode="wrap")
    @classmethod
    def _gate_problem_at_the_field(cls, value, handler):
        """A bad gate is reported at validation.min_acceptance_length (a category's key in the message), not at
        the union member pydantic tried."""
        try:
            return handler(value)
        except ValidationError as e:
            err = e.errors()[0]
            keys = [str(p) for p in err["loc"][1:]]
            prefix = f"category {keys[0]!r}: " if keys and isinstance(value, dict) else ""
            raise PydanticCustomError(err["type"], prefix + err["msg"].replace("{", "(").replace("}", ")")) from None

    min_speedup: PositiveFinite | None = None
    """Gate: speculative / baseline output tokens per second at concurrency 1 at least this (every round of the
    sweep must agree; see allow_inconclusive)."""
    performance_rounds: Annotated[int, Field(ge=2, le=1000)] = 3
    """Rounds per concurrency level of the performance sweep: the speculative and the baseline deployment take
    turns (ABBA order), and each round gives one speedup; the report shows their median, min and max."""
    allow_inconclusive: bool = False
    """A min_speedup gate the sweep cannot decide (the rounds disagree about it, or other processes kept this
    machine busy) passes with a warning instead of failing the run."""
    sampling: SamplingCheck | None = None
    """Also compare sampled distributions (reference runtime; not for greedy-only methods)."""
    load_clients: PositiveInt32 = 4
    """Concurrent clients of the load check."""
    load_seconds: PositiveFinite = 5.0
    """Duration of the load check."""
    request_timeout_s: PositiveFinite = 120.0
    """Per-request client timeout."""
    regression: RegressionSection = Field(default_factory=RegressionSection)
    """Tolerances of a comparison with an earlier report (validate --against)."""
    spike: SpikeSection = Field(default_factory=SpikeSection)
    """The spike-and-recovery check (run when adaptive.draft_len_schedule turns drafting off)."""


class Recipe(Section):
    """A specbuild recipe: what to build, how to serve it, and how to validate it."""

    name: Annotated[str, Field(pattern=NAME_PATTERN)]
    """Names the output folders engines/<name> and triton_repo/<name>."""
    runtime: RuntimeName = runtimes.DEFAULT
    """tensorrt-llm: NVIDIA GPUs through TensorRT-LLM; reference: specbuild's CPU PyTorch runtime."""
    flavour: FlavourName = runtimes.DEFAULT_FLAVOUR
    """engine: trtllm-build engines and the tensorrtllm backend (TensorRT-LLM 0.17 - 1.3.0rc20); llm-api: the
    PyTorch backend's Python model configured by model.yaml (TensorRT-LLM 1.0+, the only one after mid-2026)."""
    model: ModelSection
    speculation: SpeculationSection = Field(default_factory=NoneConfig)
    build: BuildSection = Field(default_factory=BuildSection)
    triton: TritonSection = Field(default_factory=TritonSection)
    validation: ValidationSection = Field(default_factory=ValidationSection)
    adaptive: AdaptiveSection = Field(default_factory=AdaptiveSection)
    """Adaptive speculation: the draft length per number of requests in flight (default: fixed)."""
    llm_api: LlmApiSection = Field(default_factory=LlmApiSection)
    """Settings of the llm-api flavour (model.yaml beyond the shared sections)."""
    deploy: DeploySection = Field(default_factory=DeploySection)
    """Deployment bundle beyond one machine (Kubernetes, Slurm), written next to the repository."""
    adapt: AdaptSection | None = None
    """Adapt the draft to your traffic before the engines (specbuild adapt): compile ships the new head only when
    it measurably beats the old one on held-out traffic (docs/adapt.md). Absent: the head is used as it is."""

    _source: Path | None = PrivateAttr(default=None)
    _checkpoints: dict = PrivateAttr(default_factory=dict)
    _notes: list = PrivateAttr(default_factory=list)
    _warnings: list = PrivateAttr(default_factory=list)

    @property
    def source(self) -> Path | None:
        """The recipe file this was loaded from (None when built in code)."""
        return self._source

    @property
    def base_dir(self) -> Path:
        return self._source.parent if self._source is not None else Path.cwd()

    def resolve(self, path: Path | str) -> Path:
        """A recipe path made absolute: relative paths are relative to the recipe file's folder."""
        p = Path(path).expanduser()
        return p if p.is_absolute() else (self.base_dir / p).resolve()

    def checkpoint(self, value: Path | str) -> Checkpoint:
        """What a checkpoint field names: a folder relative to the recipe file, or a model id resolved through
        the hub cache (specbuild.checkpoints.hub); resolved once per value."""
        key = str(value)
        if key not in self._checkpoints:
            self._checkpoints[key] = hub.resolve(value, self.base_dir)
        return self._checkpoints[key]

    def checkpoint_dir(self, value: Path | str) -> Path:
        """The folder to read for a checkpoint field (a hub snapshot folder for a model id)."""
        return self.checkpoint(value).path

    @model_validator(mode="after")
    def _choose_llm_release(self) -> Recipe:
        """Fill llm_api.release, when not written, from where the repository will run (specbuild.recipe.llm_release;
        the installed TensorRT-LLM joins when the recipe is resolved: with_installed_trtllm)."""
        if self.llm_api.release is None:
            choice = llm_release.choose(self.deploy.image, None)
            self.llm_api.release = choice.line  # type: ignore[assignment]  (a line of RELEASES)
            self.llm_api._chosen = choice
        return self

    @property
    def llm_release(self) -> llm_release.ReleaseChoice:
        """The release line model.yaml is written for, where it was taken from, and why."""
        chosen = self.llm_api._chosen
        if chosen is not None and chosen.line == self.llm_api.release:
            return chosen
        return llm_release.choose(self.deploy.image, self.llm_api.release)  # written (or changed since)

    @property
    def llm_release_findings(self) -> list[Finding]:
        """Why the places that name the llm-api release refuse this recipe (specbuild.recipe.llm_release.findings)."""
        chosen = self.llm_release
        written = None if chosen is self.llm_api._chosen else self.llm_api.release
        return llm_release.findings(self.deploy.image, written, chosen)

    def with_installed_trtllm(self, installed: Callable[[], str | None]) -> Recipe:
        """This recipe, or a copy whose release is the installed TensorRT-LLM's (`installed()`: its version, None
        without one) when the llm-api recipe names nowhere it will run (no deploy.image, no llm_api.release)."""
        chosen = self.llm_api._chosen
        if self.flavour != "llm-api" or chosen is None or chosen.source != llm_release.DEFAULT:
            return self
        if chosen.line != self.llm_api.release:
            return self
        version = installed()
        if not version:
            return self
        choice = llm_release.choose(self.deploy.image, None, version)
        section = self.llm_api.model_copy(update={"release": choice.line})
        section._chosen = choice
        return self.model_copy(update={"llm_api": section})

    @property
    def notes(self) -> list[str]:
        """What `check` could not check here, and why (printed after its verdict)."""
        return self._notes

    @property
    def warnings(self) -> list:
        """Located problems that refuse nothing (`check` prints them; the exit code stays 0)."""
        return self._warnings

    @property
    def model_dir(self) -> Path:
        return self.checkpoint_dir(self.model.checkpoint)

    @property
    def tokenizer_dir(self) -> Path:
        return self.checkpoint_dir(self.model.tokenizer or self.model.checkpoint)

    @property
    def gemm_plugin(self) -> str:
        return self.build.gemm_plugin or self.model.dtype

    @property
    def draft_gpu_device_ids(self) -> list[int]:
        return self.triton.draft_gpu_device_ids or list(self.triton.gpu_device_ids)

    @property
    def builds_baseline(self) -> bool:
        """A baseline (the target without speculation) is built for the lossless check and speedups."""
        v = self.validation
        return not isinstance(self.speculation, NoneConfig) and (v.require_lossless or v.min_speedup is not None)


def _with_registered(_pack) -> None:
    """A pack registered after import (the tests' fixture pack) joins the recipe's union of sections."""
    Recipe.model_fields["speculation"] = FieldInfo.from_annotated_attribute(
        _sections(), Field(default_factory=NoneConfig)
    )
    Recipe.model_rebuild(force=True)


on_register(_with_registered)
