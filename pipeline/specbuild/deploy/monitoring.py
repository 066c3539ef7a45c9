"""Service, PodMonitor, PrometheusRule and HPA (triton-inference-server/tutorials
Deployment/Kubernetes/TensorRT-LLM_Autoscaling_and_Load_Balancing/chart/templates@e848952).

The HPA scales on `triton:queue_compute:ratio` (NVIDIA's autoscaling tutorial), recorded here for one model only
(the one requests wait at) and per pod, so prometheus-adapter's default rule serves it as a pod metric. Series
carry the pod label `specbuild_deployment` (PodMonitor podTargetLabels), so two deployments in one namespace
never mix. Acceptance length is recorded from the counters the BLS publishes for the methods it drives
(draft-target, prompt lookup); TensorRT-LLM's backend exports no acceptance metric (tensorrtllm_backend
README.md@0b9d7d5, "Metrics").
"""

from __future__ import annotations

from typing import Any

from specbuild.facts import metrics
from specbuild.deploy.context import DEPLOYMENT_LABEL, DeployContext
from specbuild.deploy.kubernetes import autoscaled, meta

QUEUE_COMPUTE = "triton:queue_compute:ratio"
ACCEPTANCE_LENGTH = "specbuild:acceptance_length:mean"
# Counters the BLS publishes (specbuild.facts.metrics: the served models' names, after vLLM's)
BLS_STEPS, BLS_ACCEPTED = metrics.STEPS, metrics.ACCEPTED


def service(ctx: DeployContext) -> list[dict[str, Any]]:
    ports = [{"name": n, "port": p, "targetPort": n, "protocol": "TCP"} for n, p in ctx.ports.items()]
    out = [
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": meta(ctx, ctx.name),
            "spec": {"type": ctx.deploy.kubernetes.service_type, "selector": dict(ctx.selector), "ports": ports},
        }
    ]
    if ctx.workload_kind == "StatefulSet":  # the governing Service of the StatefulSet's pod names
        out.append(
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": meta(ctx, f"{ctx.name}-headless"),
                "spec": {
                    "clusterIP": "None",
                    "publishNotReadyAddresses": True,
                    "selector": dict(ctx.selector),
                    "ports": ports,
                },
            }
        )
    return out


def pod_monitor(ctx: DeployContext) -> dict[str, Any]:
    m = ctx.deploy.monitoring
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PodMonitor",
        "metadata": meta(ctx, ctx.name, release=m.prometheus_release),
        "spec": {
            "selector": {"matchLabels": dict(ctx.selector)},
            "podTargetLabels": [DEPLOYMENT_LABEL],
            "podMetricsEndpoints": [{"port": "metrics", "path": "/metrics", "interval": m.scrape_interval}],
        },
    }


def _match(ctx: DeployContext, **more: str) -> str:
    pairs = {DEPLOYMENT_LABEL: ctx.name, **more}
    return "{" + ",".join(f'{k}="{v}"' for k, v in pairs.items()) + "}"


def rules(ctx: DeployContext) -> list[dict[str, Any]]:
    by = f"namespace, pod, {DEPLOYMENT_LABEL}"
    sel = _match(ctx, model=ctx.scale_model)
    out = [
        {
            "record": QUEUE_COMPUTE,
            "expr": f"sum by ({by}) (rate(nv_inference_queue_duration_us{sel}[1m])) / clamp_min(sum by ({by}) "
            f"(rate(nv_inference_compute_infer_duration_us{sel}[1m])), 1)",
        }
    ]
    if ctx.publishes_acceptance:
        group = f"namespace, {DEPLOYMENT_LABEL}"
        s = _match(ctx)
        # AL = 1 + accepted drafts / verification steps (bonus token included: validation-metrics.md)
        out.append(
            {
                "record": ACCEPTANCE_LENGTH,
                "expr": f"1 + sum by ({group}) (rate({BLS_ACCEPTED}{s}[5m])) / "
                f"(sum by ({group}) (rate({BLS_STEPS}{s}[5m])) > 0)",
            }
        )
    return out


def prometheus_rule(ctx: DeployContext) -> dict[str, Any]:
    m = ctx.deploy.monitoring
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": meta(ctx, ctx.name, release=m.prometheus_release),
        "spec": {"groups": [{"name": f"{ctx.name}.specbuild", "interval": m.rule_interval, "rules": rules(ctx)}]},
    }


def hpa(ctx: DeployContext) -> dict[str, Any] | None:
    if not autoscaled(ctx):
        return None
    a = ctx.deploy.autoscaling
    target = (
        {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet"}
        if ctx.workload_kind == "LeaderWorkerSet"
        else {"apiVersion": "apps/v1", "kind": ctx.workload_kind}
    )
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": meta(ctx, ctx.name),
        "spec": {
            "scaleTargetRef": {**target, "name": ctx.name},
            "minReplicas": a.min_replicas,
            "maxReplicas": a.max_replicas,
            "metrics": [
                {
                    "type": "Pods",
                    "pods": {
                        "metric": {"name": QUEUE_COMPUTE},
                        "target": {
                            "type": "AverageValue",
                            "averageValue": f"{round(a.target_queue_compute_ratio * 1000)}m",
                        },
                    },
                }
            ],
        },
    }
