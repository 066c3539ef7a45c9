"""The recipe's `deploy` section: how the repository runs on Kubernetes and under Slurm (scale-out fact sheet §6).

Every default is the one the fact sheet's NVIDIA examples use, or says why not. Only pydantic is imported here:
the recipe schema imports this module at load.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import Field, NonNegativeInt, PositiveFloat, PositiveInt

from specbuild.methods.base import Section

# A Kubernetes resource.Quantity as written in manifests (binary, decimal or milli suffixes).
QUANTITY_PATTERN = r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E|m)?$"
Quantity = Annotated[str, Field(pattern=QUANTITY_PATTERN)]
# DNS-1035 label (Service names), short enough that LWS pod names <name>-<group>-<worker> stay within 63.
K8S_NAME_PATTERN = r"^[a-z]([-a-z0-9]{0,38}[a-z0-9])?$"
# DNS-1123 label (namespaces, PVC and secret names).
DNS_LABEL_PATTERN = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
DURATION_PATTERN = r"^([0-9]+(ms|s|m|h))+$"  # Prometheus durations as the operator's CRDs accept them
K8S_VERSION_PATTERN = r"^v?1\.[0-9]{1,2}(\.[0-9]+)?$"

_SUFFIX = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
           "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18, "m": 1e-3, "": 1}


def quantity_value(quantity: str) -> float:
    """A Quantity in base units (bytes, cores): '16Gi' -> 17179869184."""
    m = re.match(QUANTITY_PATTERN, quantity)
    if not m:
        raise ValueError(f"not a Kubernetes quantity: {quantity!r}")
    return float(quantity[: len(quantity) - len(m.group(2) or "")]) * _SUFFIX[m.group(2) or ""]


class ImageSection(Section):
    """The container image: NVIDIA's Triton image with the TensorRT-LLM backend (fact sheet §1.1)."""

    repository: str = "nvcr.io/nvidia/tritonserver"
    """Image repository. Your own image built FROM the NGC one works too (multi-node needs kubectl in it:
    the bundle's Containerfile)."""
    tag: str | None = None
    """Image tag; default the newest `<yy.mm>-trtllm-python-py3` whose TensorRT-LLM is `trtllm_version`."""
    trtllm_version: str | None = None
    """The TensorRT-LLM that built the engines (engines load only in the release that built them); default the
    version compile used, else the newest one specbuild supports (1.2.1)."""
    pull_policy: Literal["IfNotPresent", "Always", "Never"] = "IfNotPresent"
    pull_secrets: list[Annotated[str, Field(pattern=DNS_LABEL_PATTERN)]] = Field(default_factory=list)
    """imagePullSecrets names (an NGC API key secret, for example)."""


class StorageSection(Section):
    """Where the pods find the engines, the tokenizer and the repository: one PersistentVolumeClaim.

    config.pbtxt names the engine and tokenizer folders by absolute path, so the pods mount the claim's
    sub-folders at the same paths as on the machine that compiled; the bundle's README says how to fill it."""

    claim_name: Annotated[str, Field(pattern=DNS_LABEL_PATTERN)] | None = None
    """Claim name; default `<name>-models`."""
    create_claim: bool = True
    """Write storage.yaml with the claim (false: the claim exists already)."""
    size: Quantity = "100Gi"
    storage_class: str | None = None
    """storageClassName; default the cluster's default class."""
    access_mode: Literal["ReadWriteMany", "ReadOnlyMany", "ReadWriteOnce"] = "ReadWriteMany"
    """ReadWriteMany (NFS, EFS, Filestore...): replicas and multi-node groups run on several nodes."""
    loader_image: str = "busybox:1.37"
    """Image of loader-pod.yaml, the helper pod that `kubectl cp` fills the claim through (needs tar)."""


class ProbeSection(Section):
    """Probe timings. Triton serves /v2/health/ready (200 once every model is loaded) and /v2/health/live."""

    startup_period_s: PositiveInt = 15
    startup_failure_threshold: PositiveInt = 60
    """period x threshold = the time allowed for engine load (15 min, as NVIDIA's EKS chart)."""
    readiness_period_s: PositiveInt = 5
    readiness_failure_threshold: PositiveInt = 3
    liveness_period_s: PositiveInt = 10
    liveness_failure_threshold: PositiveInt = 6
    timeout_s: PositiveInt = 5


class KubernetesSection(Section):
    """The Kubernetes manifests."""

    version: Annotated[str, Field(pattern=K8S_VERSION_PATTERN)] = "1.32"
    """The Kubernetes release whose API schemas the manifests are validated against (strict)."""
    namespace: Annotated[str, Field(pattern=DNS_LABEL_PATTERN)] = "default"
    workload: Literal["Deployment", "StatefulSet"] = "Deployment"
    """Controller of a model that fits one node; a model spanning nodes is always a LeaderWorkerSet."""
    service_type: Literal["ClusterIP", "LoadBalancer", "NodePort"] = "ClusterIP"
    gpu_resource: str = "nvidia.com/gpu"
    """Extended resource of the NVIDIA device plugin."""
    gpu_products: list[str] = Field(default_factory=list)
    """Node affinity on the GPU Feature Discovery label nvidia.com/gpu.product, e.g. [NVIDIA-H100-80GB-HBM3]."""
    tolerate_gpu_taint: bool = True
    """Tolerate the nvidia.com/gpu:NoSchedule taint GPU node pools carry."""
    cpu: Quantity | None = None
    """CPU request; default max(4, GPUs per pod) (NVIDIA's autoscaling tutorial)."""
    memory: Quantity | None = None
    """Memory request and limit; default 8Gi per CPU. /dev/shm counts against it."""
    service_account: Annotated[str, Field(pattern=DNS_LABEL_PATTERN)] | None = None
    """ServiceAccount of the pods; multi-node default `<name>-mpi` (written by the bundle, with the rights
    `kubectl exec` needs)."""
    pre_stop_sleep_s: NonNegativeInt = 5
    """preStop sleep before SIGTERM, so the Service stops routing to a terminating pod first."""
    termination_grace_period_s: PositiveInt | None = None
    """Default pre_stop_sleep_s + exit_timeout_s + 30 (model unload); must exceed the first two."""
    probes: ProbeSection = Field(default_factory=ProbeSection)


class AutoscalingSection(Section):
    """Replicas and the HorizontalPodAutoscaler on Triton's queue:compute ratio (fact sheet §3.4-3.6)."""

    min_replicas: PositiveInt = 1
    max_replicas: PositiveInt = 4
    """An HPA is written when max_replicas > min_replicas (replicas of a LeaderWorkerSet are whole groups)."""
    target_queue_compute_ratio: PositiveFloat = 1.0
    """Scale out when requests wait longer than they compute (NVIDIA's tutorials use 1)."""


class MonitoringSection(Section):
    """Prometheus Operator objects."""

    prometheus_release: str = "prometheus"
    """Value of the `release` label kube-prometheus-stack selects PodMonitors and PrometheusRules by."""
    scrape_interval: Annotated[str, Field(pattern=DURATION_PATTERN)] = "15s"
    rule_interval: Annotated[str, Field(pattern=DURATION_PATTERN)] = "15s"


class SlurmSection(Section):
    """The sbatch script (NVIDIA's leader-mode Slurm launch: one task per rank, `srun --mpi=pmix`)."""

    container_runtime: Literal["pyxis", "enroot", "apptainer", "none"] = "pyxis"
    """pyxis: srun --container-image; enroot: enroot create/start per node; apptainer: apptainer exec --nv;
    none: tritonserver installed on the nodes."""
    partition: str | None = None
    account: str | None = None
    time: Annotated[str, Field(pattern=r"^([0-9]+-)?[0-9]+(:[0-9]{2}){0,2}$")] = "04:00:00"
    cpus_per_task: PositiveInt | None = None
    extra_sbatch: list[str] = Field(default_factory=list)
    """More #SBATCH options, e.g. ["--exclusive", "--qos=high"]."""
    image_file: str | None = None
    """enroot squashfs / apptainer .sif path; default beside the sbatch script (created on first run)."""


class DeploySection(Section):
    """Deployment bundle written next to the repository: Kubernetes manifests + an sbatch script."""

    name: Annotated[str, Field(pattern=K8S_NAME_PATTERN)] | None = None
    """Base name of the Kubernetes objects; default the recipe name made DNS-safe."""
    gpus_per_node: PositiveInt = 8
    """GPUs of one node. Engine flavour: a world (tp_size * pp_size) larger than this spans nodes: a
    LeaderWorkerSet of world / gpus_per_node pods, and triton.gpu_device_ids then lists one node's GPUs. llm-api
    flavour: llm_api.nodes sets the node count; this only bounds the ranks each node runs."""
    shm_size: Quantity = "16Gi"
    """/dev/shm of a pod (python backend regions, MPI and NCCL segments)."""
    exit_timeout_s: PositiveInt = 30
    """tritonserver --exit-timeout-secs: how long in-flight requests may finish after SIGTERM."""
    image: ImageSection = Field(default_factory=ImageSection)
    storage: StorageSection = Field(default_factory=StorageSection)
    kubernetes: KubernetesSection = Field(default_factory=KubernetesSection)
    autoscaling: AutoscalingSection = Field(default_factory=AutoscalingSection)
    monitoring: MonitoringSection = Field(default_factory=MonitoringSection)
    slurm: SlurmSection = Field(default_factory=SlurmSection)
