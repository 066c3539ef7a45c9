"""A command resolves its recipe once (specbuild.runtimes.build.resolve_build, called where specbuild.load loads it)
and hands the `Build` down: `runtime_for` and `describe` are each called once per command, however many stages
need the runtime or the description."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest

from specbuild import methods, runtimes
from specbuild.cli import main
from specbuild.runtimes import REGISTRY, get_runtime

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "tests" / "recipes" / "demo_tiny.yaml"
COUNTED = {"runtime_for": runtimes, "describe": methods}


@pytest.fixture
def calls() -> dict[str, int]:
    """How often each of runtime_for and describe runs, by their code objects (however a module bound them)."""
    codes = {getattr(home, name).__code__: name for name, home in COUNTED.items()}
    counted = dict.fromkeys(COUNTED, 0)

    def profile(frame, event, arg):
        if event == "call" and frame.f_code in codes:
            counted[codes[frame.f_code]] += 1

    threading.setprofile(profile)
    sys.setprofile(profile)
    try:
        yield counted
    finally:
        sys.setprofile(None)
        threading.setprofile(None)


TRTLLM = ROOT / "recipes" / "tensorrt-llm"
# What still describes the recipe itself: repository/engine/launch.py's launch_script calls params.launch(recipe,
# role) without the spec (the engine flavour's launch script, which the tensorrt-llm runtime's repository and bundle
# carry; issue #31)


@pytest.mark.parametrize(
    "argv",
    [
        ["check", str(TINY)],
        ["check", "--json", str(TINY)],
        ["check", str(TRTLLM / "eagle.yaml")],
        ["plan", str(TINY)],
        ["plan", "--json", str(TINY)],
        ["plan", str(TRTLLM / "llmapi_eagle3.yaml")],
        ["plan", str(TRTLLM / "draft_target.yaml")],
        ["compile", "--render-only", "--json", str(TINY)],
        ["compile", "--render-only", str(ROOT / "recipes" / "reference" / "draft_target.yaml")],
        ["compile", "--render-only", str(TRTLLM / "llmapi_eagle3.yaml")],
        ["compile", "--render-only", str(TRTLLM / "eagle.yaml")],
    ],
)
def test_a_command_resolves_its_recipe_once(argv, calls, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 0, capsys.readouterr().err
    assert calls == {"runtime_for": 1, "describe": 1}


def test_validate_resolves_its_recipe_once(calls, tmp_path, monkeypatch, capsys):
    """validate against a port nothing listens on: refused (exit 2) once the suite asks the server, after the
    suite's context has been made from the resolved recipe."""
    monkeypatch.chdir(tmp_path)
    assert main(["validate", str(TINY), "--url", "127.0.0.1:9", "--checks", "health"]) == 2
    assert calls == {"runtime_for": 1, "describe": 1}


@pytest.mark.parametrize("argv", [["doctor", "--recipe", str(TRTLLM / "draft_target.yaml")], ["download", str(TINY)]])
def test_doctor_and_download_resolve_their_recipe_once(argv, calls, tmp_path, monkeypatch):
    """doctor exits 2 on a machine without the GPU path; either way it checked the recipe's needs."""
    monkeypatch.chdir(tmp_path)
    assert main(argv) in (0, 2)
    assert calls == {"runtime_for": 1, "describe": 1}


@pytest.mark.parametrize("key", sorted(REGISTRY))
def test_each_runtime_says_the_flavour_it_is_registered_under(key):
    """specbuild.deploy.kind reads the recipe's flavour as its runtime's."""
    name, flavour = key
    assert (get_runtime(name, flavour).name, get_runtime(name, flavour).flavour) == key
