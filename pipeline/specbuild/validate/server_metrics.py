"""The server's side of acceptance: scrape Triton's Prometheus endpoint and read specbuild's speculative-decoding
counters (exported by the reference tensorrt_llm and by the BLS for the rounds it drives; see
standalone/serving_metrics.py for the names, which follow vLLM's spec_decode metrics).

    before = scrape("http://127.0.0.1:8002/metrics")
    ... requests ...
    after = scrape(...)
    counts = SpecCounts.of(after, "tensorrt_llm") - SpecCounts.of(before, "tensorrt_llm")
    counts.mean_acceptance_length          # specbuild.facts.metrics: 1 + accepted / steps

Standard library only (a small parser of the text exposition format: name{label="v",...} value).
"""

from __future__ import annotations

import re
import urllib.error
import urllib.request
from dataclasses import dataclass, field

from specbuild.facts import metrics
from specbuild.facts.metrics import ACCEPTED, DRAFT_TOKENS, DRAFTS, PER_POSITION, STEPS

_LINE = re.compile(r"^(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)(?:\{(?P<labels>.*)\})?\s+(?P<value>\S+)(?:\s+\d+)?$")
_LABEL = re.compile(r'(?P<key>[A-Za-z_][A-Za-z0-9_]*)="(?P<value>(?:[^"\\]|\\.)*)"')


@dataclass(frozen=True)
class Sample:
    name: str
    labels: dict
    value: float


def parse(text: str) -> list[Sample]:
    """The samples of a Prometheus text exposition (comments and malformed lines skipped)."""
    out = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = _LINE.match(line)
        if not m:
            continue
        try:
            value = float(m.group("value"))
        except ValueError:
            continue
        labels = {
            lm.group("key"): lm.group("value").replace('\\"', '"').replace("\\\\", "\\")
            for lm in _LABEL.finditer(m.group("labels") or "")
        }
        out.append(Sample(m.group("name"), labels, value))
    return out


def scrape(url: str, timeout_s: float = 10.0) -> list[Sample]:
    """GET the metrics endpoint. OSError (with the URL) when it does not answer."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as r:
            return parse(r.read().decode("utf-8", errors="replace"))
    except (urllib.error.URLError, OSError, ValueError) as e:
        raise OSError(f"the metrics endpoint {url} did not answer: {e}") from None


def families(samples: list[Sample]) -> set[str]:
    return {s.name for s in samples}


def value(samples: list[Sample], name: str, **labels) -> float | None:
    """The sum of the samples of `name` whose labels include `labels` (None: there are none)."""
    found = [s.value for s in samples if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())]
    return sum(found) if found else None


@dataclass
class SpecCounts:
    """specbuild's speculative-decoding counters of one model (or their difference between two scrapes)."""

    model: str
    steps: int = 0
    drafts: int = 0
    draft_tokens: int = 0
    accepted: int = 0
    per_position: list[int] = field(default_factory=list)

    @classmethod
    def of(cls, samples: list[Sample], model: str) -> "SpecCounts | None":
        """None when the server exports no specbuild counters for `model`."""
        steps = value(samples, STEPS, model=model)
        if steps is None:
            return None
        positions: dict[int, int] = {}
        for s in samples:
            if s.name == PER_POSITION and s.labels.get("model") == model and s.labels.get("position", "").isdigit():
                positions[int(s.labels["position"])] = positions.get(int(s.labels["position"]), 0) + int(s.value)
        per_position = [positions.get(i, 0) for i in range(max(positions) + 1)] if positions else []
        return cls(
            model,
            int(steps),
            int(value(samples, DRAFTS, model=model) or 0),
            int(value(samples, DRAFT_TOKENS, model=model) or 0),
            int(value(samples, ACCEPTED, model=model) or 0),
            per_position,
        )

    def __sub__(self, other: "SpecCounts | None") -> "SpecCounts":
        if other is None:
            return self
        width = max(len(self.per_position), len(other.per_position))
        a = self.per_position + [0] * (width - len(self.per_position))
        b = other.per_position + [0] * (width - len(other.per_position))
        return SpecCounts(
            self.model,
            self.steps - other.steps,
            self.drafts - other.drafts,
            self.draft_tokens - other.draft_tokens,
            self.accepted - other.accepted,
            [x - y for x, y in zip(a, b)],
        )

    @property
    def mean_acceptance_length(self) -> float:
        return metrics.mean_acceptance_length(self.accepted, self.steps)

    @property
    def acceptance_rate(self) -> float:
        return metrics.acceptance_rate(self.accepted, self.draft_tokens)

    def to_dict(self) -> dict:
        return {
            "model": self.model,
            "steps": self.steps,
            "drafts": self.drafts,
            "draft_tokens": self.draft_tokens,
            "accepted_tokens": self.accepted,
            "accepted_per_position": self.per_position,
            "mean_acceptance_length": self.mean_acceptance_length,
            "acceptance_rate": self.acceptance_rate,
        }
