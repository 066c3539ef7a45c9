"""The acceptance-rate switch: speculation turned off for good once it stops paying (TensorRT-LLM's
`SpeculationGate`, tensorrt_llm/_torch/speculative/speculation_gate.py in main after PR #12905, and the fields
`acceptance_rate_threshold` / `acceptance_rate_window_size` of DecodingBaseConfig, tensorrt_llm/llmapi/llm_args.py
@0004396: "speculation will be disabled permanently once the rolling average over the last N
speculation-enabled decoding iterations (N = acceptance_rate_window_size) drops below this value").

One sample per decoding iteration that drafted: the batch's accepted draft tokens over its drafted tokens, summed
over the requests that drafted that iteration (PR #12905: "one batch-level acceptance-rate sample per
speculation-enabled iteration"; py_executor.py `_update_batch_acceptance_rate` skips requests without drafts). The
gate keeps the last `window` samples and their running sum (added, and the oldest subtracted, as upstream does, so
the float arithmetic is the same); from the `window`-th sample on, an average below the threshold disables
speculation for the rest of the executor's life (`reset` only on a new executor). The executor feeds it
(executor.py), the method reads it (`Decoder.follow_load`): a disabled method drafts nothing.

Stdlib only: the llm-api rehearsal (reference/llmapi_yaml.py) reads the decoding keys without torch.
"""

from __future__ import annotations

from collections import deque
from typing import Mapping

THRESHOLD = "acceptance_rate_threshold"  # decoding keys: model.yaml's own names
WINDOW = "acceptance_rate_window_size"


def decoding_keys(threshold: float | None, window: int | None) -> dict[str, float | int]:
    """The decoding keys of a speculative_config's switch ({}: off; py_executor.py builds the gate only
    `if window and threshold is not None`)."""
    if not window or threshold is None:
        return {}
    return {THRESHOLD: float(threshold), WINDOW: int(window)}


class SpeculationGate:
    """The rolling acceptance rate of the last `window` speculating iterations, and whether it switched speculation
    off."""

    def __init__(self, window: int, threshold: float):
        if window < 1:
            raise ValueError(f"window must be >= 1, got {window}")
        if not 0.0 <= threshold <= 1.0:
            raise ValueError(f"threshold must be in [0, 1], got {threshold}")
        self.window = window
        self.threshold = threshold
        self.history: deque[float] = deque()
        self.total = 0.0
        self.samples = 0
        self.disabled = False
        self.disabled_at: int | None = None  # the sample that switched speculation off (1-based)
        self.average: float | None = None  # the last judged average

    def record(self, accepted: int, drafted: int) -> bool:
        """One iteration's counts (summed over the requests that drafted); True when this sample switches
        speculation off. Iterations without drafts are not samples."""
        if drafted <= 0:
            return False
        return self.record_rate(accepted / drafted)

    def record_rate(self, rate: float) -> bool:
        """`SpeculationGate.record_acceptance_rate`: True only on the call that disables."""
        if self.disabled:
            return False
        if not 0.0 <= rate <= 1.0:
            raise ValueError(f"acceptance_rate must be in the range [0.0, 1.0], got {rate}")
        self.history.append(rate)
        self.total += rate
        if len(self.history) > self.window:
            self.total -= self.history.popleft()
        self.samples += 1
        if self.samples >= self.window:
            self.average = self.total / len(self.history)
            if self.average < self.threshold:
                self.disabled = True
                self.disabled_at = self.samples
                return True
        return False


def from_decoding(decoding: Mapping, where: str) -> SpeculationGate | None:
    """The gate a method's decoding keys ask for (None: none); ValueError names the key at fault."""
    threshold, window = decoding.get(THRESHOLD), decoding.get(WINDOW)
    if threshold is None and window is None:
        return None
    if threshold is None or window is None:
        missing = THRESHOLD if threshold is None else WINDOW
        raise ValueError(f"{where}: {missing} is missing (the switch needs both {THRESHOLD} and {WINDOW})")
    try:
        window, threshold = int(window), float(threshold)
    except (TypeError, ValueError):
        raise ValueError(f"{where}: {WINDOW}={window!r} and {THRESHOLD}={threshold!r} must be numbers") from None
    if window == 0:
        return None  # 0 turns the switch off (llm_args.py)
    if window < 0 or not 0.0 <= threshold <= 1.0:
        raise ValueError(f"{where}: {WINDOW} must be >= 0 and {THRESHOLD} in [0, 1]; got {window}, {threshold}")
    return SpeculationGate(window, threshold)
