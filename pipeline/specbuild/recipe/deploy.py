"""The recipe's `deploy` section: how the repository runs on Kubernetes and under Slurm (docs/deploying.md).

Every default is the one NVIDIA's examples use (triton-inference-server/tutorials Deployment/Kubernetes@e848952,
tensorrtllm_backend README.md@0b9d7d5), or says why not. Only pydantic is imported here:
the recipe schema imports this module at load.
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, WithJsonSchema
from pydantic_core import PydanticCustomError

from specbuild.section import Section

INT32_MAX = 2**31 - 1  # Kubernetes int32 fields (replicas, probe timings, ...), tritonserver's int options
INT64_MAX = 2**63 - 1  # Kubernetes int64 fields (terminationGracePeriodSeconds)

# Every string of this section reaches a manifest, a shell script or a sourced file: each is an allow-list
# (fullmatch, so a trailing newline never slips past a `$`), never escaped into shape.
QUANTITY_PATTERN = r"[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E|m)?"  # resource.Quantity as manifests write it
# DNS-1035 label (Service names), short enough that LWS pod names <name>-<group>-<worker> stay within 63.
K8S_NAME_PATTERN = r"[a-z]([-a-z0-9]{0,38}[a-z0-9])?"
K8S_NAME_MAX = 40
DNS_LABEL_PATTERN = r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?"  # DNS-1123 label (namespaces, claim and secret names)
DNS_SUBDOMAIN_PATTERN = rf"{DNS_LABEL_PATTERN}(\.{DNS_LABEL_PATTERN})*"  # storageClassName; at most 253
DURATION_PATTERN = r"([0-9]+(ms|s|m|h))+"  # Prometheus durations as the operator's CRDs accept them
K8S_VERSION_PATTERN = r"v?1\.[0-9]{1,2}(\.[0-9]+)?"
# Label values (Kubernetes apimachinery validation: at most 63, alphanumeric at both ends), non-empty here.
LABEL_VALUE_PATTERN = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
# Extended resource names: a qualified name, prefix/name (apimachinery IsQualifiedName).
RESOURCE_NAME_PATTERN = rf"({DNS_SUBDOMAIN_PATTERN}/)?{LABEL_VALUE_PATTERN}"
# Image references by the distribution grammar (distribution/reference regexp.go@00a09fa: domainAndPort, remoteName,
# tag, digestPat; `\w` there is ASCII). Registries written as IPv6 addresses ([::1]:5000) are not accepted here.
_DOMAIN_PART = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = rf"{_DOMAIN_PART}(?:\.{_DOMAIN_PART})*"
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|[-]+)[a-z0-9]+)*"
IMAGE_NAME_PATTERN = rf"(?:{_DOMAIN}(?::[0-9]+)?/)?{_COMPONENT}(?:/{_COMPONENT})*"
IMAGE_NAME_MAX = 255  # distribution/reference reference.go NameTotalLengthMax
IMAGE_TAG_PATTERN = r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}"
IMAGE_DIGEST_PATTERN = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
IMAGE_REFERENCE_PATTERN = rf"{IMAGE_NAME_PATTERN}(?::{IMAGE_TAG_PATTERN})?(?:@{IMAGE_DIGEST_PATTERN})?"
VERSION_PATTERN = r"v?[0-9]+(\.[0-9]+){1,3}([.+-]?[A-Za-z]+[0-9]*)*"  # a pip version: 1.2.1, 0.17.0.post1, 1.3.0rc20
# Slurm names (partitions: a comma-separated list, as sbatch --partition takes it).
SLURM_NAME_PATTERN = r"[A-Za-z0-9_.-]{1,64}"
SLURM_PARTITIONS_PATTERN = rf"{SLURM_NAME_PATTERN}(,{SLURM_NAME_PATTERN})*"
SLURM_TIME_PATTERN = r"([0-9]+-)?[0-9]+(:[0-9]{2}){0,2}"
SBATCH_OPTION_PATTERN = r"--[a-z][a-z0-9-]*(=[A-Za-z0-9_.,:=+@%/-]+)?"
# A path as the bundle's scripts embed it: components of letters, digits and _ . + - (no space, quote, `$`,
# comma or colon: the container runtimes' mount lists separate with those).
_PATH_COMPONENT = r"[A-Za-z0-9_.+-]+"
FILE_PATH_PATTERN = rf"/?{_PATH_COMPONENT}(/{_PATH_COMPONENT})*"
ABSOLUTE_PATH_PATTERN = rf"(/{_PATH_COMPONENT})+"
# Folders of the image a mount root must not cover (the NGC image's tritonserver and MPI, the system).
RESERVED_ROOTS = (
    "/bin",
    "/boot",
    "/dev",
    "/etc",
    "/lib",
    "/lib32",
    "/lib64",
    "/opt/hpcx",
    "/opt/tritonserver",
    "/proc",
    "/root",
    "/run",
    "/sbin",
    "/sys",
    "/tmp",
    "/usr",
    "/var",
)

_SUFFIX = {
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
    "m": 1e-3,
    "": 1,
}


def quantity_value(quantity: str) -> float:
    """A Quantity in base units (bytes, cores): '16Gi' -> 17179869184."""
    m = re.fullmatch(QUANTITY_PATTERN, quantity)
    if not m:
        raise ValueError(f"not a Kubernetes quantity: {quantity!r}")
    return float(quantity[: len(quantity) - len(m.group(2) or "")]) * _SUFFIX[m.group(2) or ""]


def allowed(pattern: str, what: str, *, max_length: int | None = None, extra: Any = None) -> Any:
    """A string type that holds only values matching `pattern` in full (at most `max_length` characters); `what`
    says what is allowed (the message of a refusal, after the field's location). `extra(value)` may refuse more
    (returns the reason, or None)."""
    compiled = re.compile(pattern)

    def check(value: str) -> str:
        if not compiled.fullmatch(value) or (max_length is not None and len(value) > max_length):
            raise PydanticCustomError("deploy_value", "must be {what}", {"what": what})
        why = extra(value) if extra else None
        if why:
            raise PydanticCustomError("deploy_value", "{why}", {"why": why})
        return value

    schema = {"type": "string", "pattern": f"^{pattern}$", **({"maxLength": max_length} if max_length else {})}
    return Annotated[str, AfterValidator(check), WithJsonSchema(schema)]


def integer(minimum: int, maximum: int, why: str) -> Any:
    """An int field bounded by what the file it lands in holds (`why` names it)."""

    def check(value: int) -> int:
        if not minimum <= value <= maximum:
            raise PydanticCustomError(
                "deploy_int", "must be in {lo}..{hi}: {why}", {"lo": minimum, "hi": maximum, "why": why}
            )
        return value

    return Annotated[
        int, AfterValidator(check), WithJsonSchema({"type": "integer", "minimum": minimum, "maximum": maximum})
    ]


def _mount_root_problem(value: str) -> str | None:
    parts = value.split("/")[1:]
    if any(p in (".", "..") for p in parts):
        return "has a '.' or '..' component — write the folder itself, e.g. /models"
    covered = [r for r in RESERVED_ROOTS if value == r or value.startswith(r + "/") or r.startswith(value + "/")]
    if covered:
        return f"is, holds or lies in the image's {covered[0]} — pick a folder of its own, e.g. /models"
    return None


Quantity = allowed(QUANTITY_PATTERN, "a Kubernetes quantity such as 16Gi, 500m or 4")
Int32Positive = integer(1, INT32_MAX, "Kubernetes and tritonserver hold it as a 32-bit integer")
Int32NonNegative = integer(0, INT32_MAX, "Kubernetes and tritonserver hold it as a 32-bit integer")
Replicas = integer(1, INT32_MAX, "the workload and its HorizontalPodAutoscaler hold replicas as 32-bit integers")
K8sName = allowed(
    K8S_NAME_PATTERN,
    f"a DNS-1035 label of at most {K8S_NAME_MAX} characters (lower-case letters, "
    "digits and '-', starting with a letter)",
)
DnsLabel = allowed(DNS_LABEL_PATTERN, "a DNS-1123 label (lower-case letters, digits and '-', at most 63)")
ImageName = allowed(
    IMAGE_NAME_PATTERN,
    "an image repository as the distribution grammar writes it, e.g. "
    "nvcr.io/nvidia/tritonserver (no tag, lower-case path)",
    max_length=IMAGE_NAME_MAX,
)
ImageTag = allowed(
    IMAGE_TAG_PATTERN, "an image tag (letters, digits, '_', '.', '-'; at most 128), e.g. 26.07-trtllm-python-py3"
)
ImageReference = allowed(
    IMAGE_REFERENCE_PATTERN,
    "an image reference name[:tag][@digest], e.g. busybox:1.37",
    max_length=IMAGE_NAME_MAX + 1 + 128 + 1 + 200,
)
LabelValue = allowed(LABEL_VALUE_PATTERN, "a Kubernetes label value (letters, digits, '-', '_', '.'; at most 63)")
AbsolutePath = allowed(
    ABSOLUTE_PATH_PATTERN,
    "an absolute folder made of letters, digits and _ . + - (no spaces, quotes, '$', ',' or ':'), e.g. /models",
    max_length=255,
    extra=_mount_root_problem,
)


def _finite_ratio(value: float) -> float:
    if not (math.isfinite(value) and 0.001 <= value <= 1e6):
        raise PydanticCustomError(
            "deploy_value",
            "must be a number from 0.001 to 1000000: the HPA target is written in thousandths (averageValue 1000m = 1)",
        )
    return value


Version = allowed(VERSION_PATTERN, "a version as pip writes it, e.g. 1.2.1", max_length=64)
StorageClass = allowed(
    DNS_SUBDOMAIN_PATTERN,
    "a StorageClass name (a DNS-1123 subdomain: lower-case letters, digits, '-' and '.')",
    max_length=253,
)
K8sVersion = allowed(K8S_VERSION_PATTERN, "a Kubernetes release, e.g. 1.32")
ResourceName = allowed(RESOURCE_NAME_PATTERN, "an extended resource name such as nvidia.com/gpu", max_length=317)
Duration = allowed(DURATION_PATTERN, "a Prometheus duration such as 15s or 1m30s")
Partitions = allowed(
    SLURM_PARTITIONS_PATTERN, "Slurm partition names (letters, digits, '_', '.', '-'; several separated by commas)"
)
SlurmAccount = allowed(SLURM_NAME_PATTERN, "a Slurm account name (letters, digits, '_', '.', '-')")
SlurmTime = allowed(SLURM_TIME_PATTERN, "a Slurm time limit such as 04:00:00 or 1-12:00:00")
SbatchOption = allowed(
    SBATCH_OPTION_PATTERN,
    "one long sbatch option, --name or --name=value (the value: letters, "
    "digits and _ . , : = + @ % / -), e.g. --qos=high",
    max_length=256,
)
ImageFile = allowed(
    FILE_PATH_PATTERN,
    "a file path made of letters, digits and _ . + - (no spaces, quotes, '$', "
    "',' or ':'), relative to the bundle folder or absolute",
    max_length=1024,
)
GracePeriod = integer(1, INT64_MAX, "Kubernetes holds it as a 64-bit integer")
QueueComputeRatio = Annotated[
    float, AfterValidator(_finite_ratio), WithJsonSchema({"type": "number", "minimum": 0.001, "maximum": 1e6})
]


class ImageSection(Section):
    """The container image: NVIDIA's Triton image with the TensorRT-LLM backend (triton-inference-server/server
    docs/introduction/compatibility.md@e1db8a6)."""

    repository: ImageName = "nvcr.io/nvidia/tritonserver"
    """Image repository. Your own image built FROM the NGC one works too (multi-node needs kubectl in it:
    the bundle's Containerfile)."""
    tag: ImageTag | None = None
    """Image tag; default the newest `<yy.mm>-trtllm-python-py3` whose TensorRT-LLM is `trtllm_version`."""
    trtllm_version: Version | None = None
    """The TensorRT-LLM that built the engines (engines load only in the release that built them); default the
    version compile used, else the newest one specbuild supports (1.2.1)."""
    pull_policy: Literal["IfNotPresent", "Always", "Never"] = "IfNotPresent"
    pull_secrets: list[DnsLabel] = Field(default_factory=list)
    """imagePullSecrets names (an NGC API key secret, for example)."""


class StorageSection(Section):
    """Where the pods find the engines (or checkpoints), the tokenizer and the repository: one
    PersistentVolumeClaim, whose folder `<name>` the pods mount at `<mount_root>/<name>`; the bundle's
    copy-models.sh fills it (README.md)."""

    claim_name: DnsLabel | None = None
    """Claim name; default `<name>-models`."""
    create_claim: bool = True
    """Write storage.yaml with the claim (false: the claim exists already)."""
    size: Quantity = "100Gi"
    storage_class: StorageClass | None = None
    """storageClassName; default the cluster's default class."""
    access_mode: Literal["ReadWriteMany", "ReadOnlyMany", "ReadWriteOnce"] = "ReadWriteMany"
    """ReadWriteMany (NFS, EFS, Filestore...): replicas and multi-node groups run on several nodes."""
    loader_image: ImageReference = "busybox:1.37"
    """Image of loader-pod.yaml, the helper pod copy-models.sh fills the claim through (needs sh and tar)."""


class ProbeSection(Section):
    """Probe timings. Triton serves /v2/health/ready (200 once every model is loaded) and /v2/health/live."""

    startup_period_s: Int32Positive = 15
    startup_failure_threshold: Int32Positive = 60
    """period x threshold = the time allowed for engine load (15 min, as NVIDIA's EKS chart)."""
    readiness_period_s: Int32Positive = 5
    readiness_failure_threshold: Int32Positive = 3
    liveness_period_s: Int32Positive = 10
    liveness_failure_threshold: Int32Positive = 6
    timeout_s: Int32Positive = 5


class KubernetesSection(Section):
    """The Kubernetes manifests."""

    version: K8sVersion = "1.32"
    """The Kubernetes release whose API schemas the manifests are validated against (strict)."""
    namespace: DnsLabel = "default"
    workload: Literal["Deployment", "StatefulSet"] = "Deployment"
    """Controller of a model that fits one node; a model spanning nodes is always a LeaderWorkerSet."""
    service_type: Literal["ClusterIP", "LoadBalancer", "NodePort"] = "ClusterIP"
    gpu_resource: ResourceName = "nvidia.com/gpu"
    """Extended resource of the NVIDIA device plugin."""
    gpu_products: list[LabelValue] = Field(default_factory=list)
    """Node affinity on the GPU Feature Discovery label nvidia.com/gpu.product, e.g. [NVIDIA-H100-80GB-HBM3]."""
    tolerate_gpu_taint: bool = True
    """Tolerate the nvidia.com/gpu:NoSchedule taint GPU node pools carry."""
    cpu: Quantity | None = None
    """CPU request; default max(4, GPUs per pod) (NVIDIA's autoscaling tutorial)."""
    memory: Quantity | None = None
    """Memory request and limit; default 8Gi per CPU. /dev/shm counts against it."""
    service_account: DnsLabel | None = None
    """ServiceAccount of the pods; multi-node default `<name>-mpi` (written by the bundle, with the rights
    `kubectl exec` needs)."""
    pre_stop_sleep_s: Int32NonNegative = 5
    """preStop sleep before SIGTERM, so the Service stops routing to a terminating pod first."""
    termination_grace_period_s: GracePeriod | None = None
    """Default pre_stop_sleep_s + exit_timeout_s + 30 (model unload); must exceed the first two."""
    probes: ProbeSection = Field(default_factory=ProbeSection)


class AutoscalingSection(Section):
    """Replicas and the HorizontalPodAutoscaler on Triton's queue:compute ratio (triton-inference-server/tutorials
    Deployment/Kubernetes/TensorRT-LLM_Autoscaling_and_Load_Balancing@e848952)."""

    min_replicas: Replicas = 1
    max_replicas: Replicas = 4
    """An HPA is written when max_replicas > min_replicas (replicas of a LeaderWorkerSet are whole groups)."""
    target_queue_compute_ratio: QueueComputeRatio = 1.0
    """Scale out when requests wait longer than they compute (NVIDIA's tutorials use 1)."""


class MonitoringSection(Section):
    """Prometheus Operator objects."""

    prometheus_release: LabelValue = "prometheus"
    """Value of the `release` label kube-prometheus-stack selects PodMonitors and PrometheusRules by."""
    scrape_interval: Duration = "15s"
    rule_interval: Duration = "15s"


class SlurmSection(Section):
    """The sbatch script (NVIDIA's leader-mode Slurm launch: one task per rank, `srun --mpi=pmix`)."""

    container_runtime: Literal["pyxis", "enroot", "apptainer", "none"] = "pyxis"
    """pyxis: srun --container-image; enroot: enroot create/start per node; apptainer: apptainer exec --nv;
    none: tritonserver installed on the nodes."""
    partition: Partitions | None = None
    account: SlurmAccount | None = None
    time: SlurmTime = "04:00:00"
    cpus_per_task: Int32Positive | None = None
    extra_sbatch: list[SbatchOption] = Field(default_factory=list)
    """More #SBATCH options, e.g. ["--exclusive", "--qos=high"]."""
    image_file: ImageFile | None = None
    """enroot squashfs / apptainer .sif path; default beside the sbatch script (created on first run)."""


class DeploySection(Section):
    """Deployment bundle written next to the repository: Kubernetes manifests + an sbatch script."""

    name: K8sName | None = None
    """Base name of the Kubernetes objects; default the recipe name made DNS-safe (with a short hash of the
    recipe name when that changes it, so two recipes never share objects)."""
    mount_root: AbsolutePath = "/models"
    """Where the containers read the deployment's files: `<mount_root>/<name>/repository`, `.../target` (engines),
    `.../tokenizer`, `.../model` (checkpoints). The bundle carries the repository with every path it names
    rewritten below it; the machine that compiled appears only in copy-models.sh, which fills the storage."""
    gpus_per_node: Int32Positive = 8
    """GPUs of one node. Engine flavour: a world (tp_size * pp_size) larger than this spans nodes: a
    LeaderWorkerSet of world / gpus_per_node pods, and triton.gpu_device_ids then lists one node's GPUs. llm-api
    flavour: llm_api.nodes sets the node count; this only bounds the ranks each node runs."""
    shm_size: Quantity = "16Gi"
    """/dev/shm of a pod (python backend regions, MPI and NCCL segments)."""
    exit_timeout_s: Int32Positive = 30
    """tritonserver --exit-timeout-secs: how long in-flight requests may finish after SIGTERM."""
    image: ImageSection = Field(default_factory=ImageSection)
    storage: StorageSection = Field(default_factory=StorageSection)
    kubernetes: KubernetesSection = Field(default_factory=KubernetesSection)
    autoscaling: AutoscalingSection = Field(default_factory=AutoscalingSection)
    monitoring: MonitoringSection = Field(default_factory=MonitoringSection)
    slurm: SlurmSection = Field(default_factory=SlurmSection)


def spans_nodes(recipe, spec) -> bool:
    """The target's world (tp * pp ranks) is larger than one node (draft-target never is: its orchestrator spawns
    the workers on one node)."""
    b = recipe.build
    return b.tp_size * b.pp_size > recipe.deploy.gpus_per_node and not spec.has_draft_engine


def expected_gpu_id_count(recipe, spec) -> int:
    """How many triton.gpu_device_ids the target lists: tp * pp on one node, one node's GPUs across nodes
    (TensorRT-LLM gives rank r gpu_device_ids[r % len]: cpp/tensorrt_llm/runtime/worldConfig.cpp)."""
    world = recipe.build.tp_size * recipe.build.pp_size
    return recipe.deploy.gpus_per_node if spans_nodes(recipe, spec) else world
