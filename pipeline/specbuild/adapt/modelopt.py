"""The `modelopt` trainer (NVIDIA Model-Optimizer's EAGLE-3 training and export, in its own virtual environment):
the setting is read and checked here; the training itself is not wired in this build (docs/adapt.md, "Model-Optimizer").

Why a separate environment: PyPI `nvidia-modelopt[hf]` pins transformers < 5.15, which would downgrade transformers
for everything else; a virtual environment made with --system-site-packages reuses the local CPU torch."""

from __future__ import annotations

from specbuild.errors import UserError
from specbuild.recipe.adapt import AdaptSection
from specbuild.methods.eagle3 import Eagle3Head
from specbuild.speculation import Speculation


def check_modelopt(spec: Speculation, settings: AdaptSection) -> None:
    """Refuse `trainer: modelopt` where it cannot run, with what to do."""
    if not isinstance(spec.params, Eagle3Head):
        raise UserError(
            f"adapt.trainer modelopt trains EAGLE-3 heads only, and this recipe's speculation.method is {spec.method} "
            "— use trainer: specbuild (the default; it trains every head kind)"
        )
    raise UserError(
        "adapt.trainer modelopt: running Model-Optimizer's EAGLE-3 training from adapt is not available in this "
        "build yet (docs/adapt.md says what is planned) — use trainer: specbuild, which writes the same upstream "
        "layout"
    )
