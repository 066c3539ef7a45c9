"""Lookahead's part of the tensorrt-llm runtime (specbuild/trtllm/method_part.py): it decodes greedily there."""

from __future__ import annotations

from specbuild.trtllm.method_part import TrtllmPart


class LookaheadTrtllm(TrtllmPart):
    # its Jacobi n-grams are verified against the target's argmax: no request or parameter changes that
    greedy_only = "verifies lookahead n-grams against the target's argmax"


PART = LookaheadTrtllm()
