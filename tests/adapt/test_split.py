"""The split of the traffic: per category, by record digest, seeded; no record in two parts; small categories not
gated."""

from __future__ import annotations

import random

from specbuild.adapt.split import split_traffic
from specbuild.adapt.traffic import Record, record_digest
from specbuild.recipe.adapt import MIN_GATED_RECORDS


def records(counts: dict[str, int]) -> list[Record]:
    out = []
    for category, n in counts.items():
        for i in range(n):
            text = f"{category} prompt {i}"
            out.append(Record(f"{category}-{i}", category, text, (1, 2, 3), record_digest(category, text)))
    return out


def digests(part) -> set[str]:
    return {r.digest for r in part}


def test_every_record_is_in_exactly_one_part_with_the_shares_asked_for():
    recs = records({"a": 50, "b": 30})
    split = split_traffic(recs, seed=0, held_out=0.3, dev=0.1)
    parts = [digests(split.train), digests(split.dev), digests(split.held_out)]
    assert sum(len(p) for p in parts) == len(recs)
    assert set.union(*parts) == digests(recs)
    assert not (parts[0] & parts[1] or parts[0] & parts[2] or parts[1] & parts[2])
    assert split.categories["a"] == {"records": 50, "train": 30, "dev": 5, "held_out": 15}
    assert split.categories["b"]["held_out"] == 9


def test_a_records_part_depends_on_the_seed_and_its_digest_not_on_the_file_order():
    recs = records({"a": 40})
    shuffled = list(recs)
    random.Random(3).shuffle(shuffled)
    one, two = split_traffic(recs, 7, 0.3, 0.1), split_traffic(shuffled, 7, 0.3, 0.1)
    assert digests(one.held_out) == digests(two.held_out) and digests(one.dev) == digests(two.dev)
    other = split_traffic(recs, 8, 0.3, 0.1)
    assert digests(other.held_out) != digests(one.held_out)


def test_categories_below_the_minimum_are_split_but_not_gated():
    split = split_traffic(records({"big": MIN_GATED_RECORDS, "small": MIN_GATED_RECORDS - 1}), 0, 0.3, 0.1)
    assert split.gated == {"big": True, "small": False}
    assert split.categories["small"]["held_out"] > 0
