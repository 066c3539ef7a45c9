"""The draft kinds adapt trains: each method pack's `trainer.py` (specbuild/methods/<name>/), behind
`base.HeadTrainer`, found through the registry by the speculation's params type.

trainer = trainer_for(spec)     # UserError naming the method and what to do when adapt cannot train it
"""

from __future__ import annotations

from specbuild.adapt.heads.base import HeadTrainer
from specbuild.errors import UserError
from specbuild.methods import METHODS, load, pack_for
from specbuild.speculation import Speculation


def trainer_for(spec: Speculation) -> HeadTrainer:
    pack = pack_for(spec)
    if pack.trainer is None:
        what = f"speculation.method {spec.method}: {pack.untrained}" if spec.speculative else "no speculation"
        trained = ", ".join(p.name for p in METHODS.values() if p.trainer is not None)
        raise UserError(
            f"adapt: the recipe has {what}; adapt trains the drafts of methods {trained} "
            "— use one of them, or leave adapt out"
        )
    return load(pack, pack.trainer)


__all__ = ["HeadTrainer", "trainer_for"]
