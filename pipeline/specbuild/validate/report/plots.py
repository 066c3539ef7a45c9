"""PNG plots (matplotlib, Agg backend): latency and throughput vs concurrency for both deployments, speedup vs
concurrency with the crossover marked, acceptance per draft position."""

from __future__ import annotations

import textwrap
from pathlib import Path

COLORS = {"speculative": "#1f77b4", "baseline": "#7f7f7f", "target": "#1f77b4"}
DPI = 110


def _pyplot():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _concurrency_axis(ax, levels: list[int]) -> None:
    ax.set_xscale("log", base=2)
    ax.set_xticks(levels)
    ax.set_xticklabels([str(c) for c in levels])
    ax.minorticks_off()
    if levels:
        ax.set_xlim(min(levels) / 1.3, max(levels) * 1.3)
    ax.set_xlabel("concurrency (requests in flight)")
    ax.grid(True, alpha=0.3)


def _series(levels: list[dict], metric: str, key: str, scale: float = 1.0):
    xs, ys = [], []
    for s in levels:
        dist = s.get(metric)
        if dist and dist.get(key) is not None:
            xs.append(s["concurrency"])
            ys.append(dist[key] * scale)
    return xs, ys


def latency_plot(plt, details: dict, path: Path, title: str) -> Path:
    levels = details["levels"]
    all_c = sorted({s["concurrency"] for vs in levels.values() for s in vs})
    fig, axes = plt.subplots(1, 3, figsize=(13, 4))
    for ax, (metric, label, scale) in zip(
        axes,
        (
            ("ttft_s", "time to first token (ms)", 1000),
            ("itl_s", "inter-token latency (ms)", 1000),
            ("latency_s", "request latency (s)", 1),
        ),
    ):
        for dep, vs in levels.items():
            x50, y50 = _series(vs, metric, "p50", scale)
            x90, y90 = _series(vs, metric, "p90", scale)
            if x50:
                ax.plot(x50, y50, "o-", color=COLORS.get(dep), label=f"{dep} p50")
            if x90:
                ax.plot(x90, y90, "--", color=COLORS.get(dep), alpha=0.6, label=f"{dep} p90")
        ax.set_ylabel(label)
        ax.set_ylim(bottom=0)
        _concurrency_axis(ax, all_c)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
        else:  # e.g. inter-token latency of a deployment that does not stream
            ax.text(
                0.5,
                0.5,
                "not measured\n(the deployment does not stream)",
                ha="center",
                va="center",
                transform=ax.transAxes,
                color="gray",
            )
    fig.suptitle(f"{title}: latency vs concurrency")
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def throughput_plot(plt, details: dict, path: Path, title: str) -> Path:
    levels = details["levels"]
    all_c = sorted({s["concurrency"] for vs in levels.values() for s in vs})
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, (key, label) in zip(
        axes, (("output_tokens_per_s", "output tokens / s"), ("requests_per_s", "requests / s"))
    ):
        for dep, vs in levels.items():
            ax.plot([s["concurrency"] for s in vs], [s[key] for s in vs], "o-", color=COLORS.get(dep), label=dep)
        ax.set_ylabel(label)
        ax.set_ylim(bottom=0)
        _concurrency_axis(ax, all_c)
        ax.legend(fontsize=8)
    fig.suptitle(f"{title}: throughput vs concurrency")
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def speedup_plot(plt, details: dict, path: Path, title: str) -> Path:
    points = [(p["concurrency"], p["speedup"]) for p in details["speedup"] if p["speedup"] is not None]
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    fig, ax = plt.subplots(figsize=(7, 4.2))
    ax.axhline(1.0, color="black", lw=1, ls="--", label="break-even (1×)")
    ax.plot(xs, ys, "o-", color=COLORS["speculative"], lw=2, label="speculative / baseline output tok/s (median)")
    spreads = [
        (p["concurrency"], p["speedup"], p.get("speedup_min"), p.get("speedup_max"))
        for p in details["speedup"]
        if p["speedup"] is not None and p.get("speedup_min") is not None
    ]
    if spreads:  # the rounds' min-max around each median
        ax.errorbar(
            [x for x, *_ in spreads],
            [y for _, y, _, _ in spreads],
            yerr=[[y - lo for _, y, lo, _ in spreads], [hi - y for _, y, _, hi in spreads]],
            fmt="none",
            ecolor=COLORS["speculative"],
            elinewidth=1,
            capsize=4,
            alpha=0.7,
            label="rounds: min–max",
        )
    for x, y in points:  # labels above the points that pay, below the ones that do not (clear of the 1x line)
        ax.annotate(
            f"{y:.2f}×", (x, y), textcoords="offset points", xytext=(0, 8 if y >= 1 else -15), ha="center", fontsize=9
        )
    top = max(ys + [1.0] + [hi for *_, hi in spreads]) * 1.2
    cross = details.get("crossover") or {}
    if cross.get("interpolated") is not None:  # a crossing: faster below it, slower above
        at = cross["interpolated"]
        ax.axvline(at, color="#d62728", lw=1.5, ls=":")
        ax.annotate(
            f"crossover ≈ {at:.1f}",
            (at, top * 0.97),
            textcoords="offset points",
            xytext=(5, 0),
            ha="left",
            va="top",
            color="#d62728",
            fontsize=9,
        )
        ax.axvspan(at, max(xs) * 1.3, color="#d62728", alpha=0.07)
    ax.set_ylabel("speedup")
    ax.set_ylim(0, top)
    _concurrency_axis(ax, xs)
    ax.legend(fontsize=8, loc="lower left")
    ax.set_title(f"{title}: speedup vs concurrency")
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def prompt_label(record: dict) -> str:
    """A request's prompt on an axis: its id and category (its index in the set when it has no id)."""
    name = record.get("prompt") or f"#{record.get('prompt_index')}"
    return f"{name} ({record['category']})" if record.get("category") else str(name)


def acceptance_plot(plt, details: dict, path: Path, title: str) -> Path:
    per_pos, hist = details.get("per_position"), details.get("histogram")
    records = details.get("records") or []
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    ax = axes[0]
    if per_pos:
        pos = list(range(1, len(per_pos) + 1))
        ax.bar(pos, per_pos, color=COLORS["speculative"])
        for x, y in zip(pos, per_pos):
            ax.annotate(f"{y:.2f}", (x, y), textcoords="offset points", xytext=(0, 3), ha="center", fontsize=8)
        ax.set_xticks(pos)
        ax.set_xlabel("draft position")
        ax.set_ylabel("share of steps accepting this position")
        ax.set_ylim(0, 1.05)
        stepped, requests = details.get("per_position_requests"), len(records)
        part = f" ({stepped} of {requests} requests)" if stepped and requests and stepped < requests else ""
        ax.set_title("acceptance per draft position" + part)
    else:
        why = details.get("per_position_note") or (
            "per-position acceptance needs a deployment that streams one response per step"
        )
        ax.text(0.5, 0.5, textwrap.fill(why, 48), ha="center", va="center", transform=ax.transAxes, fontsize=8)
        ax.set_axis_off()
    ax = axes[1]
    if hist:
        ax.bar(range(len(hist)), hist, color="#2ca02c")
        ax.set_xticks(range(len(hist)))
        ax.set_xlabel("accepted draft tokens in a step")
        ax.set_ylabel("steps")
        ax.set_title("acceptance histogram")
    elif records:
        ax.bar(range(len(records)), [r["acceptance_length"] for r in records], color="#2ca02c")
        ax.set_xticks(range(len(records)))
        ax.set_xticklabels([prompt_label(r) for r in records], rotation=45, ha="right", fontsize=7)
        ax.set_xlabel("prompt (category)")
        ax.set_ylabel("mean acceptance length")
        ax.set_title("acceptance length per request")
    ax.grid(True, axis="y", alpha=0.3)
    fig.suptitle(f"{title}: AL {details['mean_acceptance_length']:.2f} (bonus token included)")
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def _interval_bars(ax, groups: list[dict], color: str, thresholds: dict | None = None) -> None:
    """AL per group with its bootstrap interval as an error bar (and each group's gate, when it has one)."""
    names = [g["group"] for g in groups]
    values = [g["acceptance_length"]["value"] for g in groups]
    errors = [
        [v - g["acceptance_length"]["low"] for v, g in zip(values, groups)],
        [g["acceptance_length"]["high"] - v for v, g in zip(values, groups)],
    ]
    xs = list(range(len(groups)))
    ax.bar(xs, values, color=color, yerr=errors, capsize=4)
    for x, name in zip(xs, names):
        if thresholds and name in thresholds:
            ax.hlines(thresholds[name], x - 0.4, x + 0.4, colors="#d62728", linestyles="dashed")
    ax.set_xticks(xs)
    ax.set_xticklabels(names, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("AL (bonus token included)")
    ax.set_ylim(bottom=1.0 if min(values + [1.0]) >= 1.0 else 0.0)
    ax.grid(True, axis="y", alpha=0.3)


def acceptance_groups_plot(plt, details: dict, path: Path, title: str) -> Path:
    """AL per category and per context-length bucket with their intervals; the per-category gate dashed."""
    thresholds = {v["group"]: v["threshold"] for v in details.get("gate_verdicts") or []}
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
    _interval_bars(axes[0], details["by_category"], COLORS["speculative"], thresholds)
    axes[0].set_title("per category")
    _interval_bars(axes[1], details["by_context_length"], "#2ca02c")
    axes[1].set_title("per context length (prompt tokens)")
    confidence = (details.get("interval") or {}).get("confidence", 0)
    fig.suptitle(f"{title}: AL with {confidence:.0%} bootstrap intervals over requests")
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def against_plot(plt, checks: list, path: Path, title: str) -> Path:
    """Relative AL change per category vs the earlier report, with its interval; the tolerance dashed."""
    names = [c.details["category"] for c in checks]
    values = [c.details["change"]["value"] * 100 for c in checks]
    errors = [
        [v - c.details["change"]["low"] * 100 for v, c in zip(values, checks)],
        [c.details["change"]["high"] * 100 - v for v, c in zip(values, checks)],
    ]
    colors = ["#d62728" if c.status == "failed" else COLORS["speculative"] for c in checks]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    xs = list(range(len(checks)))
    ax.bar(xs, values, color=colors, yerr=errors, capsize=4)
    ax.axhline(-checks[0].details["tolerance"] * 100, color="#d62728", linestyle="dashed", label="tolerance")
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xticks(xs)
    ax.set_xticklabels(names, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("AL change vs the earlier report (%)")
    ax.legend(loc="best", fontsize=8)
    ax.grid(True, axis="y", alpha=0.3)
    fig.suptitle(f"{title}: acceptance vs the earlier report")
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def write_plots(result, folder: Path) -> list[Path]:
    """The plots whose data the result holds."""
    by = {c.name: c for c in result.checks}
    perf, acc = by.get("performance"), by.get("acceptance")
    jobs = []
    if perf is not None and perf.details.get("levels"):
        jobs += [
            (latency_plot, perf.details, "latency_vs_concurrency.png"),
            (throughput_plot, perf.details, "throughput_vs_concurrency.png"),
        ]
        if any(p.get("speedup") is not None for p in perf.details.get("speedup", [])):
            jobs.append((speedup_plot, perf.details, "speedup_vs_concurrency.png"))
    if acc is not None and acc.details.get("records"):
        jobs.append((acceptance_plot, acc.details, "acceptance_per_position.png"))
    if acc is not None and acc.details.get("by_category"):
        jobs.append((acceptance_groups_plot, acc.details, "acceptance_per_category.png"))
    changes = [c for c in result.checks if c.name.startswith("against:acceptance:") and "change" in c.details]
    if changes:
        jobs.append((against_plot, changes, "against.png"))
    if not jobs:
        return []
    plt = _pyplot()
    title = f"{result.recipe} ({result.method})"
    return [fn(plt, details, folder / name, title) for fn, details, name in jobs]
