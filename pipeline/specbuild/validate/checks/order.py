"""The checks of the validation suite, in the order they run."""

from __future__ import annotations

from specbuild.validate.checks import (
    acceptance,
    auto_disable,
    bad_input,
    cost_model,
    functional,
    health,
    load,
    lossless,
    performance,
    sampling,
    spike_recovery,
)

# auto_disable runs last: it switches the target's speculation off for good
CHECKS = [
    health,
    functional,
    lossless,
    sampling,
    acceptance,
    spike_recovery,
    performance,
    cost_model,
    bad_input,
    load,
    auto_disable,
]
ORDER = [m.NAME for m in CHECKS]
BY_NAME = {m.NAME: m for m in CHECKS}

__all__ = ["BY_NAME", "CHECKS", "ORDER"]
