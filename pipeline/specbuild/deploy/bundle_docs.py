"""The documents of a written bundle, read back for its checks (specbuild.deploy.bundle_check): the
kustomization's resources and the extra files, and the findings about them (file, field path, message)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specbuild.deploy.yamlio import load_all

KUSTOMIZATION = "kustomization.yaml"
EXTRA_FILES = ("loader-pod.yaml",)  # validated, not applied by -k


@dataclass(frozen=True)
class BundleFinding:
    file: str
    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.file}: {self.field}: {self.message}" if self.field else f"{self.file}: {self.message}"


def fmt(path: Any) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


@dataclass(frozen=True)
class Doc:
    file: str
    index: int
    body: dict

    @property
    def kind(self) -> str:
        return str(self.body.get("kind"))

    @property
    def name(self) -> str:
        return str((self.body.get("metadata") or {}).get("name"))

    def finding(self, field: Any, message: str) -> BundleFinding:
        where = fmt(field) if not isinstance(field, str) else field
        prefix = f"{self.kind} {self.name}" + (f" (document {self.index + 1})" if self.index else "")
        return BundleFinding(self.file, where, f"{prefix}: {message}")


# --- loading ---------------------------------------------------------------------------------------------------


def load_bundle(folder: Path) -> tuple[list[Doc], list[Doc], list[BundleFinding]]:
    """(applied documents from the kustomization, extra documents, problems reading them)."""
    problems: list[BundleFinding] = []
    kust_path = folder / KUSTOMIZATION
    if not kust_path.is_file():
        return [], [], [BundleFinding(KUSTOMIZATION, "", "missing — recompile to write the bundle")]
    try:
        kust = load_all(kust_path.read_text())[0]
    except Exception as e:  # ruamel's errors carry the position
        return [], [], [BundleFinding(KUSTOMIZATION, "", f"not YAML: {e}")]
    resources = kust.get("resources") or []
    docs: list[Doc] = []
    for rel in resources:
        path = folder / rel
        if not path.is_file():
            problems.append(BundleFinding(KUSTOMIZATION, "resources", f"lists {rel}, which does not exist"))
            continue
        try:
            docs += [Doc(rel, i, d) for i, d in enumerate(load_all(path.read_text()))]
        except Exception as e:
            problems.append(BundleFinding(rel, "", f"not YAML: {e}"))
    extra = []
    for rel in EXTRA_FILES:
        if (folder / rel).is_file():
            extra += [Doc(rel, i, d) for i, d in enumerate(load_all((folder / rel).read_text()))]
    listed = set(resources)
    for path in sorted(folder.glob("*.yaml")):
        if path.name not in listed and path.name not in EXTRA_FILES and path.name != KUSTOMIZATION:
            problems.append(BundleFinding(path.name, "", "is not in kustomization.yaml resources: add it or remove it"))
    return docs, extra, problems
