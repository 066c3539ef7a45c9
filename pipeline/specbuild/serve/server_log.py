"""Reading a tritonserver log: each model's load error, made short, with a hint where the cause is known."""

from __future__ import annotations

import re

FAILED_LOAD = re.compile(r"failed to load '(?P<model>[^']+)' version (?P<version>\d+): (?P<reason>.*)")
TABLE_ROW = re.compile(r"^\|\s*(?P<model>[^|\s]+)\s*\|\s*(?P<version>[^|\s]*)\s*\|\s*(?P<status>.*?)\s*\|\s*$")
LOG_PREFIX = re.compile(r"^[IWE]\d{4} \d\d:\d\d:\d\d\.\d+ \d+ [\w.]+:\d+\] ")
ADDRESS_IN_USE = ("address already in use", "failed to start", "Address already in use")


def strip_prefix(line: str) -> str:
    return LOG_PREFIX.sub("", line).strip().strip('"')


def load_errors_from_log(text: str) -> dict[str, str]:
    """Each model's load error, from the server log: the 'failed to load' lines, else the startup table."""
    errors: dict[str, str] = {}
    lines = text.splitlines()
    for i, line in enumerate(lines):
        m = FAILED_LOAD.search(strip_prefix(line))
        if not m:
            continue
        reason = m.group("reason").strip().strip('"')
        # A python traceback continues on the following lines, up to the next log record.
        j = i + 1
        while j < len(lines) and not LOG_PREFIX.match(lines[j]) and not lines[j].startswith(("+", "|")):
            reason += "\n" + lines[j].rstrip()
            j += 1
        errors[m.group("model")] = reason.strip().strip('"').strip()
    for line in lines:
        m = TABLE_ROW.match(line.strip())
        if not m or m.group("model") in ("Model", "Backend", "Option") or m.group("model") in errors:
            continue
        status = m.group("status")
        if status.startswith("UNAVAILABLE"):
            errors[m.group("model")] = status.split(":", 1)[1].strip() if ":" in status else status
    return errors


def plain_reason(reason: str) -> str:
    """A load error made short: the last exception line of a python traceback, else the message itself."""
    text = reason.replace("\\n", "\n").strip()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if not lines:
        return "unknown error"
    if len(lines) > 1 and any("Traceback" in ln for ln in lines):
        # last line that looks like "SomeError: message"
        for ln in reversed(lines):
            if re.match(r"^[\w.]+(Error|Exception|Exit|Interrupt)\b", ln):
                return ln
    first = lines[0]
    return first if len(first) < 400 else first[:397] + "..."


def hint(reason: str) -> str:
    """What to do about a known load error (empty when there is nothing to add)."""
    if "unable to find backend library for backend 'tensorrtllm'" in reason:
        return (
            " (this server has no TensorRT-LLM backend: serve the GPU repository in an NGC tritonserver "
            "trtllm container, or load only the python models with explicit model control)"
        )
    if "No module named" in reason:
        return (
            " (python models run with the Python whose bin folder is first on the server's PATH, and its stub "
            "ignores PYTHONPATH: install the missing package into that Python)"
        )
    return ""
