"""Schema validation of a bundle's manifests, strict (unknown fields are errors; specbuild.deploy.bundle_check):
every Kubernetes object against the schemas of `deploy.kubernetes.version` with kubernetes-validate;
LeaderWorkerSet, PodMonitor and PrometheusRule against their published CRD schemas (specbuild.deploy.crds, made
strict), their root metadata as ObjectMeta and the LeaderWorkerSet's pod templates as core PodTemplates, plus the
LeaderWorkerSet webhook's rules, which its schema does not carry."""

from __future__ import annotations

from typing import Any, Iterator

from specbuild.deploy.bundle_docs import BundleFinding, Doc
from specbuild.deploy import crds

INSTALL = "pip install 'specbuild[deploy]' (kubernetes-validate)"


def schema_validation_available() -> bool:
    try:
        import jsonschema  # noqa: F401
        import kubernetes_validate  # noqa: F401
    except ImportError:
        return False
    return True


def _kv(body: dict, version: str) -> tuple[Any, str] | None:
    """(jsonschema error or None, what failed) of a core object, or None when kubernetes-validate has no schema."""
    import kubernetes_validate
    from kubernetes_validate.utils import SchemaNotFoundError

    try:
        kubernetes_validate.validate(body, version, strict=True)
    except kubernetes_validate.ValidationError as e:
        return e, "schema"
    except SchemaNotFoundError:
        return None
    return False, ""


def schema_findings(docs: list[Doc], version: str) -> Iterator[BundleFinding]:
    import jsonschema
    import kubernetes_validate
    from kubernetes_validate.utils import VersionNotSupportedError

    try:
        kubernetes_validate.validate({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}, version)
    except VersionNotSupportedError:
        from kubernetes_validate.utils import all_versions

        known = sorted({v.rsplit(".", 1)[0] for v in all_versions()}, key=lambda v: tuple(map(int, v.split("."))))
        yield BundleFinding(
            "(recipe)",
            "deploy.kubernetes.version",
            f"{version}: kubernetes-validate "
            f"{kubernetes_validate.__version__} has schemas for {known[0]}..{known[-1]} only — "
            "pick one of those or upgrade kubernetes-validate",
        )
        return
    for doc in docs:
        body = doc.body
        result = _kv(body, version)
        if result is None:
            schema = crds.schema_for(str(body.get("apiVersion")), doc.kind)
            if schema is None:
                yield doc.finding(
                    "",
                    f"no schema for {body.get('apiVersion')} {doc.kind} in Kubernetes {version} "
                    "nor among specbuild's CRDs: it cannot be validated",
                )
                continue
            validator = jsonschema.Draft7Validator(crds.strict(schema))
            for err in sorted(validator.iter_errors(body), key=lambda e: list(e.absolute_path)):
                yield doc.finding(
                    list(err.absolute_path), f"{err.message} (CRD {crds.provenance(str(body['apiVersion']), doc.kind)})"
                )
            wrapped = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": body.get("metadata")}
            err, _ = _kv(wrapped, version) or (None, "")
            if err:
                yield doc.finding(list(err.path), f"{err.message} (ObjectMeta)")
            yield from _lws_templates(doc, version)
            yield from _lws_webhook(doc)
        elif result[0]:
            err = result[0]
            yield doc.finding(list(err.path), f"{err.message} (Kubernetes {err.version} schema, strict)")


def _lws_templates(doc: Doc, version: str) -> Iterator[BundleFinding]:
    if doc.kind != "LeaderWorkerSet":
        return
    lwt = (doc.body.get("spec") or {}).get("leaderWorkerTemplate") or {}
    for key in ("leaderTemplate", "workerTemplate"):
        if key not in lwt:
            continue
        wrapped = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "template"}, "template": lwt[key]}
        err, _ = _kv(wrapped, version) or (None, "")
        if err:
            path = ["spec", "leaderWorkerTemplate", key, *list(err.path)[1:]]
            yield doc.finding(path, f"{err.message} (core PodTemplateSpec of Kubernetes {err.version}, strict)")


def _lws_webhook(doc: Doc) -> Iterator[BundleFinding]:
    """kubernetes-sigs/lws pkg/webhooks/leaderworkerset_webhook.go rules the CRD schema does not carry."""
    if doc.kind != "LeaderWorkerSet":
        return
    spec = doc.body.get("spec") or {}
    replicas = spec.get("replicas", 1)
    size = (spec.get("leaderWorkerTemplate") or {}).get("size", 1)
    if isinstance(replicas, int) and not 0 <= replicas <= 1_000_000:
        yield doc.finding("spec.replicas", f"{replicas} is outside 0..1000000 (LWS webhook)")
    if isinstance(size, int) and size < 1:
        yield doc.finding("spec.leaderWorkerTemplate.size", f"{size} must be at least 1 (LWS webhook)")
    if isinstance(replicas, int) and isinstance(size, int) and replicas * size > 2**31 - 1:
        yield doc.finding("spec.replicas", "replicas x size exceeds MaxInt32 (LWS webhook)")
    conf = (spec.get("rolloutStrategy") or {}).get("rollingUpdateConfiguration") or {}
    if conf.get("maxUnavailable", 1) in (0, "0%") and conf.get("maxSurge", 0) in (0, "0%"):
        yield doc.finding(
            "spec.rolloutStrategy.rollingUpdateConfiguration.maxUnavailable",
            "must not be 0 when maxSurge is 0 (LWS webhook)",
        )
