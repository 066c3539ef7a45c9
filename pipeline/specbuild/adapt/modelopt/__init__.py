"""`adapt.trainer: modelopt`: NVIDIA Model-Optimizer's EAGLE-3 training and export, as an option where it can run.

    environment.py  its own virtual environment (--system-site-packages: the local CPU torch reused), made on demand
                    in specbuild's cache dir, atomically, with progress; or adapt.modelopt_python
    worker.py       the script run in that environment: mtsp.convert(model, [("eagle", cfg)]) of the current head and
                    target, offline training on the teacher rows, export_speculative_decoding
    trainer.py      adapt's side: the rows and the head handed over, the worker run as a child, its export read back
                    by the loader the runtimes use (then judged by the same gate as specbuild's trainer)

Why a separate environment and not a package extra: `nvidia-modelopt[hf]` pins transformers < 5.15, which would
downgrade transformers for everything else in specbuild."""

from __future__ import annotations

from specbuild.errors import UserError
from specbuild.methods.eagle3 import Eagle3Head
from specbuild.speculation import Speculation


def check_modelopt(spec: Speculation) -> None:
    """Refuse `trainer: modelopt` for a draft Model-Optimizer's EAGLE-3 flow does not train, with what to do."""
    if not isinstance(spec.params, Eagle3Head):
        raise UserError(
            f"adapt.trainer modelopt trains EAGLE-3 heads only, and this recipe's speculation.method is {spec.method} "
            "— use trainer: specbuild (the default; it trains every head kind)"
        )


__all__ = ["check_modelopt"]
