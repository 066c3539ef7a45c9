"""The workload manifests: a Deployment (or StatefulSet) when the model fits a node, a LeaderWorkerSet when
the world spans nodes (engine: tp * pp > gpus_per_node; llm-api: llm_api.nodes > 1), the claim the engines or
checkpoints live on, and the multi-node MPI plumbing (kubernetes-sigs/lws
api/leaderworkerset/v1/leaderworkerset_types.go@060ab4d; triton-inference-server/tutorials
Deployment/Kubernetes/EKS_Multinode_Triton_TRTLLM@e848952; graceful shutdown: triton-inference-server/server
src/main.cc@e1db8a6). Plain dicts, in the order the API documents the fields."""

from __future__ import annotations

import shlex
from typing import Any

from specbuild.deploy.context import LWS_NAME, MPI_DIR, DeployContext
from specbuild.recipe.deploy import quantity_value

LIVE_PATH = "/v2/health/live"
READY_PATH = "/v2/health/ready"  # 200 once every model is loaded (strict readiness, tritonserver's default)
HOSTFILE = "/tmp/specbuild-hostfile"
LOADER_ROOT = "/models"  # where loader-pod.yaml mounts the whole claim (copy-models.sh writes through it)
CONTAINER = "triton"  # first container: `kubectl exec` (kubessh) without -c would pick it anyway

# Open MPI 4 (HPC-X in NGC images) reads MCA parameters from OMPI_MCA_* variables: the rsh agent that starts
# orted in the worker pods, and the hostfile mpirun fills slot by slot (NVIDIA's EKS multi-node chart, tutorials
# Deployment/Kubernetes/EKS_Multinode_Triton_TRTLLM@e848952; the Open MPI 5 spelling is unverified).
RSH_AGENT_VAR = "OMPI_MCA_plm_rsh_agent"
HOSTFILE_VAR = "OMPI_MCA_orte_default_hostfile"

KUBESSH = """#!/bin/sh
# mpirun's rsh agent (NVIDIA EKS multi-node chart, containers/kubessh): run orted in the worker pod's triton
# container. Needs kubectl in the image and the ServiceAccount's pods/exec right (rbac.yaml).
pod="$1"
shift
exec kubectl exec "$pod" -n "$POD_NAMESPACE" -c triton -- /bin/sh -c "$*"
"""


def meta(ctx: DeployContext, name: str, **labels: str) -> dict[str, Any]:
    return {"name": name, "namespace": ctx.namespace, "labels": {**ctx.labels, **labels}}


def gpu_count(ctx: DeployContext) -> int:
    return ctx.world.gpus_per_pod


def cpu_for(k, gpus: int) -> str:
    """deploy.kubernetes.cpu, else max(4, GPUs per pod) (NVIDIA's autoscaling tutorial)."""
    return k.cpu or str(max(4, gpus))


def memory_for(k, gpus: int) -> str:
    """deploy.kubernetes.memory, else 8Gi per CPU (the same tutorial)."""
    return k.memory or f"{int(-(-quantity_value(cpu_for(k, gpus)) // 1)) * 8}Gi"


def cpu_request(ctx: DeployContext) -> str:
    return cpu_for(ctx.deploy.kubernetes, gpu_count(ctx))


def memory_request(ctx: DeployContext) -> str:
    return memory_for(ctx.deploy.kubernetes, gpu_count(ctx))


def resources(ctx: DeployContext) -> dict[str, Any]:
    gpu = ctx.deploy.kubernetes.gpu_resource
    n = gpu_count(ctx)
    # GPUs in limits (requests, when given, must be equal: device plugin contract)
    return {
        "requests": {"cpu": cpu_request(ctx), "memory": memory_request(ctx), gpu: n},
        "limits": {"memory": memory_request(ctx), gpu: n},
    }


def volume_mounts(ctx: DeployContext) -> list[dict[str, Any]]:
    """/dev/shm, and the claim's folder <name> at <mount_root>/<name>, where the repository names every folder."""
    return [
        {"name": "dshm", "mountPath": "/dev/shm"},
        {"name": "models", "mountPath": ctx.tree, "subPath": ctx.name, "readOnly": True},
    ]


def volumes(ctx: DeployContext, *, mpi: bool = False) -> list[dict[str, Any]]:
    out = [
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": ctx.deploy.shm_size}},
        {"name": "models", "persistentVolumeClaim": {"claimName": ctx.claim, "readOnly": True}},
    ]
    if mpi:
        out.append({"name": "mpi", "configMap": {"name": f"{ctx.name}-mpi", "defaultMode": 0o555}})
    return out


def probe(ctx: DeployContext, path: str, period: int, threshold: int) -> dict[str, Any]:
    return {
        "httpGet": {"path": path, "port": "http"},
        "periodSeconds": period,
        "failureThreshold": threshold,
        "timeoutSeconds": ctx.deploy.kubernetes.probes.timeout_s,
    }


def serving_ports(ctx: DeployContext) -> list[dict[str, Any]]:
    return [{"name": name, "containerPort": port, "protocol": "TCP"} for name, port in ctx.ports.items()]


def leader_script(ctx: DeployContext) -> str:
    """The leader's command: wait until `kubectl exec` reaches every worker pod, write the hostfile (the leader
    first, so rank 0 is here), then exec the repository's launch command (engine: its mpirun reaches the workers)
    or mpirun running that command on every rank (llm-api: trtllm-llmapi-launch makes rank 0 serve)."""
    w = ctx.world
    slots = w.ranks_per_node
    lines = [
        "set -euo pipefail",
        "if ! command -v kubectl >/dev/null; then",
        "  echo 'specbuild: this image has no kubectl; mpirun starts the worker ranks through it (kubessh). Build "
        "the bundle Containerfile and set deploy.image to it (kustomize edit set image).' >&2",
        "  exit 3",
        "fi",
        f'echo "$POD_NAME slots={slots}" > "${HOSTFILE_VAR}"',
        f"for i in {{1..{w.nodes - 1}}}; do",
        '  worker="$POD_NAME-$i"',
        f'  until kubectl exec "$worker" -n "$POD_NAMESPACE" -c {CONTAINER} -- true >/dev/null 2>&1; do',
        '    echo "waiting for worker pod $worker"',
        "    sleep 2",
        "  done",
        f'  echo "$worker slots={slots}" >> "${HOSTFILE_VAR}"',
        "done",
        "exec " + shlex.join(ctx.launch.leader_command),
    ]
    return "\n".join(lines) + "\n"


WORKER_SCRIPT = "trap 'exit 0' TERM INT\nsleep infinity &\nwait\n"


def container(ctx: DeployContext, role: str) -> dict[str, Any]:
    """role: single (the whole world in one pod), leader (rank 0's pod of a group), worker."""
    d, k = ctx.deploy, ctx.deploy.kubernetes
    c: dict[str, Any] = {"name": CONTAINER, "image": ctx.image.reference, "imagePullPolicy": d.image.pull_policy}
    if role == "single":
        c["command"] = list(ctx.launch.container_argv)
    elif role == "leader":
        c["command"] = ["bash", "-c", leader_script(ctx)]
    else:
        c["command"] = ["bash", "-c", WORKER_SCRIPT]
    env: list[dict[str, Any]] = []  # the launch script exports what its ranks need itself
    if role != "single":
        env += [
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        ]
    if role == "leader":
        env += [{"name": RSH_AGENT_VAR, "value": f"{MPI_DIR}/kubessh"}, {"name": HOSTFILE_VAR, "value": HOSTFILE}]
    if env:
        c["env"] = env
    if role != "worker":
        c["ports"] = serving_ports(ctx)
    c["resources"] = resources(ctx)
    c["volumeMounts"] = volume_mounts(ctx) + (
        [{"name": "mpi", "mountPath": MPI_DIR, "readOnly": True}] if role == "leader" else []
    )
    if role != "worker":
        p = k.probes
        c["startupProbe"] = probe(ctx, READY_PATH, p.startup_period_s, p.startup_failure_threshold)
        c["readinessProbe"] = probe(ctx, READY_PATH, p.readiness_period_s, p.readiness_failure_threshold)
        c["livenessProbe"] = probe(ctx, LIVE_PATH, p.liveness_period_s, p.liveness_failure_threshold)
        if k.pre_stop_sleep_s:
            c["lifecycle"] = {"preStop": {"exec": {"command": ["sleep", str(k.pre_stop_sleep_s)]}}}
    return c


def pod_spec(ctx: DeployContext, role: str) -> dict[str, Any]:
    k = ctx.deploy.kubernetes
    spec: dict[str, Any] = {}
    if ctx.service_account:
        spec["serviceAccountName"] = ctx.service_account
    spec["terminationGracePeriodSeconds"] = ctx.grace_period_s
    if ctx.deploy.image.pull_secrets:
        spec["imagePullSecrets"] = [{"name": s} for s in ctx.deploy.image.pull_secrets]
    if k.gpu_products:
        spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": "nvidia.com/gpu.product", "operator": "In", "values": list(k.gpu_products)}
                            ]
                        }
                    ]
                }
            }
        }
    if k.tolerate_gpu_taint:
        spec["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    spec["containers"] = [container(ctx, role)]
    spec["volumes"] = volumes(ctx, mpi=role == "leader")
    return spec


def autoscaled(ctx: DeployContext) -> bool:
    a = ctx.deploy.autoscaling
    return a.max_replicas > a.min_replicas


def workload(ctx: DeployContext) -> dict[str, Any]:
    kind = ctx.workload_kind
    if kind == "LeaderWorkerSet":
        return leader_worker_set(ctx)
    spec: dict[str, Any] = {}
    if not autoscaled(ctx):  # the HPA owns replicas otherwise (an apply would reset them)
        spec["replicas"] = ctx.deploy.autoscaling.min_replicas
    spec["selector"] = {"matchLabels": dict(ctx.selector)}
    if kind == "StatefulSet":
        spec["serviceName"] = f"{ctx.name}-headless"
        spec["podManagementPolicy"] = "Parallel"
    else:
        # no surge: a rollout must not need a second set of GPUs
        spec["strategy"] = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}
    spec["template"] = {"metadata": {"labels": dict(ctx.labels)}, "spec": pod_spec(ctx, "single")}
    return {"apiVersion": "apps/v1", "kind": kind, "metadata": meta(ctx, ctx.name), "spec": spec}


def leader_worker_set(ctx: DeployContext) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if not autoscaled(ctx):
        spec["replicas"] = ctx.deploy.autoscaling.min_replicas
    # LeaderCreated: with LeaderReady the workers would wait for a leader whose readiness waits for them
    spec["startupPolicy"] = "LeaderCreated"
    spec["rolloutStrategy"] = {
        "type": "RollingUpdate",
        "rollingUpdateConfiguration": {"maxUnavailable": 1, "maxSurge": 0},
    }
    spec["leaderWorkerTemplate"] = {
        "size": ctx.world.nodes,
        # explicit: LWS v0.3.0 defaulted to Default (only the failed pod restarts; MPI cannot recover from that)
        "restartPolicy": "RecreateGroupOnPodRestart",
        "leaderTemplate": {"metadata": {"labels": {**ctx.labels, "role": "leader"}}, "spec": pod_spec(ctx, "leader")},
        "workerTemplate": {"metadata": {"labels": {**ctx.labels, "role": "worker"}}, "spec": pod_spec(ctx, "worker")},
    }
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": meta(ctx, ctx.name),
        "spec": spec,
    }


def claim(ctx: DeployContext) -> dict[str, Any]:
    s = ctx.deploy.storage
    spec: dict[str, Any] = {"accessModes": [s.access_mode]}
    if s.storage_class:
        spec["storageClassName"] = s.storage_class
    spec["resources"] = {"requests": {"storage": s.size}}
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": meta(ctx, ctx.claim, **{"app.kubernetes.io/component": "storage"}),
        "spec": spec,
    }


def loader_pod(ctx: DeployContext) -> dict[str, Any]:
    """A helper pod with the claim writable at /models, for copy-models.sh (not part of the kustomization)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta(ctx, f"{ctx.name}-loader", **{"app.kubernetes.io/component": "loader"}),
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "loader",
                    "image": ctx.deploy.storage.loader_image,
                    "command": ["sleep", "86400"],
                    "volumeMounts": [{"name": "models", "mountPath": LOADER_ROOT}],
                }
            ],
            "volumes": [{"name": "models", "persistentVolumeClaim": {"claimName": ctx.claim}}],
        },
    }


def rbac(ctx: DeployContext) -> list[dict[str, Any]]:
    """What kubessh needs: find the group's pods and exec into them (NVIDIA EKS chart rbac.yaml, trimmed)."""
    name = ctx.service_account
    comp = {"app.kubernetes.io/component": "mpi"}
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta(ctx, name, **comp)},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": meta(ctx, name, **comp),
            "rules": [
                {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
                {"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["create"]},
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": meta(ctx, name, **comp),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": ctx.namespace}],
        },
    ]


def mpi_config(ctx: DeployContext) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": meta(ctx, f"{ctx.name}-mpi", **{"app.kubernetes.io/component": "mpi"}),
        "data": {"kubessh": KUBESSH},
    }


def containerfile(ctx: DeployContext) -> str:
    """The multi-node image: the NGC image plus kubectl (NVIDIA's EKS containerfile installs it the same way)."""
    minor = ".".join(ctx.deploy.kubernetes.version.lstrip("v").split(".")[:2])
    return "\n".join(
        [
            f"# Multi-node image for {ctx.name}: {ctx.image.reference} plus kubectl, which mpirun's kubessh agent runs",
            "# (ConfigMap <name>-mpi). Build and push it, then point the bundle at it:",
            f"#   docker build -t REGISTRY/{ctx.name}-triton:{ctx.image.tag} -f Containerfile .",
            f"#   kustomize edit set image {ctx.image.repository}=REGISTRY/{ctx.name}-triton:{ctx.image.tag}",
            f"FROM {ctx.image.reference}",
            "RUN apt-get update && apt-get install -y --no-install-recommends apt-transport-https ca-certificates curl gpg \\",
            f" && curl -fsSL https://pkgs.k8s.io/core:/stable:/v{minor}/deb/Release.key \\",
            "    | gpg --dearmor -o /usr/share/keyrings/kubernetes-apt-keyring.gpg \\",
            " && echo 'deb [signed-by=/usr/share/keyrings/kubernetes-apt-keyring.gpg] "
            f"https://pkgs.k8s.io/core:/stable:/v{minor}/deb/ /' > /etc/apt/sources.list.d/kubernetes.list \\",
            " && apt-get update && apt-get install -y --no-install-recommends kubectl && rm -rf /var/lib/apt/lists/*",
            "",
        ]
    )


__all__ = ["LWS_NAME", "claim", "containerfile", "leader_worker_set", "loader_pod", "mpi_config", "rbac", "workload"]
