"""Tests of specbuild.serve (helpers live in serve_helpers.py: a conftest is not importable by name when several
test folders have one). The toy repositories of the validation tests are used here too."""

from __future__ import annotations

import sys
from pathlib import Path

VALIDATE_TESTS = Path(__file__).resolve().parents[1] / "validate"
if str(VALIDATE_TESTS) not in sys.path:
    sys.path.insert(0, str(VALIDATE_TESTS))
