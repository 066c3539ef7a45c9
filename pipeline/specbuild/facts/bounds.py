"""The limits of every engine and request number, defined once.

Engine and deployment sizes (recipe fields, the LLM arguments of model.yaml, what the reference cores are loaded
with) are here:
- counts and sizes are positive or non-negative integers that fit an int32: Triton's model config and TensorRT
  take int32, and so does TensorRT-LLM's executor (`SizeType32` in `cpp/include/tensorrt_llm/executor/types.h`:
  batch sizes, token counts, sequence and draft lengths) — a Python int beyond it fails only where it is used;
- floats are finite (no .inf/.nan, not even quoted). The YAML reader already refuses integers beyond int64 and
  unquoted .inf/.nan anywhere (recipe/yaml_source.py); these bound what gets past it, with pydantic's located
  messages;
- the sequence fits the model's positions (`max_seq_len` at most max_position_embeddings), a chain of drafts fits
  the sequence (`draft_len_problem`), and the cancellation period is one a request outlives
  (MAX_CANCELLATION_CHECK_PERIOD_MS).
`check` applies them to recipes, the llm-api reference core (reference/llmapi_yaml.py) to model.yaml, the recipe
schema and the method sections through the annotated types.

Request values (temperature, top_k, top_p, penalties, max_tokens) have their one definition in
`specbuild/standalone/request_checks.py`: it is copied into our python models' folders and runs in NVIDIA's
containers without specbuild, so it stays standard-library only. Both reference cores (the engine contract's and
the llm-api contract's, reference/llmapi_contract.py) refuse the same values with it.

Import-light (pydantic only): method configs can use these without importing the recipe package.
"""

from __future__ import annotations

from typing import Annotated, Any, Mapping

from pydantic import Field

INT32_MAX = 2**31 - 1
# How often a core may poll Triton for cancelled requests, at most. NVIDIA's llmapi model polls every 100 ms by
# default; a cancelled request keeps decoding (and holding its batch slot) until the next poll, so a period above a
# minute outlasts any request it could cancel — and one beyond ~9.2e12 ms stops the polling thread altogether
# (time.sleep overflows).
MAX_CANCELLATION_CHECK_PERIOD_MS = 60_000

PositiveInt32 = Annotated[int, Field(gt=0, le=INT32_MAX)]
NonNegativeInt32 = Annotated[int, Field(ge=0, le=INT32_MAX)]
PositiveFinite = Annotated[float, Field(gt=0.0, allow_inf_nan=False)]
CancellationPeriodMs = Annotated[int, Field(gt=0, le=MAX_CANCELLATION_CHECK_PERIOD_MS)]


def position_limit(hf_config: Mapping[str, Any] | None) -> int | None:
    """The positions a Hugging Face model has (config.json's max_position_embeddings); None when it does not say."""
    n = (hf_config or {}).get("max_position_embeddings")
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else None


def max_seq_len_problem(max_seq_len: int, positions: int | None, owner: str = "the model's") -> str | None:
    """Why a sequence of max_seq_len tokens cannot be served by a model with `positions` positions (None: it can).
    The phrase follows the field name: 'max_seq_len <problem>'."""
    if positions is not None and max_seq_len > positions:
        return (
            f"is {max_seq_len} but {owner} max_position_embeddings is {positions}: a sequence that long runs "
            f"past the positions the model has — lower max_seq_len to at most {positions}"
        )
    return None


def draft_len_problem(draft_len: int, max_seq_len: int) -> str | None:
    """Why a chain of draft_len drafts per step cannot be used within max_seq_len (None: it can). A step verifies
    its chain after the prompt's at least one token, so at most max_seq_len - 1 drafts ever fit."""
    if draft_len >= max_seq_len:
        return (
            f"is {draft_len} but max_seq_len is {max_seq_len}: a step can use at most {max_seq_len - 1} draft "
            f"tokens (the prompt takes at least one position) — give a draft length below {max_seq_len}"
        )
    return None
