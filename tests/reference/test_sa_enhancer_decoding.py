"""The `sa_config` enhancer on the reference runtime (TensorRT-LLM 1.3's SAEnhancerConfig on Eagle3 / MTP): beside the
shipped tiny EAGLE-3 head and the tiny MTP target's layer, a suffix automaton whose match of at least `threshold`
tokens replaces the drafted chain. Greedy output stays that of autoregressive decoding (batched, in flight), and on
prompts that repeat themselves the automaton does replace drafts (the decoder's count)."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from tree_helpers import SHIPPED_TINY, make_engine, requests, run

from specbuild.methods.eagle3.decoder import Eagle3Decoder
from specbuild.methods.mtp.decoder import MtpDecoder

BLOCK = "def push(self, item):\n    self.items.append(item)\n    return len(self.items)\n\n\n"


@pytest.fixture(scope="module", autouse=True)
def _threads():
    torch.set_num_threads(1)


@pytest.fixture(scope="module")
def prompts():
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(SHIPPED_TINY / "tokenizer")
    texts = [BLOCK * 2 + "def push(self", "class Stack:\n    " + BLOCK * 2 + "def", "import os\n" + BLOCK + "def push"]
    return [tok(t).input_ids for t in texts]


def executor(engine, decoder, batch_size: int = 3):
    from specbuild.reference.decoder.executor import Executor, _Group

    ex = Executor(engine)
    ex.limits = replace(ex.limits, max_batch_size=batch_size)
    ex._groups["engine"] = _Group(decoder)
    ex.method_name = decoder.name
    return ex


@pytest.mark.parametrize("global_pool", [False, True])
def test_eagle3_with_sa_config_is_lossless_and_overrides_on_repeats(tmp_path, prompts, global_pool):
    target = SHIPPED_TINY / "target"
    engine = make_engine(tmp_path / "e3", target, "none", extra_dirs={"eagle3": SHIPPED_TINY / "eagle3"})
    ar = make_engine(tmp_path / "ar", target, "none")
    expected = [r.output_ids for r in run(ar, requests(prompts, 24), batch_size=1)]
    decoding = {"max_draft_len": 3, "sa_threshold": 4, "sa_enable_global_pool": global_pool, "draft_dtype": "float32"}
    decoder = Eagle3Decoder(engine, None, decoding)
    out = executor(engine, decoder).run(requests(prompts, 24))
    assert [r.output_ids for r in out] == expected
    assert decoder.sa is not None and decoder.sa.overridden > 0
    assert Eagle3Decoder(engine, None, {"max_draft_len": 3}).sa is None  # no sa_config: no automaton


def test_mtp_with_sa_config_is_lossless_and_overrides_on_repeats(tmp_path, prompts):
    folder = SHIPPED_TINY / "mtp-target"
    engine = make_engine(tmp_path / "mtp", folder, "mtp", decoding={"max_draft_len": 3})
    ar = make_engine(tmp_path / "ar", folder, "none")
    expected = [r.output_ids for r in run(ar, requests(prompts, 24), batch_size=1)]
    decoder = MtpDecoder(engine, None, {"max_draft_len": 3, "sa_threshold": 3, "draft_dtype": "float32"})
    out = executor(engine, decoder).run(requests(prompts, 24))
    assert [r.output_ids for r in out] == expected
    assert decoder.sa.overridden > 0
