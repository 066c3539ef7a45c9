"""DIR/recipe.yaml: the recipe that deploys the new head — the original file, comments and all, with
speculation.checkpoint pointing at DIR/head, every other local path made absolute (so the file works from DIR),
and without its `adapt:` section (a compile of it builds the adapted deployment; it does not adapt again)."""

from __future__ import annotations

import io
from pathlib import Path

from specbuild.checkpoints.hub import checkpoint_fields
from specbuild.recipe.schema import Recipe

HEADER = (
    "# written by `specbuild adapt` from {source}: speculation.checkpoint is the adapted head (adapt.json says why it\n"
    "# shipped); local paths are absolute so that this file works where it is; the adapt section is left out.\n"
)


def _yaml():
    from ruamel.yaml import YAML

    yaml = YAML(typ="rt")
    yaml.preserve_quotes = True
    yaml.width = 120
    return yaml


def adapted_recipe_text(recipe: Recipe, head: Path) -> str:
    """The recipe's own text with the head replaced (module docstring). A recipe made in code (no file) is dumped
    from its values."""
    yaml = _yaml()
    if recipe.source is not None and recipe.source.is_file():
        data = yaml.load(recipe.source.read_text())
    else:
        data = recipe.model_dump(mode="json", exclude_unset=True)
    for field, value in checkpoint_fields(recipe):
        section, key = field.split(".")
        if field == "speculation.checkpoint":
            data[section][key] = str(Path(head).absolute())
            continue
        found = recipe.checkpoint(value)
        if found.model_id is None:  # a folder: absolute; a hub id stays as written
            data[section][key] = str(found.path)
    prompts = recipe.validation.prompts
    if prompts is not None and not isinstance(prompts, list) and "validation" in data:
        data["validation"]["prompts"] = str(recipe.resolve(prompts))
    data.pop("adapt", None)
    buf = io.StringIO()
    yaml.dump(data, buf)
    return HEADER.format(source=recipe.source or "a recipe made in code") + buf.getvalue()
