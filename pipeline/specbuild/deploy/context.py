"""Everything a bundle's files are made from, derived once from the recipe and the compile layout.

Two kinds of paths, never mixed: the containers read everything below `<deploy.mount_root>/<name>` (the Kubernetes
claim's folder `<name>`, a Slurm job's models folder), and only copy-models.sh, which runs where the recipe was
compiled, names the folders there (`Mount.source`).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Callable

from specbuild.deploy.images import ImageChoice, choose_image
from specbuild.deploy.launch import LaunchPlan, launch_plan
from specbuild.recipe.deploy import K8S_NAME_MAX, K8S_NAME_PATTERN
from specbuild.deploy.world import World, world_of
from specbuild.repository.engine import params
from specbuild.repository.llmapi.configs import MODEL
from specbuild.deploy.kind import deploy_kind
from specbuild.repository.llmapi.model_yaml import model_yaml
from specbuild.repository.llmapi.releases import rules

if TYPE_CHECKING:
    from specbuild.plan import Layout
    from specbuild.recipe.schema import Recipe
    from specbuild.runtimes.build import Build
    from specbuild.speculation import Speculation

LWS_NAME = "leaderworkerset.sigs.k8s.io/name"
LWS_WORKER_INDEX = "leaderworkerset.sigs.k8s.io/worker-index"
DEPLOYMENT_LABEL = "specbuild_deployment"  # also a Prometheus target label (PodMonitor podTargetLabels)
MPI_DIR = "/opt/specbuild-mpi"  # where the multi-node ConfigMap (kubessh) is mounted


def bundle_folder(layout: Layout) -> Path:
    """deploy/<name> beside triton_repo/ (the design contract's output folders)."""
    return Path(layout.repo_root).absolute().parent / "deploy" / layout.name


# What the containers read besides the repository, per kind (specbuild.deploy.kind)
PATHS_READ = {"engine": "engines, tokenizer", "llm-api": "checkpoints (model, tokenizer, speculative model)"}
NAME_HASH = 6  # hex digits of the recipe name's hash a shortened or changed name ends with


def k8s_name(recipe: Recipe) -> str:
    """deploy.name, else the recipe name when it is a DNS-1035 label of at most 40 characters, else the name made
    one, ending with a hash of the recipe name: two recipes whose names differ only in what the label cannot hold
    (past 40 characters, case, '_' or '.') still get different objects, claims and folders."""
    if recipe.deploy.name:
        return recipe.deploy.name
    if re.fullmatch(K8S_NAME_PATTERN, recipe.name):
        return recipe.name
    name = re.sub(r"[^a-z0-9-]+", "-", recipe.name.lower()).strip("-")
    name = re.sub(r"-{2,}", "-", name)
    if not name or not name[0].isalpha():
        name = f"sb-{name}".rstrip("-")
    digest = hashlib.sha256(recipe.name.encode()).hexdigest()[:NAME_HASH]
    return f"{name[: K8S_NAME_MAX - NAME_HASH - 1].rstrip('-')}-{digest}"


@dataclass(frozen=True)
class Mount:
    what: str  # repository | target/draft engine | tokenizer | model.yaml's model / tokenizer / speculative model
    source: Path  # the folder where the recipe was compiled (the repository: the bundle carries its container copy)
    sub_path: str  # <name>/<slug>: its folder in the storage (claim, Slurm models folder)
    container: str  # <mount_root>/<name>/<slug>: where the containers read it

    @property
    def bundled(self) -> bool:
        """Copied from the bundle itself (its repository/), not from `source`."""
        return self.what == "repository"


@dataclass(frozen=True)
class DeployContext:
    recipe: Recipe
    layout: Layout
    folder: Path
    name: str
    image: ImageChoice
    world: World
    launch: LaunchPlan
    mounts: tuple[Mount, ...]
    spec: Speculation  # the recipe's speculation (specbuild.runtimes.build)
    serving_model: str  # the model clients call (the runtime's: the ensemble, the BLS, or the llm-api model)

    @property
    def deploy(self):
        return self.recipe.deploy

    @property
    def namespace(self) -> str:
        return self.deploy.kubernetes.namespace

    @property
    def repository(self) -> Path:
        """The compiled repository, where the recipe was compiled (the bundle's repository/ is its container copy)."""
        return Path(self.layout.repository("target")).absolute()

    @property
    def tree(self) -> str:
        """Where the containers read this deployment's files: <mount_root>/<name>."""
        return tree_of(self.recipe, self.name)

    @property
    def container_repository(self) -> str:
        return f"{self.tree}/{REPOSITORY_SLUG}"

    def in_container(self, path: str) -> str | None:
        """Where the containers read a folder or file of the machine that compiled; None when no mount holds it."""
        p = Path(path)
        for m in sorted(self.mounts, key=lambda m: -len(str(m.source))):
            if p == m.source or m.source in p.parents:
                return str(PurePosixPath(m.container, *p.relative_to(m.source).parts))
        return None

    @property
    def claim(self) -> str:
        return self.deploy.storage.claim_name or f"{self.name}-models"

    @property
    def service_account(self) -> str | None:
        k = self.deploy.kubernetes
        return k.service_account or (f"{self.name}-mpi" if self.world.multi_node else None)

    @property
    def ports(self) -> dict[str, int]:
        p = self.launch.ports
        return {"http": p["HTTP_PORT"], "grpc": p["GRPC_PORT"], "metrics": p["METRICS_PORT"]}

    @property
    def labels(self) -> dict[str, str]:
        return {
            "app.kubernetes.io/name": self.name,
            "app.kubernetes.io/instance": self.name,
            "app.kubernetes.io/component": "server",
            "app.kubernetes.io/part-of": "specbuild",
            DEPLOYMENT_LABEL: self.name,
        }

    @property
    def selector(self) -> dict[str, str]:
        """Labels of the serving pods (leaders only across nodes: only rank 0 opens ports)."""
        if self.world.multi_node:
            return {LWS_NAME: self.name, LWS_WORKER_INDEX: "0"}
        return {"app.kubernetes.io/instance": self.name, "app.kubernetes.io/component": "server"}

    @property
    def workload_kind(self) -> str:
        return "LeaderWorkerSet" if self.world.multi_node else self.deploy.kubernetes.workload

    @property
    def kind(self) -> str:
        return self.launch.kind

    @property
    def scale_model(self) -> str:
        """The Triton model whose queue:compute ratio drives the HPA: where requests wait (engine flavour: the BLS
        runs the speculative loop of draft-target and prompt lookup, otherwise the engine model; llm-api: its one
        tensorrt_llm model)."""
        return MONITORING_KINDS[self.kind](self.spec)[0]

    @property
    def publishes_acceptance(self) -> bool:
        """Drafted/accepted tokens are Prometheus counters: only the engine flavour's BLS publishes them (the llm-api
        model returns its speculative counters as per-response tensors, no metric: TensorRT-LLM
        triton_backend/all_models/llmapi/tensorrt_llm/1/model.py@0ebb153)."""
        return MONITORING_KINDS[self.kind](self.spec)[1]

    @property
    def grace_period_s(self) -> int:
        k = self.deploy.kubernetes
        return k.termination_grace_period_s or k.pre_stop_sleep_s + self.deploy.exit_timeout_s + 30


def _engine_monitoring(spec: Speculation) -> tuple[str, bool]:
    bls = params.bls_driven(spec, "target")
    return ("tensorrt_llm_bls" if bls else "tensorrt_llm"), bls


def _llmapi_monitoring(spec: Speculation) -> tuple[str, bool]:
    return MODEL, False


MONITORING_KINDS: dict[str, Callable[[Speculation], tuple[str, bool]]] = {
    "engine": _engine_monitoring,
    "llm-api": _llmapi_monitoring,
}


REPOSITORY_SLUG = "repository"


def tree_of(recipe: Recipe, name: str) -> str:
    return f"{recipe.deploy.mount_root.rstrip('/')}/{name}"


def mounts_of(recipe: Recipe, spec: Speculation, layout: Layout, name: str) -> tuple[Mount, ...]:
    return _unique(name, tree_of(recipe, name), MOUNT_KINDS[deploy_kind(recipe)](recipe, spec, layout))


def _unique(name: str, tree: str, wanted: list[tuple[str, Path, str]]) -> tuple[Mount, ...]:
    """(what, absolute folder where compiled, its folder name in the tree) -> mounts; a folder inside another one
    is not copied again (the containers find it inside that one)."""
    out: list[Mount] = []
    for what, path, slug in wanted:
        if any(path == m.source or m.source in path.parents for m in out):
            continue
        out.append(Mount(what, path, f"{name}/{slug}", f"{tree}/{slug}"))
    return tuple(out)


def engine_mounts(recipe: Recipe, spec: Speculation, layout: Layout) -> list[tuple[str, Path, str]]:
    """The repository, the engines it serves and the tokenizer (config.pbtxt names them; converted checkpoints
    and logs stay behind)."""
    engines = [("draft" if m == "tensorrt_llm_draft" else "target") for m in params.core_models(recipe, spec, "target")]
    return [
        ("repository", Path(layout.repository("target")).absolute(), REPOSITORY_SLUG),
        *((f"{role} engine", Path(layout.engine(role)).absolute(), role) for role in engines),
        ("tokenizer", recipe.tokenizer_dir.absolute(), "tokenizer"),
    ]


def llmapi_paths(recipe: Recipe, spec: Speculation) -> dict[str, str]:
    """The checkpoint folders the target's model.yaml names, by model.yaml key (model, tokenizer, and the draft or
    EAGLE-3 head under speculative_config's speculative_model / speculative_model_dir)."""
    args = model_yaml(recipe, spec, role="target")
    out = {"model": str(args["model"]), "tokenizer": str(args["tokenizer"])}
    field = rules(recipe.llm_api.release).draft_field
    draft = (args.get("speculative_config") or {}).get(field)
    if draft is not None:
        out[f"speculative_config.{field}"] = str(draft)
    return out


def llmapi_mounts(recipe: Recipe, spec: Speculation, layout: Layout) -> list[tuple[str, Path, str]]:
    """The repository and every checkpoint folder model.yaml names (Hugging Face checkpoints, the draft model or
    EAGLE-3 head; no engines: the LLM loads them itself)."""
    slugs = {"model": "model", "tokenizer": "tokenizer"}
    return [
        ("repository", Path(layout.repository("target")).absolute(), REPOSITORY_SLUG),
        *(
            (f"model.yaml {key}", Path(path), slugs.get(key, "speculative-model"))
            for key, path in llmapi_paths(recipe, spec).items()
        ),
    ]


MOUNT_KINDS: dict[str, Callable[[Recipe, Speculation, Layout], list[tuple[str, Path, str]]]] = {
    "engine": engine_mounts,
    "llm-api": llmapi_mounts,
}


def context(
    build: Build, layout: Layout, folder: Path | None = None, trtllm_version: str | None = None
) -> DeployContext:
    recipe = build.recipe
    name = k8s_name(recipe)
    repository = Path(f"{tree_of(recipe, name)}/{REPOSITORY_SLUG}")  # the containers' path
    return DeployContext(
        recipe=recipe,
        layout=layout,
        folder=Path(folder or bundle_folder(layout)).absolute(),
        name=name,
        image=choose_image(recipe, trtllm_version),
        world=world_of(recipe, build.spec),
        launch=launch_plan(recipe, build.spec, repository),
        mounts=mounts_of(recipe, build.spec, layout, name),
        spec=build.spec,
        serving_model=build.runtime.serving_model(build.spec),
    )
