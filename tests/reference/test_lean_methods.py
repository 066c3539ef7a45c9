"""Every decoding method gives the same greedy tokens with the lean forward and with transformers' forward.

On the shipped tiny zoo (trained target, draft, Medusa heads, EAGLE-1 head, so drafts are really accepted), each
method runs the same requests through two engines loaded from one engine folder: one with the default lean path
(target, draft model, EAGLE head on `specbuild.reference.decoder.lean`, Medusa heads stacked), one with
SPECBUILD_REFERENCE_FORWARD=transformers (transformers' decoder and the heads' own modules). Outputs must be
identical token for token, at batch 1 and with requests joining a batch of 4, and equal to autoregressive decoding.
"""

from __future__ import annotations

import inspect
import json

import pytest
from zoo_engines import METHODS as SHARED_METHODS
from zoo_engines import build_draft, build_target

LIMITS = dict(max_batch_size=4, max_input_len=96, max_seq_len=160, max_num_tokens=2048)
METHODS = {"autoregressive": ("none", {}, 0, {}, {}), **SHARED_METHODS}


@pytest.fixture(scope="module")
def zoo_engines(shipped_tiny, tmp_path_factory):
    """label -> {"lean": Engine, "transformers": Engine} (plus "draft"), each pair loaded from one folder."""
    from specbuild.reference.engine_folder import load_engine

    root = tmp_path_factory.mktemp("lean_methods")
    folders = {
        label: build_target(
            shipped_tiny,
            root / label,
            method=method,
            decoding=decoding,
            max_draft_len=draft_len,
            extra=extra,
            pretrained=pretrained,
            limits=LIMITS,
        )
        for label, (method, decoding, draft_len, extra, pretrained) in METHODS.items()
    }
    folders["draft"] = build_draft(shipped_tiny, root / "draft", LIMITS)
    engines: dict = {}
    with pytest.MonkeyPatch.context() as mp:
        for path in ("lean", "transformers"):
            mp.setenv("SPECBUILD_REFERENCE_FORWARD", "auto" if path == "lean" else path)
            for label, folder in folders.items():
                engines.setdefault(label, {})[path] = load_engine(folder)
    return engines


@pytest.fixture(scope="module")
def zoo_requests(shipped_tiny):
    from transformers import AutoTokenizer

    from specbuild.reference.decoder.request import Request

    tok = AutoTokenizer.from_pretrained(shipped_tiny / "tokenizer")
    sources = [inspect.getsource(m) for m in (json, inspect)]
    prompts = [tok(s[i * 700 : i * 700 + 700])["input_ids"][:80] for s in sources for i in range(5)]
    return [Request(input_ids=p, max_new_tokens=24 + 3 * (i % 4)) for i, p in enumerate(prompts)]


def _outputs(engines, label, path, requests, batch):
    from dataclasses import replace

    from specbuild.reference.decoder.executor import Executor

    draft = engines["draft"][path] if label == "draft_target" else None
    ex = Executor(engines[label][path], draft)
    ex.limits = replace(ex.limits, max_batch_size=batch)
    results = ex.run(requests)
    return [r.output_ids for r in results], sum(r.stats.total_accepted_draft_tokens for r in results)


def test_both_paths_are_what_they_say(zoo_engines):
    for label, pair in zoo_engines.items():
        assert pair["lean"].model.implementation == "lean", label
        assert pair["transformers"].model.implementation == "transformers", label


@pytest.mark.parametrize("batch", [1, 4])
def test_every_method_gives_the_same_tokens_on_both_paths(zoo_engines, zoo_requests, batch):
    reference, _ = _outputs(zoo_engines, "autoregressive", "transformers", zoo_requests, batch)
    assert sum(map(len, reference)) > 200
    for label in METHODS:
        lean, accepted = _outputs(zoo_engines, label, "lean", zoo_requests, batch)
        ref, ref_accepted = _outputs(zoo_engines, label, "transformers", zoo_requests, batch)
        assert lean == ref, f"{label} at batch {batch}: lean and transformers outputs differ"
        assert lean == reference, f"{label} at batch {batch}: differs from autoregressive decoding"
        if label != "autoregressive":
            assert accepted > 0 and ref_accepted > 0, f"{label}: no draft accepted, the comparison means little"


def test_eagle_and_medusa_drafters_follow_the_path(zoo_engines):
    """The EAGLE head runs lean next to a lean target and as transformers layers next to a transformers target;
    Medusa heads are evaluated by LeanMedusaHeads on the lean path and give the heads module's logits. Lean drafters
    draft in bfloat16 on CPUs with native bf16 (draft_dtype auto), with int8 matmuls where PyTorch runs fbgemm
    otherwise, and in float32 on the transformers path."""
    import torch

    from specbuild.facts.cpu import has_native_bf16
    from specbuild.reference.decoder.lean.linear import Int8Linear, int8_available
    from specbuild.reference.decoder.methods import method_class

    lean, ref = (method_class("eagle")(zoo_engines["eagle1"][p]) for p in ("lean", "transformers"))
    assert lean.lean_head is not None and ref.lean_head is None
    expected = (torch.bfloat16, False) if has_native_bf16() else (torch.float32, int8_available())
    assert tuple(lean.draft_precision) == expected
    assert tuple(ref.draft_precision) == (torch.float32, False)
    assert isinstance(lean.draft_head.linear, Int8Linear) == expected[1]
    medusa_lean, medusa_ref = (method_class("medusa")(zoo_engines["medusa"][p]) for p in ("lean", "transformers"))
    assert type(medusa_lean.evaluate_heads).__name__ == "LeanMedusaHeads"
    assert tuple(medusa_lean.draft_precision) == expected
    for method in (medusa_lean, medusa_ref):
        hidden = torch.randn(3, method.heads.hidden_size).to(method.draft_dtype)
        with torch.inference_mode():
            got, want = method.evaluate_heads(hidden).float(), method.heads(hidden[:, None])[:, :, 0].float()
        if method.draft_precision.int8:  # int8 weights and activations: about 1e-2 of the largest logit
            tol = 5e-2 * want.abs().max().item()
        else:
            tol = 1e-4 if method.draft_dtype == torch.float32 else 2e-2 * want.abs().max().item()
        torch.testing.assert_close(got, want, atol=tol, rtol=1e-2 if tol > 1e-4 else 1e-4)


@pytest.mark.parametrize("label", ["medusa", "eagle1"])
def test_int8_drafters_are_lossless_and_keep_their_acceptance(shipped_tiny, tmp_path, zoo_engines, zoo_requests, label):
    """draft_dtype int8 (lean drafters' larger matmuls in int8, lean.linear.Int8Linear): the same tokens as
    autoregressive decoding with requests joining a batch of 4, and nearly the float32 drafter's accepted tokens
    (drafts only move). EAGLE-2 drafts through the same head objects as EAGLE-1."""
    from specbuild.reference.engine_folder import load_engine
    from specbuild.reference.decoder.lean.linear import Int8Linear, int8_available

    if not int8_available():
        pytest.skip("this PyTorch has no fbgemm int8 engine")
    from specbuild.reference.decoder.methods import method_class

    method, decoding, draft_len, extra, pretrained = METHODS[label]
    engines = {"autoregressive": zoo_engines["autoregressive"]}
    for dtype in ("int8", "float32"):
        folder = build_target(
            shipped_tiny,
            tmp_path / dtype,
            method=method,
            max_draft_len=draft_len,
            extra=extra,
            decoding={**decoding, "draft_dtype": dtype},
            pretrained=pretrained,
            limits=LIMITS,
        )
        engines[dtype] = {"lean": load_engine(folder)}
    drafter = method_class(method)(engines["int8"]["lean"])
    linears = [drafter.draft_head.linear] if label != "medusa" else drafter.evaluate_heads.projections
    assert all(isinstance(linear, Int8Linear) for linear in linears)
    expected, _ = _outputs(engines, "autoregressive", "lean", zoo_requests, 4)
    got, accepted = _outputs(engines, "int8", "lean", zoo_requests, 4)
    _, accepted_float = _outputs(engines, "float32", "lean", zoo_requests, 4)
    assert got == expected, f"{label} int8: differs from autoregressive decoding"
    assert accepted >= 0.9 * accepted_float > 0, (label, accepted, accepted_float)


def test_eagle3_gives_the_same_tokens_on_both_paths(shipped_tiny, tmp_path, zoo_engines, zoo_requests):
    """The zoo's EAGLE-3 head drafts through LeanEagle3Head next to a lean target and through Eagle3HeadModule's own
    modules next to a transformers target: the same tokens either way, autoregressive decoding's."""
    from dataclasses import replace

    from specbuild.reference.engine_folder import load_engine
    from specbuild.reference.decoder.executor import Executor, _Group
    from specbuild.methods.eagle3.decoder import Eagle3Decoder

    folder = build_target(
        shipped_tiny,
        tmp_path / "eagle3",
        method="none",
        decoding={},
        max_draft_len=4,
        extra={"eagle3": "eagle3"},
        pretrained={},
        limits=LIMITS,
    )
    expected, _ = _outputs(zoo_engines, "autoregressive", "transformers", zoo_requests, 4)
    for path in ("lean", "transformers"):
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("SPECBUILD_REFERENCE_FORWARD", "auto" if path == "lean" else path)
            engine = load_engine(folder)
        method = Eagle3Decoder(engine, None, {"max_draft_len": 4})
        assert (method.lean_head is not None) == (path == "lean"), path
        ex = Executor(engine)
        ex.limits = replace(ex.limits, max_batch_size=4)
        ex._groups["engine"] = _Group(method)
        results = ex.run(zoo_requests)
        assert [r.output_ids for r in results] == expected, f"eagle3 on the {path} path differs from autoregressive"
        assert sum(r.stats.total_accepted_draft_tokens for r in results) > 0, path
