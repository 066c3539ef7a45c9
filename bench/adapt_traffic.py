"""Traffic outside the zoo's Python-stdlib domain, generated deterministically (no download, nothing copied: the
same records on every machine and Python), for bench/adapt.py.

Four categories of machine-written text a service might be asked to continue: arithmetic worksheets (sums,
differences and products, the last one left open), application log lines, YAML configuration and hexdumps. The
zoo's target never saw any of them in training. It degenerates into loops on most of them, which the shipped EAGLE
head predicts well (logs, YAML, hexdumps: AL about 5 of at most 6 in a first run); on the arithmetic worksheets it
accepts least, so bench/adapt.py adapts on those (bench/README.md, "Adapting the draft").

    python bench/adapt_traffic.py --categories arithmetic --per-category 150 --out traffic.jsonl
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

WORDS = (
    "system network server request client data model file user time value process memory cache table query index "
    "record field session worker queue token stream buffer socket handler config route"
).split()
LEVELS = ("INFO", "WARN", "ERROR", "DEBUG")
EVENTS = ("started", "stopped", "failed", "retrying", "connected", "timed out", "flushed", "evicted")


def arithmetic(r: random.Random) -> str:
    """A worksheet of sums, differences and products, the last line left for the model to answer."""
    lines = []
    for _ in range(r.randint(5, 10)):
        a, b = r.randint(1, 999), r.randint(1, 999)
        op = r.choice("+-*")
        value = a + b if op == "+" else a - b if op == "-" else a * b
        lines.append(f"{a} {op} {b} = {value}")
    a, b = r.randint(1, 999), r.randint(1, 999)
    return "\n".join(lines) + f"\n{a} {r.choice('+-*')} {b} ="


def logs(r: random.Random) -> str:
    lines = []
    for _ in range(r.randint(3, 6)):
        lines.append(
            f"2024-03-{r.randint(1, 28):02d} {r.randint(0, 23):02d}:{r.randint(0, 59):02d}:{r.randint(0, 59):02d} "
            f"{r.choice(LEVELS)} [{r.choice(WORDS)}] {r.choice(WORDS)} {r.choice(EVENTS)} after {r.randint(1, 999)} ms"
        )
    return "\n".join(lines) + "\n"


def yaml_config(r: random.Random) -> str:
    lines = []
    for _ in range(r.randint(3, 6)):
        lines.append(f"{r.choice(WORDS)}:")
        lines.append(f"  {r.choice(WORDS)}: {r.randint(1, 999)}")
        lines.append(f"  {r.choice(WORDS)}_{r.choice(WORDS)}: {r.choice(['true', 'false', 'none'])}")
    return "\n".join(lines) + "\n"


def hexdump(r: random.Random) -> str:
    start = r.randrange(0, 1 << 20) * 16
    rows = []
    for offset in range(start, start + 16 * r.randint(4, 8), 16):
        rows.append(f"{offset:08x}: " + " ".join(f"{r.randrange(256):02x}" for _ in range(16)))
    return "\n".join(rows) + "\n"


CATEGORIES = {"arithmetic": arithmetic, "logs": logs, "yaml": yaml_config, "hexdump": hexdump}


def records(per_category: int, seed: int = 0, categories: tuple[str, ...] | None = None) -> list[dict]:
    """`per_category` text records of each category (default all), {"id", "category", "prompt"}, the same for the
    same arguments."""
    out = []
    for name in categories or tuple(CATEGORIES):
        make = CATEGORIES[name]
        r = random.Random(f"specbuild-adapt-bench:{seed}:{name}")
        out += [{"id": f"{name}-{i:03d}", "category": name, "prompt": make(r)} for i in range(per_category)]
    return out


def write(path: Path, per_category: int, seed: int = 0, categories: tuple[str, ...] | None = None) -> Path:
    path.write_text("".join(json.dumps(rec) + "\n" for rec in records(per_category, seed, categories)))
    return path


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--per-category", type=int, default=75)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--categories", default=",".join(CATEGORIES), help="comma-separated, of: " + ", ".join(CATEGORIES)
    )
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    write(args.out, args.per_category, args.seed, tuple(args.categories.split(",")))
