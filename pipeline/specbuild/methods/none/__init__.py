"""No speculation: the baseline every speculative deployment is compared with (every runtime decodes it
autoregressively: the pack has no part of its own)."""

from __future__ import annotations

from typing import Literal

from specbuild.methods.pack import MethodPack
from specbuild.section import Section
from specbuild.speculation import NO_SPECULATION


class NoneConfig(Section):
    """Plain autoregressive decoding."""

    method: Literal["none"] = "none"


class NonePack(MethodPack):
    name = "none"
    Config = NoneConfig
    Params = None
    summary = "autoregressive baseline"

    def describe(self, recipe):
        return NO_SPECULATION


PACK = NonePack()
