"""What an adapt run writes about itself, beside the head (docs/adapt.md documents each shape):

adapt.json          the verdict for machines: shipped, reason, head, categories, overall (+ training, traffic)
report.json         adapt.json and everything behind it (split, dev curve, per-record counters, settings)
report.md           for people: the verdict, a before/after table per category, the training run
junit.xml           one test case per gate (overall, each gated category, lossless), for CI
training_curve.png  training loss per step and dev AL at each measurement (the kept step marked)
before_after.png    held-out AL per category, old and new head, with their 95% intervals
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from specbuild.validate.report.markdown_table import table

ADAPT_JSON = "adapt.json"
FORMAT = 1


def _al(iv: dict | None) -> str:
    if not iv or iv.get("al") is None:
        return "-"
    return f"{iv['al']:.2f} [{iv['low']:.2f}-{iv['high']:.2f}]"


def _diff(d: dict | None) -> str:
    if not d or d.get("value") is None:
        return "-"
    return f"{d['value']:+.2f} [{d['low']:+.2f}, {d['high']:+.2f}]"


def write_json(path: Path, data: dict) -> Path:
    path.write_text(json.dumps(data, indent=2, sort_keys=False) + "\n")
    return path


def markdown(report: dict) -> str:
    a = report["adapt"]
    lines = [f"# adapt: {report['recipe']}", ""]
    lines += [f"**{'SHIPPED' if a['shipped'] else 'NOT SHIPPED'}** — {a['reason']}", ""]
    lines += [f"- head: `{a['head']}`" + (" (new)" if a["shipped"] else " (the old one, kept)")]
    lines += [f"- old head: `{report['base_head']['path']}` ({report['base_head']['kind']})"]
    t = report.get("traffic") or {}
    if t:
        lines += [
            f"- traffic: {t['source']}: {t['records']} records in {len(t['categories'])} "
            f"categor{'y' if len(t['categories']) == 1 else 'ies'} "
            f"(digest {t['digest'][:12]}), sent as {t['prompt_format']['used']} ({t['prompt_format']['why']})"
        ]
        if t.get("left_out"):
            lines += [f"- left out: {len(t['left_out'])} records that do not fit the deployment's limits"]
    lines += [""]
    if a.get("categories"):
        lines += ["## Held-out acceptance, old head vs new head", ""]
        rows = [
            [
                name,
                c["held_out"],
                "yes" if c["gated"] else "no (no held-out record)" if not c["held_out"] else "no (under 20 records)",
                _al(c["before"]),
                _al(c["after"]),
                _diff(c.get("difference")),
            ]
            for name, c in a["categories"].items()
        ]
        o = a["overall"]
        rows.append(
            ["**all**", o.get("held_out", "-"), "yes", _al(o["before"]), _al(o["after"]), _diff(o.get("difference"))]
        )
        lines += table(["category", "held-out", "gated", "AL before", "AL after", "new - old (paired)"], rows)
        lines += [
            "AL: mean acceptance length, bonus token included, pooled per verification step; [low-high]: 95% "
            "percentile bootstrap interval over the records; new - old: paired bootstrap (the same resamples for "
            "both heads).",
            "",
        ]
    lossless = report.get("lossless") or {}
    if lossless:
        lines += [
            f"Lossless: {lossless['identical']}/{lossless['records']} held-out answers identical for both heads.",
            "",
        ]
    tr = report.get("training")
    if tr:
        lines += ["## Training", ""]
        lines += [
            f"- {tr['steps']} steps ({tr['stopped_by'].replace('_', ' ')}), kept step {tr['best_step']}; "
            f"{tr['seconds']:.0f} s on {tr['device']} ({tr['precision']}, {tr['torch_threads']} threads)",
            f"- trainer: {tr['trainer']}; learning rate {tr['learning_rate']:g}, batch {tr['batch_size']}, "
            f"seed {tr['seed']}",
            f"- rows: {tr['train_rows']} train, {tr['dev_rows']} dev; dev AL "
            + " -> ".join(f"{d['al']:.2f}@{d['step']}" for d in tr.get("dev", [])),
        ]
        if tr.get("prepared"):
            lines += [f"- before training: {json.dumps(tr['prepared'])}"]
        lines += [""]
    plots = report.get("plots") or []
    if plots:
        lines += ["## Plots", ""] + [f"![{p}]({p})" for p in plots] + [""]
    timings = report.get("timings_s") or {}
    if timings:
        cpu = report.get("cpu_s") or {}
        rows = [[k, f"{v:.0f}", f"{cpu[k]:.0f}" if k in cpu else "-"] for k, v in timings.items()]
        lines += ["## Time", ""] + table(["stage", "wall s", "CPU s"], rows)
    return "\n".join(lines)


def junit(report: dict) -> ET.ElementTree:
    a = report["adapt"]
    cases: list[tuple[str, str | None]] = []  # (name, failure message or None)
    diff = (a.get("overall") or {}).get("difference") or {}
    improved = diff.get("low") is not None and diff["low"] > 0
    cases.append(("overall: new head measurably better", None if improved else a["reason"]))
    for name, c in (a.get("categories") or {}).items():
        if c["gated"]:
            cases.append(
                (f"category {name}: no drop beyond max_category_drop", a["reason"] if c["below_drop"] else None)
            )
    lossless = report.get("lossless") or {}
    if lossless.get("records"):
        same = lossless["identical"] == lossless["records"]
        cases.append(("lossless: identical greedy answers", None if same else f"{lossless['differ']}"))
    failures = sum(1 for _, f in cases if f is not None)
    root = ET.Element("testsuites", name="specbuild adapt", tests=str(len(cases)), failures=str(failures))
    suite = ET.SubElement(
        root, "testsuite", name=f"specbuild.adapt.{report['recipe']}", tests=str(len(cases)), failures=str(failures)
    )
    props = ET.SubElement(suite, "properties")
    ET.SubElement(props, "property", name="shipped", value=str(a["shipped"]).lower())
    ET.SubElement(props, "property", name="head", value=str(a["head"]))
    for name, failure in cases:
        case = ET.SubElement(suite, "testcase", classname=f"specbuild.adapt.{report['recipe']}", name=name)
        if failure is not None:
            ET.SubElement(case, "failure", message=failure[:500], type="gate")
    ET.indent(root)
    return ET.ElementTree(root)


def _pyplot():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def training_plot(plt, report: dict, path: Path) -> Path:
    tr = report["training"]
    fig, ax = plt.subplots(figsize=(8, 4))
    losses = tr.get("losses") or []
    if losses:
        ax.plot(range(1, len(losses) + 1), losses, color="#7f7f7f", linewidth=0.8, label="training loss")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("training loss")
    ax.grid(True, alpha=0.3)
    ax2 = ax.twinx()
    dev = tr.get("dev") or []
    ax2.plot([d["step"] for d in dev], [d["al"] for d in dev], "o-", color="#1f77b4", label="dev AL (greedy chains)")
    ax2.axvline(tr["best_step"], color="#2ca02c", linestyle="dashed", label=f"kept: step {tr['best_step']}")
    ax2.set_ylabel("dev AL")
    handles = ax.get_legend_handles_labels()[0] + ax2.get_legend_handles_labels()[0]
    ax2.legend(handles=handles, loc="lower right", fontsize=8)
    fig.suptitle(f"{report['recipe']}: adapting the {report['base_head']['kind']}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def before_after_plot(plt, report: dict, path: Path) -> Path:
    a = report["adapt"]
    groups = [(n, c) for n, c in a["categories"].items() if c["before"]["al"] is not None]
    groups.append(("all", a["overall"]))
    fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(groups) + 2), 4.5))
    width = 0.38
    for k, (label, color) in enumerate((("before", "#7f7f7f"), ("after", "#1f77b4"))):
        xs = [i + (k - 0.5) * width for i in range(len(groups))]
        values = [g[label]["al"] for _, g in groups]
        errors = [
            [v - g[label]["low"] for v, (_, g) in zip(values, groups)],
            [g[label]["high"] - v for v, (_, g) in zip(values, groups)],
        ]
        ax.bar(
            xs, values, width, yerr=errors, capsize=3, color=color, label=f"{label} ({'old' if k == 0 else 'new'} head)"
        )
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels([n for n, _ in groups], rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("held-out AL (bonus token included)")
    ax.set_ylim(bottom=1.0)
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    fig.suptitle(f"{report['recipe']}: {'shipped' if a['shipped'] else 'not shipped'} (95% bootstrap intervals)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_report(folder: Path, report: dict, notice=None) -> list[Path]:
    """Every report file into `folder` (adapt.json last but one: it is what callers read first)."""
    written: list[Path] = []
    plots: list[str] = []
    try:
        plt = _pyplot()
        if report.get("training"):
            plots.append(training_plot(plt, report, folder / "training_curve.png").name)
        if report["adapt"].get("categories"):
            plots.append(before_after_plot(plt, report, folder / "before_after.png").name)
    except ImportError as e:  # matplotlib is in the triton extra
        if notice:
            notice(f"no plots: {e} (install specbuild[triton])")
    report["plots"] = plots
    written.append(write_json(folder / "report.json", _clean(report)))
    (folder / "report.md").write_text(markdown(report) + "\n")
    written.append(folder / "report.md")
    junit(report).write(folder / "junit.xml", encoding="utf-8", xml_declaration=True)
    written.append(folder / "junit.xml")
    written.append(write_json(folder / ADAPT_JSON, _clean(report["adapt"])))
    return written + [folder / p for p in plots]


def _clean(value: Any) -> Any:
    """JSON-ready: paths as strings, tuples as lists, non-finite floats as null."""
    import math

    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
