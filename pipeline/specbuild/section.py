"""What every recipe section is: a pydantic model whose unknown keys are errors (the loader adds a "did you mean").
The method sections (specbuild/methods/), the recipe's own (specbuild/recipe/schema.py) and the deploy and llm_api
sections are all built on it."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    """A recipe section: unknown keys are errors (the loader adds a "did you mean")."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)
