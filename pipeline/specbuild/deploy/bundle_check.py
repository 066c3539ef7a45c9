"""Validate a bundle without a cluster (docs/deploying.md): `validate_bundle` and `check_bundle` read the written
documents (specbuild.deploy.bundle_docs) and run the schema rules (specbuild.deploy.manifest_rules) and the
cross-checks (specbuild.deploy.cross_checks, reading the compiled repository: specbuild.deploy.repository_facts).

1. Schemas, strict (unknown fields are errors):
   - every Kubernetes object against the schemas of `deploy.kubernetes.version`, with the kubernetes-validate
     package (`kubernetes_validate.validate(doc, version, strict=True)`);
   - LeaderWorkerSet, PodMonitor, PrometheusRule against their published CRD schemas (specbuild.deploy.crds, made
     strict), their root metadata as ObjectMeta, and the LeaderWorkerSet's pod templates as core PodTemplates of the
     stated version; plus the LeaderWorkerSet webhook's rules, which its schema does not carry.
2. Cross-checks against the recipe and, when compiled, the repository on disk: world size = tp * pp = pods x GPUs
   per pod; the container command is exactly the repository's launch command (Slurm: each rank is the script's, or
   each task runs the command; llm-api across nodes: the leader's mpirun runs it on tp * pp ranks); the
   repository's model.yaml is the recipe's and every checkpoint it names is mounted (llm-api);
   ports agree with the repository's launch script and the recipe; probes hit /v2/health/live and /v2/health/ready
   on the HTTP port; /dev/shm is a memory volume within the memory limit; every path config.pbtxt reads is mounted;
   selectors match the pods; the HPA scales the workload on a recorded metric; the draft and target engines run on
   the GPUs the recipe names, inside the pod's GPUs; the bundle's repository/ is the compiled repository with the
   containers' paths, and no file that runs in the cluster names a folder of the machine that compiled.

Each problem is a BundleFinding: file, field path, message. `check_bundle` raises them as one UserError.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

from specbuild.deploy.bundle_docs import KUSTOMIZATION, BundleFinding, Doc, load_bundle
from specbuild.deploy.checks import deploy_findings
from specbuild.deploy.cross_checks import cross_findings
from specbuild.deploy.manifest_rules import INSTALL, schema_findings, schema_validation_available
from specbuild.deploy.context import context
from specbuild.deploy.yamlio import load_all
from specbuild.errors import UserError

if TYPE_CHECKING:
    from specbuild.plan import Layout
    from specbuild.runtimes.build import Build

# --- 3. kubectl kustomize --------------------------------------------------------------------------------------


def kubectl_binary() -> str | None:
    return shutil.which("kubectl")


def render_kustomize(folder: Path, kubectl: str | None = None) -> list[dict]:
    """`kubectl kustomize <folder>` (no cluster needed), parsed. UserError when kubectl fails or is absent."""
    binary = kubectl or kubectl_binary()
    if binary is None:
        raise UserError("kubectl is not on PATH: install it to render the bundle with kubectl kustomize")
    run = subprocess.run(
        [binary, "kustomize", str(folder)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "KUBECONFIG": "/dev/null"},
    )
    if run.returncode != 0:
        raise UserError(f"kubectl kustomize {folder} failed: {run.stderr.strip()[-800:]}")
    return load_all(run.stdout)


# --- entry points ----------------------------------------------------------------------------------------------


def validate_bundle(
    folder: Path,
    build: Build,
    layout: Layout,
    *,
    schemas: bool | None = True,
    bundle_folder: Path | None = None,
    kubectl: bool = False,
) -> list[BundleFinding]:
    """Every problem of the bundle in `folder` (written for `bundle_folder`, default `folder`).

    schemas: True: strict schema validation (UserError when kubernetes-validate is missing); None: when
    installed; False: cross-checks only. kubectl: also render with `kubectl kustomize` and validate its output."""
    folder = Path(folder)
    if schemas and not schema_validation_available():
        raise UserError(f"validating a bundle against the Kubernetes schemas needs kubernetes-validate — {INSTALL}")
    use_schemas = schema_validation_available() if schemas is None else schemas
    recipe = build.recipe
    recipe_problems = [
        BundleFinding(str(recipe.source or "(recipe)"), ".".join(map(str, f.path)), f.message)
        for f in deploy_findings(build)
    ]
    ctx = context(build, layout, bundle_folder or folder)
    docs, extra, problems = load_bundle(folder)
    problems = recipe_problems + problems
    version = recipe.deploy.kubernetes.version
    if use_schemas:
        problems += list(schema_findings(docs + extra, version))
    problems += list(cross_findings(ctx, docs, folder))
    if kubectl:
        rendered = render_kustomize(folder)
        mine = {(d.kind, d.name) for d in docs}
        got = {(str(d.get("kind")), str((d.get("metadata") or {}).get("name"))) for d in rendered}
        if got != mine:
            problems.append(
                BundleFinding(
                    KUSTOMIZATION, "", f"kubectl kustomize renders {sorted(got)}, the files hold {sorted(mine)}"
                )
            )
        if use_schemas:
            problems += [
                BundleFinding("(kubectl kustomize output)", f.field, f.message)
                for f in schema_findings([Doc("(rendered)", i, d) for i, d in enumerate(rendered)], version)
            ]
    return problems


def check_bundle(
    folder: Path,
    build: Build,
    layout: Layout,
    *,
    schemas: bool | None = None,
    bundle_folder: Path | None = None,
    kubectl: bool = False,
) -> None:
    """validate_bundle, raising the findings as one UserError."""
    problems = validate_bundle(folder, build, layout, schemas=schemas, bundle_folder=bundle_folder, kubectl=kubectl)
    if problems:
        where = bundle_folder or folder
        raise UserError(
            f"deployment bundle {where} is not valid:\n"
            + "\n".join(f"  {p}" for p in problems)
            + "\n— fix the recipe's deploy section (or triton/build values) and recompile"
        )
