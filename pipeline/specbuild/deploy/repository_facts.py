"""What the compiled repository on disk says, for the bundle's cross-checks (specbuild.deploy.cross_checks):
its models, the absolute paths it reads, its GPU ids and instance counts, its launch script and (llm-api) its
model.yaml."""

from __future__ import annotations

import re
from typing import Any

from specbuild.deploy.context import DeployContext
from specbuild.repository.engine.configs import parse_pbtxt

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
    ctx.flavour.read_repository(ctx, facts)
    script = repo / ctx.launch.script.name
    facts["script"] = script.read_text() if script.is_file() else None
    return facts
