"""README.md of a bundle: how to fill the storage, apply, check, and run under Slurm — with this bundle's values."""

from __future__ import annotations

import shlex
from typing import Any

from specbuild.deploy.context import DeployContext
from specbuild.deploy.copying import COPY_SCRIPT
from specbuild.deploy.launch import SLURM_EVERY_TASK, SLURM_ONE_TASK, SLURM_RANKS
from specbuild.deploy.monitoring import ACCEPTANCE_LENGTH, QUEUE_COMPUTE
from specbuild.deploy.repository import FOLDER


TASKS = {
    SLURM_ONE_TASK: "One task runs the repository's launch command{why}.",
    SLURM_RANKS: "Each task is one MPI rank (`srun --mpi=pmix`; `slurm/ranks.sh` runs that rank's part of the "
    "repository's mpirun line).",
    SLURM_EVERY_TASK: "Each task is one MPI rank (`srun --mpi=pmix`, NVIDIA's documented multi-node launch of this "
    "flavour) and runs the repository's launch command; `trtllm-llmapi-launch` in it makes rank 0 "
    "serve and the others LLM workers.",
}
ONE_TASK_WHY = {  # by world mode
    "orchestrator": " (a spawning orchestrator: mpirun inside the container starts its one rank; NVIDIA says "
    'spawning "might not work properly with slurm")',
    "single": " (one tritonserver; the LLM starts its tensor/pipeline-parallel workers itself, inside the task: "
    "unverified under Slurm)",
    "multi-instance": " (one tritonserver whose instances each use their own GPUs, without MPI)",
}


def bundle_readme(ctx: DeployContext, plan: dict[str, Any], schemas: bool = True) -> str:
    ns, name, w = ctx.namespace, ctx.name, ctx.world
    text = ctx.flavour.readme
    loader = f"{name}-loader"
    layout = "\n".join(f"- {k}: {v}" for k, v in plan["layout"].items())
    sources = "\n".join(
        f"- `{m.container}` <- "
        + (f"`{FOLDER}/` of this bundle" if m.bundled else f"`{shlex.quote(str(m.source))}`")
        + f" ({m.what})"
        for m in ctx.mounts
    )
    bare = ctx.deploy.slurm.container_runtime == "none"
    multi = ""
    if w.multi_node:
        launch = ctx.flavour.multi_node.format(nodes=w.nodes, world=w.world_size)
        multi = f"""
## Multi-node: the image needs kubectl

{launch} (`kubectl exec`, ConfigMap `{name}-mpi`, rights in `rbac.yaml`), as NVIDIA's EKS multi-node chart does. NGC images
have no kubectl: build `Containerfile` (the NGC image plus kubectl), push it, and point the bundle at it:

```bash
docker build -t REGISTRY/{name}-triton:{ctx.image.tag} -f Containerfile . && docker push REGISTRY/{name}-triton:{ctx.image.tag}
kustomize edit set image {ctx.image.repository}=REGISTRY/{name}-triton:{ctx.image.tag}
```

Without it the leader exits at once with a message saying so. The LeaderWorkerSet controller (v0.4 or newer;
validated against the v0.10.0 CRD) must be installed in the cluster.
"""
    al = (
        f"`{ACCEPTANCE_LENGTH}` (mean acceptance length, from the counters the BLS publishes)"
        if ctx.publishes_acceptance
        else text.acceptance
    )
    tasks = TASKS[ctx.launch.slurm].format(why=ONE_TASK_WHY.get(w.mode, ""))
    leader = (
        f"\n- across nodes every rank runs that command: the leader pod writes the hostfile, then execs "
        f"`{shlex.join(ctx.launch.leader_argv)}`"
        if ctx.launch.leader_argv and w.multi_node
        else ""
    )
    checks = "cross-checks (world size, ports, the launch command, probe paths, GPUs, mounts)"
    slurm_fill = (
        f"bash {COPY_SCRIPT} HOST:{ctx.deploy.mount_root}   # the nodes read {ctx.tree} themselves"
        if bare
        else f"bash {COPY_SCRIPT} HOST:BUNDLE/models   # or a folder of your own: MODELS_DIR=..."
    )
    slurm_tree = (
        f"The nodes read `{ctx.tree}` directly (no container)."
        if bare
        else f"The job binds `$MODELS_DIR/{name}` (default `models/{name}` in the bundle) at `{ctx.tree}` in the "
        "container, read-only."
    )
    validated = (
        f"Validated offline before it was written: each manifest against the Kubernetes "
        f"{ctx.deploy.kubernetes.version} schemas (strict: unknown fields are errors), the LeaderWorkerSet and "
        f"Prometheus Operator objects against their CRDs, and {checks}."
        if schemas
        else f"Checked before it was written by {checks} only: kubernetes-validate was not installed, so the "
        "manifests were NOT validated against the Kubernetes schemas (pip install 'specbuild[deploy]')."
    )
    return f"""# Deployment bundle: {ctx.recipe.name}

Written by `specbuild compile` from the recipe's `deploy` section; edit the recipe and recompile rather than
these files. {validated}

- world: {plan["world"]}
{layout}
- image: {plan["image"]}
- serving container command (the repository's own launch command): `{plan["command"]}`{leader}
- ports: HTTP {ctx.ports["http"]}, gRPC {ctx.ports["grpc"]}, metrics {ctx.ports["metrics"]} (Service `{name}`)

## 1. Storage: put {text.contents} on the claim

{text.named_by}.

The containers read everything below `{ctx.tree}` (`deploy.mount_root` in the recipe), where the pods mount the
folder `{name}` of the claim `{ctx.claim}` read-only. `{COPY_SCRIPT}` fills it from the machine that compiled (the
only file here that names its folders):

{sources}

It copies with `tar -h`, following symlinks: a Hugging Face hub-cache snapshot (files linked into `../../blobs/`)
lands as the files themselves. Edit `deploy.storage` in the recipe for the size ({ctx.deploy.storage.size}),
storage class and access mode ({ctx.deploy.storage.access_mode}; replicas and groups on several nodes need
ReadWriteMany). Fill it once, and again after each compile:

```bash
kubectl apply -f storage.yaml -f loader-pod.yaml
kubectl wait -n {ns} --for=condition=Ready pod/{loader}
bash {COPY_SCRIPT} kubernetes
kubectl delete -n {ns} pod/{loader}
```
{multi}
## 2. Apply

```bash
kubectl apply -k .                 # or: kubectl kustomize . | kubectl apply -f -
kubectl rollout status -n {ns} {ctx.workload_kind.lower()}/{name}   # ready once every model has loaded
kubectl port-forward -n {ns} svc/{name} {ctx.ports["http"]}:{ctx.ports["http"]}
{text.request(ctx)}
```

Change the image with `kustomize edit set image {ctx.image.repository}=...` (or `deploy.image` in the recipe);
{text.image(ctx)}.
The startup probe allows {ctx.deploy.kubernetes.probes.startup_period_s * ctx.deploy.kubernetes.probes.startup_failure_threshold} s
for {text.load}. On SIGTERM tritonserver drains for {ctx.deploy.exit_timeout_s} s
(`--exit-timeout-secs`) within a grace period of {ctx.grace_period_s} s.

## 3. Monitoring and autoscaling

`podmonitor.yaml` and `prometheusrule.yaml` carry `release: {ctx.deploy.monitoring.prometheus_release}` (the label
kube-prometheus-stack selects by). The rule records `{QUEUE_COMPUTE}` per pod for model `{ctx.scale_model}`, and
{al}. The HPA (`hpa.yaml`, when max_replicas > min_replicas) reads `{QUEUE_COMPUTE}` through prometheus-adapter's
default rule (`helm install prometheus-adapter prometheus-community/prometheus-adapter` with your Prometheus URL).

## 4. Slurm

Copy this bundle folder to the cluster's shared filesystem, fill its tree from the machine that compiled, and
submit from the bundle folder:

```bash
{slurm_fill}
cd BUNDLE && sbatch slurm/{name}.sbatch
```

{w.nodes} node(s), {w.gpus_per_pod} GPU(s) each, container runtime `{ctx.deploy.slurm.container_runtime}`
(`deploy.slurm` in the recipe: pyxis, enroot, apptainer or none). {tasks} {slurm_tree}
"""
