"""Speculative-decoding acceptance metrics, defined once for the runtime and the validation suite.

Mean acceptance length (AL) counts the tokens one verification step (one target forward) yields:
the accepted draft tokens **plus the bonus token** the target always produces. So AL >= 1, and
AL == 1 means no draft token was ever accepted (vLLM, SGLang, TensorRT-LLM use the same convention).
"""

from __future__ import annotations

from specbuild.standalone.serving_metrics import PER_POSITION as _PER_POSITION, SPEC_PREFIX

# specbuild's speculative-decoding counters as the served models export them (standalone/serving_metrics.py)
STEPS, DRAFTS = SPEC_PREFIX + "num_steps_total", SPEC_PREFIX + "num_drafts_total"
DRAFT_TOKENS, ACCEPTED = SPEC_PREFIX + "num_draft_tokens_total", SPEC_PREFIX + "num_accepted_tokens_total"
PER_POSITION = SPEC_PREFIX + _PER_POSITION
# One line of PromQL for the mean acceptance length (bonus token included), per model, over 5 minutes.
PROMQL_AL = f"1 + sum by (model) (rate({ACCEPTED}[5m])) / sum by (model) (rate({STEPS}[5m]))"


def mean_acceptance_length(accepted_draft_tokens: int, steps: int) -> float:
    """AL = 1 + accepted_draft_tokens / steps (the bonus token included). 0.0 when nothing ran."""
    if steps <= 0:
        return 0.0
    return 1.0 + accepted_draft_tokens / steps


def acceptance_rate(accepted_draft_tokens: int, draft_tokens: int) -> float:
    """Fraction of proposed draft tokens that the target accepted (0.0 when none were proposed)."""
    if draft_tokens <= 0:
        return 0.0
    return accepted_draft_tokens / draft_tokens
