"""What the compiled repository on disk says, for the bundle's cross-checks (specbuild.deploy.cross_checks):
its models, the absolute paths it reads, its GPU ids and instance counts, its launch script and (llm-api) its
model.yaml."""

from __future__ import annotations

import re
from typing import Any, Callable

from specbuild.deploy.context import DeployContext
from specbuild.deploy.repository import MODEL_YAML_PATHS
from specbuild.repository.engine.configs import parse_pbtxt
from specbuild.repository.llmapi import model_yaml
from specbuild.repository.llmapi.configs import MODEL

IMAGE_PATHS = ("/opt/tritonserver/",)  # paths inside the NGC image, not on the claim


def _pbtxt_parameters(text: str) -> dict[str, str]:
    """The string parameters of a config.pbtxt, unescaped (protobuf text format, as it was written); {} when it is
    not a ModelConfig (the stale-repository check reports it)."""
    try:
        cfg = parse_pbtxt(text)
    except Exception:  # google.protobuf.text_format.ParseError and its kin
        return {}
    return {key: value.string_value for key, value in cfg.parameters.items()}


def repository_facts(ctx: DeployContext) -> dict[str, Any]:
    """What the compiled repository on disk says (empty when not compiled yet): its models, the absolute paths
    it reads (engine: config.pbtxt parameters; llm-api: model.yaml) as (what, path where compiled), each model's
    gpu_device_ids (llm-api instances: "0,1;2,3" read as 0,1,2,3) and instance count, and its launch script."""
    repo = ctx.repository
    facts: dict[str, Any] = {"paths": set(), "gpu_device_ids": {}, "models": set(), "instances": {}}
    if not repo.is_dir():
        return facts
    for config in sorted(repo.glob("*/config.pbtxt")):
        model = config.parent.name
        facts["models"].add(model)
        text = config.read_text()
        params = _pbtxt_parameters(text)
        for key, value in params.items():
            if value.startswith("/") and not value.startswith(IMAGE_PATHS):
                facts["paths"].add((f"{model}/config.pbtxt {key}", value))
        if "gpu_device_ids" in params:
            facts["gpu_device_ids"][model] = [int(x) for x in re.split(r"[;,]", params["gpu_device_ids"]) if x.strip()]
        counts = re.findall(r"instance_group\s*\{[^}]*?count:\s*(\d+)", text)
        if counts:
            facts["instances"][model] = sum(map(int, counts))
    FACT_READERS[ctx.kind](ctx, facts)
    script = repo / ctx.launch.script.name
    facts["script"] = script.read_text() if script.is_file() else None
    return facts


def _engine_facts(ctx: DeployContext, facts: dict[str, Any]) -> None:
    """config.pbtxt says all the engine flavour reads."""


def _llmapi_facts(ctx: DeployContext, facts: dict[str, Any]) -> None:
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


FACT_READERS: dict[str, Callable[[DeployContext, dict[str, Any]], None]] = {
    "engine": _engine_facts,
    "llm-api": _llmapi_facts,
}
