"""Training precision: bf16 autocast only where the CPU has native bf16; recorded and honoured on resume."""

from __future__ import annotations

import pytest
import torch
from click.testing import CliRunner

from specbuild.errors import UserError
from specbuild.zoo import precision


@pytest.mark.parametrize("native, expected", [(True, precision.BFLOAT16), (False, precision.FLOAT32)])
def test_auto_follows_native_bf16(monkeypatch, native, expected):
    monkeypatch.setattr(precision, "has_native_bf16", lambda: native)
    assert precision.resolve("auto") == expected
    # an explicit choice is kept whatever the CPU
    assert precision.resolve(precision.FLOAT32) == precision.FLOAT32
    assert precision.resolve(precision.BFLOAT16) == precision.BFLOAT16


def test_unknown_precision_is_a_user_error_naming_it():
    with pytest.raises(UserError, match="'float16' is not one of auto, bfloat16, float32"):
        precision.resolve("float16")


def test_cli_rejects_unknown_precision_with_exit_2():
    from specbuild.zoo.__main__ import cli

    result = CliRunner().invoke(cli, ["build", "--profile", "micro", "--out", "x", "--precision", "fp8"])
    assert result.exit_code == 2 and "fp8" in result.output


@pytest.mark.parametrize("name, dtype", [(precision.BFLOAT16, torch.bfloat16), (precision.FLOAT32, torch.float32)])
def test_autocast_computes_in_that_precision(name, dtype):
    layer = torch.nn.Linear(4, 4)
    with precision.autocast(name):
        assert layer(torch.ones(1, 4)).dtype == dtype


@pytest.mark.parametrize(
    "record, expected",
    [
        ({"precision": "float32"}, precision.FLOAT32),
        ({"training_precision": precision.DESCRIPTIONS[precision.FLOAT32]}, precision.FLOAT32),
        ({"training_precision": precision.DESCRIPTIONS[precision.BFLOAT16]}, precision.BFLOAT16),
        ({}, precision.BFLOAT16),  # builds from before the choice existed trained under bf16 autocast
    ],
)
def test_precision_of_an_earlier_build(record, expected):
    assert precision.of_record(record) == expected


def test_shipped_tiny_zoo_reads_as_trained_under_bf16():
    """The committed zoo predates the `precision` field: its recorded text must still map to bf16, so a rebuild
    with --resume-from checkpoints/tiny reuses its stages only at that precision."""
    from specbuild.zoo import COMMITTED, manifest

    recorded = manifest.read(COMMITTED["tiny"])
    assert recorded["training_precision"] == precision.DESCRIPTIONS[precision.BFLOAT16]
    assert precision.of_record(recorded) == precision.BFLOAT16
