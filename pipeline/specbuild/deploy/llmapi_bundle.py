"""The llm-api flavour's part of the deployment bundle (specbuild.deploy.context.BundleFlavour; repository/llmapi/
flavour.py names it): TensorRT-LLM's PyTorch backend behind NVIDIA's llmapi Python model, one tensorrt_llm model
configured by model.yaml (single process, multi-instance, or trtllm-llmapi-launch on every rank across nodes;
tensorrtllm_backend docs/llmapi.md@0b9d7d5), its node count from llm_api.nodes."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Iterator

from specbuild.deploy import images
from specbuild.deploy.bundle_docs import BundleFinding
from specbuild.deploy.checks import TP_PP
from specbuild.deploy.context import REPOSITORY_SLUG, BundleFlavour, DeployContext, KindText
from specbuild.deploy.images import ImageChoice, NGC_REPOSITORY, llmapi_releases, newest_of_release, ngc_tag, tag_for
from specbuild.deploy.images import trtllm_of_tag
from specbuild.deploy.launch import SLURM_EVERY_TASK, SLURM_ONE_TASK, LaunchPlan, exit_timeout, script_ports
from specbuild.deploy.repository import MODEL_YAML_PATHS
from specbuild.deploy.world import Rank, World
from specbuild.findings import Finding
from specbuild.repository.llmapi import launch as llmapi
from specbuild.repository.llmapi import model_yaml
from specbuild.repository.llmapi.configs import MODEL, gpu_groups
from specbuild.repository.llmapi.launch import launch_mode
from specbuild.repository.llmapi.releases import rules

if TYPE_CHECKING:
    from specbuild.plan import Layout
    from specbuild.recipe.schema import Recipe
    from specbuild.speculation import Speculation


def _llmapi_request(ctx: DeployContext) -> str:
    body = '{"text_input": "def add(a, b):", "sampling_param_max_tokens": 32'
    if ctx.recipe.triton.streaming:  # a decoupled model streams: Triton's generate_stream (server-sent events)
        return (
            f"curl -sN localhost:{ctx.ports['http']}/v2/models/{ctx.serving_model}/generate_stream -d "
            f"'{body}, \"streaming\": true}}'"
        )
    return f"curl -s localhost:{ctx.ports['http']}/v2/models/{ctx.serving_model}/generate -d '{body}}}'"


def llmapi_paths(recipe: Recipe, spec: Speculation) -> dict[str, str]:
    """The checkpoint folders the target's model.yaml names, by model.yaml key (model, tokenizer, and the draft or
    EAGLE-3 head under speculative_config's speculative_model / speculative_model_dir)."""
    args = model_yaml.model_yaml(recipe, spec, role="target")
    out = {"model": str(args["model"]), "tokenizer": str(args["tokenizer"])}
    field = rules(recipe.llm_api.release).draft_field
    draft = (args.get("speculative_config") or {}).get(field)
    if draft is not None:
        out[f"speculative_config.{field}"] = str(draft)
    return out


def _fewest_nodes(world: int, per_node: int) -> int:
    """The fewest nodes that split `world` ranks evenly with at most `per_node` on each."""
    return next(n for n in range(1, world + 1) if world % n == 0 and world // n <= per_node)


class LlmApiBundle(BundleFlavour):
    paths_read = "checkpoints (model, tokenizer, speculative model)"
    nodes_from = " (llm_api.nodes)"
    no_acceptance_counters = "the llm-api model's speculative counters are per-response tensors, not metrics"
    leader_execs = "mpirun running the repository's launch command on every rank"
    readme = KindText(
        contents="the checkpoints and repository",
        named_by="`tensorrt_llm/1/model.yaml` names the Hugging Face checkpoints (model, tokenizer, and the draft model "
        "or EAGLE-3 head of speculative_config) by absolute paths: in this bundle's `repository/` they are "
        "the containers' paths (there are no engines: the LLM loads the checkpoints itself)",
        load="the LLM to load the checkpoints (and capture its CUDA graphs)",
        image=lambda ctx: (
            f"the tag must carry TensorRT-LLM {ctx.recipe.llm_api.release}.x (llm_api.release: "
            f"model.yaml is written in that release's spelling; 1.0 or newer, containers 25.09 and "
            f"later; this one: {ctx.image.trtllm_version or 'unknown'})"
        ),
        acceptance="no acceptance-length series: the llm-api model exports only Triton's core metrics "
        "(`nv_inference_*`, plus the server's GPU/CPU metrics); its speculative counters "
        "(`acceptance_rate`, `total_accepted_draft_tokens`, `total_draft_tokens`) are per-response output "
        "tensors, returned when a request sets `sampling_param_return_perf_metrics`, not Prometheus metrics "
        "(`specbuild validate` reads them client-side)",
        request=_llmapi_request,
    )
    multi_node = (
        "The leader pod runs `mpirun -np {world}` over the group's {nodes} pods, each rank running the "
        "repository's launch command (its `trtllm-llmapi-launch` makes rank 0 serve on the leader and the "
        "others LLM workers; NVIDIA documents this flavour across nodes for Slurm only, so this Kubernetes "
        "launch is unverified); mpirun starts the worker ranks with `kubessh`"
    )

    def world(self, recipe: Recipe, spec: Speculation) -> World:
        info = launch_mode(recipe)
        mode, b = info["mode"], recipe.build
        tp_pp = b.tp_size * b.pp_size
        if mode == "multi-instance":
            groups = gpu_groups(recipe)
            flat = [g for group in groups for g in group]
            gpus = max(flat) + 1
            lines = {
                "node 0": f"one tritonserver, {len(groups)} instances of {MODEL} (no MPI)",
                **{f"instance {i}": f"GPUs {','.join(map(str, g))} (tp*pp = {tp_pp})" for i, g in enumerate(groups)},
            }
            ranks = (
                Rank(0, 0, None, f"tritonserver: {len(groups)} instances of {MODEL}, no MPI; serves HTTP/gRPC/metrics"),
            )
            return World(
                mode,
                tp_pp,
                1,
                gpus,
                1,
                False,
                ranks,
                {MODEL: flat},
                tp_pp,
                f"multi-instance mode, {len(groups)} instance(s) x tp*pp = {tp_pp} in one tritonserver (no MPI)"
                f" = 1 node x {gpus} GPU(s)",
                groups=lines,
            )
        nodes = int(info.get("nodes", 1))
        per_node = -(-tp_pp // nodes)  # as launch.py: at least one (nodes that do not split tp*pp are refused)
        if mode == "multi-node":
            first, other = (
                "trtllm-llmapi-launch: tritonserver serves HTTP/gRPC/metrics, the LLM's leader",
                "trtllm-llmapi-launch: LLM worker",
            )
            summary = (
                f"multi-node mode, {tp_pp} MPI rank(s) under trtllm-llmapi-launch = {nodes} node(s) x {per_node} "
                f"GPU(s) (tp*pp = {tp_pp})"
            )
        else:
            first, other = "tritonserver serves HTTP/gRPC/metrics, the LLM's rank 0", "LLM worker (spawned in the pod)"
            summary = (
                f"single mode, one tritonserver whose LLM runs tp*pp = {tp_pp} rank(s) = 1 node x {per_node} GPU(s)"
            )
        # one instance: rank r on GPU r % per_node of node r // per_node (gpu_device_ids [0 .. tp*pp-1])
        ranks = tuple(Rank(r, r // per_node, r % per_node, other if r else first) for r in range(tp_pp))
        return World(
            mode,
            tp_pp,
            nodes,
            per_node,
            per_node,
            False,
            ranks,
            {MODEL: list(range(per_node))},
            tp_pp,
            summary,
            one_rank_per_gpu=True,
        )

    def world_findings(self, recipe: Recipe, spec: Speculation) -> Iterator[Finding]:
        d, t, b, a = recipe.deploy, recipe.triton, recipe.build, recipe.llm_api
        per_node = d.gpus_per_node
        world = b.tp_size * b.pp_size
        where = ("deploy", "gpus_per_node")
        if a.nodes == 1 and a.instances == 1 and world > per_node:
            # (reported on build.tp_size when llm_api.nodes is not written: the message names both)
            yield Finding(
                ("llm_api", "nodes"),
                f"llm_api.nodes is 1 but tp_size * pp_size = {world} is more than a "
                f"node's {per_node} GPUs (deploy.gpus_per_node): set llm_api.nodes: "
                f"{_fewest_nodes(world, per_node)} (the "
                "repository's launch script then runs tritonserver under trtllm-llmapi-launch on every rank), "
                f"or deploy.gpus_per_node: {world} if your nodes have that many GPUs",
                also=(where, *TP_PP),
            )
            return
        if a.nodes > 1 and world % a.nodes == 0 and world // a.nodes > per_node:  # (uneven splits: flavour checks)
            yield Finding(
                ("llm_api", "nodes"),
                f"is {a.nodes}, which puts {world // a.nodes} of the tp_size * pp_size = "
                f"{world} ranks on each node, but a node has {per_node} GPUs (deploy.gpus_per_node) — set "
                f"llm_api.nodes: {_fewest_nodes(world, per_node)}",
                also=(where, *TP_PP),
            )
            return
        ids = list(t.gpu_device_ids)
        if a.instances > 1:
            if ids and max(ids) >= per_node:
                yield Finding(
                    ("triton", "gpu_device_ids"),
                    f"names GPU {max(ids)} but a node has {per_node} "
                    f"(deploy.gpus_per_node): the {a.instances} instances share one pod — use ids 0..{per_node - 1}",
                    also=(where, ("llm_api", "instances")),
                )
            return
        if ids != list(range(world)) and len(ids) == world:  # (a wrong count: flavour checks)
            yield Finding(
                ("triton", "gpu_device_ids"),
                f"is {ids} but one llm-api instance pins no GPU (model.yaml "
                f"names none; the LLM takes the first tp_size * pp_size GPUs it sees, and its pod"
                + (f"s get {world // a.nodes} each" if a.nodes > 1 else f" gets {world}")
                + f") — list {list(range(world))}",
                also=TP_PP,
            )

    def lays_out(self, recipe: Recipe) -> bool:
        """Whether llm_api.nodes splits the world evenly, one instance across nodes (the flavour's checks refuse the
        rest, saying why)."""
        a, b = recipe.llm_api, recipe.build
        return a.nodes == 1 or (
            a.instances == 1 and (b.tp_size * b.pp_size) % a.nodes == 0 and b.tp_size * b.pp_size >= a.nodes
        )

    def image(self, recipe: Recipe, trtllm_version: str | None = None) -> ImageChoice:
        """deploy.image.tag when given, else the tag of deploy.image.trtllm_version, else of the installed TensorRT-LLM
        (`trtllm_version`, from compile, which checked it is llm_api.release), else the newest container of
        llm_api.release."""
        img = recipe.deploy.image
        if img.tag:
            known = trtllm_of_tag(img.tag) if img.repository == NGC_REPOSITORY else None
            return ImageChoice(img.repository, img.tag, known, "deploy.image.tag")
        release = recipe.llm_api.release
        if img.trtllm_version:
            version, why = img.trtllm_version, "deploy.image.trtllm_version"
        elif trtllm_version and tag_for(trtllm_version):
            version, why = trtllm_version, "the installed TensorRT-LLM"
        else:  # (an installed build no container ships, e.g. a nightly of the release: the release's newest container)
            version, why = newest_of_release(release), f"the newest container of llm_api.release {release}"
        if version is None:
            raise ValueError(f"no NGC tritonserver image ships TensorRT-LLM {release} (llm_api.release)")
        tag = tag_for(version)
        if tag is None:
            raise ValueError(f"no NGC tritonserver image ships TensorRT-LLM {version}")
        return ImageChoice(img.repository, tag, version, f"{why} ({version})")

    def no_image(self, recipe: Recipe) -> str | None:
        """Why an llm-api recipe gets no bundle: the TensorRT-LLM it names (deploy.image.trtllm_version), or its
        llm_api.release, is in no NGC container, and deploy.image.tag names no image of its own (a TensorRT-LLM
        installed from pip or built from source serves it, but the bundle would have no image to run; no NGC tag is
        invented)."""
        img, release = recipe.deploy.image, recipe.llm_api.release
        if img.tag:
            return None
        if img.trtllm_version:
            if tag_for(img.trtllm_version) is not None:
                return None
            return (
                f"no NGC tritonserver container ships TensorRT-LLM {img.trtllm_version} (deploy.image.trtllm_version; "
                f"the table ends at {max(images.NGC_TRTLLM)}: {images.NGC_TRTLLM[max(images.NGC_TRTLLM)]}) — set "
                "deploy.image.repository and deploy.image.tag to an image with it to get one"
            )
        if newest_of_release(release) is not None:
            return None
        return (
            f"no NGC tritonserver container ships TensorRT-LLM {release} (llm_api.release) yet (those that do: "
            f"{', '.join(llmapi_releases())}) — set deploy.image.repository and deploy.image.tag to an image with "
            f"TensorRT-LLM {release} to get one"
        )

    def image_findings(self, recipe: Recipe) -> Iterator[Finding]:
        """The image's own spelling (an NGC tag without the TensorRT-LLM backend, a version that is none). Whether
        the TensorRT-LLM it names serves the llm-api flavour and agrees with llm_api.release is the recipe's check
        (specbuild.recipe.llm_release.findings: every runtime, bundle or not)."""
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
            # (a version no NGC container ships, without deploy.image.tag: no bundle, said by plan and compile)
        # (a release no container ships, with no deploy.image: no bundle, said by `plan`: context.applies)
        if img.tag and img.repository == images.NGC_REPOSITORY:
            problems, _ = ngc_tag(img)
            yield from problems

    def monitored(self, spec: Speculation) -> tuple[str, bool]:
        return MODEL, False

    def mounts(self, recipe: Recipe, spec: Speculation, layout: Layout) -> list[tuple[str, Path, str]]:
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

    def launch(self, recipe: Recipe, spec: Speculation, repository: Path) -> LaunchPlan:
        script = repository / llmapi.SCRIPT_NAME
        text = llmapi.launch_script(recipe)
        argv = ["bash", str(script), *exit_timeout(recipe)]
        info = llmapi.launch_mode(recipe)
        if info["mode"] != "multi-node":  # one tritonserver process; the LLM spawns its own workers in the pod
            return LaunchPlan(script, text, argv, [], {}, script_ports(text), slurm=SLURM_ONE_TASK)
        world, per_node = int(info["world_size"]), int(info["ranks_per_node"])
        # every rank runs the launch command; ppr:<n>:node fills the hostfile's pods in order (leader first: rank 0)
        leader = ["mpirun", "--allow-run-as-root", "-np", str(world), "--map-by", f"ppr:{per_node}:node", *argv]
        return LaunchPlan(
            script,
            text,
            argv,
            [list(argv) for _ in range(world)],
            {},
            script_ports(text),
            slurm=SLURM_EVERY_TASK,
            leader_argv=leader,
        )

    def script_ports(self, text: str) -> dict[str, int]:
        return script_ports(text)

    def read_repository(self, ctx: DeployContext, facts: dict) -> None:
        """model.yaml of the tensorrt_llm model: the LLM arguments, and the checkpoint folders they name."""
        path = ctx.repository / MODEL / "1" / model_yaml.FILE
        facts["model_yaml_path"] = path
        if not path.is_file():
            facts["model_yaml"] = None
            return
        try:
            data = model_yaml.load(path.read_text())
        except Exception as e:  # ruamel's errors carry the position
            facts["model_yaml"], facts["model_yaml_error"] = None, str(e)
            return
        facts["model_yaml"] = data
        spec = data.get("speculative_config") or {}
        named = {
            key: (spec if key.startswith("speculative_config.") else data).get(key.rsplit(".", 1)[-1])
            for key in MODEL_YAML_PATHS
        }
        for key, value in named.items():
            if isinstance(value, str):
                facts.setdefault("model_yaml_paths", {})[key] = value
                if value.startswith("/"):
                    facts["paths"].add((f"{MODEL}/1/model.yaml {key}", value))

    def repository_checks(self, ctx: DeployContext, facts: dict) -> Iterator[BundleFinding]:
        """The llm-api repository on disk: its one tensorrt_llm model with the recipe's instance count, and a
        model.yaml that is the recipe's, names its checkpoints by absolute paths, and runs the world's tp * pp."""
        if not facts["models"]:
            return  # not compiled yet
        recipe, w = ctx.recipe, ctx.world
        where = str(facts["model_yaml_path"])
        if facts["models"] != {MODEL}:
            yield BundleFinding(
                str(ctx.repository),
                "",
                f"holds models {sorted(facts['models'])}; an llm-api repository serves one, {MODEL!r} — recompile",
            )
        count = facts["instances"].get(MODEL)
        if count is not None and count != recipe.llm_api.instances:
            yield BundleFinding(
                f"{ctx.repository}/{MODEL}/config.pbtxt",
                "instance_group.count",
                f"{count} but llm_api.instances is {recipe.llm_api.instances} — recompile the repository",
            )
        data = facts.get("model_yaml")
        if data is None:
            why = facts.get("model_yaml_error") or "missing"
            yield BundleFinding(where, "", f"{why}: the llmapi model reads its LLM arguments there — recompile")
            return
        want = model_yaml.model_yaml(recipe, ctx.spec, role="target")
        stale = sorted(k for k in set(want) | set(data) if want.get(k) != data.get(k))
        if stale:
            yield BundleFinding(
                where,
                ", ".join(stale),
                "differs from the model.yaml this recipe implies (stale repository) — recompile",
            )
        for key, value in (facts.get("model_yaml_paths") or {}).items():
            if not value.startswith("/"):
                yield BundleFinding(
                    where,
                    key,
                    f"{value!r} is relative: the LLM would resolve it against the container's "
                    "working directory, which no mount guarantees — recompile (specbuild writes "
                    "absolute paths)",
                )
        tp, pp = data.get("tensor_parallel_size", 1), data.get("pipeline_parallel_size", 1)
        if isinstance(tp, int) and isinstance(pp, int) and tp * pp != w.tp_pp:
            yield BundleFinding(
                where,
                "tensor_parallel_size",
                f"tensor_parallel_size * pipeline_parallel_size = "
                f"{tp}*{pp} = {tp * pp} but the bundle's world runs {w.tp_pp} rank(s) per instance",
            )


BUNDLE = LlmApiBundle()
