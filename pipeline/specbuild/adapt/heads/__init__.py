"""The draft kinds adapt trains, by speculation params type: one module each, behind `base.HeadTrainer`.

trainer = trainer_for(spec)     # UserError naming the method and what to do when adapt cannot train it
"""

from __future__ import annotations

from specbuild.adapt.heads import draft_model, eagle, eagle3, medusa
from specbuild.adapt.heads.base import HeadTrainer
from specbuild.errors import UserError
from specbuild.methods.draft_target import DraftModel
from specbuild.methods.eagle import EagleHead
from specbuild.methods.eagle3 import Eagle3Head
from specbuild.methods.medusa import MedusaHeads
from specbuild.methods.mtp import MtpLayers
from specbuild.speculation import Speculation

TRAINERS: dict[type, HeadTrainer] = {
    EagleHead: eagle.TRAINER,
    Eagle3Head: eagle3.TRAINER,
    MedusaHeads: medusa.TRAINER,
    DraftModel: draft_model.TRAINER,
}


def trainer_for(spec: Speculation) -> HeadTrainer:
    trainer = TRAINERS.get(type(spec.params))
    if trainer is None:
        if isinstance(spec.params, MtpLayers):
            what = "speculation.method mtp, whose drafts come from layers inside the target checkpoint (adapt does not train the target)"
        elif spec.params is None:
            what = "no speculation"
        else:
            what = f"speculation.method {spec.method}, whose drafts come from no trained weights"
        raise UserError(
            f"adapt: the recipe has {what}; adapt trains EAGLE-1/2 and EAGLE-3 heads, Medusa heads and draft models "
            "— use method eagle, eagle3, medusa or draft_target, or leave adapt out"
        )
    return trainer


__all__ = ["TRAINERS", "HeadTrainer", "trainer_for"]
