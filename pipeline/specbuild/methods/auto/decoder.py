"""AUTO on the reference runtime: TensorRT-LLM replaces the AUTO config with the NGram config of its heuristic when
the executor is made (heuristic.py), so AUTO decodes as prompt lookup does; the llm-api rehearsal serves the NGram
config it picked (the pack's `served_in_place`)."""

from __future__ import annotations

from specbuild.methods.prompt_lookup.decoder import PromptLookupDecoder


class AutoDecoder(PromptLookupDecoder):
    name = "auto"
