"""specbuild.serve.server_log: load errors read from a real tritonserver log, in plain words."""

from __future__ import annotations

import textwrap

from specbuild.serve import server_log


def test_log_parser_on_a_real_log_excerpt():
    # lines as tritonserver 2.51 writes them (escaped newlines inside the quoted message)
    log = textwrap.dedent("""\
        I1129 16:03:44.864016 9439 model_lifecycle.cc:472] "loading: core:1"
        E1129 16:03:44.864000 9439 model_lifecycle.cc:642] "failed to load 'core' version 1: Internal: ModuleNotFoundError: No module named 'specbuild'\\n\\nAt:\\n  /r/core/1/model.py(6): initialize\\n"
        I1129 16:03:44.942813 9439 server.cc:674]
        +-------+---------+-------------------------------------------------------------+
        | Model | Version | Status                                                      |
        +-------+---------+-------------------------------------------------------------+
        | core  | 1       | UNAVAILABLE: Internal: ModuleNotFoundError: No module named |
        | trt   | 1       | UNAVAILABLE: Invalid argument: unable to find backend library for backend 'tensorrtllm' |
        | pre   | 1       | READY                                                       |
        +-------+---------+-------------------------------------------------------------+
    """)
    errors = server_log.load_errors_from_log(log)
    assert set(errors) == {"core", "trt"}
    assert server_log.plain_reason(errors["core"]) == "Internal: ModuleNotFoundError: No module named 'specbuild'"
    assert "tensorrtllm" in errors["trt"]
