"""A run against an earlier report of the same recipe (`specbuild validate --against OLD/report.json`): acceptance
per category and the speedup per concurrency level, new vs old, each judged as a check of its own (one JUnit case
each), so that a drop fails the run.

- Acceptance: per category, the relative change of AL, (new - old) / old, with a bootstrap interval: the prompts
  both reports hold are resampled together (paired; the same prompt set run twice on the same build differs by
  exactly 0), other prompts each on their own side. Failed when all of the interval is below
  -validation.regression.max_acceptance_drop, passed when none of it is, inconclusive otherwise.
- Speed: per level both swept, the speedups' rounds (median, min-max). Judged only when the rounds agree, as the
  min_speedup gate is: failed when every new round is below every old round less max_speedup_drop; otherwise
  passed, saying when the rounds overlap (not judged).
- Identity: what identifies each build (`build_identity`: the provenance manifest and the servers' versions) and
  which of it changed (`provenance.diff_manifests`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from specbuild.facts import metrics
from specbuild.cache import provenance
from specbuild.errors import UserError
from specbuild.files.safe_files import UnreadableFile, read_json
from specbuild.validate.aggregate import BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED, CONFIDENCE, Interval
from specbuild.validate.checks.base import FAILED, INCONCLUSIVE, PASSED, SKIPPED, CheckResult
from specbuild.validate.report.markdown import AGAINST_PREFIX

PREFIX = AGAINST_PREFIX  # the checks' names: against:acceptance:<category>, against:speedup:<concurrency>
MAX_REPORT_BYTES = 256 << 20


# -- what identifies a build ---------------------------------------------------------------------------------


def build_identity(recipe, server_versions: dict[str, str | None] | None = None, runtime=None) -> dict:
    """The report's provenance manifest (specbuild.cache.provenance: the recipe, its checkpoints' identities, the tool
    versions, with `runtime`'s TensorRT-LLM) and the servers' versions as they report them."""
    manifest = provenance.make_manifest(recipe, "report", Path(), runtime=runtime)
    return {**manifest, "servers": dict(server_versions or {})}


def identity_changes(old: dict | None, new: dict | None) -> list[str]:
    """What differs between two builds' identities, one line each (empty: nothing recorded differs)."""
    if not new:
        return []
    if not old or "provenance" not in old:
        return ["the earlier report records no build identity"]
    return provenance.diff_manifests(old, new)


# -- the earlier report --------------------------------------------------------------------------------------


def load_report(path: Path) -> dict:
    """An earlier report.json; UserError naming it when it is not one."""
    try:
        data = read_json(path, what="earlier validation report (--against)", max_bytes=MAX_REPORT_BYTES)
    except UnreadableFile as e:
        raise UserError(f"--against: {e}") from None
    if data.get("specbuild_validation_report") != 1 or not isinstance(data.get("checks"), list):
        raise UserError(
            f"--against: {path} is not a specbuild validation report (report.json from specbuild "
            "validate --report DIR) — give the report.json of the earlier run"
        )
    return data


def _check(report: dict, name: str) -> dict | None:
    return next((c for c in report.get("checks") or [] if c.get("name") == name), None)


# -- acceptance per category ---------------------------------------------------------------------------------


def _records_by_category(report: dict) -> dict[str, dict[str, dict]]:
    acc = _check(report, "acceptance") or {}
    out: dict[str, dict[str, dict]] = {}
    for i, r in enumerate((acc.get("details") or {}).get("records") or []):
        out.setdefault(r.get("category") or "uncategorised", {})[str(r.get("prompt") or i)] = r
    return out


def _sums(records: list[dict], picks: np.ndarray) -> np.ndarray:
    """Accepted drafts and steps summed over each resample's picks: (2, resamples)."""
    if not records:
        return np.zeros((2, picks.shape[0]))
    values = np.array([[r["accepted_draft_tokens"], r["steps"]] for r in records], dtype=float)
    return values[picks].sum(axis=1).T


def _als(sums: np.ndarray) -> np.ndarray:
    return np.array([metrics.mean_acceptance_length(a, s) for a, s in zip(*sums.tolist())])


def relative_change(old: dict[str, dict], new: dict[str, dict], seed: int = BOOTSTRAP_SEED) -> dict:
    """(new AL - old AL) / old AL of one category (prompt id -> record), pooled per verification step, with its
    bootstrap interval: the prompts in both reports resampled together, the others on their own side."""
    shared = sorted(set(old) & set(new))
    only_old, only_new = sorted(set(old) - set(new)), sorted(set(new) - set(old))
    rng = np.random.default_rng(seed)

    def draw(n: int) -> np.ndarray:
        return rng.integers(0, n, size=(BOOTSTRAP_RESAMPLES, n))

    paired = draw(len(shared))
    old_sums = _sums([old[k] for k in shared], paired) + _sums([old[k] for k in only_old], draw(len(only_old)))
    new_sums = _sums([new[k] for k in shared], paired) + _sums([new[k] for k in only_new], draw(len(only_new)))
    old_al, new_al = _als(old_sums), _als(new_sums)
    old_point = metrics.mean_acceptance_length(
        sum(r["accepted_draft_tokens"] for r in old.values()), sum(r["steps"] for r in old.values())
    )
    new_point = metrics.mean_acceptance_length(
        sum(r["accepted_draft_tokens"] for r in new.values()), sum(r["steps"] for r in new.values())
    )
    ok = old_al > 0
    ratios = (new_al[ok] - old_al[ok]) / old_al[ok]
    tail = (1.0 - CONFIDENCE) / 2 * 100
    value = (new_point - old_point) / old_point if old_point > 0 else 0.0
    low, high = np.percentile(ratios, [tail, 100 - tail]) if ratios.size else (value, value)
    return {
        "old_acceptance_length": old_point,
        "new_acceptance_length": new_point,
        "change": Interval(float(value), float(low), float(high)).to_dict(),
        "paired_prompts": len(shared),
        "only_old": only_old,
        "only_new": only_new,
    }


def judge_drop(change: dict, tolerance: float) -> str:
    """Failed when all of the interval lies below -tolerance, passed when none of it does, else inconclusive."""
    if change["high"] < -tolerance:
        return FAILED
    if change["low"] >= -tolerance:
        return PASSED
    return INCONCLUSIVE


def _pct(iv: dict) -> str:
    return f"{iv['value']:+.1%} [{iv['low']:+.1%} to {iv['high']:+.1%}]"


def acceptance_checks(old: dict, new: dict, tolerance: float, allow_inconclusive: bool) -> list[CheckResult]:
    before, after = _records_by_category(old), _records_by_category(new)
    out = []
    for category in list(after) + [c for c in before if c not in after]:
        name, title = f"{PREFIX}:acceptance:{category}", f"Acceptance of {category} vs the earlier report"
        gate = f"AL drop at most {tolerance:.0%} (validation.regression.max_acceptance_drop)"
        if category not in before or category not in after:
            where = "earlier" if category not in before else "new"
            out.append(CheckResult(name, title, SKIPPED, f"no {category} prompts in the {where} report", {}, gate))
            continue
        d = relative_change(before[category], after[category])
        status = judge_drop(d["change"], tolerance)
        text = (
            f"AL {d['old_acceptance_length']:.2f} -> {d['new_acceptance_length']:.2f}, change "
            f"{_pct(d['change'])} ({CONFIDENCE:.0%} interval, {d['paired_prompts']} prompts paired)"
        )
        why = {
            FAILED: f"dropped beyond {tolerance:.0%}: ",
            INCONCLUSIVE: f"inconclusive: the interval straddles "
            f"-{tolerance:.0%} (more prompts of this category would decide): ",
            PASSED: "",
        }[status]
        out.append(
            CheckResult(
                name,
                title,
                status,
                why + text,
                {"category": category, "tolerance": tolerance, **d},
                gate,
                inconclusive_allowed=allow_inconclusive,
            )
        )
    return out


# -- speed per concurrency level -----------------------------------------------------------------------------


def speed_checks(old: dict, new: dict, tolerance: float) -> list[CheckResult]:
    def points(report):
        perf = _check(report, "performance") or {}
        return {
            p["concurrency"]: p
            for p in (perf.get("details") or {}).get("speedup") or []
            if p.get("speedup") is not None
        }

    before, after = points(old), points(new)
    out = []
    for c in sorted(set(before) & set(after)):
        a, b = before[c], after[c]
        name, title = f"{PREFIX}:speedup:{c}", f"Speedup at concurrency {c} vs the earlier report"
        gate = f"speedup drop at most {tolerance:.0%} when the rounds agree (validation.regression.max_speedup_drop)"
        text = (
            f"speedup {a['speedup']:.2f} ({a['speedup_min']:.2f}–{a['speedup_max']:.2f}) -> {b['speedup']:.2f} "
            f"({b['speedup_min']:.2f}–{b['speedup_max']:.2f})"
        )
        details = {"concurrency": c, "old": a, "new": b, "tolerance": tolerance}
        if b["speedup_max"] < a["speedup_min"] * (1 - tolerance):
            out.append(
                CheckResult(name, title, FAILED, f"slower beyond {tolerance:.0%} in every round: {text}", details, gate)
            )
        elif b["speedup_min"] > a["speedup_max"] or b["speedup_max"] < a["speedup_min"]:
            out.append(CheckResult(name, title, PASSED, f"the rounds agree: {text}", details, gate))
        else:
            out.append(CheckResult(name, title, PASSED, f"not judged: the rounds overlap: {text}", details, gate))
    return out


def against_checks(old: dict, new: dict, recipe) -> list[CheckResult]:
    """The comparison's checks: acceptance per category, then speedup per level."""
    r = recipe.validation.regression
    return acceptance_checks(old, new, r.max_acceptance_drop, recipe.validation.allow_inconclusive) + speed_checks(
        old, new, r.max_speedup_drop
    )
