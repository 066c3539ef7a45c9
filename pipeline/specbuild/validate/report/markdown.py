"""report.md: the tables a person reads (checks, gates, performance per concurrency, acceptance, findings)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from specbuild.validate.report.cost_model import markdown_lines
from specbuild.validate.report.markdown_table import table

# the names of the checks against an earlier report (validate/compare.py names them, against_lines reads them):
# against:acceptance:<category>, against:speedup:<concurrency>
AGAINST_PREFIX = "against"
FILE = "report.md"
ICON = {
    "passed": "✅ passed",
    "failed": "❌ failed",
    "error": "💥 error",
    "warned": "⚠️ warning",
    "skipped": "➖ skipped",
    "inconclusive": "❔ inconclusive",
}
PLOT_TITLES = {
    "latency_vs_concurrency.png": "Latency vs concurrency",
    "throughput_vs_concurrency.png": "Throughput vs concurrency",
    "speedup_vs_concurrency.png": "Speedup vs concurrency",
    "acceptance_per_position.png": "Acceptance per draft position",
    "acceptance_per_category.png": "Acceptance per category and context length",
    "against.png": "Acceptance change per category vs the earlier report",
}


def ms(dist: dict | None, key: str) -> str:
    return f"{dist[key] * 1000:.1f}" if dist and dist.get(key) is not None else "–"


def sec(dist: dict | None, key: str) -> str:
    return f"{dist[key]:.3f}" if dist and dist.get(key) is not None else "–"


def status_text(check) -> str:
    text = ICON.get(check.status, check.status)
    return text + " (allowed by validation.allow_inconclusive)" if check.status == "inconclusive" and check.ok else text


def performance_rows(details: dict) -> list[list[Any]]:
    speed = {p["concurrency"]: p for p in details.get("speedup", [])}
    rows = []
    levels = details.get("levels", {})
    concurrencies = sorted({s["concurrency"] for vs in levels.values() for s in vs})
    for c in concurrencies:
        for dep, vs in levels.items():
            s = next((x for x in vs if x["concurrency"] == c), None)
            if s is None:
                continue
            sp = speed.get(c) if dep == "speculative" else None
            rows.append(
                [
                    c,
                    dep,
                    f"{s['requests'] - s['errors']}/{s['requests']}",
                    f"{s['output_tokens_per_s']:.1f}",
                    f"{s['requests_per_s']:.2f}",
                    f"{ms(s['ttft_s'], 'p50')} / {ms(s['ttft_s'], 'p90')} / {ms(s['ttft_s'], 'p99')}",
                    f"{ms(s['itl_s'], 'p50')} / {ms(s['itl_s'], 'p90')} / {ms(s['itl_s'], 'p99')}",
                    f"{sec(s['latency_s'], 'p50')} / {sec(s['latency_s'], 'p90')} / {sec(s['latency_s'], 'p99')}",
                    speedup_range_text(sp),
                ]
            )
    return rows


PERF_HEADER = [
    "concurrency",
    "deployment",
    "ok/requests",
    "output tok/s",
    "req/s",
    "TTFT ms p50/p90/p99",
    "ITL ms p50/p90/p99",
    "latency s p50/p90/p99",
    "speedup median (min–max)",
]


def speedup_text(value: float | None) -> str:
    if value is None:
        return ""
    return f"{value:.2f}×" if value >= 0.1 else f"{value:.3f}×"


def speedup_range_text(point: dict | None) -> str:
    """A level's speedup: the median of its rounds and their min–max (a speedup dict of the performance check)."""
    if not point or point.get("speedup") is None:
        return ""
    low, high = point.get("speedup_min"), point.get("speedup_max")
    if low is None or high is None or len(point.get("rounds") or ()) < 2:
        return speedup_text(point["speedup"])
    return f"{speedup_text(point['speedup'])} ({speedup_text(low)}–{speedup_text(high)})"


def _sweep_lines(details: dict) -> list[str]:
    """How the sweep was run and how busy the machine was, and the gate's verdict."""
    out = []
    if details.get("rounds"):
        out.append(
            f"Each level ran {details['rounds']} rounds, the deployments taking turns in "
            f"{details.get('round_order', 'ABBA')} order (odd rounds reversed, so that a steady drift in the machine's "
            "load weighs on both alike); a level's speedup is the median of its rounds' speedups, with their min–max."
        )
    load = {c: s for c, s in (details.get("machine_load") or {}).items() if s}
    if load:
        out.append(
            "Other processes' share of this machine's CPU time while measured: "
            + ", ".join(f"{s['foreign_share']:.0%} at concurrency {c}" for c, s in load.items())
            + f" (a gate is not judged above {details.get('busy_threshold', 0.25):.0%})."
        )
    verdict = details.get("gate_verdict")
    if verdict:
        out.append(f"**Gate:** {verdict['status']} — {verdict['why']}.")
    return [line for text in out for line in (text, "")]


def _levels(levels: list[int]) -> str:
    return ", ".join(str(c) for c in levels)


def crossover_text(cross: dict) -> str | None:
    """Where speculation is faster than the baseline and where slower, in words (a Crossover's to_dict, as
    report.json keeps it): "stops paying" only where it is faster below a concurrency and slower from it."""
    slower, faster = cross.get("slower_levels") or [], cross.get("faster_levels") or []
    if cross.get("always_faster"):
        return "faster than the baseline at every concurrency level measured"
    if cross.get("never_faster"):
        return "slower than the baseline at every concurrency level measured"
    if not slower and not faster:  # a report written before the levels were kept
        at = cross.get("interpolated") or cross.get("first_level_below_1")
        return f"first slower than the baseline at concurrency {at:.3g}" if at else None
    if faster and slower and max(faster) < min(slower):
        where = f"≈ {cross['interpolated']:.1f}" if cross.get("interpolated") else str(min(slower))
        return (
            f"speculation stops paying at concurrency {where}: faster than the baseline at {_levels(faster)}, "
            f"slower at {_levels(slower)}"
        )
    if min(slower) < min(faster):  # slower at low concurrency, faster above (or back and forth)
        return f"slower than the baseline at concurrency {_levels(slower)}; faster at {_levels(faster)}"
    return f"faster than the baseline at concurrency {_levels(faster)}; slower at {_levels(slower)}"


def _crossover_line(details: dict) -> str:
    cross = details.get("crossover")
    if not cross:
        return ""
    uncertain = cross.get("uncertain_levels") or []
    note = (
        " The rounds disagree about speedup ≥ 1× at concurrency " + ", ".join(str(c) for c in uncertain) + "."
        if uncertain
        else ""
    )
    said = crossover_text(cross)
    if not said:
        return ""
    if said.startswith("speculation stops paying"):
        return f"**Crossover:** {said} (medians of the rounds)." + note
    return f"Speculation is {said} (medians of the rounds)." + note


def _mib(value: int | None) -> str:
    return f"{value / 2**20:.0f} MiB" if value else "–"


def load_lines(L: dict) -> list[str]:
    """The load check's mix: good and bad requests, what was lost, the server's health and memory after."""
    g, b = L["good"], L["bad"]
    out = [
        f"{L['clients']} clients for {L['seconds']} s ({L['wall_s']:.1f} s with the requests in flight), "
        f"models {', '.join(L.get('models') or [])}: {L['sent']} requests, {L['requests_per_s']:.1f} req/s.",
        "",
    ]
    out += table(
        [
            "requests",
            "sent",
            "equal",
            "mixed",
            "diverged",
            "refused",
            "answered",
            "ended by client",
            "no answer",
            "lost",
        ],
        [
            ["good", g["sent"], g["equal"], g["mixed"], g["diverged"], g["error"], "", "", g["no answer"], L["lost"]],
            ["bad", b["sent"], "", "", "", b["refused"], b["answered"], b.get("ended", ""), b["no answer"], ""],
        ],
    )
    if L.get("by_case"):
        out += table(
            ["bad case", "sent", "refused", "answered", "ended by client", "no answer"],
            [
                [name, r["sent"], r["refused"], r["answered"], r.get("ended", ""), r["no answer"]]
                for name, r in L["by_case"].items()
            ],
        )
    h, srv = L.get("health") or {}, L.get("server")
    after = [
        f"server live: {'yes' if h.get('live') else 'NO'}",
        "every model ready" if not h.get("not_ready") else "NOT ready: " + ", ".join(h["not_ready"]),
    ]
    if srv is not None:
        growth = srv.get("rss_growth")
        after += [
            f"stubs died: {', '.join(srv['stubs_died']) or 'none'}",
            f"RSS (server + stubs) {_mib(srv.get('rss_before_bytes'))} → {_mib(srv.get('rss_after_bytes'))}"
            + (f" ({growth:+.1%})" if growth is not None else ""),
        ]
    out += ["After the load: " + "; ".join(after) + ".", ""]
    for problem in L.get("problems") or []:
        out += [f"- {problem}"]
    return out + ([""] if L.get("problems") else [])


def prompt_lines(prompt_format: dict | None, tokenizer: dict | None, prompt_set: dict | None = None) -> list[str]:
    """Where the prompts came from (categories, those left out), how they were sent (chat template or raw, and
    why) and the client's tokenizer, or why none."""
    lines = []
    if prompt_set:
        cats = ", ".join(f"{name} {n}" for name, n in prompt_set["categories"].items())
        lines.append(f"- prompt set: {prompt_set['source']} ({cats})")
        for o in prompt_set.get("left_out") or []:
            lines.append(f"- left out: {o['prompt']} ({o['category']}): {o['why']}")
        if prompt_set.get("ignored_keys"):
            lines.append(f"- {prompt_set['ignored_keys']}")
    if prompt_format:
        how = (
            f"through the target's chat template ({prompt_format['template']})"
            if prompt_format["used"] == "chat"
            else "as they are (raw)"
        )
        lines.append(f"- prompts: sent {how} — {prompt_format['why']}")
        example = prompt_format.get("example")
        if example:
            lines.append(f"- first prompt as sent: `{example[:400]!r}`" + (" (clipped)" if len(example) > 400 else ""))
    if tokenizer:
        lines.append(
            f"- client tokenizer: {tokenizer['folder']} ({tokenizer['reader']})"
            if "folder" in tokenizer
            else f"- client tokenizer: none — {tokenizer.get('problem')}"
        )
    return lines


def _iv(iv: dict | None, fmt: str = ".2f") -> str:
    return "–" if iv is None else f"{iv['value']:{fmt}} [{iv['low']:{fmt}}–{iv['high']:{fmt}}]"


def _position_cells(group: dict, depth: int) -> list[str]:
    """A group's per-position cells, one per position 1..depth: "–" where none of its requests gave steps."""
    found = group["per_position"] or []
    return [_iv(found[i]) if i < len(found) else "–" for i in range(depth)]


def acceptance_group_lines(a: dict) -> list[str]:
    """Acceptance per category and per context-length bucket, with intervals, and the gate's verdicts."""
    if not a.get("by_category"):
        return []
    interval = a.get("interval") or {}
    lines = [
        f"Per category and per context length (prompt tokens as sent); [low–high] is the "
        f"{interval.get('confidence', 0):.0%} bootstrap interval over requests ({interval.get('resamples')} "
        "resamples); AL and rates are pooled per verification step.",
        "",
    ]
    groups_all = a["by_category"] + a["by_context_length"]
    depth = max([a.get("positions") or 0, *(len(g["per_position"] or []) for g in groups_all)])
    header = ["requests", "steps", "AL", "acceptance rate"] + [f"pos {i}" for i in range(1, depth + 1)]
    for title, groups in (("category", a["by_category"]), ("context length", a["by_context_length"])):
        rows = [
            [g["group"], g["requests"], g["steps"], _iv(g["acceptance_length"]), _iv(g["acceptance_rate"], ".1%")]
            + _position_cells(g, depth)
            for g in groups
        ]
        lines += table([title] + header, rows)
    if a.get("per_position_note"):
        lines += [a["per_position_note"][:1].upper() + a["per_position_note"][1:] + ".", ""]
    if a.get("gate_verdicts"):
        lines += table(
            ["gated group", "minimum AL", "AL [interval]", "verdict"],
            [[v["group"], v["threshold"], _iv(v["acceptance_length"]), v["status"]] for v in a["gate_verdicts"]],
        )
    if a.get("gate_categories_missing"):
        lines += [
            "Gated categories with no prompts in the set (not judged): "
            + ", ".join(a["gate_categories_missing"])
            + ".",
            "",
        ]
    return lines


def against_lines(against: dict | None, checks) -> list[str]:
    """The comparison with an earlier report: what changed between the builds, acceptance per category and
    speedup per level, old and new, with the change's interval and the verdict."""
    if not against:
        return []
    lines = [f"## Against {against['report']}", ""]
    changes = against.get("changes") or []
    lines += ["What changed: " + ("; ".join(changes) if changes else "nothing the reports record") + ".", ""]
    acc = [c for c in checks if c.name.startswith(f"{AGAINST_PREFIX}:acceptance:") and "change" in c.details]
    if acc:
        lines += table(
            ["category", "earlier AL", "AL", "change [interval]", "verdict"],
            [
                [
                    c.details["category"],
                    f"{c.details['old_acceptance_length']:.3f}",
                    f"{c.details['new_acceptance_length']:.3f}",
                    f"{c.details['change']['value']:+.1%} [{c.details['change']['low']:+.1%} to "
                    f"{c.details['change']['high']:+.1%}]",
                    status_text(c),
                ]
                for c in acc
            ],
        )
    speed = [c for c in checks if c.name.startswith(f"{AGAINST_PREFIX}:speedup:")]
    if speed:

        def spread(p):
            return f"{p['speedup']:.2f} ({p['speedup_min']:.2f}–{p['speedup_max']:.2f})"

        lines += table(
            ["concurrency", "earlier speedup (rounds)", "speedup (rounds)", "verdict"],
            [[c.details["concurrency"], spread(c.details["old"]), spread(c.details["new"]), c.summary] for c in speed],
        )
    return lines


def _section(lines: list[str], title: str) -> None:
    lines += [f"## {title}", ""]


def _release_line(d: dict) -> list[str]:
    """llm-api flavour: which TensorRT-LLM release line model.yaml was written for, and why (the build's provenance);
    what runs in the method's place (AUTO's pick)."""
    build = d.get("build") or {}
    said = (build.get("versions") or {}).get("llm_api_release")
    return ([f"- model.yaml written for TensorRT-LLM {said}"] if said else []) + (
        [f"- what ran: {build['runs']}"] if build.get("runs") else []
    )


def write_markdown(result, folder: Path, plots: list[str]) -> Path:
    d = result.to_dict()
    lines = [
        f"# Validation report — {d['recipe']}",
        "",
        f"**Result: {'PASSED' if d['passed'] else 'FAILED'}**"
        f"{' (with warnings, below)' if d.get('warnings') else ''} — method `{d['method']}` on the `{d['runtime']}` "
        f"runtime, serving model `{d['serving_model']}` ({d.get('contract', 'engine')} contract), "
        f"{d['prompts']} prompts, {d['duration_s']:.1f} s "
        f"(started {d['started']}).",
        "",
        f"- speculative deployment: {result.target.describe()}",
        f"- baseline deployment: {result.baseline.describe() if result.baseline else 'none'}",
        *_release_line(d),
        *prompt_lines(d.get("prompt_format"), d.get("tokenizer"), d.get("prompt_set")),
        "",
        *[f"- ⚠️ warning: {w}" for w in d.get("warnings") or []],
        *([""] if d.get("warnings") else []),
    ]
    _section(lines, "Checks")
    lines += table(
        ["check", "status", "gate", "summary", "time s"],
        [[c.name, status_text(c), c.gate or "", c.summary, f"{c.duration_s:.1f}"] for c in result.checks],
    )
    by = {c.name: c for c in result.checks}
    lines += against_lines(d.get("against"), result.checks)

    perf = by.get("performance")
    if perf and perf.details.get("levels"):
        _section(lines, "Performance")
        lines += [
            f"Greedy, {perf.details.get('max_tokens')} tokens per request, closed loop over "
            f"{perf.details.get('protocol')}; ITL = {perf.details.get('itl_definition')}.",
            "",
        ]
        lines += table(PERF_HEADER, performance_rows(perf.details))
        lines += _sweep_lines(perf.details)
        cross = _crossover_line(perf.details)
        if cross:
            lines += [cross, ""]

    cost = by.get("cost_model")
    if cost and cost.details.get("levels"):
        _section(lines, "Cost model")
        lines += markdown_lines(cost.details)

    acc = by.get("acceptance")
    if acc and acc.details.get("records"):
        a = acc.details
        _section(lines, "Acceptance")
        lines += [
            f"Mean acceptance length (AL, bonus token included) **{a['mean_acceptance_length']:.3f}**; "
            f"draft acceptance rate {a['acceptance_rate']:.1%} ({a['accepted_draft_tokens']} of "
            f"{a['draft_tokens']} draft tokens, {a['steps']} steps). {a.get('definition', '')}",
            "",
        ]
        server = a.get("server_side") or {}
        if server.get("available"):
            srv, cli = server["server"], server["client"]
            lines += table(
                ["side", "AL", "verification steps", "draft tokens", "accepted tokens"],
                [
                    [
                        f"server ({server['model']} counters, metrics endpoint)",
                        f"{srv['mean_acceptance_length']:.3f}",
                        srv["steps"],
                        srv["draft_tokens"],
                        srv["accepted_tokens"],
                    ],
                    [
                        "client (per-request outputs)",
                        f"{cli['mean_acceptance_length']:.3f}",
                        cli["steps"],
                        cli["draft_tokens"],
                        cli["accepted_tokens"],
                    ],
                ],
            )
        elif server:
            lines += [f"Server-side acceptance: not available ({server.get('why')}).", ""]
        lines += acceptance_group_lines(a)
        if a.get("per_position"):
            lines += table(
                ["draft position"] + [str(i) for i in range(1, len(a["per_position"]) + 1)],
                [["accepted share"] + [f"{v:.3f}" for v in a["per_position"]]],
            )
        if a.get("histogram"):
            lines += table(
                ["accepted drafts per step"] + [str(i) for i in range(len(a["histogram"]))],
                [["steps"] + a["histogram"]],
            )
        lines += table(
            ["prompt", "tokens", "accepted", "drafted", "rate (server)", "steps", "AL"],
            [
                [
                    r.get("prompt") or r["prompt_index"],
                    r["output_tokens"],
                    r["accepted_draft_tokens"],
                    r["draft_tokens"],
                    "–" if r["server_acceptance_rate"] is None else f"{r['server_acceptance_rate']:.3f}",
                    r["steps"],
                    f"{r['acceptance_length']:.3f}",
                ]
                for r in a["records"]
            ],
        )

    loss = by.get("lossless")
    if loss and loss.details.get("differences"):
        _section(lines, "Lossless differences")
        lines += table(
            ["prompt", "first difference", "speculative continues", "baseline continues"],
            [
                [
                    x["prompt"],
                    f"{x['unit']} {x['position']}",
                    repr(x.get("speculative_text", "")),
                    repr(x.get("baseline_text", "")),
                ]
                for x in loss.details["differences"]
            ],
        )

    samp = by.get("sampling")
    if samp and "p_value" in samp.details:
        s = samp.details
        _section(lines, "Sampling distribution")
        lines += [
            f"{s['test']}: statistic {s['statistic']:.3f}, {s['dof']} dof, p = {s['p_value']:.4g} "
            f"(fails below {s['significance']}); total variation {s['total_variation']:.3f}; "
            f"{s['trials']} seeds per deployment at temperature {s['temperature']}, first {s['tokens']} tokens.",
            "",
        ]
        lines += table(
            ["outcome", "speculative", "baseline"],
            [[c, a, b] for c, a, b in zip(s["columns"], s["counts_a"], s["counts_b"])][:20],
        )

    bad = by.get("bad_input")
    if bad and bad.details.get("cases"):
        _section(lines, "Bad input")
        lines += table(
            ["case", "expected", "outcome", "healthy after", "message"],
            [
                [
                    r["case"],
                    r["expect"],
                    r["outcome"],
                    {True: "yes", False: "NO"}.get(r.get("healthy_after"), ""),
                    r.get("message") or "",  # whole: GitHub wraps a cell to the page (markdown_table.py)
                ]
                for r in bad.details["cases"]
            ],
        )

    load = by.get("load")
    if load and "sent" in load.details:
        _section(lines, "Load")
        lines += load_lines(load.details)

    func = by.get("functional")
    if func and func.details.get("prompts"):
        _section(lines, "Prompts (speculative deployment, greedy)")
        lines += table(
            ["prompt", "category", "tokens", "latency s", "text"],
            [
                [r["prompt"], r["category"], r["tokens"], r["latency_s"], repr(r["text"])]
                for r in func.details["prompts"]
            ],
        )

    if plots:
        _section(lines, "Plots")
        for name in plots:
            lines += [f"![{PLOT_TITLES.get(name, name)}]({name})", ""]
    path = folder / FILE
    path.write_text("\n".join(lines), encoding="utf-8")
    return path
