"""EAGLE-3's part of the tensorrt-llm runtime (specbuild/trtllm/method_part.py): the releases whose LLM API drafts
a dynamic tree."""

from __future__ import annotations

from typing import Iterator

from specbuild.findings import Finding
from specbuild.methods.eagle3 import RELEASES_WITH_DYNAMIC_TREE
from specbuild.speculation import DynamicTree
from specbuild.trtllm.method_part import TrtllmPart


class Eagle3Trtllm(TrtllmPart):
    def llmapi_checks(self, recipe, spec) -> Iterator[Finding]:
        release = recipe.llm_api.release
        if isinstance(spec.tree, DynamicTree) and release not in RELEASES_WITH_DYNAMIC_TREE:
            yield Finding(
                ("speculation", "dynamic_tree"),
                f"TensorRT-LLM {release} drafts EAGLE-3 as a chain only "
                '(its one-model worker "only supports linear tree"; dynamic trees arrived after 1.2) — '
                "remove dynamic_tree, or use runtime: reference",
            )


PART = Eagle3Trtllm()
