"""Fixtures of the validation-suite tests: the toy tokenizer and the toy deployments served by a real
tritonserver (nvidia-pytriton's), started once per session: a speculative one, its baseline, and a broken
speculative one (a wrong token at position 5, and temperature ignored)."""

from __future__ import annotations

import pytest
from validate_helpers import core_parameters, toy_recipe
from validate_toy.repo import write_toy_repo
from validate_toy.tokenizer import write_toy_tokenizer


@pytest.fixture(scope="session")
def toy_tokenizer(tmp_path_factory):
    return write_toy_tokenizer(tmp_path_factory.mktemp("toy-tokenizer"))


@pytest.fixture(scope="session")
def toy_servers(tmp_path_factory, toy_tokenizer):
    """{"target", "baseline", "broken"}: running TritonServer objects."""
    from contextlib import ExitStack

    from specbuild.serve import TritonServer

    params = core_parameters(toy_recipe(toy_tokenizer))
    root = tmp_path_factory.mktemp("toy-repos")
    repos = {
        "target": write_toy_repo(root / "target", mode="speculative", core_parameters=params),
        "baseline": write_toy_repo(root / "baseline", mode="baseline"),
        "broken": write_toy_repo(root / "broken", mode="speculative", broken="tokens,sampling", core_parameters=params),
    }
    with ExitStack() as stack:
        servers = {}
        for name, repo in repos.items():
            server = TritonServer(repo, log_path=root / f"{name}.log", exit_timeout_s=1)
            stack.enter_context(server)
            servers[name] = server
        yield servers


WEAK_ON = "def "  # the coding prompts of the bundled set hold it, the others do not


@pytest.fixture(scope="session")
def weak_head_server(tmp_path_factory, toy_tokenizer):
    """A speculative toy deployment whose head is good on every category but coding (every draft of a prompt
    holding WEAK_ON is rejected): a weaker head than toy_servers' target, on the same target model."""
    from specbuild.serve import TritonServer

    params = core_parameters(toy_recipe(toy_tokenizer))
    root = tmp_path_factory.mktemp("toy-weak")
    repo = write_toy_repo(root / "weak", mode="speculative", core_parameters=params, weak_on=WEAK_ON)
    with TritonServer(repo, log_path=root / "weak.log", exit_timeout_s=1) as server:
        yield server
