"""Cross-checks of a written bundle against the recipe and, when compiled, the repository on disk (the checks
listed in specbuild.deploy.bundle_check); each problem is a BundleFinding."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from specbuild.deploy.bundle_docs import KUSTOMIZATION, BundleFinding, Doc
from specbuild.deploy.repository_facts import repository_facts
from specbuild.deploy.context import LWS_NAME, LWS_WORKER_INDEX, DeployContext
from specbuild.deploy.copying import COPY_SCRIPT
from specbuild.deploy.kubernetes import CONTAINER, LIVE_PATH, READY_PATH
from specbuild.deploy.launch import SLURM_RANKS, ScriptFormatError, expand, parse_script
from specbuild.deploy.monitoring import ACCEPTANCE_LENGTH, QUEUE_COMPUTE
from specbuild.deploy.repository import FOLDER, compiled_files, container_files
from specbuild.recipe.deploy import quantity_value
from specbuild.deploy.slurm import RANKS_SCRIPT, srun_mpi, tasks_per_node


@dataclass(frozen=True)
class PodTemplate:
    doc: Doc
    path: list
    role: str  # single | leader | worker
    body: dict

    def container(self) -> tuple[list, dict] | tuple[None, None]:
        for i, c in enumerate((self.body.get("spec") or {}).get("containers") or []):
            if c.get("name") == CONTAINER:
                return [*self.path, "spec", "containers", i], c
        return None, None


def pod_templates(doc: Doc) -> list[PodTemplate]:
    spec = doc.body.get("spec") or {}
    if doc.kind in ("Deployment", "StatefulSet"):
        return [PodTemplate(doc, ["spec", "template"], "single", spec.get("template") or {})]
    if doc.kind == "LeaderWorkerSet":
        lwt = spec.get("leaderWorkerTemplate") or {}
        out = [
            PodTemplate(
                doc,
                ["spec", "leaderWorkerTemplate", "leaderTemplate"],
                "leader",
                lwt.get("leaderTemplate") or lwt.get("workerTemplate") or {},
            )
        ]
        if "workerTemplate" in lwt:
            out.append(
                PodTemplate(doc, ["spec", "leaderWorkerTemplate", "workerTemplate"], "worker", lwt["workerTemplate"])
            )
        return out
    return []


def _under(path: str, mounts: list[str]) -> bool:
    p = Path(path)
    return any(p == Path(m) or Path(m) in p.parents for m in mounts)


def cross_findings(ctx: DeployContext, docs: list[Doc], folder: Path) -> Iterator[BundleFinding]:
    recipe, w = ctx.recipe, ctx.world
    facts = repository_facts(ctx)
    ports_of_script = ctx.launch.ports
    script_path = str(ctx.repository / ctx.launch.script.name)
    if facts.get("script") is not None:
        if facts["script"] != ctx.launch.script_text:
            yield BundleFinding(
                script_path,
                "",
                "the repository's launch script is not the one this recipe implies (stale repository) — recompile",
            )
        try:
            ports_of_script = ctx.flavour.script_ports(facts["script"])
        except ScriptFormatError as e:
            yield BundleFinding(script_path, "", f"cannot read its ports and ranks ({e}) — recompile")
    t = recipe.triton
    recipe_ports = {"http": t.http_port, "grpc": t.grpc_port, "metrics": t.metrics_port}
    repo_ports = {
        "http": ports_of_script["HTTP_PORT"],
        "grpc": ports_of_script["GRPC_PORT"],
        "metrics": ports_of_script["METRICS_PORT"],
    }
    for name in recipe_ports:
        if recipe_ports[name] != repo_ports[name]:
            yield BundleFinding(
                script_path,
                f"{name.upper()}_PORT",
                f"{repo_ports[name]} but recipe triton.{name}_port is {recipe_ports[name]} — recompile the repository",
            )

    by_kind: dict[str, list[Doc]] = {}
    for d in docs:
        by_kind.setdefault(d.kind, []).append(d)
        ns = (d.body.get("metadata") or {}).get("namespace")
        if ns != ctx.namespace:
            yield d.finding("metadata.namespace", f"{ns!r} but deploy.kubernetes.namespace is {ctx.namespace!r}")
    workloads = [d for d in docs if pod_templates(d)]
    if len(workloads) != 1 or workloads[0].kind != ctx.workload_kind:
        yield BundleFinding(
            KUSTOMIZATION,
            "resources",
            f"needs exactly one {ctx.workload_kind} (world of "
            f"{w.world_size} rank(s) on {w.nodes} node(s)); found "
            f"{', '.join(d.kind for d in workloads) or 'none'}",
        )
        return
    wl = workloads[0]
    templates = pod_templates(wl)
    yield from _world(ctx, wl, templates, facts)
    yield from ctx.flavour.repository_checks(ctx, facts)
    for tpl in templates:
        yield from _container(ctx, tpl, repo_ports, facts)
    serving = templates[0]
    yield from _selectors(ctx, by_kind, wl, serving)
    yield from _hpa_and_rules(ctx, by_kind, wl, facts)
    yield from _slurm(ctx, folder, facts)
    yield from _bundled_repository(ctx, folder)
    yield from _portable(ctx, folder)


def _gpus(ctx: DeployContext, tpl: PodTemplate) -> tuple[list, int | None]:
    path, c = tpl.container()
    if c is None:
        return [], None
    limits = (c.get("resources") or {}).get("limits") or {}
    value = limits.get(ctx.deploy.kubernetes.gpu_resource)
    try:
        return path, int(quantity_value(str(value))) if value is not None else None
    except ValueError:
        return path, None


def _world(ctx: DeployContext, wl: Doc, templates: list[PodTemplate], facts: dict) -> Iterator[BundleFinding]:
    recipe, w = ctx.recipe, ctx.world
    gpu = ctx.deploy.kubernetes.gpu_resource
    tp, pp = recipe.build.tp_size, recipe.build.pp_size
    lwt = (wl.body.get("spec") or {}).get("leaderWorkerTemplate") or {}
    pods = lwt.get("size", 1) if wl.kind == "LeaderWorkerSet" else 1
    for tpl in templates:
        path, n = _gpus(ctx, tpl)
        if n is None:
            yield wl.finding([*path, "resources", "limits"], f"no {gpu} limit: the device plugin gives GPUs by limits")
            continue
        requests = ((tpl.container()[1] or {}).get("resources") or {}).get("requests") or {}
        if gpu in requests and str(requests[gpu]) != str(
            ((tpl.container()[1].get("resources") or {}).get("limits") or {}).get(gpu)
        ):
            yield wl.finding([*path, "resources", "requests", gpu], "must equal the limit (device plugin)")
        if n != w.gpus_per_pod:
            yield wl.finding(
                [*path, "resources", "limits", gpu],
                f"{n} GPU(s) per pod but the recipe's world needs "
                f"{w.gpus_per_pod} ({w.mode} mode, gpu_device_ids {w.engine_gpus})",
            )
        if w.one_rank_per_gpu and tpl is templates[0]:
            used = min(len(set(recipe.triton.gpu_device_ids)), n)
            if pods * used != tp * pp:
                yield wl.finding(
                    "spec.leaderWorkerTemplate.size"
                    if wl.kind == "LeaderWorkerSet"
                    else [*path, "resources", "limits", gpu],
                    f"world size tp*pp = {tp}*{pp} = {tp * pp} but {pods} pod(s) x {used} GPU(s) per pod "
                    f"run {pods * used} rank(s) — one rank per GPU in leader mode",
                )
        for model, ids in w.engine_gpus.items():
            outside = [i for i in ids if i >= n]
            if outside:
                yield wl.finding(
                    [*path, "resources", "limits", gpu],
                    f"{model} runs on GPU(s) {ids} but the pod has {n} (GPU ids in a pod count from 0)",
                )
    if pods != w.nodes:
        yield wl.finding(
            "spec.leaderWorkerTemplate.size" if wl.kind == "LeaderWorkerSet" else "kind",
            f"{pods} pod(s) per replica but tp*pp = {tp * pp} on {ctx.deploy.gpus_per_node} GPUs per "
            f"node needs {w.nodes}{ctx.flavour.nodes_from}",
        )
    for model, ids in facts["gpu_device_ids"].items():
        want = w.engine_gpus.get(model)
        if want is not None and ids != want:
            yield BundleFinding(
                f"{ctx.repository}/{model}/config.pbtxt",
                "gpu_device_ids",
                f"{ids} but the recipe names {want} — recompile the repository",
            )


def _container(ctx: DeployContext, tpl: PodTemplate, ports: dict[str, int], facts: dict) -> Iterator[BundleFinding]:
    doc = tpl.doc
    path, c = tpl.container()
    if c is None:
        yield doc.finding([*tpl.path, "spec", "containers"], f"no container named {CONTAINER!r}")
        return
    command = list(c.get("command") or []) + list(c.get("args") or [])
    expected = ctx.launch.container_argv
    if tpl.role == "single" and command != expected:
        yield doc.finding(
            [*path, "command"],
            f"{shlex.join(command)!r} is not the repository's launch command {shlex.join(expected)!r}",
        )
    if tpl.role == "leader":
        yield from _leader(ctx, doc, path, command)
    if tpl.role != "worker":
        declared = {p.get("name"): p.get("containerPort") for p in c.get("ports") or []}
        for i, p in enumerate(c.get("ports") or []):
            want = ports.get(p.get("name"))
            if want is None:
                yield doc.finding(
                    [*path, "ports", i, "name"], f"{p.get('name')!r} is not a Triton port (http, grpc, metrics)"
                )
            elif p.get("containerPort") != want:
                yield doc.finding(
                    [*path, "ports", i, "containerPort"],
                    f"{p.get('containerPort')} but the "
                    f"repository serves {p.get('name')} on {want} (launch_triton.sh, recipe "
                    f"triton.{p.get('name')}_port)",
                )
        for name in ports:
            if name not in declared:
                yield doc.finding([*path, "ports"], f"no port named {name!r}")
        for key, want_path in (
            ("startupProbe", READY_PATH),
            ("readinessProbe", READY_PATH),
            ("livenessProbe", LIVE_PATH),
        ):
            probe = c.get(key)
            if not probe:
                yield doc.finding(
                    [*path, key],
                    f"missing: Triton answers {want_path} once it is {'live' if want_path == LIVE_PATH else 'ready'}",
                )
                continue
            get = probe.get("httpGet") or {}
            if get.get("path") != want_path:
                yield doc.finding(
                    [*path, key, "httpGet", "path"],
                    f"{get.get('path')!r}: Triton serves "
                    f"{want_path} for this probe (/v2/health/live, /v2/health/ready)",
                )
            port = get.get("port")
            if port != "http" and port != ports["http"]:
                yield doc.finding(
                    [*path, key, "httpGet", "port"], f"{port!r} is not the HTTP port ({ports['http']}, named http)"
                )
    yield from _volumes(ctx, tpl, path, c, facts)


def _leader(ctx: DeployContext, doc: Doc, path: list, command: list[str]) -> Iterator[BundleFinding]:
    """The leader's script: exec what the world needs last, with as many hostfile slots and (llm-api) mpirun ranks
    as the world has."""
    w = ctx.world
    script = command[2] if command[:2] == ["bash", "-c"] and len(command) == 3 else ""
    last = [ln for ln in script.strip().splitlines() if ln.strip()][-1:] or [""]
    expected = ctx.launch.leader_command
    if last[0].strip() != "exec " + shlex.join(expected):
        yield doc.finding(
            [*path, "command"],
            f"the leader must end by exec-ing {ctx.flavour.leader_execs} "
            f"{shlex.join(expected)!r}; its last line is {last[0].strip()!r}",
        )
    try:
        words = shlex.split(last[0].strip())
    except ValueError:
        words = []
    if "-np" in words[:-1] and words[words.index("-np") + 1] != str(w.world_size):
        yield doc.finding(
            [*path, "command"],
            f"mpirun -np {words[words.index('-np') + 1]} but the world has tp*pp = {w.tp_pp} rank(s)",
        )
    slots = set(re.findall(r" slots=(\d+)", script))
    if slots and slots != {str(w.ranks_per_node)}:
        yield doc.finding(
            [*path, "command"], f"hostfile slots {sorted(slots)} but each pod runs {w.ranks_per_node} rank(s)"
        )


def _volumes(ctx: DeployContext, tpl: PodTemplate, path: list, c: dict, facts: dict) -> Iterator[BundleFinding]:
    doc = tpl.doc
    spec = tpl.body.get("spec") or {}
    vols = {v.get("name"): v for v in spec.get("volumes") or []}
    mounts = c.get("volumeMounts") or []
    shm = [m for m in mounts if m.get("mountPath") == "/dev/shm"]
    if not shm:
        yield doc.finding(
            [*path, "volumeMounts"],
            "no /dev/shm mount: the python backend and NCCL need more than the runtime's default (Docker: 64 MB)",
        )
    else:
        vol = vols.get(shm[0].get("name")) or {}
        empty = vol.get("emptyDir") or {}
        if empty.get("medium") != "Memory":
            yield doc.finding([*tpl.path, "spec", "volumes"], "/dev/shm must be an emptyDir with medium: Memory")
        limit = ((c.get("resources") or {}).get("limits") or {}).get("memory")
        if limit and empty.get("sizeLimit"):
            if quantity_value(str(empty["sizeLimit"])) > quantity_value(str(limit)):
                yield doc.finding(
                    [*path, "resources", "limits", "memory"],
                    f"{limit} is below the /dev/shm sizeLimit {empty['sizeLimit']}: shared memory counts against it",
                )
    mounted = [m.get("mountPath") for m in mounts if m.get("name") in vols]
    needed = [(m.what, m.container) for m in ctx.mounts]
    needed += [(what, ctx.in_container(p) or p) for what, p in sorted(facts["paths"])]
    for what, p in needed:
        if not _under(p, mounted):
            yield doc.finding([*path, "volumeMounts"], f"{p} ({what}) is not mounted: the pod would not find it")


def _labels_match(selector: dict, labels: dict, lws: str | None) -> bool:
    for k, v in selector.items():
        if lws and k == LWS_NAME and v == lws:
            continue
        if lws and k == LWS_WORKER_INDEX and v == "0":
            continue
        if labels.get(k) != v:
            return False
    return True


def _selectors(ctx: DeployContext, by_kind: dict, wl: Doc, serving: PodTemplate) -> Iterator[BundleFinding]:
    labels = (serving.body.get("metadata") or {}).get("labels") or {}
    lws = wl.name if wl.kind == "LeaderWorkerSet" else None
    if wl.kind != "LeaderWorkerSet":
        sel = ((wl.body.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
        if not _labels_match(sel, labels, None):
            yield wl.finding("spec.selector.matchLabels", "does not match the pod template's labels")
    _, c = serving.container()
    port_names = {p.get("name") for p in (c or {}).get("ports") or []}
    for d in by_kind.get("Service", []):
        spec = d.body.get("spec") or {}
        if not _labels_match(spec.get("selector") or {}, labels, lws):
            yield d.finding("spec.selector", "selects no serving pod of the workload")
        for i, p in enumerate(spec.get("ports") or []):
            if p.get("targetPort") not in port_names or p.get("port") != ctx.ports.get(p.get("name")):
                yield d.finding(
                    ["spec", "ports", i],
                    f"{p.get('name')}: port {p.get('port')} -> "
                    f"{p.get('targetPort')} does not reach the container's {p.get('name')} port",
                )
    for d in by_kind.get("PodMonitor", []):
        spec = d.body.get("spec") or {}
        if not _labels_match((spec.get("selector") or {}).get("matchLabels") or {}, labels, lws):
            yield d.finding("spec.selector.matchLabels", "selects no serving pod of the workload")
        for i, ep in enumerate(spec.get("podMetricsEndpoints") or []):
            if ep.get("port") not in port_names or ctx.ports.get(ep.get("port")) != ctx.ports["metrics"]:
                yield d.finding(
                    ["spec", "podMetricsEndpoints", i, "port"],
                    f"{ep.get('port')!r} is not the container's metrics port",
                )
    for kind in ("PodMonitor", "PrometheusRule"):
        for d in by_kind.get(kind, []):
            release = ((d.body.get("metadata") or {}).get("labels") or {}).get("release")
            if release != ctx.deploy.monitoring.prometheus_release:
                yield d.finding(
                    "metadata.labels.release",
                    f"{release!r}: kube-prometheus-stack selects "
                    f"release={ctx.deploy.monitoring.prometheus_release!r} (deploy.monitoring)",
                )


def _hpa_and_rules(ctx: DeployContext, by_kind: dict, wl: Doc, facts: dict) -> Iterator[BundleFinding]:
    records = {}
    for d in by_kind.get("PrometheusRule", []):
        for gi, group in enumerate((d.body.get("spec") or {}).get("groups") or []):
            for ri, rule in enumerate(group.get("rules") or []):
                if ("record" in rule) == ("alert" in rule):
                    yield d.finding(["spec", "groups", gi, "rules", ri], "set exactly one of record and alert")
                if "record" in rule:
                    records[rule["record"]] = (d, ["spec", "groups", gi, "rules", ri, "expr"], str(rule.get("expr")))
    if ACCEPTANCE_LENGTH in records and not ctx.publishes_acceptance:
        d, path, _ = records[ACCEPTANCE_LENGTH]
        yield d.finding(
            path[:-1],
            f"records {ACCEPTANCE_LENGTH} from counters no model of this repository exports "
            f"({ctx.flavour.no_acceptance_counters})",
        )
    if QUEUE_COMPUTE in records:
        d, path, expr = records[QUEUE_COMPUTE]
        models = set(re.findall(r'model="([^"]+)"', expr))
        if models != {ctx.scale_model}:
            yield d.finding(path, f"should read model {ctx.scale_model!r} only (found {sorted(models)})")
        elif facts["models"] and ctx.scale_model not in facts["models"]:
            yield d.finding(path, f"model {ctx.scale_model!r} is not in the repository {ctx.repository}")
    for d in by_kind.get("HorizontalPodAutoscaler", []):
        spec = d.body.get("spec") or {}
        ref = spec.get("scaleTargetRef") or {}
        want_api = "leaderworkerset.x-k8s.io/v1" if wl.kind == "LeaderWorkerSet" else "apps/v1"
        if (ref.get("kind"), ref.get("name"), ref.get("apiVersion")) != (wl.kind, wl.name, want_api):
            yield d.finding("spec.scaleTargetRef", f"{ref} does not name the workload {want_api} {wl.kind} {wl.name}")
        for i, m in enumerate(spec.get("metrics") or []):
            name = ((m.get("pods") or {}).get("metric") or {}).get("name")
            if name not in records:
                yield d.finding(["spec", "metrics", i], f"metric {name!r} is recorded by no PrometheusRule here")
        if spec.get("minReplicas", 1) > spec.get("maxReplicas", 0):
            yield d.finding("spec.minReplicas", "exceeds maxReplicas")


def _slurm(ctx: DeployContext, folder: Path, facts: dict) -> Iterator[BundleFinding]:
    w = ctx.world
    sbatch_rel = f"slurm/{ctx.name}.sbatch"
    sbatch, ranks = folder / sbatch_rel, folder / "slurm" / RANKS_SCRIPT
    if not sbatch.is_file() or not ranks.is_file():
        yield BundleFinding("slurm", "", f"missing {sbatch_rel} or slurm/{RANKS_SCRIPT} — recompile")
        return
    text = sbatch.read_text()
    opts = dict(re.findall(r"^#SBATCH --([a-z-]+)=(\S+)$", text, re.M))
    tasks = tasks_per_node(ctx)
    for key, want in (("nodes", w.nodes), ("ntasks-per-node", tasks), ("gpus-per-node", w.gpus_per_pod)):
        if opts.get(key) != str(want):
            yield BundleFinding(
                sbatch_rel,
                f"#SBATCH --{key}",
                f"{opts.get(key)} but the world needs {want} "
                f"({w.world_size} rank(s), {w.nodes} node(s) x {w.gpus_per_pod} GPU(s))",
            )
    srun = [ln for ln in text.splitlines() if ln.startswith("srun ") and RANKS_SCRIPT in ln]
    mpi = srun_mpi(ctx)
    if len(srun) != 1 or mpi not in srun[0] or f"--ntasks={tasks * w.nodes}" not in srun[0]:
        yield BundleFinding(
            sbatch_rel, "srun", f"needs one `srun {mpi} --ntasks={tasks * w.nodes} ... {RANKS_SCRIPT}` line"
        )
    body = ranks.read_text()
    script = facts.get("script")
    if ctx.launch.slurm != SLURM_RANKS:
        execs = [ln for ln in body.splitlines() if ln.lstrip().startswith("exec ")]
        if execs != ["exec " + shlex.join(ctx.launch.container_argv)]:
            yield BundleFinding(
                f"slurm/{RANKS_SCRIPT}",
                "",
                "must exec the repository's launch command "
                f"{shlex.join(ctx.launch.container_argv)!r} (and nothing else)",
            )
        return
    expected = ctx.launch.rank_argv
    if script is not None:  # the ranks of the repository's script on disk, with the image's paths
        try:
            parts = parse_script(script)
            values = {
                "TRITONSERVER": expected[0][0],
                "REPO": ctx.container_repository,
                **{k: str(v) for k, v in parts.ports.items()},
            }
            extra = [f"--exit-timeout-secs={ctx.deploy.exit_timeout_s}"]
            expected = [expand(seg, values, extra) for seg in parts.segments]
        except (ScriptFormatError, IndexError):
            pass
    exports = dict(re.findall(r"^export ([A-Z_]+)=(\S+)$", body, re.M))
    want_env = parse_script(script).env if script is not None else ctx.launch.env
    if exports != want_env:
        yield BundleFinding(
            f"slurm/{RANKS_SCRIPT}", "export", f"{exports} but the repository's launch script exports {want_env}"
        )
    found = {int(m.group(1)): shlex.split(m.group(2)) for m in re.finditer(r"^  (\d+)\) exec (.*) ;;$", body, re.M)}
    if sorted(found) != list(range(len(expected))):
        yield BundleFinding(
            f"slurm/{RANKS_SCRIPT}",
            "case",
            f"ranks {sorted(found)} but the repository's mpirun line has {len(expected)} (0..{len(expected) - 1})",
        )
    for rank, argv in found.items():
        if rank < len(expected) and argv != expected[rank]:
            yield BundleFinding(
                f"slurm/{RANKS_SCRIPT}",
                f"rank {rank}",
                f"{shlex.join(argv)!r} is not rank {rank} of "
                f"the repository's launch script: {shlex.join(expected[rank])!r}",
            )


def _bundled_repository(ctx: DeployContext, folder: Path) -> Iterator[BundleFinding]:
    """The bundle's repository/ is the compiled repository with the containers' paths, file for file."""
    compiled = compiled_files(ctx)
    if not compiled:
        return  # not compiled yet
    want = container_files(ctx, compiled)
    root = folder / FOLDER
    have = {str(p.relative_to(root)): p for p in sorted(root.rglob("*")) if p.is_file()} if root.is_dir() else {}
    for rel in sorted(set(want) | set(have)):
        if rel not in have:
            yield BundleFinding(
                f"{FOLDER}/{rel}", "", f"missing: the compiled repository has it ({ctx.repository}) — recompile"
            )
        elif rel not in want:
            yield BundleFinding(f"{FOLDER}/{rel}", "", "is not in the compiled repository — recompile")
        elif have[rel].read_text() != want[rel]:
            yield BundleFinding(
                f"{FOLDER}/{rel}", "", "is not the compiled file with the containers' paths (stale bundle) — recompile"
            )


# Files of a bundle that run on the machine that compiled, or only describe: the only ones that may name its folders
WHERE_COMPILED = (COPY_SCRIPT, "README.md", "bundle.json")


def _portable(ctx: DeployContext, folder: Path) -> Iterator[BundleFinding]:
    """No file that runs in the cluster names a folder of the machine that compiled: the containers read below
    deploy.mount_root, the Slurm job finds the bundle where it was submitted."""
    local = sorted(
        p
        for p in {str(m.source) for m in ctx.mounts} | {str(ctx.repository), str(ctx.folder)}
        if not _under(p, [ctx.tree])
    )
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        rel = str(path.relative_to(folder))
        if rel in WHERE_COMPILED:
            continue
        text = path.read_text(errors="replace")
        named = [p for p in local if p in text]
        if named:
            yield BundleFinding(
                rel,
                "",
                f"names {named[0]}, a folder of the machine that compiled: the cluster reads "
                f"below {ctx.tree} (deploy.mount_root) — recompile",
            )
