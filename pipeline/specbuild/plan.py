"""The plan: the ordered steps `specbuild compile` takes for a recipe. Pure: it reads the recipe, runs nothing.

Every command line is written with every relevant flag explicit, because defaults drift between TensorRT-LLM
versions (engine fact sheet §9.2).
"""

from __future__ import annotations

import json
import os
import shlex
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from specbuild.methods import method_for
from specbuild.recipe.schema import Recipe
from specbuild.triton import params as triton_params

ROLES_DOC = {"target": "the serving engine", "draft": "the draft engine", "baseline": "the target without speculation"}

# SpeculativeDecodingMode.NONE (engine fact sheet §1.4); method modules carry the other values.
MODE_NONE = 1
DEFAULT_MAX_NUM_TOKENS = 8192  # BuildConfig default (§1.2)
QUANT_WHEEL = {"int8_weight_only": "W8A16", "int4_weight_only": "W4A16", "fp8": "FP8"}
# QuantConfig._requires_modelopt_quantization: FP8 is calibrated by ModelOpt in <Class>.quantize(), which writes
# every rank itself; from_hugging_face only handles the uncalibrated weight-only algorithms.
QUANT_CALIBRATED = {"fp8"}
CALIBRATION = {"calib_dataset": "cnn_dailymail", "calib_batches": 512}  # the wheel's defaults, made explicit
QUANT_SCRIPT = {"int8_weight_only": ["--use_weight_only", "--weight_only_precision", "int8"],
                "int4_weight_only": ["--use_weight_only", "--weight_only_precision", "int4"],
                "fp8": ["--use_fp8"]}


def show(path: Path | str) -> str:
    """A path as printed in plans: relative to the working directory when inside it."""
    p = Path(path)
    try:
        rel = os.path.relpath(p, Path.cwd())
    except ValueError:
        return str(p)
    return str(p) if rel.startswith("..") else rel


@dataclass
class Step:
    kind: str  # reference-engine | convert | build | verify-engine | repository | serve | validate
    title: str
    role: str | None = None
    command: list[str] | None = None  # argv of a command this step runs
    details: dict[str, Any] = field(default_factory=dict)


@dataclass
class Outputs:
    engines: dict[str, str]
    repository: str
    baseline_repository: str | None
    report: str


@dataclass
class Plan:
    recipe: str
    name: str
    runtime: str
    method: str
    outputs: Outputs
    steps: list[Step]

    def to_dict(self) -> dict:
        return asdict(self)

    def render(self) -> str:
        lines = [f"plan for {self.recipe} — {self.name}: {self.method} on the {self.runtime} runtime", ""]
        for i, step in enumerate(self.steps, 1):
            lines.append(f"{i}. [{step.kind}] {step.title}")
            if step.command:
                lines.append("   $ " + shlex.join(step.command))
            for key, value in step.details.items():
                lines.extend(_render_detail(key, value, "   "))
        lines.append("")
        lines.append("outputs:")
        for role, path in self.outputs.engines.items():
            lines.append(f"   engine {role}: {path}")
        lines.append(f"   repository: {self.outputs.repository}")
        if self.outputs.baseline_repository:
            lines.append(f"   baseline repository: {self.outputs.baseline_repository}")
        lines.append(f"   report: {self.outputs.report}")
        return "\n".join(lines) + "\n"


def _render_detail(key: str, value: Any, indent: str) -> list[str]:
    if isinstance(value, dict):
        out = [f"{indent}{key}:"]
        for k, v in value.items():
            out.extend(_render_detail(k, v, indent + "  "))
        return out
    if isinstance(value, list) and value and all(isinstance(v, list) for v in value):
        return [f"{indent}{key}: {len(value)} paths {json.dumps(value[:4])}{' ...' if len(value) > 4 else ''}"]
    return [f"{indent}{key}: {value if isinstance(value, str) else json.dumps(value)}"]


@dataclass(frozen=True)
class Layout:
    """Where a compile writes (design contract "Output folders")."""

    engines_root: Path
    repo_root: Path
    report_root: Path
    name: str

    def engine(self, role: str) -> Path:
        return self.engines_root / self.name / role

    def checkpoint(self, role: str) -> Path:
        return self.engines_root / self.name / "checkpoints" / role

    def repository(self, role: str = "target") -> Path:
        return self.repo_root / (self.name if role == "target" else f"{self.name}-{role}")

    @property
    def report(self) -> Path:
        return self.report_root / self.name


def roles(recipe: Recipe) -> list[str]:
    out = ["target"]
    if method_for(recipe).needs_draft_engine:
        out.append("draft")
    if recipe.builds_baseline:
        out.append("baseline")
    return out


def engine_limits(recipe: Recipe, role: str) -> dict[str, int]:
    """The build_config values an engine of this role must carry (what trtllm-build writes, §1.4)."""
    method = method_for(recipe)
    spec = recipe.speculation
    speculative = role == "target" and method.speculative
    draft_len = method.max_draft_len(spec) if speculative else 0
    b = recipe.build
    max_seq_len = b.max_seq_len + (draft_len + method.extra_len(spec) if speculative else 0)
    # builder.py: check_max_num_tokens (remove_input_padding and context_fmha on) clips max_num_tokens to
    # max_batch_size * max_seq_len (before max_draft_len is added) and raises it to tokens_per_block; then, for a
    # speculative engine, raises it to max_batch_size * (max_draft_len + 1) (engine fact sheet §1.2).
    max_num_tokens = min(b.max_num_tokens or DEFAULT_MAX_NUM_TOKENS, b.max_batch_size * b.max_seq_len)
    max_num_tokens = max(max_num_tokens, b.tokens_per_block)
    if speculative:
        max_num_tokens = max(max_num_tokens, b.max_batch_size * (draft_len + 1))
    return {
        "max_batch_size": b.max_batch_size,
        "max_input_len": b.max_input_len,
        "max_seq_len": max_seq_len,
        "max_num_tokens": max_num_tokens,
        "max_beam_width": b.max_beam_width,
        "max_draft_len": draft_len,
        "speculative_decoding_mode": method.mode_flag if speculative else MODE_NONE,
    }


def make_plan(recipe: Recipe, layout: Layout, *, trtllm_examples: str | None = None) -> Plan:
    method = method_for(recipe)
    steps: list[Step] = []
    for role in roles(recipe):
        if recipe.runtime == "reference":
            steps.append(_reference_engine_step(recipe, layout, role))
        else:
            steps.extend(_trtllm_engine_steps(recipe, layout, role, trtllm_examples))
    repo_roles = ["target"] + (["baseline"] if recipe.builds_baseline else [])
    for role in repo_roles:
        steps.append(_repository_step(recipe, layout, role))
    steps.append(_serve_step(recipe, layout, repo_roles))
    steps.append(_validate_step(recipe, layout))
    outputs = Outputs(
        engines={role: show(layout.engine(role)) for role in roles(recipe)},
        repository=show(layout.repository()),
        baseline_repository=show(layout.repository("baseline")) if recipe.builds_baseline else None,
        report=show(layout.report),
    )
    return Plan(recipe=show(recipe.source) if recipe.source else "<recipe>", name=recipe.name,
                runtime=recipe.runtime, method=method.name, outputs=outputs, steps=steps)


# --- reference runtime -------------------------------------------------------------------------------------

def _reference_engine_step(recipe: Recipe, layout: Layout, role: str) -> Step:
    method = method_for(recipe)
    model = recipe.resolve(recipe.speculation.checkpoint) if role == "draft" else recipe.model_dir
    details: dict[str, Any] = {
        "model": show(model),
        "method": method.name if role == "target" else "none",
        "dtype": f"{recipe.model.dtype} recorded; computes in float32 on the CPU",
        "limits": engine_limits(recipe, role),
    }
    if role == "target":
        extra = {k: show(v) for k, v in method.speculative_dirs(recipe).items()}
        if extra:
            details["weights"] = extra
        decoding = method.reference_decoding(recipe)
        if decoding:
            details["decoding"] = decoding
    details["output"] = show(layout.engine(role))
    return Step("reference-engine", f"reference engine: {role} ({ROLES_DOC[role]})", role=role, details=details)


# --- TensorRT-LLM runtime ----------------------------------------------------------------------------------

def _trtllm_engine_steps(recipe: Recipe, layout: Layout, role: str, examples: str | None) -> list[Step]:
    method = method_for(recipe)
    steps = []
    reuse_target_ckpt = role == "baseline" and not method.speculative_dirs(recipe)
    ckpt_role = "target" if reuse_target_ckpt else role
    if not reuse_target_ckpt:
        steps.append(_convert_step(recipe, layout, role, examples))
    steps.append(_build_step(recipe, layout, role, layout.checkpoint(ckpt_role)))
    steps.append(Step("verify-engine", f"read back engines/{recipe.name}/{role}/config.json and compare with the recipe",
                      role=role, details={"expect": engine_limits(recipe, role)}))
    return steps


def _convert_step(recipe: Recipe, layout: Layout, role: str, examples: str | None) -> Step:
    from specbuild.methods.common import plain_converter

    method = method_for(recipe)
    b = recipe.build
    tp = recipe.speculation.tp_size if role == "draft" else b.tp_size
    pp = 1 if role == "draft" else b.pp_size
    if role == "target":
        conv = method.converter(recipe, examples)
        model_dir = recipe.model_dir
    elif role == "draft":
        conv = method.draft_converter(recipe)
        model_dir = recipe.resolve(recipe.speculation.checkpoint)
    else:
        conv = plain_converter(recipe)
        model_dir = recipe.model_dir
    out = layout.checkpoint(role)
    details: dict[str, Any] = {"via": conv.via, "why": conv.reason}
    quant = b.quantization
    if conv.via == "script":
        command = ["python3", str(Path(examples) / conv.script), "--model_dir", show(model_dir),
                   "--output_dir", show(out), "--dtype", recipe.model.dtype, "--tp_size", str(tp),
                   "--pp_size", str(pp), "--workers", str(b.workers), *conv.script_args,
                   *(QUANT_SCRIPT[quant] if quant != "none" else [])]
        return Step("convert", f"convert {role} checkpoint with {conv.script}", role=role, command=command,
                    details=details)
    call: dict[str, Any] = {"hf_model_or_dir": show(model_dir), "dtype": recipe.model.dtype,
                            "mapping": {"world_size": tp * pp, "tp_size": tp, "pp_size": pp},
                            # the wheel's config readers default trust_remote_code to True: always say it
                            "trust_remote_code": recipe.model.trust_remote_code}
    if quant != "none":
        call["quant_config"] = {"quant_algo": QUANT_WHEEL[quant]}
    call.update(conv.kwargs)
    if quant in QUANT_CALIBRATED:
        function = "quantize"
        call.update(CALIBRATION)
        ranks = (f"all {tp * pp} rank(s) in one call: ModelOpt calibrates on calib_dataset (downloaded from the "
                 "Hugging Face hub) and writes config.json and every rank{N}.safetensors")
    else:
        function = "from_hugging_face"
        ranks = f"0..{tp * pp - 1}: from_hugging_face(mapping rank r) then save_checkpoint(output, save_config=(r == 0))"
    details.update({
        "call": f"tensorrt_llm.models.{conv.model_class}.{function}",
        "arguments": call,
        "ranks": ranks,
        "process": "a child process (its memory is returned; a crash is reported)",
        "output": show(out),
    })
    return Step("convert", f"convert {role} checkpoint with {conv.model_class}.{function}", role=role,
                details=details)


def trtllm_build_argv(recipe: Recipe, layout: Layout, role: str, checkpoint: Path) -> list[str]:
    method = method_for(recipe)
    limits = engine_limits(recipe, role)
    b = recipe.build
    flags: dict[str, str | None] = {
        "--checkpoint_dir": show(checkpoint),
        "--output_dir": show(layout.engine(role)),
        "--max_batch_size": str(b.max_batch_size),
        "--max_input_len": str(b.max_input_len),
        "--max_seq_len": str(b.max_seq_len),  # trtllm-build adds max_draft_len (+num_eagle_layers) itself
        "--max_num_tokens": str(limits["max_num_tokens"]),
        "--max_beam_width": str(b.max_beam_width),
        "--gemm_plugin": recipe.gemm_plugin,
        "--gpt_attention_plugin": recipe.model.dtype,
        "--context_fmha": "enable",
        "--use_paged_context_fmha": "enable" if b.use_paged_context_fmha else "disable",
        "--remove_input_padding": "enable",
        "--kv_cache_type": b.kv_cache_type,
        "--tokens_per_block": str(b.tokens_per_block),
        "--workers": str(b.workers),
    }
    if role == "target":
        flags.update(method.build_flags(recipe))
    elif role == "draft":
        flags.update(method.draft_build_flags(recipe))
    argv = ["trtllm-build"]
    for flag, value in flags.items():
        argv.append(flag)
        if value is not None:
            argv.append(value)
    return argv


def _build_step(recipe: Recipe, layout: Layout, role: str, checkpoint: Path) -> Step:
    return Step("build", f"trtllm-build the {role} engine ({ROLES_DOC[role]})", role=role,
                command=trtllm_build_argv(recipe, layout, role, checkpoint))


# --- repository, serving, validation -----------------------------------------------------------------------

def _repository_step(recipe: Recipe, layout: Layout, role: str) -> Step:
    engine_role = role
    models: dict[str, Any] = {}
    for name in triton_params.repository_models(recipe, role):
        info: dict[str, Any] = {}
        if name in ("tensorrt_llm", "tensorrt_llm_draft"):
            engine = layout.engine("draft" if name == "tensorrt_llm_draft" else engine_role)
            p = triton_params.core_parameters(recipe, role, name, engine)
            info["backend"] = "python (specbuild reference)" if recipe.runtime == "reference" else "tensorrtllm"
            info["decoupled"] = triton_params.core_decoupled(recipe, role)
            keep = ("gpt_model_path", "decoding_mode", "medusa_choices", "eagle_choices", "eagle_use_dynamic_tree",
                    "eagle_dynamic_tree_max_top_k", "lookahead_window_size", "lookahead_ngram_size",
                    "lookahead_verification_set_size", "exclude_input_in_output", "kv_cache_free_gpu_mem_fraction",
                    "gpu_device_ids", "participant_ids")
            for k in keep:
                if k in p:
                    v = p[k]
                    info[k] = show(v) if k == "gpt_model_path" else (v if len(v) < 60 else v[:57] + "...")
        elif name == "tensorrt_llm_bls":
            info.update(triton_params.bls_parameters(recipe, role))
            info["decoupled"] = recipe.triton.streaming
        elif name == "ensemble":
            info["steps"] = "preprocessing -> tensorrt_llm -> postprocessing"
        else:
            info["tokenizer_dir"] = show(recipe.tokenizer_dir)
        models[name] = info
    serving = method_for(recipe).serving_model if role == "target" else "ensemble"
    return Step("repository", f"write the Triton repository {show(layout.repository(role))}", role=role,
                details={"max_batch_size": recipe.build.max_batch_size, "serve requests at": serving,
                         "models": models})


def _serve_step(recipe: Recipe, layout: Layout, repo_roles: list[str]) -> Step:
    t = recipe.triton
    if recipe.runtime == "reference":
        command = ["specbuild", "serve", show(layout.repository()), "--http-port", str(t.http_port),
                   "--grpc-port", str(t.grpc_port), "--metrics-port", str(t.metrics_port)]
        details = {"server": "a system tritonserver if found, else the one bundled in nvidia-pytriton (CPU)",
                   "binds": "127.0.0.1"}
        if len(repo_roles) > 1:
            details["baseline"] = f"served alongside from {show(layout.repository('baseline'))} on free ports"
        details["compile"] = "serves on free loopback ports, validates, then stops the server"
        return Step("serve", "serve the repository", command=command, details=details)
    info = triton_params.launch(recipe, "target")
    command = ["bash", show(layout.repository() / "launch_triton.sh")]
    return Step("serve", f"launch tritonserver in {info['mode']} mode (world size {info['world_size']})",
                command=command, details={k: v for k, v in info.items() if k != "mode"})


def _validate_step(recipe: Recipe, layout: Layout) -> Step:
    v = recipe.validation
    gates = {"require_lossless": v.require_lossless}
    if v.min_acceptance_length is not None:
        gates["min_acceptance_length"] = v.min_acceptance_length
    if v.min_speedup is not None:
        gates["min_speedup"] = v.min_speedup
    details: dict[str, Any] = {
        "prompts": show(recipe.resolve(v.prompts)) if isinstance(v.prompts, Path)
        else (f"{len(v.prompts)} inline" if v.prompts else "the bundled prompt set"),
        "max_tokens": v.max_tokens,
        "concurrency": v.concurrency,
        "gates": gates,
    }
    if v.sampling is not None:
        details["sampling"] = v.sampling.model_dump()
    details["report"] = show(layout.report)
    return Step("validate", "run the validation suite against the served repository", details=details)
