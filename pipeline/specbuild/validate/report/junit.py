"""junit.xml: one test case per check, for CI systems (failed -> <failure>, error -> <error>,
skipped -> <skipped>, inconclusive -> <failure type="inconclusive"> unless validation.allow_inconclusive; a warning
and an allowed inconclusive pass with the finding in <system-out>)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

from specbuild.validate.checks.base import ERROR, FAILED, INCONCLUSIVE, SKIPPED, WARNED
from specbuild.validate.report.json_report import clean

FILE = "junit.xml"


def junit_tree(result) -> ET.ElementTree:
    checks = result.checks
    counts = {
        "tests": len(checks),
        "failures": sum(c.status == FAILED or (c.status == INCONCLUSIVE and not c.ok) for c in checks),
        "errors": sum(c.status == ERROR for c in checks),
        "skipped": sum(c.status == SKIPPED for c in checks),
    }
    total_time = f"{result.duration_s:.3f}"
    root = ET.Element(
        "testsuites", name="specbuild validate", time=total_time, **{k: str(v) for k, v in counts.items()}
    )
    suite = ET.SubElement(
        root,
        "testsuite",
        name=f"specbuild.validate.{result.recipe}",
        time=total_time,
        timestamp=result.started,
        **{k: str(v) for k, v in counts.items()},
    )
    props = ET.SubElement(suite, "properties")
    for k, v in (
        ("method", result.method),
        ("runtime", result.runtime),
        ("serving_model", result.serving_model),
        ("target", result.target.describe()),
        ("baseline", result.baseline.describe() if result.baseline else "none"),
    ):
        ET.SubElement(props, "property", name=k, value=str(v))
    for c in checks:
        case = ET.SubElement(
            suite, "testcase", classname=f"specbuild.validate.{result.recipe}", name=c.name, time=f"{c.duration_s:.3f}"
        )
        text = json.dumps(clean(c.details), indent=1)[:20000]
        if c.status == FAILED:
            ET.SubElement(case, "failure", message=c.summary, type=c.gate or "check").text = text
        elif c.status == ERROR:
            ET.SubElement(case, "error", message=c.summary, type="error").text = text
        elif c.status == INCONCLUSIVE and not c.ok:
            ET.SubElement(case, "failure", message=c.summary, type="inconclusive").text = text
        elif c.status == SKIPPED:
            ET.SubElement(case, "skipped", message=c.summary)
        out = ET.SubElement(case, "system-out")
        prefix = {WARNED: "WARNING: "}.get(c.status, "")
        if c.status == INCONCLUSIVE:
            prefix = "INCONCLUSIVE (allowed by validation.allow_inconclusive): " if c.ok else "INCONCLUSIVE: "
        out.text = prefix + c.summary
    ET.indent(root)
    return ET.ElementTree(root)


def write_junit(result, folder: Path) -> Path:
    path = folder / FILE
    junit_tree(result).write(path, encoding="utf-8", xml_declaration=True)
    return path
