"""A loaded reference engine: its config, limits, decoding options and target model."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from specbuild.facts.engine_facts import EngineLimits, SpecMode, limits_from_config
from specbuild.reference.decoder.model import CausalLM


@dataclass
class Engine:
    path: Path
    config: dict
    decoding: dict  # specbuild.decoding with the load-time overrides applied
    folders: dict[str, Path]  # sub-folders by name: model, tokenizer, medusa, eagle, ...
    model: CausalLM
    compute_dtype: str = "float32"
    limits_override: EngineLimits | None = None  # an engine made in memory (the llm-api rehearsal: no engine folder)

    @property
    def role(self) -> str:
        return self.config["specbuild"]["role"]

    @property
    def method(self) -> str:
        """The recipe's method (a draft or baseline engine records the method of its deployment)."""
        return self.config["specbuild"]["method"]

    @property
    def mode(self) -> SpecMode:
        return limits_from_config(self.config).speculative_decoding_mode

    @property
    def decoding_method(self) -> str:
        """The method this engine decodes with in-process: the recipe's method for a target (`none` decodes
        autoregressively), autoregressive for a draft or baseline engine."""
        return self.method if self.role == "target" else "autoregressive"

    @property
    def accepts_external_drafts(self) -> bool:
        return self.mode == SpecMode.DRAFT_TOKENS_EXTERNAL

    @property
    def limits(self) -> EngineLimits:
        """The engine's limits, as its config.json records them (a request may use requested_max_seq_len)."""
        if self.limits_override is not None:
            return self.limits_override
        return limits_from_config(self.config)

    @property
    def vocab_size(self) -> int:
        return self.model.vocab_size

    @property
    def tokenizer_dir(self) -> Path:
        return self.folders.get("tokenizer", self.folders["model"])
