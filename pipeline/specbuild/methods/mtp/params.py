"""MTP's params: the target's own prediction layers a Speculation drafts with."""

from __future__ import annotations

from dataclasses import dataclass

from specbuild.speculation import MethodParams, Speculation


@dataclass(frozen=True)
class MtpLayers(MethodParams):
    """The target's own multi-token-prediction layers."""

    num_nextn_predict_layers: int

    def full_length(self, spec: Speculation) -> int | None:
        return self.num_nextn_predict_layers
