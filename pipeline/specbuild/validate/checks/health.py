"""Health: the servers are live and ready (HTTP and gRPC), every model of the repository is ready, every Python
stub answers, and the served configs match the recipe, as the deployment's contract has them:

- engine: the ensemble/BLS repository's models; `tensorrt_llm` max batch size, decoupled, the method's decoding
  parameters; the draft model and the BLS's view of it;
- llm-api: exactly one model, `tensorrt_llm`, with max_batch_size 0, decoupled exactly
  when triton.streaming, and the llmapi inputs declared (llmapi model.py@b35ac1b). What it speculates with lives in
  model.yaml, which Triton does not show; the acceptance check sees it work.

Readiness alone misses a dead stub: Triton releases before the python backend's stub-health readiness (Triton
server PR #8552, python backend PR #430) keep reporting a model ready after its stub process died, and answer
each request with "Stub process ... is not healthy". So a 2-token request goes through the ensemble and the BLS
(which between them call every model of the repository: preprocessing, the cores, the draft, postprocessing), or
through the llm-api flavour's one model."""

from __future__ import annotations

from specbuild.repository.engine import params as triton_params
from specbuild.repository.engine import speculation_params
from specbuild.repository.llmapi import tensors
from specbuild.validate.checks.base import FAILED, PASSED, CheckResult, Deployment, SuiteContext, timed
from specbuild.validate.client import GenerateParams

NAME, TITLE = "health", "Health and served configuration"
CORE = "tensorrt_llm"
DRAFT = speculation_params.DRAFT_MODEL_NAME


def _param(config: dict, key: str) -> str | None:
    value = (config.get("parameters") or {}).get(key)
    if value is None:
        return None
    return value.get("string_value") if isinstance(value, dict) else str(value)


def _decoupled(config: dict) -> bool:
    return bool((config.get("model_transaction_policy") or {}).get("decoupled", False))


def deployment_problems(ctx: SuiteContext, dep: Deployment) -> tuple[list[str], dict]:
    """Every way `dep` differs from what the recipe says it serves, and the facts read."""
    problems: list[str] = []
    health = dep.server.health()
    facts: dict = {"endpoints": dep.endpoints.to_dict(), "serving_model": dep.model, **health}
    for key in ("http_live", "http_ready", "grpc_live", "grpc_ready"):
        if key in health and not health[key]:
            problems.append(
                f"{dep.label}: server not {key.split('_')[1]} over {key.split('_')[0].upper()}"
                + (f" ({health.get(key.split('_')[0] + '_error')})" if health.get(key.split("_")[0] + "_error") else "")
            )
    models = health.get("models", {})
    for name, info in sorted(models.items()):
        if not info["ready"]:
            reason = f": {info['reason']}" if info.get("reason") else ""
            problems.append(f"{dep.label}: model {name} is not ready (state {info['state'] or 'not loaded'}{reason})")
    facts["probes"] = {}
    for model in PROBED[dep.contract.name]:
        if models.get(model, {}).get("ready"):
            problem = _probe(dep, model)
            facts["probes"][model] = problem or "answered"
            if problem:
                problems.append(problem)
    problems += CONFIG_CHECKS[dep.contract.name](ctx, dep, models, facts)
    return problems, facts


def engine_problems(ctx: SuiteContext, dep: Deployment, models: dict, facts: dict) -> list[str]:
    """The engine flavour's repository: its models, the core's batch size / decoupled / decoding parameters."""
    recipe, spec = ctx.recipe, ctx.spec
    problems: list[str] = []
    role = dep.role
    expected = triton_params.repository_models(recipe, spec, role)
    for name in expected:
        if name not in models:
            problems.append(f"{dep.label}: the repository has no model {name}")
    if dep.model not in models:
        problems.append(f"{dep.label}: the serving model {dep.model} is not in the repository")
    if CORE not in models or not models[CORE]["ready"]:
        return problems

    core = dep.server.config(CORE)
    facts["core"] = {
        "max_batch_size": core.get("max_batch_size"),
        "decoupled": _decoupled(core),
        "parameters": {k: _param(core, k) for k in sorted((core.get("parameters") or {}))},
    }
    if int(core.get("max_batch_size", 0)) != recipe.build.max_batch_size:
        problems.append(
            f"{dep.label}: {CORE} max_batch_size is {core.get('max_batch_size')}, the recipe's "
            f"build.max_batch_size is {recipe.build.max_batch_size}"
        )
    want_decoupled = triton_params.core_decoupled(recipe, spec, role)
    if _decoupled(core) != want_decoupled:
        problems.append(
            f"{dep.label}: {CORE} is {'' if _decoupled(core) else 'not '}decoupled; the recipe "
            f"(triton.streaming: {str(recipe.triton.streaming).lower()}) needs "
            f"{'' if want_decoupled else 'not '}decoupled"
        )
    if role == "target":
        for key, want in speculation_params.core_parameters(spec).items():
            got = _param(core, key)
            if got != want:
                problems.append(f"{dep.label}: {CORE} parameter {key} is {got!r}, the recipe gives {want!r}")
    else:
        mode = _param(core, "decoding_mode")
        if mode and mode in speculation_params.speculative_decoding_modes():
            problems.append(f"{dep.label}: the baseline's {CORE} has decoding_mode {mode!r} (speculation is on)")
    needs_draft = role == "target" and spec.has_draft_engine
    if needs_draft and not models.get(DRAFT, {}).get("ready"):
        problems.append(f"{dep.label}: draft-target needs a ready {DRAFT} model")
    if not needs_draft and DRAFT in models:
        problems.append(f"{dep.label}: {DRAFT} is present but the recipe's method ({spec.method}) has no draft model")
    if dep.model == "tensorrt_llm_bls" and "tensorrt_llm_bls" in models:
        bls = dep.server.config("tensorrt_llm_bls")
        if _decoupled(bls) != recipe.triton.streaming:
            problems.append(
                f"{dep.label}: tensorrt_llm_bls decoupled is {_decoupled(bls)}, the recipe's "
                f"triton.streaming is {recipe.triton.streaming}"
            )
        if needs_draft and _param(bls, "tensorrt_llm_draft_model_name") != DRAFT:
            problems.append(f"{dep.label}: tensorrt_llm_bls does not name {DRAFT} as its draft model")
    return problems


def llmapi_problems(ctx: SuiteContext, dep: Deployment, models: dict, facts: dict) -> list[str]:
    """An llm-api deployment: one `tensorrt_llm` model, max_batch_size 0, decoupled as triton.streaming."""
    recipe = ctx.recipe
    problems: list[str] = []
    if dep.model not in models:
        problems.append(f"{dep.label}: the serving model {dep.model} is not in the repository")
    others = sorted(set(models) - {CORE})
    if others:
        problems.append(
            f"{dep.label}: an llm-api repository serves one model, {CORE}, but it also has {', '.join(others)}"
        )
    if CORE not in models or not models[CORE]["ready"]:
        return problems
    core = dep.server.config(CORE)
    declared = {t.get("name") for t in core.get("input", [])}
    facts["core"] = {
        "backend": core.get("backend"),
        "max_batch_size": core.get("max_batch_size"),
        "decoupled": _decoupled(core),
        "inputs": sorted(declared),
    }
    if int(core.get("max_batch_size", 0) or 0) != 0:
        problems.append(
            f"{dep.label}: {CORE} max_batch_size is {core.get('max_batch_size')}; the llmapi model takes "
            "one prompt per request and needs 0 (model.yaml triton_config.max_batch_size)"
        )
    if _decoupled(core) != recipe.triton.streaming:
        problems.append(
            f"{dep.label}: {CORE} is {'' if _decoupled(core) else 'not '}decoupled; the recipe "
            f"(triton.streaming: {str(recipe.triton.streaming).lower()}) needs "
            f"{'' if recipe.triton.streaming else 'not '}decoupled (config.pbtxt model_transaction_policy "
            "and model.yaml triton_config.decoupled)"
        )
    missing = [t.name for t in tensors.inputs(recipe.llm_api.release) if t.name not in declared]
    if missing:
        problems.append(f"{dep.label}: {CORE} does not declare the llmapi input(s) {', '.join(missing)}")
    return problems


CONFIG_CHECKS = {"engine": engine_problems, "llm-api": llmapi_problems}
# The models a 2-token request goes through (between them they call every model of the repository)
PROBED = {"engine": ("ensemble", "tensorrt_llm_bls"), "llm-api": (CORE,)}


def _probe(dep: Deployment, model: str) -> str | None:
    """A 2-token greedy request through `model` (2 tokens: a BLS-driven method then drafts once, so the draft
    model is called too); a sentence when it fails."""
    gen = dep.generate("Hello", GenerateParams(max_tokens=2, return_perf_metrics=False), "http", model=model)
    if gen.ok:
        return None
    if "not healthy" in gen.error:
        return (
            f'{dep.label}: a Python stub process behind {model} died ("{gen.error.strip()}"): Triton still '
            "reports the model ready but fails every request — restart the server (or unload and load the model)"
        )
    return f"{dep.label}: a 2-token request through {model} failed: {gen.error}"


@timed
def run(ctx: SuiteContext) -> CheckResult:
    problems: list[str] = []
    details: dict = {}
    for dep in ctx.deployments():
        found, facts = deployment_problems(ctx, dep)
        problems += found
        details[dep.label] = facts
    details["problems"] = problems
    if problems:
        return CheckResult(NAME, TITLE, FAILED, f"{len(problems)} problem(s): " + "; ".join(problems[:3]), details)
    n = sum(len(details[d.label].get("models", {})) for d in ctx.deployments())
    return CheckResult(
        NAME, TITLE, PASSED, f"servers live and ready, {n} models ready, configs match the recipe", details
    )
