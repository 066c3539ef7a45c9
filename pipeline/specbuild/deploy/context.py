"""Everything a bundle's files are made from, derived once from the recipe and the compile layout, and the part
of the bundle its runtime's flavour has (`BundleFlavour`).

Two kinds of paths, never mixed: the containers read everything below `<deploy.mount_root>/<name>` (the Kubernetes
claim's folder `<name>`, a Slurm job's models folder), and only copy-models.sh, which runs where the recipe was
compiled, names the folders there (`Mount.source`).

What the bundle does differently per flavour is a member of the flavour's part: the engine flavour's
(deploy/engine_bundle.py: TensorRT engines behind the C++ tensorrtllm backend, an ensemble/BLS repository, an mpirun
launch script) and the llm-api flavour's (deploy/llmapi_bundle.py: TensorRT-LLM's PyTorch backend behind NVIDIA's
llmapi model configured by model.yaml). The flavour object names its part (`bundle` of repository/engine/flavour.py
EngineFlavour and repository/llmapi/flavour.py LlmApiFlavour, which sit below the bundle in the import layers), and
`bundle_flavour` loads it from the runtime the command resolved.
"""

from __future__ import annotations

import hashlib
import importlib
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Callable, ClassVar, Iterator, Protocol, runtime_checkable

from specbuild.recipe.deploy import K8S_NAME_MAX, K8S_NAME_PATTERN

if TYPE_CHECKING:
    from specbuild.deploy.bundle_docs import BundleFinding
    from specbuild.deploy.images import ImageChoice
    from specbuild.deploy.launch import LaunchPlan
    from specbuild.deploy.world import World
    from specbuild.findings import Finding
    from specbuild.plan import Layout
    from specbuild.recipe.schema import Recipe
    from specbuild.runtimes.base import Runtime
    from specbuild.runtimes.build import Build
    from specbuild.speculation import Speculation

LWS_NAME = "leaderworkerset.sigs.k8s.io/name"
LWS_WORKER_INDEX = "leaderworkerset.sigs.k8s.io/worker-index"
DEPLOYMENT_LABEL = "specbuild_deployment"  # also a Prometheus target label (PodMonitor podTargetLabels)
MPI_DIR = "/opt/specbuild-mpi"  # where the multi-node ConfigMap (kubessh) is mounted


def bundle_folder(layout: Layout) -> Path:
    """deploy/<name> beside triton_repo/ (the design contract's output folders)."""
    return Path(layout.repo_root).absolute().parent / "deploy" / layout.name


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
class KindText:
    """What a bundle's README says differently per flavour (BundleFlavour.readme)."""

    contents: str  # what the claim holds
    named_by: str  # how the repository names those folders
    load: str  # what the startup probe waits for
    image: Callable[[DeployContext], str]  # what the image tag must carry
    acceptance: str  # why there is no acceptance-length series (when there is none)
    request: Callable[[DeployContext], str]  # a request with curl


@runtime_checkable
class BundleFlavour(Protocol):
    """One flavour's part of the deployment bundle."""

    # What the containers read besides the repository (copy-models.sh, the Slurm job).
    paths_read: ClassVar[str]
    # Where a world's node count comes from, as a cross-check says it ("" or " (llm_api.nodes)").
    nodes_from: ClassVar[str]
    # Why the monitoring rules have no acceptance-length series when a deployment publishes no counters.
    no_acceptance_counters: ClassVar[str]
    # What a multi-node leader execs last, in words.
    leader_execs: ClassVar[str]
    # What the bundle's README says of this flavour.
    readme: ClassVar[KindText]
    # How the README says a multi-node group starts ({nodes}, {world}).
    multi_node: ClassVar[str]

    # Where every MPI rank of the deployment runs (nodes x GPUs).
    def world(self, recipe: Recipe, spec: Speculation) -> World:
        raise NotImplementedError

    # What the deploy section cannot lay out (recipe findings).
    def world_findings(self, recipe: Recipe, spec: Speculation) -> Iterator[Finding]:
        raise NotImplementedError

    # Whether the world is laid out (False: the flavour's own checks refuse the recipe, saying why).
    def lays_out(self, recipe: Recipe) -> bool:
        raise NotImplementedError

    # The image of the bundle; ValueError when no tag fits (image_findings reports it against the recipe first).
    def image(self, recipe: Recipe, trtllm_version: str | None = None) -> ImageChoice:
        raise NotImplementedError

    # Why the recipe gets no bundle for want of an image to run (None: it gets one).
    def no_image(self, recipe: Recipe) -> str | None:
        raise NotImplementedError

    # What deploy.image cannot be for this flavour (recipe findings).
    def image_findings(self, recipe: Recipe) -> Iterator[Finding]:
        raise NotImplementedError

    # The Triton model whose queue:compute ratio drives the autoscaler, and whether it publishes acceptance counters.
    def monitored(self, spec: Speculation) -> tuple[str, bool]:
        raise NotImplementedError

    # The folders the containers read: (what, the folder where compiled, its name in the tree).
    def mounts(self, recipe: Recipe, spec: Speculation, layout: Layout) -> list[tuple[str, Path, str]]:
        raise NotImplementedError

    # What the containers run: the repository's launch command.
    def launch(self, recipe: Recipe, spec: Speculation, repository: Path) -> LaunchPlan:
        raise NotImplementedError

    # The port defaults of a launch script on disk (launch.ScriptFormatError when it cannot be read).
    def script_ports(self, text: str) -> dict[str, int]:
        raise NotImplementedError

    # What the compiled repository on disk says beyond its configs, added to `facts`.
    def read_repository(self, ctx: DeployContext, facts: dict) -> None:
        raise NotImplementedError

    # The compiled repository on disk against the recipe.
    def repository_checks(self, ctx: DeployContext, facts: dict) -> Iterator[BundleFinding]:
        raise NotImplementedError


def bundle_flavour(runtime: Runtime) -> BundleFlavour:
    """The bundle's part of the runtime's flavour (the flavour object's `bundle`, "module:object")."""
    module, name = runtime.bundle.split(":")
    return getattr(importlib.import_module(module), name)


def applies(recipe: Recipe, runtime: Runtime) -> str | None:
    """None when the recipe gets a bundle; else why not (said by `plan` and `compile`): its runtime's refusal
    (the reference runtime serves on CPU), or no image to run (llm-api: a release no NGC container ships)."""
    return runtime.bundle_refusal or bundle_flavour(runtime).no_image(recipe)


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
    flavour: BundleFlavour  # the bundle's part of the runtime's flavour

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
    def scale_model(self) -> str:
        """The Triton model whose queue:compute ratio drives the HPA: where requests wait (engine flavour: the BLS
        runs the speculative loop of draft-target and prompt lookup, otherwise the engine model; llm-api: its one
        tensorrt_llm model)."""
        return self.flavour.monitored(self.spec)[0]

    @property
    def publishes_acceptance(self) -> bool:
        """Drafted/accepted tokens are Prometheus counters: only the engine flavour's BLS publishes them (the llm-api
        model returns its speculative counters as per-response tensors, no metric: TensorRT-LLM
        triton_backend/all_models/llmapi/tensorrt_llm/1/model.py@0ebb153)."""
        return self.flavour.monitored(self.spec)[1]

    @property
    def grace_period_s(self) -> int:
        k = self.deploy.kubernetes
        return k.termination_grace_period_s or k.pre_stop_sleep_s + self.deploy.exit_timeout_s + 30


REPOSITORY_SLUG = "repository"


def tree_of(recipe: Recipe, name: str) -> str:
    return f"{recipe.deploy.mount_root.rstrip('/')}/{name}"


def mounts_of(
    flavour: BundleFlavour, recipe: Recipe, spec: Speculation, layout: Layout, name: str
) -> tuple[Mount, ...]:
    return _unique(name, tree_of(recipe, name), flavour.mounts(recipe, spec, layout))


def _unique(name: str, tree: str, wanted: list[tuple[str, Path, str]]) -> tuple[Mount, ...]:
    """(what, absolute folder where compiled, its folder name in the tree) -> mounts; a folder inside another one
    is not copied again (the containers find it inside that one)."""
    out: list[Mount] = []
    for what, path, slug in wanted:
        if any(path == m.source or m.source in path.parents for m in out):
            continue
        out.append(Mount(what, path, f"{name}/{slug}", f"{tree}/{slug}"))
    return tuple(out)


def context(
    build: Build, layout: Layout, folder: Path | None = None, trtllm_version: str | None = None
) -> DeployContext:
    recipe, flavour = build.recipe, bundle_flavour(build.runtime)
    name = k8s_name(recipe)
    repository = Path(f"{tree_of(recipe, name)}/{REPOSITORY_SLUG}")  # the containers' path
    return DeployContext(
        recipe=recipe,
        layout=layout,
        folder=Path(folder or bundle_folder(layout)).absolute(),
        name=name,
        image=flavour.image(recipe, trtllm_version),
        world=flavour.world(recipe, build.spec),
        launch=flavour.launch(recipe, build.spec, repository),
        mounts=mounts_of(flavour, recipe, build.spec, layout, name),
        spec=build.spec,
        serving_model=build.runtime.serving_model(build.spec),
        flavour=flavour,
    )
