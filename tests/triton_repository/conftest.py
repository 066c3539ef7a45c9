"""Fixtures of the Triton repository tests (helpers live in repo_helpers.py: a conftest is not importable by
name when several test folders have one)."""

from __future__ import annotations

import pytest

from specbuild.plan import Layout


@pytest.fixture
def layout_for(tmp_path):
    def make(recipe) -> Layout:
        return Layout(tmp_path / "engines", tmp_path / "triton_repo", tmp_path / "reports", recipe.name)

    return make
