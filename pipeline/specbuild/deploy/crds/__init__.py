"""The published CRD schemas the bundle's custom resources are validated against (as `kubectl --validate=strict` would;
docs/deploying.md).

Each `*.json.gz` here holds the unmodified `spec.versions[].schema.openAPIV3Schema` of one upstream CRD file
(named, with its sha256, in the file and in README.md). Regenerate one with
`python -m specbuild.deploy.crds CRD.yaml` (PyYAML needed).

`strict()` makes a schema reject unknown fields the way the API server does with `kubectl --validate=strict`:
every object node that lists properties and does not say otherwise gets `additionalProperties: false`.
"""

from __future__ import annotations

import copy
import gzip
import hashlib
import json
from functools import lru_cache
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent

# (apiVersion, kind) -> file, upstream path, sha256 of the upstream CRD YAML
CRDS: dict[tuple[str, str], tuple[str, str, str]] = {
    ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet"): (
        "leaderworkerset-v0.10.0.json.gz",
        "kubernetes-sigs/lws v0.10.0 config/crd/bases/leaderworkerset.x-k8s.io_leaderworkersets.yaml",
        "c5dcad8ed943e495490241f00b9a1b45d51203b6d484020db3636d5bf553568e",
    ),
    ("monitoring.coreos.com/v1", "PodMonitor"): (
        "podmonitors-v0.93.0.json.gz",
        "prometheus-operator/prometheus-operator v0.93.0 example/prometheus-operator-crd/"
        "monitoring.coreos.com_podmonitors.yaml",
        "45a93443daa687d3654f7e9631909ff7edcdf3ec09c5e60251b74aa2722aee5d",
    ),
    ("monitoring.coreos.com/v1", "PrometheusRule"): (
        "prometheusrules-v0.93.0.json.gz",
        "prometheus-operator/prometheus-operator v0.93.0 example/prometheus-operator-crd/"
        "monitoring.coreos.com_prometheusrules.yaml",
        "78be98554b9c8506ab2b4f4feb91c5f3a56e536a0a510f3a8e876a459970d56d",
    ),
}


def extract(crd: dict, source: str, sha256: str) -> dict[str, Any]:
    """The served versions' openAPIV3Schema of a parsed CRD document, with provenance."""
    spec = crd["spec"]
    return {
        "group": spec["group"],
        "kind": spec["names"]["kind"],
        "source": source,
        "sha256": sha256,
        "versions": {v["name"]: v["schema"]["openAPIV3Schema"] for v in spec["versions"] if v.get("served")},
    }


def write(data: dict, path: Path) -> None:
    raw = json.dumps(data, sort_keys=True, separators=(",", ":")).encode()
    with open(path, "wb") as f, gzip.GzipFile(fileobj=f, mode="wb", mtime=0, compresslevel=9) as gz:
        gz.write(raw)


@lru_cache(maxsize=None)
def _load(file: str) -> dict[str, Any]:
    with gzip.open(HERE / file, "rt") as f:
        return json.load(f)


def schema_for(api_version: str, kind: str) -> dict[str, Any] | None:
    """The published openAPIV3Schema of a custom resource, or None when specbuild ships none for it."""
    entry = CRDS.get((api_version, kind))
    if entry is None:
        return None
    data = _load(entry[0])
    return data["versions"].get(api_version.split("/", 1)[1])


def provenance(api_version: str, kind: str) -> str:
    file, source, sha = CRDS[(api_version, kind)]
    return f"{source} (sha256 {sha[:12]}...)"


def strict(schema: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(schema)

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if (
                node.get("type") == "object"
                and "properties" in node
                and "additionalProperties" not in node
                and not node.get("x-kubernetes-preserve-unknown-fields")
            ):
                node["additionalProperties"] = False
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(out)
    return out


def main(argv: list[str] | None = None) -> int:
    import sys

    import yaml

    for name in argv if argv is not None else sys.argv[1:]:
        text = Path(name).read_bytes()
        sha = hashlib.sha256(text).hexdigest()
        doc = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
        entry = next((k, v) for k, v in CRDS.items() if v[2] == sha)
        write(extract(doc, entry[1][1], sha), HERE / entry[1][0])
        print(f"{name} -> {HERE / entry[1][0]}")
    return 0
