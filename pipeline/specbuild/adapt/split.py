"""Each category of the traffic split into train, dev (early stopping) and held-out (the gate) parts.

Seeded and by record: within a category the records are ordered by sha256(seed, record digest), and the first
round(n x held_out) go to held-out, the next round(n x dev) to dev, the rest to train. A record's part depends only
on the seed, its own digest and its category's records, never on the order of the file; identical records are one
record (specbuild.adapt.traffic), so none is in two parts. A category with fewer than MIN_GATED_RECORDS records is
split the same way and counted in the overall figures, but the per-category gate does not judge it."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from specbuild.adapt.traffic import Record
from specbuild.recipe.adapt import MIN_GATED_RECORDS

PARTS = ("train", "dev", "held_out")


@dataclass(frozen=True)
class Split:
    train: list[Record]
    dev: list[Record]
    held_out: list[Record]
    categories: dict[str, dict[str, int]]  # category -> {records, train, dev, held_out}
    gated: dict[str, bool]  # category -> judged by the per-category gate

    def part(self, name: str) -> list[Record]:
        return {"train": self.train, "dev": self.dev, "held_out": self.held_out}[name]

    def to_dict(self) -> dict:
        return {
            "rule": "per category, records ordered by sha256(seed, record digest): held-out first, then dev, then train",
            "min_gated_records": MIN_GATED_RECORDS,
            "categories": {c: {**counts, "gated": self.gated[c]} for c, counts in self.categories.items()},
        }


def _order(seed: int, record: Record) -> str:
    return hashlib.sha256(f"{seed}:{record.digest}".encode()).hexdigest()


def split_traffic(records: list[Record], seed: int, held_out: float, dev: float) -> Split:
    by_category: dict[str, list[Record]] = {}
    for r in records:
        by_category.setdefault(r.category, []).append(r)
    parts: dict[str, list[Record]] = {p: [] for p in PARTS}
    categories: dict[str, dict[str, int]] = {}
    gated: dict[str, bool] = {}
    for category, members in by_category.items():
        ordered = sorted(members, key=lambda r: _order(seed, r))
        n = len(ordered)
        n_held = round(n * held_out)
        n_dev = min(round(n * dev), n - n_held)
        chosen = {
            "held_out": ordered[:n_held],
            "dev": ordered[n_held : n_held + n_dev],
            "train": ordered[n_held + n_dev :],
        }
        for name, part in chosen.items():
            parts[name].extend(part)
        categories[category] = {"records": n, **{name: len(chosen[name]) for name in PARTS}}
        gated[category] = n >= MIN_GATED_RECORDS
    # within a part, the traffic's own order (the file's), so that reports list records as the user wrote them
    position = {r.digest: i for i, r in enumerate(records)}
    for name in PARTS:
        parts[name].sort(key=lambda r: position[r.digest])
    return Split(parts["train"], parts["dev"], parts["held_out"], categories, gated)
