"""No speculation: the baseline every speculative deployment is compared with."""

from __future__ import annotations

from typing import Literal

from specbuild.methods.base import Method

from specbuild.section import Section
from specbuild.speculation import NO_SPECULATION


class NoneConfig(Section):
    """Plain autoregressive decoding."""

    method: Literal["none"] = "none"


class NoSpeculation(Method):
    name = "none"
    Config = NoneConfig
    summary = "autoregressive baseline"

    def describe(self, recipe):
        return NO_SPECULATION
