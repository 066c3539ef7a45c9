"""Reference engine folders: a TensorRT-LLM-shaped `config.json` next to the weights it needs.

    <engine>/config.json     version, pretrained_config, build_config (as `trtllm-build` writes them) + specbuild
    <engine>/model/          the Hugging Face checkpoint (copied, read-only), sha256 per file
    <engine>/medusa|eagle/   method weights, when the method has any
    <engine>/tokenizer/      only when the tokenizer is not inside the checkpoint folder

`build_engine` writes it atomically (specbuild.files.atomic); `load_engine` loads only from it, after checking every
file's sha256. Files are copied, never hard-linked: editing an engine must not edit the user's checkpoint.
Symlinks are followed (the Hugging Face hub cache links snapshot files into ../../blobs/); a link that leads
anywhere else outside the folder, or to something that is not a regular file, is refused.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Mapping

import specbuild
from specbuild.files import atomic
from specbuild.facts.engine_facts import CONFIG, EngineLimits, SpecMode, built_limits
from specbuild.errors import UserError
from specbuild.files.paths import show
from specbuild.reference.decoder.methods import method_class

if TYPE_CHECKING:
    from specbuild.reference.decoder.engine import Engine

SpeculativeDecodingMode = SpecMode  # the name TensorRT-LLM uses (tensorrt_llm/models/modeling_utils.py)
ROLES = ("target", "draft", "baseline")
REQUESTED_KEYS = ("max_batch_size", "max_input_len", "max_seq_len", "max_num_tokens", "max_draft_len")


# ====================================================================== build
def build_engine(
    out_dir: str | Path,
    *,
    role: str,
    method: str,
    mode: SpecMode | None = None,
    decoding: Mapping | None = None,
    model_dir: str | Path,
    tokenizer_dir: str | Path | None = None,
    extra_dirs: Mapping[str, str | Path] | None = None,
    dtype: str = "float16",
    limits: EngineLimits | Mapping[str, int],
    pretrained_extra: Mapping | None = None,
    progress: Callable[[str], None] | None = None,
    notice: atomic.Notice | None = None,
) -> Path:
    """Write a reference engine folder at `out_dir` (replacing any previous one) and return its path.

    role: target | draft | baseline. Only a target carries speculation; draft and baseline engines are plain.
    method: the recipe method (none, draft_target, prompt_lookup, medusa, eagle, lookahead).
    mode: the target's speculative-decoding mode (default: the one the reference implementation of `method`
        runs on, `specbuild.reference.decoder.methods.<method>.METHOD.engine_mode`).
    decoding: the method's runtime defaults (stored in specbuild.decoding; e.g. medusa_choices).
    extra_dirs: method weights to carry, by name (e.g. {"medusa": heads_dir} or {"eagle": eagle_dir}).
    limits: the built limits (EngineLimits, as the plan predicts them), or the requested values
        (max_batch_size, max_input_len, max_seq_len, max_num_tokens, max_draft_len) to build them from exactly
        as trtllm-build does (specbuild.facts.engine_facts).
    pretrained_extra: keys added to pretrained_config (num_medusa_heads, num_eagle_layers, eagle_net_config...).
    """
    out_dir = Path(out_dir)
    say = progress or (lambda _msg: None)
    if role not in ROLES:
        raise UserError(f"engine role {role!r} is not one of {', '.join(ROLES)}")
    if role != "target" or method == "none":
        mode = SpecMode.NONE
    elif mode is None:
        mode = method_class(method).engine_mode
    pretrained_extra = dict(pretrained_extra or {})
    if not isinstance(limits, EngineLimits):
        limits = _requested(limits, mode, int(pretrained_extra.get("num_eagle_layers", 0)))
    model_dir = Path(model_dir)
    hf_config = _read_json(model_dir / CONFIG, what="Hugging Face checkpoint config")
    sources: dict[str, Path] = {"model": model_dir}
    for name, folder in (extra_dirs or {}).items():
        if name in ("model", "tokenizer"):
            raise UserError(f"extra_dirs: {name!r} is reserved; name the folder after the method (e.g. 'medusa')")
        sources[name] = Path(folder)
    if tokenizer_dir is not None and Path(tokenizer_dir).resolve() != model_dir.resolve():
        sources["tokenizer"] = Path(tokenizer_dir)
    for name, folder in sources.items():
        if not folder.is_dir():
            raise UserError(f"{folder}: the {name} folder does not exist")

    config = {
        "version": f"specbuild-reference-{specbuild.__version__}",
        "pretrained_config": _pretrained_config(hf_config, dtype, pretrained_extra),
        "build_config": _build_config(limits, dict(decoding or {}), role),
        "specbuild": {
            "runtime": "reference",
            "role": role,
            "method": method,
            "decoding": dict(decoding or {}),
            "files": {},
        },
    }
    with atomic.atomic_folder(out_dir, notice) as partial:
        files = config["specbuild"]["files"]
        for name, folder in sources.items():
            say(f"copying {name} weights from {folder}")
            files[name] = {"path": name, "sha256": _copy_tree(folder, partial / name)}
        if "tokenizer" not in files:
            files["tokenizer"] = {"path": "model"}
        (partial / CONFIG).write_text(json.dumps(config, indent=2) + "\n")
    say(f"wrote {out_dir}")
    return out_dir


def _requested(values: Mapping[str, int], mode: SpecMode, num_eagle_layers: int) -> EngineLimits:
    missing = [k for k in REQUESTED_KEYS if k not in values]
    if missing:
        raise UserError(f"engine limits: missing {', '.join(missing)}")
    lim = {k: int(values[k]) for k in REQUESTED_KEYS}
    bad = [k for k in REQUESTED_KEYS if lim[k] < (0 if k == "max_draft_len" else 1)]
    if bad:
        raise UserError(f"engine limits: {', '.join(f'{k}={lim[k]}' for k in bad)} must be positive")
    if lim["max_input_len"] > lim["max_seq_len"]:
        raise UserError(f"engine limits: max_input_len={lim['max_input_len']} exceeds max_seq_len={lim['max_seq_len']}")
    return built_limits(
        max_batch_size=lim["max_batch_size"],
        max_input_len=lim["max_input_len"],
        max_seq_len=lim["max_seq_len"],
        max_num_tokens=lim["max_num_tokens"],
        tokens_per_block=1,
        max_beam_width=1,
        mode=mode,
        max_draft_len=lim["max_draft_len"],
        extra_seq_len=num_eagle_layers,
    )


def _pretrained_config(hf: dict, dtype: str, extra: dict) -> dict:
    rope = hf.get("rope_parameters") or {}
    heads = hf.get("num_attention_heads")
    architectures = hf.get("architectures")
    cfg = {
        "architecture": architectures[0] if isinstance(architectures, list) and architectures else "LlamaForCausalLM",
        "dtype": dtype,
        "logits_dtype": "float32",
        "vocab_size": hf.get("vocab_size"),
        "hidden_size": hf.get("hidden_size"),
        "num_hidden_layers": hf.get("num_hidden_layers"),
        "num_attention_heads": heads,
        "num_key_value_heads": hf.get("num_key_value_heads", heads),
        "intermediate_size": hf.get("intermediate_size"),
        "max_position_embeddings": hf.get("max_position_embeddings"),
        "hidden_act": hf.get("hidden_act", "silu"),
        "norm_epsilon": hf.get("rms_norm_eps", hf.get("layer_norm_eps", 1e-5)),
        "position_embedding_type": "rope_gpt_neox",
        "rotary_base": float(rope.get("rope_theta", hf.get("rope_theta", 10000.0)))
        if isinstance(rope, dict)
        else 10000.0,
        "mapping": {"world_size": 1, "tp_size": 1, "pp_size": 1},
    }
    cfg.update(extra)
    return cfg


def _build_config(limits: EngineLimits, decoding: dict, role: str) -> dict:
    gather_generation_logits = bool(decoding.get("use_draft_logits", False)) and role in ("target", "draft")
    return {
        **limits.as_build_config(),
        "kv_cache_type": "PAGED",
        "gather_context_logits": False,
        "gather_generation_logits": gather_generation_logits,
        "plugin_config": {"use_paged_context_fmha": True},
    }


def _source_file(path: Path, root: Path) -> Path:
    """The regular file a checkpoint entry stands for: symlinks are followed when they stay inside the folder or
    point into the Hugging Face hub cache's blobs/ (snapshots/<rev>/<file> -> ../../blobs/<sha>)."""
    if not path.is_symlink():
        return path
    try:
        target = path.resolve(strict=True)
    except (OSError, RuntimeError):
        raise UserError(f"{show(path)}: a broken symlink in the checkpoint folder — fix or remove it") from None
    blobs = root.resolve().parent.parent / "blobs"
    inside = target.is_relative_to(root.resolve()) or target.is_relative_to(blobs)
    if not inside:
        raise UserError(
            f"{show(path)}: a symlink to {target}, outside the checkpoint folder (and not the Hugging "
            "Face hub cache's blobs/) — copy the file into the checkpoint folder"
        )
    return target


def _copy_tree(src: Path, dst: Path) -> dict[str, str]:
    """Copy every file under src into dst (read-only), following safe symlinks; return {relative path: sha256}."""
    hashes = {}
    for path in sorted(src.rglob("*")):
        rel = path.relative_to(src)
        if any(part.startswith(".") for part in rel.parts) or (path.is_dir() and not path.is_symlink()):
            continue
        source = _source_file(path, src)
        mode = source.stat().st_mode
        if stat.S_ISDIR(mode):
            continue
        if not stat.S_ISREG(mode):
            raise UserError(
                f"{show(path)}: not a regular file (a FIFO, socket or device) — remove it from the checkpoint folder"
            )
        target = dst / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
        os.chmod(target, 0o444)
        hashes[rel.as_posix()] = sha256_file(target)
    if not hashes:
        raise UserError(f"{src}: the folder is empty")
    return hashes


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


# ====================================================================== read
def read_engine_config(engine_dir: str | Path) -> dict:
    """config.json of a reference engine folder, checked to be one (light: no torch)."""
    engine_dir = Path(engine_dir)
    if not engine_dir.is_dir():
        raise UserError(f"{engine_dir}: no such engine folder; build it with `specbuild compile`")
    config = _read_json(engine_dir / CONFIG, what="engine config")
    section = config.get("specbuild")
    if not isinstance(section, dict) or section.get("runtime") != "reference":
        if "build_config" in config and any(engine_dir.glob("rank*.engine")):
            raise UserError(
                f"{engine_dir}: this is a TensorRT-LLM engine (version {config.get('version', '?')}), not a reference "
                "engine; serve it with the TensorRT-LLM runtime on a GPU (recipe `runtime: tensorrt-llm`), or "
                "build a reference engine with `runtime: reference`"
            )
        runtime = section.get("runtime") if isinstance(section, dict) else None
        raise UserError(
            f"{engine_dir / CONFIG}: not a reference engine (specbuild.runtime is {runtime!r}, expected 'reference'); "
            "build one with `specbuild compile` and `runtime: reference`"
        )
    for key in ("pretrained_config", "build_config"):
        if not isinstance(config.get(key), dict):
            raise UserError(f"{engine_dir / CONFIG}: missing section {key!r}; rebuild the engine")
    for key in ("role", "method", "files"):
        if key not in section:
            raise UserError(f"{engine_dir / CONFIG}: missing specbuild.{key}; rebuild the engine")
    return config


def verify_files(engine_dir: str | Path, config: dict) -> dict[str, Path]:
    """Check the sha256 of every file the engine lists; return {name: folder}."""
    engine_dir = Path(engine_dir)
    folders = {}
    for name, entry in config["specbuild"]["files"].items():
        folder = engine_dir / entry["path"]
        for rel, expected in entry.get("sha256", {}).items():
            path = folder / rel
            if not path.is_file():
                raise UserError(f"{path}: missing from the engine folder (listed in {CONFIG}); rebuild the engine")
            actual = sha256_file(path)
            if actual != expected:
                raise UserError(
                    f"{path}: sha256 {actual} does not match {expected} recorded in {engine_dir / CONFIG}; "
                    "the file changed after the engine was built — rebuild the engine"
                )
        folders[name] = folder
    return folders


def load_engine(
    engine_dir: str | Path,
    decoding_overrides: Mapping | None = None,
    *,
    compute_dtype: str = "float32",
    verify: bool = True,
) -> "Engine":
    """Load a reference engine (model weights from the folder only). `decoding_overrides` replace keys of
    specbuild.decoding (e.g. the Triton model's `medusa_choices`). compute_dtype: float32 (default) or bfloat16."""
    from specbuild.reference.decoder.engine import Engine
    from specbuild.reference.decoder.model import CausalLM

    engine_dir = Path(engine_dir)
    config = read_engine_config(engine_dir)
    folders = (
        verify_files(engine_dir, config)
        if verify
        else {name: engine_dir / entry["path"] for name, entry in config["specbuild"]["files"].items()}
    )
    if "model" not in folders:
        raise UserError(f"{engine_dir / CONFIG}: specbuild.files has no 'model' entry; rebuild the engine")
    decoding = dict(config["specbuild"].get("decoding") or {})
    decoding.update(decoding_overrides or {})
    model = CausalLM.from_pretrained(folders["model"], dtype=compute_dtype)
    return Engine(
        path=engine_dir, config=config, decoding=decoding, folders=folders, model=model, compute_dtype=compute_dtype
    )


def _read_json(path: Path, *, what: str) -> dict:
    if not path.is_file():
        raise UserError(f"{path}: missing ({what})")
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise UserError(f"{path}: cannot read the {what}: {exc}") from exc
    if not isinstance(data, dict):
        raise UserError(f"{path}: the {what} is not a JSON object")
    return data
