"""What the tree drafters compute in (reference/decoder/drafters.py `drafter_precision`, `draft_dtype` in the engine's
decoding options) and the int8 matmul behind `draft_dtype: int8` (lean/linear.py `Int8Linear`, `drafting_linear`).
That int8 drafting is lossless on the tiny zoo is tests/reference/test_lean_methods.py's."""

from __future__ import annotations

import pytest
import torch

from specbuild.errors import UserError
from specbuild.reference.decoder import drafters
from specbuild.reference.decoder.drafters import DraftPrecision, drafter_precision
from specbuild.reference.decoder.lean import linear

needs_int8 = pytest.mark.skipif(not linear.int8_available(), reason="this PyTorch has no fbgemm int8 engine")


@needs_int8
@pytest.mark.parametrize("shape", [(4096, 256), (768, 256)])
def test_int8_linear_is_the_float_matmul_to_about_a_percent(shape):
    torch.manual_seed(0)
    weight, bias = torch.randn(shape) * 0.05, torch.randn(shape[0])
    x = torch.randn(2, 5, shape[1])
    want = torch.nn.functional.linear(x, weight, bias)
    got = linear.Int8Linear(weight, bias)(x)
    assert got.shape == want.shape and got.dtype == torch.float32
    error = (got - want).abs().max().item()
    assert error <= 0.02 * want.abs().max().item(), error
    assert error > 0  # it is int8 arithmetic, not the float matmul under another name


@needs_int8
def test_drafting_linear_takes_int8_only_where_asked_and_worth_it(monkeypatch):
    big, small = torch.randn(linear.INT8_MIN_WEIGHTS // 100 + 1, 100), torch.randn(256, 256)
    assert isinstance(linear.drafting_linear(big, int8=True), linear.Int8Linear)
    assert isinstance(linear.drafting_linear(big), linear.Linear)
    assert isinstance(linear.drafting_linear(small, int8=True), linear.Linear)  # 65k weights: float32 is as fast
    assert isinstance(linear.drafting_linear(big.bfloat16(), int8=True), linear.Linear)
    monkeypatch.setattr(linear, "int8_available", lambda: False)
    assert isinstance(linear.drafting_linear(big, int8=True), linear.Linear)


@pytest.mark.parametrize(
    "bf16, int8, lean, want",
    [
        (True, True, True, DraftPrecision(torch.bfloat16)),
        (False, True, True, DraftPrecision(torch.float32, int8=True)),
        (False, False, True, DraftPrecision(torch.float32)),
        (False, True, False, DraftPrecision(torch.float32)),  # transformers' modules: no int8
        (True, True, False, DraftPrecision(torch.float32)),  # hidden 256 < 512: bf16 does not pay on that path
    ],
)
def test_auto_follows_the_cpu_and_the_path(monkeypatch, bf16, int8, lean, want):
    monkeypatch.setattr(drafters, "has_native_bf16", lambda: bf16)  # where drafter_precision looks it up
    monkeypatch.setattr(linear, "int8_available", lambda: int8)
    assert drafter_precision({}, torch.float32, "engine", 256, lean=lean) == want
    assert drafter_precision({"draft_dtype": "auto"}, torch.float16, "engine", 256, lean=lean) == (torch.float16, False)


def test_a_named_dtype_is_kept(monkeypatch):
    monkeypatch.setattr(linear, "int8_available", lambda: True)
    assert drafter_precision({"draft_dtype": "float32"}, torch.float32, "e", 256, lean=True) == (torch.float32, False)
    assert drafter_precision({"draft_dtype": "bfloat16"}, torch.float32, "e", 256) == (torch.bfloat16, False)
    assert drafter_precision({"draft_dtype": "int8"}, torch.float32, "e", 256, lean=True) == (torch.float32, True)


def test_bad_or_impossible_choices_name_the_field(monkeypatch):
    where = "engines/target/config.json specbuild.decoding"
    with pytest.raises(UserError, match=r"decoding\.draft_dtype='int4': use auto, float32, bfloat16, float16 or int8"):
        drafter_precision({"draft_dtype": "int4"}, torch.float32, where, 256, lean=True)
    with pytest.raises(UserError, match=r"draft_dtype=int8: int8 drafting runs on the lean forward only"):
        drafter_precision({"draft_dtype": "int8"}, torch.float32, where, 256, lean=False)
    monkeypatch.setattr(linear, "int8_available", lambda: False)
    with pytest.raises(UserError, match=r"draft_dtype=int8: this PyTorch has no fbgemm int8 engine"):
        drafter_precision({"draft_dtype": "int8"}, torch.float32, where, 256, lean=True)
