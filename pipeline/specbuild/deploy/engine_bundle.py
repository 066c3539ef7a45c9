"""The engine flavour's part of the deployment bundle (specbuild.deploy.context.BundleFlavour; repository/engine/
flavour.py names it): TensorRT engines behind the C++ tensorrtllm backend, an ensemble/BLS repository, and the
repository's launch_triton.sh (leader mode, or the orchestrator of draft-target)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Iterator

from specbuild.deploy import images
from specbuild.deploy.bundle_docs import BundleFinding
from specbuild.deploy.checks import TP_PP
from specbuild.deploy.context import REPOSITORY_SLUG, BundleFlavour, DeployContext, KindText
from specbuild.deploy.images import ImageChoice, NGC_REPOSITORY, newest_supported, ngc_tag, tag_for, trtllm_of_tag
from specbuild.deploy.launch import (
    IMAGE_TRITONSERVER,
    SLURM_ONE_TASK,
    SLURM_RANKS,
    LaunchPlan,
    exit_timeout,
    expand,
    parse_script,
)
from specbuild.deploy.world import Rank, World, _summary
from specbuild.findings import Finding
from specbuild.repository.engine import params
from specbuild.repository.engine.launch import SCRIPT_NAME, launch_script

if TYPE_CHECKING:
    from specbuild.plan import Layout
    from specbuild.recipe.schema import Recipe
    from specbuild.speculation import Speculation


def _engine_request(ctx: DeployContext) -> str:
    return (
        f"curl -s localhost:{ctx.ports['http']}/v2/models/{ctx.serving_model}/generate -d "
        '\'{"text_input": "def add(a, b):", "max_tokens": 32}\''
    )


def _engine_mapping(ctx: DeployContext) -> Iterator[BundleFinding]:
    """A built target engine's mapping must be the world's (tensorrtllm_backend asserts gpusPerNode of config.json
    against the node across nodes: NVIDIA EKS tutorial "3. Deploy_Triton.md")."""
    import json

    config = Path(ctx.layout.engine("target")).absolute() / "config.json"
    if not config.is_file():
        return
    try:
        mapping = (json.loads(config.read_text()).get("pretrained_config") or {}).get("mapping") or {}
    except (OSError, ValueError):
        return
    b = ctx.recipe.build
    if mapping.get("world_size") not in (None, b.tp_size * b.pp_size):
        yield BundleFinding(
            str(config),
            "pretrained_config.mapping.world_size",
            f"{mapping['world_size']} but tp_size * pp_size = {b.tp_size * b.pp_size} — rebuild the engine",
        )
    if ctx.world.multi_node and mapping.get("gpus_per_node") not in (None, ctx.deploy.gpus_per_node):
        yield BundleFinding(
            str(config),
            "pretrained_config.mapping.gpus_per_node",
            f"{mapping['gpus_per_node']} but "
            f"deploy.gpus_per_node is {ctx.deploy.gpus_per_node}: the backend checks it against the "
            "node's GPUs — convert the checkpoint with that gpus_per_node",
        )


class EngineBundle(BundleFlavour):
    paths_read = "engines, tokenizer"
    nodes_from = ""
    no_acceptance_counters = "only the BLS of draft-target and prompt lookup counts them"
    leader_execs = "the repository's launch command"
    readme = KindText(
        contents="the engines, tokenizer and repository",
        named_by="`config.pbtxt` names the engine and tokenizer folders by absolute paths: in this bundle's "
        "`repository/` they are the containers' paths",
        load="the engines to load",
        image=lambda ctx: (
            f"the tag must carry the TensorRT-LLM release that built the engines "
            f"({ctx.image.trtllm_version or 'unknown'})"
        ),
        acceptance="no acceptance-length series: TensorRT-LLM's backend exports none for this method "
        "(`specbuild validate` measures it client-side)",
        request=_engine_request,
    )
    multi_node = (
        "The leader pod runs `mpirun` over the group's {nodes} pods; mpirun starts the worker ranks with `kubessh`"
    )

    def world(self, recipe: Recipe, spec: Speculation) -> World:
        info = params.launch(recipe, "target", spec)
        t, b = recipe.triton, recipe.build
        tp_pp = b.tp_size * b.pp_size
        per_node = recipe.deploy.gpus_per_node
        engines = {"tensorrt_llm": list(t.gpu_device_ids)}
        if info["mode"] == "leader":
            ids = list(t.gpu_device_ids) or [0]
            world = int(info["world_size"])
            nodes = -(-world // per_node) if world > per_node else 1
            gpus = per_node if nodes > 1 else max(ids) + 1
            ranks = tuple(
                Rank(
                    r,
                    r // per_node if nodes > 1 else 0,
                    ids[r % len(ids)],
                    "serves HTTP/gRPC/metrics" if r == 0 else "engine shard",
                )
                for r in range(world)
            )
            return World(
                "leader",
                world,
                nodes,
                gpus,
                min(world, per_node),
                False,
                ranks,
                engines,
                tp_pp,
                _summary("leader", world, nodes, gpus, tp_pp),
                one_rank_per_gpu=True,
            )
        engines["tensorrt_llm_draft"] = list(recipe.draft_gpu_device_ids)
        used = set(engines["tensorrt_llm"]) | set(engines["tensorrt_llm_draft"]) or {0}
        world = int(info["world_size"])
        spawn = not info.get("disable_spawn_processes", False)
        ranks = [
            Rank(
                0,
                0,
                None,
                "orchestrator: serves HTTP/gRPC/metrics" + ("; spawns one worker per engine" if spawn else ""),
            )
        ]
        for model, ids in sorted(info.get("participant_ids", {}).items(), reverse=True):  # draft ranks first
            gpus = engines[model]
            for i, rank in enumerate(int(x) for x in ids.split(",")):
                ranks.append(Rank(rank, 0, gpus[i % len(gpus)], f"{model} participant"))
        ranks.sort(key=lambda r: r.rank)
        gpus = max(used) + 1
        return World(
            "orchestrator",
            world,
            1,
            gpus,
            world,
            spawn,
            tuple(ranks),
            engines,
            tp_pp,
            _summary("orchestrator", world, 1, gpus, None),
        )

    def world_findings(self, recipe: Recipe, spec: Speculation) -> Iterator[Finding]:
        d, t, b = recipe.deploy, recipe.triton, recipe.build
        per_node = d.gpus_per_node
        world = b.tp_size * b.pp_size
        where = ("deploy", "gpus_per_node")
        if spec.has_draft_engine:
            if world > per_node:
                yield Finding(
                    where,
                    f"is {per_node} but the draft-target target has tp_size * pp_size = {world}: "
                    "draft-target runs in orchestrator mode, which spawns its workers on one node — use nodes "
                    f"with at least {world} GPUs (raise gpus_per_node) or a smaller target",
                    also=TP_PP,
                )
            used = sorted(set(t.gpu_device_ids) | set(recipe.draft_gpu_device_ids))
            if used and used[-1] >= per_node:
                yield Finding(
                    ("triton", "draft_gpu_device_ids")
                    if t.draft_gpu_device_ids and max(recipe.draft_gpu_device_ids) >= per_node
                    else ("triton", "gpu_device_ids"),
                    f"names GPU {used[-1]} but a node has {per_node} (deploy.gpus_per_node): the draft and "
                    "target engines share one pod — use GPU ids below it",
                    also=(where,),
                )
            return
        if world <= per_node:
            if t.gpu_device_ids and max(t.gpu_device_ids) >= per_node:
                yield Finding(
                    ("triton", "gpu_device_ids"),
                    f"names GPU {max(t.gpu_device_ids)} but a node has "
                    f"{per_node} (deploy.gpus_per_node) — use ids 0..{per_node - 1}",
                    also=(where,),
                )
            return
        if world % per_node:
            yield Finding(
                where,
                f"is {per_node} but tp_size * pp_size = {world} spans nodes and is not a multiple of "
                f"it: every node runs the same number of ranks — set gpus_per_node to a divisor of {world}",
                also=TP_PP,
            )
            return
        ids = list(t.gpu_device_ids)
        if len(ids) != per_node or sorted(ids) != list(range(per_node)):
            yield Finding(
                ("triton", "gpu_device_ids"),
                f"is {ids} but tp_size * pp_size = {world} spans "
                f"{world // per_node} nodes of {per_node} GPUs: list one node's GPUs, "
                f"{list(range(per_node))} (TensorRT-LLM runs rank r on gpu_device_ids[r % {per_node}] on "
                "every node)",
                also=(where,),
            )

    def lays_out(self, recipe: Recipe) -> bool:
        return True

    def image(self, recipe: Recipe, trtllm_version: str | None = None) -> ImageChoice:
        """deploy.image.tag when given, else the tag of the TensorRT-LLM release that built the engines
        (`trtllm_version`, from compile), else of deploy.image.trtllm_version, else the newest supported."""
        img = recipe.deploy.image
        if img.tag:
            known = trtllm_of_tag(img.tag) if img.repository == NGC_REPOSITORY else None
            return ImageChoice(img.repository, img.tag, known, "deploy.image.tag")
        version = img.trtllm_version or trtllm_version or newest_supported()
        tag = tag_for(version)
        if tag is None:
            raise ValueError(f"no NGC tritonserver image ships TensorRT-LLM {version}")
        why = (
            "deploy.image.trtllm_version"
            if img.trtllm_version
            else "the TensorRT-LLM that built the engines"
            if trtllm_version
            else "the newest TensorRT-LLM specbuild supports"
        )
        return ImageChoice(img.repository, tag, version, f"{why} ({version})")

    def no_image(self, recipe: Recipe) -> str | None:
        return None

    def image_findings(self, recipe: Recipe) -> Iterator[Finding]:
        img = recipe.deploy.image
        if img.trtllm_version:
            try:
                images.release3(img.trtllm_version)
            except ValueError:
                yield Finding(
                    ("deploy", "image", "trtllm_version"),
                    f"{img.trtllm_version!r} is not a version — write it as in pip, e.g. 1.2.1",
                )
                return
            if not images.supported(img.trtllm_version):
                yield Finding(
                    ("deploy", "image", "trtllm_version"),
                    f"is {img.trtllm_version} but specbuild builds "
                    "TensorRT engines with TensorRT-LLM 0.17 <= version <= 1.3.0rc20",
                )
            elif not img.tag and images.tag_for(img.trtllm_version) is None:
                known = sorted({v for v in images.NGC_TRTLLM.values() if images.supported(v)}, key=images.release3)
                yield Finding(
                    ("deploy", "image", "trtllm_version"),
                    f"no NGC tritonserver image ships TensorRT-LLM "
                    f"{img.trtllm_version} (known: {', '.join(known)}) — pick one of those or set "
                    "deploy.image.tag",
                )
        if img.tag and img.repository == images.NGC_REPOSITORY:
            problems, version = ngc_tag(img)
            yield from problems
            if version is None:
                return
            if not images.supported(version):
                yield Finding(
                    ("deploy", "image", "tag"),
                    f"{img.tag} ships TensorRT-LLM {version}; specbuild's engines need 0.17 <= version <= 1.3.0rc20",
                )
            elif img.trtllm_version and images.release3(img.trtllm_version) != images.release3(version):
                yield Finding(
                    ("deploy", "image", "tag"),
                    f"{img.tag} ships TensorRT-LLM {version} but "
                    f"deploy.image.trtllm_version is {img.trtllm_version}: engines load only in the release "
                    "that built them",
                    also=(("deploy", "image", "trtllm_version"),),
                )

    def monitored(self, spec: Speculation) -> tuple[str, bool]:
        bls = params.bls_driven(spec, "target")
        return ("tensorrt_llm_bls" if bls else "tensorrt_llm"), bls

    def mounts(self, recipe: Recipe, spec: Speculation, layout: Layout) -> list[tuple[str, Path, str]]:
        """The repository, the engines it serves and the tokenizer (config.pbtxt names them; converted checkpoints
        and logs stay behind)."""
        engines = [
            ("draft" if m == "tensorrt_llm_draft" else "target") for m in params.core_models(recipe, spec, "target")
        ]
        return [
            ("repository", Path(layout.repository("target")).absolute(), REPOSITORY_SLUG),
            *((f"{role} engine", Path(layout.engine(role)).absolute(), role) for role in engines),
            ("tokenizer", recipe.tokenizer_dir.absolute(), "tokenizer"),
        ]

    def launch(self, recipe: Recipe, spec: Speculation, repository: Path) -> LaunchPlan:
        script = repository / SCRIPT_NAME
        extra = exit_timeout(recipe)
        text = launch_script(recipe, spec, "target")
        parts = parse_script(text)
        info = params.launch(recipe, "target", spec)
        spawn = info["mode"] == "orchestrator" and not info.get("disable_spawn_processes", False)
        values = {
            "TRITONSERVER": IMAGE_TRITONSERVER,
            "REPO": str(repository),
            **{k: str(v) for k, v in parts.ports.items()},
        }
        ranks = [] if spawn else [expand(seg, values, extra) for seg in parts.segments]
        return LaunchPlan(
            script,
            text,
            ["bash", str(script), *extra],
            ranks,
            parts.env,
            parts.ports,
            slurm=SLURM_ONE_TASK if spawn else SLURM_RANKS,
        )

    def script_ports(self, text: str) -> dict[str, int]:
        return parse_script(text).ports  # (also its mpirun app contexts: ScriptFormatError when unreadable)

    def read_repository(self, ctx: DeployContext, facts: dict) -> None:
        """config.pbtxt says all the engine flavour reads."""

    def repository_checks(self, ctx: DeployContext, facts: dict) -> Iterator[BundleFinding]:
        yield from _engine_mapping(ctx)
        if ctx.world.mode == "orchestrator" and "tensorrt_llm_bls" not in facts["models"] and facts["models"]:
            yield BundleFinding(str(ctx.repository), "tensorrt_llm_bls", "missing: draft-target is served by the BLS")


BUNDLE = EngineBundle()
