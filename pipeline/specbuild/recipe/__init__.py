"""The recipe: typed schema (schema.py), YAML loading with positions (loader.py), rules (checks.py, files.py)."""

from specbuild.recipe.loader import load_recipe
from specbuild.recipe.schema import Recipe

__all__ = ["Recipe", "load_recipe"]
