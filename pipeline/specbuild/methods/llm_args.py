"""TensorRT-LLM's decoding configs as the CPU rehearsal of the llm-api flavour validates them
(tensorrt_llm/llmapi/llm_args.py, main after 1.3.0rc3: `StrictBaseModel`, `DecodingBaseConfig`): unknown keys are
errors, as they are for the LLM. Each pack that the rehearsal serves extends `DecodingBaseConfig` with its own config
(its `rehearsal_config`); specbuild/reference/llmapi_yaml.py reads the rest of model.yaml with `Strict` too."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from specbuild.facts.bounds import NonNegativeInt32


class Strict(BaseModel):
    """TensorRT-LLM's StrictBaseModel: unknown keys are errors."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class DecodingBaseConfig(Strict):
    """DecodingBaseConfig fields specbuild writes (max_draft_len, the draft length per batch size:
    draft_len_schedule and max_concurrency; the acceptance-rate switch: acceptance_rate_threshold in [0, 1] and
    acceptance_rate_window_size, llm_args.py@0004396)."""

    max_draft_len: NonNegativeInt32 | None = None
    draft_len_schedule: dict[int, int] | None = None
    max_concurrency: NonNegativeInt32 | None = None
    acceptance_rate_threshold: Annotated[float, Field(ge=0.0, le=1.0)] | None = None
    acceptance_rate_window_size: NonNegativeInt32 | None = None


class WithDraftModel(DecodingBaseConfig):
    """A decoding config that names a draft model or head."""

    speculative_model: str | None = None
    speculative_model_dir: str | None = None  # the only name in <= 1.1; an alias from 1.2

    @property
    def draft_model(self) -> str | None:
        return self.speculative_model or self.speculative_model_dir
