"""The deployment bundle of a recipe: `deploy/<name>/` beside `triton_repo/`, written atomically.

    from specbuild.deploy.bundle import write_bundle, bundle_plan
    write_bundle(build, layout)           # -> deploy/<name> (validated before it is renamed into place)
    bundle_plan(build, layout)            # the files and the world layout, for `specbuild plan`
    deploy_step(build, layout)            # the plan's step that writes it (specbuild.planning)

Files (plain YAML + kustomization.yaml, `kubectl apply -k deploy/<name>`):
    kustomization.yaml, storage.yaml (PVC), deployment.yaml | statefulset.yaml | leaderworkerset.yaml,
    service.yaml, podmonitor.yaml, prometheusrule.yaml, hpa.yaml (when max_replicas > min_replicas),
    rbac.yaml + mpi.yaml + Containerfile (multi-node), loader-pod.yaml (fills the claim; not applied by -k),
    (the same files for both flavours: engine and llm-api, specbuild.deploy.kind)
    slurm/<name>.sbatch + slurm/ranks.sh (+ slurm/enroot.conf), bundle.json (this plan), README.md,
    repository/ (the compiled repository with the containers' paths: specbuild.deploy.repository),
    copy-models.sh (fills the claim or the Slurm models folder: specbuild.deploy.copying)

Nothing of the machine that compiled appears in what runs in the cluster: the containers read below
deploy.mount_root; only copy-models.sh names the folders it copies from.
"""

from __future__ import annotations

import json
import shlex
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from specbuild.files import atomic
from specbuild.deploy import kubernetes as k8s
from specbuild.deploy import monitoring
from specbuild.deploy.bundle_check import check_bundle
from specbuild.deploy.context import DeployContext, bundle_folder, context
from specbuild.deploy.copying import COPY_SCRIPT, copy_script
from specbuild.deploy.manifest_rules import schema_validation_available
from specbuild.deploy.readme import bundle_readme
from specbuild.deploy.repository import FOLDER, container_repository
from specbuild.deploy.slurm import slurm_files
from specbuild.deploy.world import describe
from specbuild.deploy.yamlio import dump_all
from specbuild.errors import UserError
from specbuild.plan import DeployStep
from specbuild.deploy.context import applies
from specbuild.recipe.deploy import DeploySection
from specbuild.files.paths import show

if TYPE_CHECKING:
    from specbuild.plan import Layout
    from specbuild.recipe.schema import Recipe
    from specbuild.runtimes.build import Build

KUSTOMIZATION = "kustomization.yaml"
PLAN_FILE = "bundle.json"


def manifests(ctx: DeployContext) -> dict[str, Callable[[], list[dict]]]:
    """Kustomization resources: file name -> what makes its documents, in apply order (naming them renders
    nothing: `specbuild plan` lists the names)."""
    files: dict[str, Callable[[], list[dict]]] = {}
    if ctx.deploy.storage.create_claim:
        files["storage.yaml"] = lambda: [k8s.claim(ctx)]
    if ctx.world.multi_node:
        files["rbac.yaml"] = lambda: k8s.rbac(ctx)
        files["mpi.yaml"] = lambda: [k8s.mpi_config(ctx)]
    files[f"{ctx.workload_kind.lower()}.yaml"] = lambda: [k8s.workload(ctx)]
    files["service.yaml"] = lambda: monitoring.service(ctx)
    files["podmonitor.yaml"] = lambda: [monitoring.pod_monitor(ctx)]
    files["prometheusrule.yaml"] = lambda: [monitoring.prometheus_rule(ctx)]
    if k8s.autoscaled(ctx):
        files["hpa.yaml"] = lambda: [monitoring.hpa(ctx)]
    return files


def rendered_files(ctx: DeployContext, header: str) -> dict[str, Callable[[], str]]:
    """Every file of the bundle but bundle.json, README.md and repository/: relative path -> what renders it."""
    docs = manifests(ctx)
    files: dict[str, Callable[[], str]] = {rel: partial(_dump, make, header) for rel, make in docs.items()}
    files[KUSTOMIZATION] = lambda: dump_all([kustomization(ctx, list(docs))], header)
    loader_header = header + "\nNot in the kustomization: apply it to fill the claim with copy-models.sh (README.md)"
    files["loader-pod.yaml"] = lambda: dump_all([k8s.loader_pod(ctx)], loader_header)
    if ctx.world.multi_node:
        files["Containerfile"] = lambda: k8s.containerfile(ctx)
    files.update(slurm_files(ctx))
    files[COPY_SCRIPT] = lambda: copy_script(ctx)
    return files


def _dump(make: Callable[[], list[dict]], header: str) -> str:
    return dump_all(make(), header)


def kustomization(ctx: DeployContext, resources: list[str]) -> dict[str, Any]:
    return {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "namespace": ctx.namespace,
        "resources": resources,
    }


def plan_of(ctx: DeployContext, files: list[str], path: Callable[[str], str] = str) -> dict[str, Any]:
    """The bundle's summary; `path` prints paths (bundle.json: absolute; `specbuild plan`: relative to the
    working directory, as the rest of the plan)."""
    w = ctx.world
    out: dict[str, Any] = {
        "folder": path(str(ctx.folder)),
        "kubernetes": f"{ctx.workload_kind} {ctx.name} in namespace {ctx.namespace} (validated against "
        f"Kubernetes {ctx.deploy.kubernetes.version})",
        "image": f"{ctx.image.reference} ({ctx.image.why})",
        "world": w.summary,
        "layout": describe(w),
        "pods": (
            f"LeaderWorkerSet groups of {w.nodes} pods (leader {ctx.name}-<group>, workers "
            f"{ctx.name}-<group>-<i>), {w.gpus_per_pod} GPU(s) each"
            if w.multi_node
            else f"one pod per replica with {w.gpus_per_pod} GPU(s)"
        ),
        "command": shlex.join(ctx.launch.container_argv),
        **(
            {"leader": "writes the hostfile, then execs " + shlex.join(ctx.launch.leader_argv)}
            if ctx.launch.leader_argv and w.multi_node
            else {}
        ),
        "replicas": f"{ctx.deploy.autoscaling.min_replicas}..{ctx.deploy.autoscaling.max_replicas}"
        + (f" (HPA on {monitoring.QUEUE_COMPUTE} of {ctx.scale_model})" if k8s.autoscaled(ctx) else ""),
        "storage": f"claim {ctx.claim}, folder {ctx.name} at {ctx.tree} in the containers: "
        + "; ".join(
            f"{m.what} {m.container} <- "
            + (f"{FOLDER}/ (the compiled repository, its paths rewritten)" if m.bundled else path(str(m.source)))
            for m in ctx.mounts
        ),
        "slurm": f"sbatch slurm/{ctx.name}.sbatch ({ctx.deploy.slurm.container_runtime})",
        "files": files,
    }
    return out


def allowed_values(recipe: Recipe) -> None:
    """The deploy section validated again, as `check` does: a recipe changed in code after loading (model_copy)
    skips the schema's allow-lists, and nothing in a bundle may come from a value they refuse."""
    from pydantic import ValidationError

    try:
        DeploySection.model_validate(recipe.deploy.model_dump(warnings=False))
    except ValidationError as e:
        problems = "; ".join(f"deploy.{'.'.join(map(str, err['loc']))}: {err['msg']}" for err in e.errors())
        raise UserError(
            f"{recipe.source or 'recipe'}: {problems} — fix the recipe (specbuild check shows where)"
        ) from None


def _context(build: Build, layout: Layout, folder: Path | None, trtllm_version: str | None) -> DeployContext:
    recipe = build.recipe
    allowed_values(recipe)
    try:
        return context(build, layout, folder, trtllm_version)
    except ValueError as e:
        raise UserError(
            f"{recipe.source or 'recipe'}: deploy: {e} — set deploy.image.tag (or "
            "deploy.image.trtllm_version) to an NGC tritonserver trtllm image"
        ) from e


def _header(build: Build, ctx: DeployContext) -> str:
    return (
        f"specbuild deployment bundle of recipe {build.recipe.name!r} ({ctx.name}); regenerate with specbuild "
        "compile, edit the recipe's deploy section rather than this file"
    )


def _names(rendered: dict[str, Callable[[], str]]) -> list[str]:
    return sorted([*rendered, PLAN_FILE, "README.md", f"{FOLDER}/"])


def build_bundle(
    build: Build,
    layout: Layout,
    *,
    folder: Path | None = None,
    trtllm_version: str | None = None,
    schemas: bool = True,
    repository: bool = True,
) -> tuple[DeployContext, dict[str, str]]:
    """Every file of the bundle as relative path -> text (repository=False: without repository/, which needs the
    compiled repository). Writes nothing."""
    ctx = _context(build, layout, folder, trtllm_version)
    rendered = rendered_files(ctx, _header(build, ctx))
    files = {rel: render() for rel, render in rendered.items()}
    plan = plan_of(ctx, _names(rendered))
    files[PLAN_FILE] = json.dumps(plan, indent=2) + "\n"
    files["README.md"] = bundle_readme(ctx, plan, schemas)
    if repository:
        files.update({f"{FOLDER}/{rel}": text for rel, text in container_repository(ctx).items()})
    return ctx, files


def bundle_plan(build: Build, layout: Layout, *, trtllm_version: str | None = None) -> dict[str, Any]:
    """What `specbuild plan` shows for the bundle: its folder, files, image, command and world layout, from the
    deploy context alone (no file is rendered)."""
    why_not = applies(build.recipe, build.runtime)
    if why_not:
        return {"bundle": f"none: {why_not}"}
    ctx = _context(build, layout, None, trtllm_version)
    return plan_of(ctx, _names(rendered_files(ctx, "")), show)


def deploy_step(build: Build, layout: Layout) -> DeployStep | str:
    """The plan's step that writes the bundle (its summary: `bundle_plan`), or why the recipe gets none."""
    why_not = applies(build.recipe, build.runtime)
    if why_not:
        return why_not
    return DeployStep(folder=bundle_folder(layout), info=bundle_plan(build, layout))


def write_bundle(
    build: Build,
    layout: Layout,
    *,
    folder: Path | None = None,
    trtllm_version: str | None = None,
    validate: bool | None = None,
    notice: atomic.Notice | None = None,
) -> Path | None:
    """Write deploy/<name> (or `folder`) and return it; None when the recipe gets no bundle (`applies`).

    The files are written to a sibling temp folder, validated there (validate=None: when kubernetes-validate
    is installed, else only the cross-checks that need no schema), and swapped into place (specbuild.files.atomic); an
    existing bundle is replaced only by a complete, valid one. Problems raise UserError naming file and field."""
    if applies(build.recipe, build.runtime):
        return None
    schemas = schema_validation_available() if validate is None else validate
    target = Path(folder or bundle_folder(layout)).absolute()
    ctx, files = build_bundle(build, layout, folder=target, trtllm_version=trtllm_version, schemas=schemas)
    with atomic.atomic_folder(target, notice) as partial:
        for rel, text in files.items():
            path = partial / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            if rel.endswith((".sh", ".sbatch")):  # (bash runs them: the mode is for people)
                path.chmod(0o755)
        check_bundle(partial, build, layout, schemas=schemas, bundle_folder=target)
    return target
