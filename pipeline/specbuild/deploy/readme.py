"""README.md of a bundle: how to fill the storage, apply, check, and run under Slurm — with this bundle's values."""

from __future__ import annotations

from typing import Any

from specbuild.deploy.context import DeployContext
from specbuild.deploy.monitoring import ACCEPTANCE_LENGTH, QUEUE_COMPUTE


def bundle_readme(ctx: DeployContext, plan: dict[str, Any], schemas: bool = True) -> str:
    ns, name, w = ctx.namespace, ctx.name, ctx.world
    loader = f"{name}-loader"
    layout = "\n".join(f"- {k}: {v}" for k, v in plan["layout"].items())
    copy = "\n".join(f"kubectl cp {m.path} {ns}/{loader}:/models/{m.sub_path}" for m in ctx.mounts)
    parents = sorted({m.sub_path.rsplit("/", 1)[0] for m in ctx.mounts})
    multi = ""
    if w.multi_node:
        multi = f"""
## Multi-node: the image needs kubectl

The leader pod runs `mpirun` over the group's {w.nodes} pods; mpirun starts the worker ranks with `kubessh`
(`kubectl exec`, ConfigMap `{name}-mpi`, rights in `rbac.yaml`), as NVIDIA's EKS multi-node chart does. NGC images
have no kubectl: build `Containerfile` (the NGC image plus kubectl), push it, and point the bundle at it:

```bash
docker build -t REGISTRY/{name}-triton:{ctx.image.tag} -f Containerfile . && docker push REGISTRY/{name}-triton:{ctx.image.tag}
kustomize edit set image {ctx.image.repository}=REGISTRY/{name}-triton:{ctx.image.tag}
```

Without it the leader exits at once with a message saying so. The LeaderWorkerSet controller (v0.4 or newer;
validated against the v0.10.0 CRD) must be installed in the cluster.
"""
    al = (f"`{ACCEPTANCE_LENGTH}` (mean acceptance length, from the counters the BLS publishes)"
          if ctx.publishes_acceptance else
          "no acceptance-length series: TensorRT-LLM's backend exports none for this method "
          "(`specbuild validate` measures it client-side)")
    tasks = ("One task runs the repository's launch script (a spawning orchestrator: mpirun inside the container "
             "starts its one rank; NVIDIA says spawning \"might not work properly with slurm\")."
             if ctx.launch.tasks_run_script else
             "Each task is one MPI rank (`srun --mpi=pmix`; `slurm/ranks.sh` runs that rank's part of the "
             "repository's mpirun line).")
    checks = "cross-checks (world size, ports, the launch command, probe paths, GPUs, mounts)"
    validated = (f"Validated offline before it was written: each manifest against the Kubernetes "
                 f"{ctx.deploy.kubernetes.version} schemas (strict: unknown fields are errors), the LeaderWorkerSet and "
                 f"Prometheus Operator objects against their CRDs, and {checks}." if schemas else
                 f"Checked before it was written by {checks} only: kubernetes-validate was not installed, so the "
                 "manifests were NOT validated against the Kubernetes schemas (pip install 'specbuild[deploy]').")
    return f"""# Deployment bundle: {ctx.recipe.name}

Written by `specbuild compile` from the recipe's `deploy` section; edit the recipe and recompile rather than
these files. {validated}

- world: {plan['world']}
{layout}
- image: {plan['image']}
- serving container command (the repository's own launch command): `{plan['command']}`
- ports: HTTP {ctx.ports['http']}, gRPC {ctx.ports['grpc']}, metrics {ctx.ports['metrics']} (Service `{name}`)

## 1. Storage: put the engines, tokenizer and repository on the claim

`config.pbtxt` names the engine and tokenizer folders by their absolute paths on the machine that compiled, so
the pods mount sub-folders of the claim `{ctx.claim}` at exactly those paths:

{chr(10).join(f"- `{m.path}` <- claim `{m.sub_path}` ({m.what})" for m in ctx.mounts)}

Edit `deploy.storage` in the recipe for the size ({ctx.deploy.storage.size}), storage class and access mode
({ctx.deploy.storage.access_mode}; replicas and groups on several nodes need ReadWriteMany). Fill it once:

```bash
kubectl apply -f storage.yaml -f loader-pod.yaml
kubectl wait -n {ns} --for=condition=Ready pod/{loader}
kubectl exec -n {ns} {loader} -- mkdir -p {" ".join(f"/models/{p}" for p in parents)}
{copy}
kubectl delete -n {ns} pod/{loader}
```
{multi}
## 2. Apply

```bash
kubectl apply -k .                 # or: kubectl kustomize . | kubectl apply -f -
kubectl rollout status -n {ns} {ctx.workload_kind.lower()}/{name}   # ready once every model has loaded
kubectl port-forward -n {ns} svc/{name} {ctx.ports['http']}:{ctx.ports['http']}
curl -s localhost:{ctx.ports['http']}/v2/models/{ctx.serving_model}/generate -d '{{"text_input": "def add(a, b):", "max_tokens": 32}}'
```

Change the image with `kustomize edit set image {ctx.image.repository}=...` (or `deploy.image` in the recipe);
the tag must carry the TensorRT-LLM release that built the engines ({ctx.image.trtllm_version or 'unknown'}).
The startup probe allows {ctx.deploy.kubernetes.probes.startup_period_s * ctx.deploy.kubernetes.probes.startup_failure_threshold} s
for the engines to load. On SIGTERM tritonserver drains for {ctx.deploy.exit_timeout_s} s
(`--exit-timeout-secs`) within a grace period of {ctx.grace_period_s} s.

## 3. Monitoring and autoscaling

`podmonitor.yaml` and `prometheusrule.yaml` carry `release: {ctx.deploy.monitoring.prometheus_release}` (the label
kube-prometheus-stack selects by). The rule records `{QUEUE_COMPUTE}` per pod for model `{ctx.scale_model}`, and
{al}. The HPA (`hpa.yaml`, when max_replicas > min_replicas) reads `{QUEUE_COMPUTE}` through prometheus-adapter's
default rule (`helm install prometheus-adapter prometheus-community/prometheus-adapter` with your Prometheus URL).

## 4. Slurm

```bash
sbatch slurm/{name}.sbatch
```

{w.nodes} node(s), {w.gpus_per_pod} GPU(s) each, container runtime `{ctx.deploy.slurm.container_runtime}`
(`deploy.slurm` in the recipe: pyxis, enroot, apptainer or none). {tasks} The paths above must exist on the
cluster's shared filesystem.
"""
