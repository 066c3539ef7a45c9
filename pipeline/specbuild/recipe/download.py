"""`specbuild download`: fetch the model ids a recipe names into the hub cache (specbuild/hub.py resolves them)."""

from __future__ import annotations

from pathlib import Path

from specbuild.hub import checkpoint_fields, download
from specbuild.recipe.loader import load_recipe


def fetch_recipe_models(recipe_path: Path):
    """Download the model ids a recipe names that the hub cache lacks; yields one line per field."""
    recipe = load_recipe(recipe_path, check_files=False)
    for field, value in checkpoint_fields(recipe):
        found = recipe.checkpoint(value)
        if found.model_id is None:
            yield f"{field}: {value} is a folder — nothing to download"
        elif found.problem is None:
            yield f"{field}: {found.model_id} is in the hub cache ({found.path})"
        else:
            yield f"{field}: {found.model_id} downloaded to {download(found.model_id)}"
