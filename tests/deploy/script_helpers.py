"""Running a bundle's scripts in a test: bash in a temp folder, with stand-ins first on PATH for every program the
scripts call, each recording its arguments (kubectl also runs the loader pod's `sh -c` locally, into a folder that
stands for the claim, so copy-models.sh can be replayed)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from specbuild.deploy.kubernetes import LOADER_ROOT

RECORDER = """#!{python}
import json, os, sys
with open(os.environ["RECORD"], "a") as f:
    f.write(json.dumps([os.path.basename(sys.argv[0]), *sys.argv[1:]]) + "\\n")
"""
# kubectl: records, and runs `exec ... -- CMD` locally with the loader's claim root mapped to CLAIM (copy-models.sh)
KUBECTL = """#!{python}
import json, os, sys
with open(os.environ["RECORD"], "a") as f:
    f.write(json.dumps(["kubectl", *sys.argv[1:]]) + "\\n")
args = sys.argv[1:]
if args[:1] == ["exec"] and "--" in args and args[args.index("--") + 1:][:1] == ["sh"]:
    root, claim = {root!r}, os.environ["CLAIM"]
    cmd = [claim + a[len(root):] if a == root or a.startswith(root + "/") else a for a in args[args.index("--") + 1:]]
    os.execvp(cmd[0], cmd)
"""
STANDINS = (
    "sbatch",
    "srun",
    "scontrol",
    "enroot",
    "apptainer",
    "ssh",
    "mpirun",
    "tritonserver",
    "docker",
    "kustomize",
    "curl",
    "helm",
    "nvidia-smi",
    "trtllm-llmapi-launch",
)


def standins(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name in STANDINS:
        (folder / name).write_text(RECORDER.format(python=sys.executable))
    (folder / "kubectl").write_text(KUBECTL.format(python=sys.executable, root=LOADER_ROOT))
    for p in folder.iterdir():
        p.chmod(0o755)
    return folder


class Runner:
    """Runs scripts with bash in `work`, the stand-ins first on PATH, every call recorded."""

    def __init__(self, root: Path):
        self.work = root / "work"
        self.work.mkdir()
        self.record = root / "record.jsonl"
        self.claim = root / "claim"
        self.claim.mkdir()
        self.bin = standins(root / "bin")

    def env(self, **more: str) -> dict[str, str]:
        return {
            **os.environ,
            "PATH": f"{self.bin}{os.pathsep}{os.environ['PATH']}",
            "RECORD": str(self.record),
            "CLAIM": str(self.claim),
            "HOME": str(self.work),
            **more,
        }

    def bash(self, *args: str, cwd: Path | None = None, **env: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["/bin/bash", *args],
            cwd=cwd or self.work,
            env=self.env(**env),
            capture_output=True,
            text=True,
            timeout=120,
            stdin=subprocess.DEVNULL,
        )

    def calls(self) -> list[list[str]]:
        if not self.record.is_file():
            return []
        return [json.loads(line) for line in self.record.read_text().splitlines()]

    def clear(self) -> None:
        self.record.unlink(missing_ok=True)


def bash_blocks(readme: str) -> list[str]:
    return re.findall(r"```bash\n(.*?)```", readme, re.S)
