"""Numbers a recipe field may hold: positive/non-negative integers that fit an int32 (Triton's model config and
TensorRT take int32: instance counts, batch sizes, queue sizes, token limits) and finite floats (no .inf/.nan,
not even quoted). The YAML reader already refuses integers beyond int64 and unquoted .inf/.nan anywhere
(recipe/yaml_source.py); these bound what gets past it, with pydantic's located messages.
Import-light: method configs can use them without importing the recipe package."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

INT32_MAX = 2**31 - 1

PositiveInt32 = Annotated[int, Field(gt=0, le=INT32_MAX)]
NonNegativeInt32 = Annotated[int, Field(ge=0, le=INT32_MAX)]
PositiveFinite = Annotated[float, Field(gt=0.0, allow_inf_nan=False)]
