"""Shared test setup: make the source tree importable without an install, keep torch to one thread."""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT / "pipeline") not in sys.path:
    sys.path.insert(0, str(ROOT / "pipeline"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# The suite's servers share the CPUs with the other xdist worker: no CPU is kept for a decoder (specbuild compile
# and serve default to auto; tests/serve/test_decode_cpus.py turns it on where it tests it).
os.environ.setdefault("SPECBUILD_DECODE_CPUS", "off")
# compile stores engines and repositories in the build cache (specbuild.cache.step_store): the suite's go to a folder of
# its own, removed at exit, never the user's cache
if "SPECBUILD_CACHE_DIR" not in os.environ:
    import atexit
    import shutil
    import tempfile

    os.environ["SPECBUILD_CACHE_DIR"] = _suite_cache = tempfile.mkdtemp(prefix="specbuild-test-cache-")
    atexit.register(shutil.rmtree, _suite_cache, True)
