"""config.pbtxt files as `model_config_pb2.ModelConfig` messages (never string templates).

`repository_configs(recipe, spec, role, engines, flavour)` builds every model's message; `to_pbtxt`/`parse_pbtxt`
write and read them with `google.protobuf.text_format`; `config_problems` lists what a served config must not have
(`${` placeholders, missing or empty must-have parameters).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from specbuild.repository.engine import params, tensors
from specbuild.repository.engine.tensors import Tensor

if TYPE_CHECKING:
    from specbuild.recipe.schema import Recipe
    from specbuild.repository.engine.core import EngineCore
    from specbuild.speculation import Speculation

CORE_MODELS = ("tensorrt_llm", "tensorrt_llm_draft")

# Parameter keys a model cannot do without, and whether an empty value is allowed (tensorrtllm_backend
# inflight_batcher_llm/src/model_state.cc, preprocessing/ and postprocessing/1/model.py@v0.19.0).
MUST_HAVE: dict[str, dict[str, bool]] = {
    "tensorrt_llm": {
        "gpt_model_type": False,
        "gpt_model_path": False,
        "tokenizer_dir": True,
        "xgrammar_tokenizer_info_path": True,
        "guided_decoding_backend": True,
        "max_beam_width": False,
        "exclude_input_in_output": False,
        "enable_kv_cache_reuse": False,
        "kv_cache_free_gpu_mem_fraction": False,
        "batch_scheduler_policy": False,
    },
    "preprocessing": {"tokenizer_dir": False, "add_special_tokens": False, "multimodal_model_path": True},
    "postprocessing": {"tokenizer_dir": False, "skip_special_tokens": False},
    "tensorrt_llm_bls": {
        "tensorrt_llm_model_name": False,
        "accumulate_tokens": False,
        "exclude_input_in_output": False,
    },
}
MUST_HAVE["tensorrt_llm_draft"] = MUST_HAVE["tensorrt_llm"]


def _mc():
    from tritonclient.grpc import model_config_pb2

    return model_config_pb2


def _add_tensors(repeated, items: list[Tensor], *, inputs: bool) -> None:
    mc = _mc()
    for t in items:
        m = repeated.add()
        m.name = t.name
        m.data_type = mc.DataType.Value(t.dtype)
        m.dims.extend(t.dims)
        if inputs:
            if t.optional:
                m.optional = True
            if t.reshape:
                m.reshape.SetInParent()  # reshape: { shape: [ ] }
            if t.ragged:
                m.allow_ragged_batch = True


def _parameters(cfg, values: dict[str, str]) -> None:
    for key, value in values.items():
        cfg.parameters[key].string_value = str(value)


def _dynamic_batching(cfg, recipe: Recipe, preferred: bool = True) -> None:
    t = recipe.triton
    db = cfg.dynamic_batching
    if preferred:
        db.preferred_batch_size.append(recipe.build.max_batch_size)
    db.max_queue_delay_microseconds = t.max_queue_delay_microseconds
    db.default_queue_policy.max_queue_size = t.max_queue_size


def _instances(cfg, count: int) -> None:
    group = cfg.instance_group.add()
    group.count = count
    group.kind = _mc().ModelInstanceGroup.Kind.Value("KIND_CPU")


def _base(name: str, recipe: Recipe, backend: str | None = None, platform: str | None = None):
    cfg = _mc().ModelConfig()
    cfg.name = name
    if backend:
        cfg.backend = backend
    if platform:
        cfg.platform = platform
    cfg.max_batch_size = recipe.build.max_batch_size
    return cfg


# --- the models ---------------------------------------------------------------------------------------------------


def preprocessing_config(recipe: Recipe, legacy: bool):
    cfg = _base("preprocessing", recipe, backend="python")
    _dynamic_batching(cfg, recipe)
    _add_tensors(cfg.input, tensors.preprocessing_inputs(legacy), inputs=True)
    _add_tensors(cfg.output, tensors.PREPROCESSING_OUTPUTS, inputs=False)
    _instances(cfg, recipe.triton.preprocessing_instances)
    _parameters(cfg, params.preprocessing_parameters(recipe))
    return cfg


def postprocessing_config(recipe: Recipe):
    cfg = _base("postprocessing", recipe, backend="python")
    _dynamic_batching(cfg, recipe, preferred=False)
    _add_tensors(cfg.input, tensors.POSTPROCESSING_INPUTS, inputs=True)
    _add_tensors(cfg.output, tensors.POSTPROCESSING_OUTPUTS, inputs=False)
    _instances(cfg, recipe.triton.postprocessing_instances)
    _parameters(cfg, params.postprocessing_parameters(recipe))
    return cfg


def core_config(recipe: Recipe, spec: Speculation, role: str, model: str, engine_dir: Path, backend: str, legacy: bool):
    """`tensorrt_llm` / `tensorrt_llm_draft`: the C++ backend on GPU, our python model on the reference runtime
    (`backend`: the runtime's core_backend); the same tensors and parameters either way."""
    cfg = _base(model, recipe, backend=backend)
    if params.core_decoupled(recipe, spec, role):
        cfg.model_transaction_policy.decoupled = True
    _dynamic_batching(cfg, recipe)
    _add_tensors(cfg.input, tensors.core_inputs(legacy), inputs=True)
    _add_tensors(cfg.output, tensors.core_outputs(legacy), inputs=False)
    _instances(cfg, 1)
    _parameters(cfg, params.core_parameters(recipe, spec, role, model, engine_dir))
    return cfg


def ensemble_config(recipe: Recipe, legacy: bool):
    cfg = _base("ensemble", recipe, platform="ensemble")
    _add_tensors(cfg.input, tensors.ensemble_inputs(legacy), inputs=True)
    _add_tensors(cfg.output, tensors.interface_outputs(legacy), inputs=False)
    steps = cfg.ensemble_scheduling
    pre = steps.step.add(model_name="preprocessing", model_version=-1)
    core = steps.step.add(model_name="tensorrt_llm", model_version=-1)
    post = steps.step.add(model_name="postprocessing", model_version=-1)
    for tensor, where, name in tensors.ensemble_routes(legacy):
        (pre if where == "pre" else core).input_map[name] = tensor.name
    # preprocessing -> tensorrt_llm (OUT_PROMPT_TABLE_EXTRA_IDS and OUT_MIN_TOKENS only when asked for: an
    # optional core input the step does not produce is left out, as upstream's ensemble relies on)
    for out, internal, core_in in tensors.pre_to_core(legacy):
        pre.output_map[out] = internal
        core.input_map[core_in] = internal
    # tensorrt_llm -> postprocessing, and the outputs handed back unchanged
    core.output_map["output_ids"] = "_TOKENS_BATCH"
    core.output_map["sequence_length"] = "_SEQUENCE_LENGTH"
    for t in tensors.passthrough_outputs(legacy):
        core.output_map[t.name] = t.name
    post.input_map["TOKENS_BATCH"] = "_TOKENS_BATCH"
    post.input_map["SEQUENCE_LENGTH"] = "_SEQUENCE_LENGTH"
    post.output_map["OUTPUT"] = "text_output"
    post.output_map["OUTPUT_IDS"] = tensors.OUTPUT_IDS.name
    return cfg


def bls_config(recipe: Recipe, spec: Speculation, role: str, legacy: bool):
    cfg = _base("tensorrt_llm_bls", recipe, backend="python")
    if recipe.triton.streaming:
        cfg.model_transaction_policy.decoupled = True
    _dynamic_batching(cfg, recipe, preferred=False)
    _add_tensors(cfg.input, tensors.bls_inputs(legacy), inputs=True)
    _add_tensors(cfg.output, tensors.interface_outputs(legacy), inputs=False)
    _instances(cfg, recipe.triton.bls_instances)
    _parameters(cfg, params.bls_parameters(recipe, spec, role))
    return cfg


def repository_configs(
    recipe: Recipe, spec: Speculation, role: str, engines: dict[str, Path], flavour: EngineCore
) -> dict[str, Any]:
    """Every model's ModelConfig, by model name. `engines` maps core model names to their engine folders;
    `flavour`: the recipe's runtime, which writes the repository."""
    out: dict[str, Any] = {}
    legacy = params.legacy_tensor_names(recipe, flavour)  # once: it may ask the installed TensorRT-LLM
    for name in params.repository_models(recipe, spec, role):
        if name == "preprocessing":
            out[name] = preprocessing_config(recipe, legacy)
        elif name == "postprocessing":
            out[name] = postprocessing_config(recipe)
        elif name in CORE_MODELS:
            out[name] = core_config(recipe, spec, role, name, engines[name], flavour.core_backend, legacy)
        elif name == "ensemble":
            out[name] = ensemble_config(recipe, legacy)
        elif name == "tensorrt_llm_bls":
            out[name] = bls_config(recipe, spec, role, legacy)
        else:  # pragma: no cover - repository_models and this function are written together
            raise AssertionError(f"no config builder for model {name}")
    return out


# --- text form --------------------------------------------------------------------------------------------------


def to_pbtxt(cfg) -> str:
    from google.protobuf import text_format

    return text_format.MessageToString(cfg)


def parse_pbtxt(text: str):
    from google.protobuf import text_format

    return text_format.Parse(text, _mc().ModelConfig())


def config_problems(cfg, text: str | None = None, must_have: dict[str, dict[str, bool]] | None = None) -> list[str]:
    """What keeps a config from being served as written: placeholders left in, must-have parameters missing or
    empty, tensors declared twice, ensemble steps reading tensors nobody produces."""
    text = to_pbtxt(cfg) if text is None else text
    problems: list[str] = []
    if "${" in text:
        line = next(i for i, ln in enumerate(text.splitlines(), 1) if "${" in ln)
        problems.append(f"{cfg.name}: an unfilled ${{...}} placeholder (line {line})")
    for key, may_be_empty in (MUST_HAVE if must_have is None else must_have).get(cfg.name, {}).items():
        if key not in cfg.parameters:
            problems.append(f"{cfg.name}: parameter {key} is missing")
        elif not may_be_empty and not cfg.parameters[key].string_value.strip():
            problems.append(f"{cfg.name}: parameter {key} is empty")
    for what, tensors_ in (("input", cfg.input), ("output", cfg.output)):
        seen: set[str] = set()
        for t in tensors_:
            if t.name in seen:
                problems.append(f"{cfg.name}: {what} {t.name} is declared twice")
            seen.add(t.name)
    if cfg.platform == "ensemble":
        produced = {t.name for t in cfg.input}
        for step in cfg.ensemble_scheduling.step:
            for tensor in step.input_map.values():
                if tensor not in produced:
                    problems.append(
                        f"{cfg.name}: step {step.model_name} reads {tensor}, which nothing produces before it"
                    )
            produced.update(step.output_map.values())
        for t in cfg.output:
            if t.name not in produced:
                problems.append(f"{cfg.name}: output {t.name} is produced by no step")
    return problems
