"""What the installed `trtllm-build` accepts, read from its `--help`, checked against a command before it runs.

Flag spellings and defaults drift between TensorRT-LLM releases (tensorrt_llm/commands/build.py), so every command
is checked against the installed tool: each flag must be listed, and a value must be one of the flag's choices
when argparse prints them (`--gemm_plugin {auto,float16,...}`).
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass

from specbuild.errors import UserError

_OPTION = re.compile(r"--[A-Za-z0-9][\w-]*")
_CHOICES = re.compile(r"\{([^{}]*)\}")


@dataclass(frozen=True)
class HelpFlags:
    """flag -> its choices (None when argparse prints a metavar instead of choices)."""

    flags: dict[str, tuple[str, ...] | None]
    tool: str

    def problems(self, argv: list[str]) -> list[str]:
        """Every flag of argv the tool does not list, and every value outside a flag's choices."""
        out = []
        for i, arg in enumerate(argv[1:], 1):
            if not arg.startswith("--"):
                continue
            if arg not in self.flags:
                out.append(f"{arg} is not an option of this trtllm-build")
                continue
            choices = self.flags[arg]
            value = argv[i + 1] if i + 1 < len(argv) and not argv[i + 1].startswith("--") else None
            if choices and value is not None and value not in choices:
                out.append(f"{arg} {value}: this trtllm-build accepts {{{','.join(choices)}}}")
        return out


def parse_help(text: str, tool: str = "trtllm-build") -> HelpFlags:
    """Read the option lines of an argparse help text (`  --flag VALUE, --alias VALUE   help...`).

    Only the invocation part of option lines counts: help sentences such as "``--remove_input_padding disable``"
    mention flags without declaring them.
    """
    flags: dict[str, tuple[str, ...] | None] = {}
    for line in text.splitlines():
        stripped = line.lstrip(" ")
        indent = len(line) - len(stripped)
        if not stripped.startswith("-") or indent > 6:
            continue
        invocation = re.split(r"\s{2,}", stripped, maxsplit=1)[0]
        for part in invocation.split(", "):
            names = _OPTION.findall(part.split(" ")[0])
            if not names:
                continue
            m = _CHOICES.search(part)
            flags[names[0]] = tuple(c.strip() for c in m.group(1).split(",")) if m else None
    return HelpFlags(flags, tool)


def read_help(exe: str = "trtllm-build", env: dict | None = None) -> HelpFlags:
    try:
        out = subprocess.run([exe, "--help"], capture_output=True, text=True, timeout=300, env=env)
    except FileNotFoundError:
        raise UserError(
            f"{exe} is not on PATH — it comes with the TensorRT-LLM wheel (pip install "
            '"tensorrt_llm>=0.17,<=1.3.0rc20"); activate the Python environment that has it'
        ) from None
    except subprocess.TimeoutExpired:
        raise UserError(f"`{exe} --help` did not finish in 5 minutes — check the TensorRT-LLM installation") from None
    if out.returncode != 0:
        tail = "\n".join((out.stderr or out.stdout).strip().splitlines()[-10:])
        raise UserError(f"`{exe} --help` failed (exit {out.returncode}):\n{tail}\n— fix the TensorRT-LLM installation")
    parsed = parse_help(out.stdout, exe)
    if not parsed.flags:
        raise UserError(f"`{exe} --help` printed no options — is {exe} really TensorRT-LLM's trtllm-build?")
    return parsed
