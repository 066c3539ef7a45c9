"""The repository as the containers serve it: the compiled repository with every path it names rewritten to where
the containers read that folder (`<mount_root>/<name>/...`). The bundle carries it as `repository/`; copy-models.sh
puts it in the storage. Only the values that name a mounted folder change: config.pbtxt parameters (engine and
tokenizer folders; protobuf text format, read and written by specbuild.repository.engine.configs) and the checkpoint keys
of an llm-api model.yaml (specbuild.repository.llmapi.model_yaml); every other file is copied as it is.

    files = container_repository(ctx)        # relative path -> text; UserError when nothing is compiled yet
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from specbuild.errors import UserError
from specbuild.cache.provenance import MANIFEST
from specbuild.repository.engine.configs import parse_pbtxt, to_pbtxt
from specbuild.repository.llmapi import model_yaml

if TYPE_CHECKING:
    from specbuild.deploy.context import DeployContext

FOLDER = "repository"  # in the bundle
# model.yaml keys that name checkpoint folders (TensorRT-LLM tensorrt_llm/llmapi/llm_args.py; dotted: inside
# speculative_config)
MODEL_YAML_PATHS = (
    "model",
    "tokenizer",
    "speculative_config.speculative_model",
    "speculative_config.speculative_model_dir",
)


def compiled_files(ctx: DeployContext) -> dict[str, str]:
    """Every file of the compiled repository (relative path -> text); empty when it is not compiled. Not its
    provenance.json: that records the compiling machine (the bundle has its own)."""
    repo = ctx.repository
    if not repo.is_dir():
        return {}
    return {
        str(p.relative_to(repo)): p.read_text()
        for p in sorted(repo.rglob("*"))
        if p.is_file() and p.relative_to(repo).as_posix() != MANIFEST
    }


def _pbtxt(ctx: DeployContext, text: str) -> str:
    cfg = parse_pbtxt(text)
    changed = False
    for value in cfg.parameters.values():
        inside = ctx.in_container(value.string_value) if value.string_value.startswith("/") else None
        if inside is not None and inside != value.string_value:
            value.string_value, changed = inside, True
    return to_pbtxt(cfg) if changed else text


def _model_yaml(ctx: DeployContext, text: str) -> str:
    data = model_yaml.load(text)
    changed = False
    for key in MODEL_YAML_PATHS:
        *parents, last = key.split(".")
        node = data
        for part in parents:
            node = node.get(part) if isinstance(node, dict) else None
        value = node.get(last) if isinstance(node, dict) else None
        inside = ctx.in_container(value) if isinstance(value, str) and value.startswith("/") else None
        if inside is not None and inside != value:
            node[last], changed = inside, True
    return model_yaml.dump(data) if changed else text


REWRITERS: dict[str, Callable[[DeployContext, str], str]] = {"config.pbtxt": _pbtxt, "model.yaml": _model_yaml}


def container_files(ctx: DeployContext, files: dict[str, str]) -> dict[str, str]:
    """The files of a repository as the containers read them."""
    return {
        rel: REWRITERS.get(rel.rsplit("/", 1)[-1], lambda _ctx, text: text)(ctx, text) for rel, text in files.items()
    }


def container_repository(ctx: DeployContext) -> dict[str, str]:
    files = compiled_files(ctx)
    if not files:
        raise UserError(
            f"the deployment bundle carries the repository {ctx.repository} with the containers' paths, "
            "but it is not written yet — compile the recipe (the repository comes before the bundle)"
        )
    return container_files(ctx, files)
