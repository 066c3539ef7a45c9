"""Build a zoo profile from nothing but this machine: corpus -> tokenizer -> target -> draft/heads -> eval.

Output folder (written to `.<name>.partial-<pid>` beside it, renamed into place when complete):

    manifest.json   sizes, sha256, training times, params, corpus hash, seeds, versions, quality
    README.md       what the folder holds, how it was built, its quality figures
    tokenizer/      tokenizer.json + tokenizer_config.json  (AutoTokenizer)
    target/         LlamaForCausalLM (config.json, generation_config.json, model.safetensors, tokenizer)
    draft/          LlamaForCausalLM distilled from the target (same files)
    medusa/         Medusa heads (config.json, medusa_lm_head.safetensors)   -> specbuild.heads.medusa
    eagle/          EAGLE-1 head (config.json, pytorch_model.bin)              -> specbuild.heads.eagle
    eagle3/         EAGLE-3 head (config.json, model.safetensors)              -> specbuild.heads.eagle3
    pard/           PARD draft: draft/ with a mask token, trained in parallel  -> TensorRT-LLM decoding_type PARD
    mtp-target/     DeepseekV3ForCausalLM with MTP layers (profiles with mtp_target settings) -> specbuild.heads.mtp

`add_stage(folder, "eagle3" | "pard" | "mtp-target")` trains one stage into an existing zoo folder from its own
tokenizer and target (`pard`: and its draft; `mtp-target`: its tokenizer and the corpus); the other stages' files are
not touched; it rewrites the folder's README and manifest (`python -m specbuild.zoo add-stage`).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Callable

import torch

from specbuild.files import atomic
from specbuild.facts.cpu import has_native_bf16
from specbuild.errors import UserError
from specbuild.heads.eagle import EagleHeadModule, load_eagle_head, save_eagle_head
from specbuild.heads.eagle3 import draft_vocabulary, load_eagle3_head, new_eagle3_head, save_eagle3_head
from specbuild.heads.medusa import MedusaHeadsModule, load_medusa_heads, save_medusa_heads
from specbuild.zoo import corpus as corpus_mod
from specbuild.zoo import data, distill, distill_eagle3, distill_pard, manifest, precision as precision_mod
from specbuild.zoo import target as target_mod
from specbuild.zoo import mtp_target, teacher
from specbuild.zoo.quality import eagle3_quality, heldout_sequences, load_causal_lm, measure_quality, pard_quality
from specbuild.zoo.profiles import Profile, get_profile
from specbuild.zoo.tokenizer import save_tokenizer, train_tokenizer

# Bump BUILDER_VERSION when layouts, evaluation or the manifest change; bump a stage's version when the
# code that trains it changes (stage versions decide whether --resume-from may reuse a stage).
BUILDER_VERSION = 1
STAGE_VERSIONS = {"target": 1, "draft": 2, "medusa": 2, "eagle": 2, "eagle3": 1, "pard": 1, "mtp-target": 1}
MTP_STAGE = "mtp-target"  # a second target (DeepseekV3 with MTP layers), trained from the corpus like the target
_TARGET_SETTINGS = (
    "corpus_max_bytes",
    "vocab_size",
    "seq_len",
    "target",
    "target_train",
    "max_position_embeddings",
    "storage_dtype",
    "seed",
)
_TEACHER_SETTINGS = ("teacher_prompts", "teacher_prompt_len", "teacher_new_tokens", "teacher_corpus_blocks")
STAGE_SETTINGS = {
    "target": _TARGET_SETTINGS,
    "draft": _TARGET_SETTINGS + _TEACHER_SETTINGS + ("draft", "draft_train"),
    "medusa": _TARGET_SETTINGS + _TEACHER_SETTINGS + ("medusa_heads", "medusa_train"),
    "eagle": _TARGET_SETTINGS + _TEACHER_SETTINGS + ("eagle_train",),
    "eagle3": _TARGET_SETTINGS + _TEACHER_SETTINGS + ("eagle3",),
    "pard": _TARGET_SETTINGS + _TEACHER_SETTINGS + ("draft", "draft_train", "pard"),
    MTP_STAGE: ("corpus_max_bytes", "vocab_size", "seq_len", "max_position_embeddings", "storage_dtype", "seed")
    + ("eval_prompts", "eval_prompt_len", "eval_new_tokens", "eval_blocks", "mtp_target"),
}
HEAD_STAGES = ("draft", "medusa", "eagle", "eagle3", "pard")  # the stages trained from the target's teacher data
OPTIONAL_STAGES = ("eagle3", "pard")  # head stages trained when the profile has their settings
STAGES_FILE = "stages.json"  # progress record inside a partial folder; removed before the manifest

Progress = Callable[[str], None]


def _seeds(profile: Profile) -> dict:
    base = profile.seed
    return {
        "target_init": base,
        "target_data": base + 1,
        "teacher_prompts": base + 2,
        "draft_init": base + 3,
        "draft_data": base + 4,
        "medusa_init": base + 5,
        "medusa_data": base + 6,
        "eagle_init": base + 7,
        "eagle_data": base + 8,
        "eval_prompts": base + 9,
        "eagle3_init": base + 10,
        "eagle3_data": base + 11,
        "pard_data": base + 12,
        # (pard and mtp-target were added on two branches at once; each draws its own generator, so the shared value
        # is harmless, and changing either would no longer reproduce the committed checkpoints/tiny folder)
        "mtp_target_init": base + 12,
        "mtp_target_data": base + 13,
    }


def _round_to_storage(module: torch.nn.Module, dtype: torch.dtype) -> None:
    """Make the in-memory weights equal the stored ones, so teacher data and figures match the files."""
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(p.to(dtype).float())


def _portable_hf_config(folder: Path, dtype: str) -> None:
    """Add the transformers-4 spellings (`torch_dtype`, `rope_theta`) that older readers (TensorRT-LLM
    1.2 pins transformers 4.x) look for; transformers 5 reads either."""
    path = folder / "config.json"
    config = json.loads(path.read_text())
    config.setdefault("torch_dtype", dtype)
    rope = config.get("rope_parameters") or {}
    config.setdefault("rope_theta", float(rope.get("rope_theta", 10000.0)))
    config.setdefault("rope_scaling", None)
    path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def _save_causal_lm(model, tokenizer, folder: Path, dtype: torch.dtype) -> None:
    from transformers import GenerationConfig

    import copy

    stored = copy.deepcopy(model).to(dtype)  # .to() would also round buffers (rotary inv_freq) in place
    stored.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        do_sample=False,
    )
    stored.save_pretrained(str(folder))
    save_tokenizer(tokenizer, folder)
    _portable_hf_config(folder, str(dtype).removeprefix("torch."))


def _params(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def stage_key(profile_config: dict, stage: str, version: int | None = None) -> str:
    """What a stage's output depends on: its settings and its code version (default: the current one)."""
    import hashlib

    settings = {k: profile_config.get(k) for k in STAGE_SETTINGS[stage]}
    version = STAGE_VERSIONS[stage] if version is None else version
    blob = json.dumps({"settings": settings, "stage_version": version}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


class StageSource:
    """Completed stages of an earlier build (a finished folder or a partial one) that may be reused.

    Every stage is deterministic given its settings, so reusing one gives the files a fresh run would
    write on the same machine and versions; the manifest lists the reused stages and their source.
    """

    def __init__(self, folder: Path):
        self.folder = Path(folder)
        record = manifest.read(self.folder) or _read_stages(self.folder) or {}
        self.profile_config = record.get("profile_config") or {}
        self.builder_version = record.get("builder_version")
        if "models" in record:  # a finished folder: stats live in the manifest
            self.stats = {k: v["training"] for k, v in record["models"].items() if "training" in v}
        else:
            self.stats = record.get("stats", {})
        self.timings = record.get("timings_seconds", {})
        self.stage_keys = record.get("stage_keys", {})
        self.stage_versions = record.get("stage_versions") or {}  # absent: builds before versions (= 1)
        self.precision = precision_mod.of_record(record)
        self.stage_precision = record.get("stage_precision") or {}  # absent: every stage at `precision`

    def has(self, stage: str, profile: Profile, precision: str) -> bool:
        recorded_key = self.stage_keys.get(stage) or (
            stage_key(self.profile_config, stage, self.stage_versions.get(stage, 1)) if self.profile_config else None
        )
        trained_at = self.stage_precision.get(stage, self.precision)
        return (
            self.builder_version == BUILDER_VERSION
            and stage in self.stats
            and trained_at == precision
            and (self.folder / stage).is_dir()
            and recorded_key == stage_key(profile.as_dict(), stage)
        )


def _read_stages(folder: Path) -> dict | None:
    path = Path(folder) / STAGES_FILE
    return json.loads(path.read_text()) if path.is_file() else None


def build(
    profile: Profile,
    out: str | Path,
    progress: Progress | None = None,
    threads: int | None = None,
    resume_from: str | Path | None = None,
    precision: str = "auto",
) -> Path:
    """Build `profile` into `out` (replacing it). Returns the folder.

    `precision`: auto | bfloat16 | float32 (`specbuild.zoo.precision`; auto = bf16 only where the CPU has it natively).

    `resume_from`: an earlier build folder whose stages with identical settings and code versions are
    copied instead of retrained (e.g. after changing only the Medusa schedule). A failed or interrupted
    build removes its `.partial-*` folder; only a hard-killed one leaves it (with `stages.json`) to resume from.
    """
    precision = precision_mod.resolve(precision)
    out = Path(out).resolve()
    partial = out.parent / f".{out.name}.partial-{os.getpid()}"
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    source = StageSource(Path(resume_from)) if resume_from else None
    saved = (torch.get_num_threads(), torch.are_deterministic_algorithms_enabled())
    try:
        summary = _build_into(profile, partial, progress or (lambda _m: None), threads, precision, source)
        (partial / STAGES_FILE).unlink(missing_ok=True)
        manifest.write(partial, summary)
        atomic.replace_folder(partial, out)  # (not atomic_folder: a hard-killed partial is kept to resume from)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    finally:  # leave the caller's torch settings as they were (ensure_profile runs inside benchmarks)
        torch.set_num_threads(saved[0])
        torch.use_deterministic_algorithms(saved[1])
        torch.set_flush_denormal(False)
    return out


def _build_into(
    profile: Profile, root: Path, say: Progress, threads: int | None, precision: str, source: StageSource | None = None
) -> dict:

    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    started = time.perf_counter()
    threads = threads or min(2, os.cpu_count() or 1)
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(True)
    torch.set_flush_denormal(True)  # denormals make late training steps several times slower on x86
    seeds = _seeds(profile)
    storage = getattr(torch, profile.storage_dtype)
    timings: dict[str, float] = {}

    stats: dict[str, dict] = {}
    reused: list[str] = []
    stage_precision: dict[str, str] = {}

    def timed(label: str, t0: float) -> None:
        timings[label] = round(time.perf_counter() - t0, 1)
        if label in STAGE_VERSIONS:
            (root / STAGES_FILE).write_text(
                json.dumps(
                    {
                        "builder_version": BUILDER_VERSION,
                        "profile_config": profile.as_dict(),
                        "stats": stats,
                        "timings_seconds": timings,
                        "stage_versions": STAGE_VERSIONS,
                        "precision": precision,
                        "stage_precision": {k: stage_precision.get(k, precision) for k in stats},
                        "stage_keys": {k: stage_key(profile.as_dict(), k) for k in stats},
                    }
                )
            )

    def reuse(stage: str) -> bool:
        if source is None or not source.has(stage, profile, precision):
            return False
        shutil.copytree(source.folder / stage, root / stage)
        stats[stage] = source.stats[stage]
        stage_precision[stage] = source.stage_precision.get(stage, source.precision)
        timings[stage] = source.timings.get(stage, 0.0)
        reused.append(stage)
        say(f"{stage}: reused from {source.folder}")
        return True

    say(f"training precision: {precision_mod.DESCRIPTIONS[precision]} ({threads} threads)")
    # 1. corpus and tokenizer
    t0 = time.perf_counter()
    corpus = corpus_mod.load_corpus(profile.corpus_max_bytes)
    say(f"corpus: {corpus.files} files, {corpus.bytes / 1e6:.1f} MB, sha256 {corpus.sha256[:12]}")
    tokenizer = train_tokenizer(corpus.train, profile.vocab_size)
    save_tokenizer(tokenizer, root / "tokenizer")
    train_stream = data.encode_documents(tokenizer, corpus.train)
    heldout_stream = data.encode_documents(tokenizer, corpus.heldout)
    timed("corpus_and_tokenizer", t0)
    say(f"tokenizer: vocab {len(tokenizer)}; {train_stream.numel()} train / {heldout_stream.numel()} held-out tokens")

    # 2. target
    t0 = time.perf_counter()
    if reuse("target"):
        target = load_causal_lm(root / "target")
    else:
        target = target_mod.new_model(profile.target, profile, tokenizer, seeds["target_init"])
        target_blocks = data.blocks(train_stream, profile.seq_len + 1)
        stats["target"] = target_mod.train_target(
            target, target_blocks, profile, seeds["target_data"], say, precision=precision
        )
        _save_causal_lm(target, tokenizer, root / "target", storage)
        timed("target", t0)
        target = load_causal_lm(root / "target")  # downstream stages see exactly the shipped target
    stages = [s for s in HEAD_STAGES if s not in OPTIONAL_STAGES or getattr(profile, s) is not None]
    pending = [s for s in stages if not reuse(s)]

    # 3. teacher data: the target's greedy continuations + corpus rows, with its features
    if pending:
        teacher_data = _teacher_data(target, train_stream, profile, seeds, say, timings)

    # 4. draft model, distilled
    if "draft" in pending:
        t0 = time.perf_counter()
        draft = target_mod.new_model(profile.draft, profile, tokenizer, seeds["draft_init"])
        stats["draft"] = distill.train_draft(
            draft, teacher_data, profile.draft_train, seeds["draft_data"], say, precision=precision
        )
        _round_to_storage(draft, storage)
        _save_causal_lm(draft, tokenizer, root / "draft", storage)
        timed("draft", t0)
    else:
        draft = load_causal_lm(root / "draft")

    # 5. Medusa heads, self-distilled
    if "medusa" in pending:
        t0 = time.perf_counter()
        torch.manual_seed(seeds["medusa_init"])
        heads = MedusaHeadsModule(
            profile.target.hidden, profile.vocab_size, num_heads=profile.medusa_heads, num_layers=1
        )
        stats["medusa"] = distill.train_medusa(
            heads, teacher_data, profile.medusa_train, seeds["medusa_data"], say, precision=precision
        )
        _round_to_storage(heads, storage)
        save_medusa_heads(heads, root / "medusa", dtype=storage, base_model_name_or_path="../target")
        timed("medusa", t0)
    else:
        heads = load_medusa_heads(root / "medusa")

    # 6. EAGLE-1 head
    if "eagle" in pending:
        t0 = time.perf_counter()
        torch.manual_seed(seeds["eagle_init"])
        eagle = EagleHeadModule.for_target(target.config)
        distill.init_eagle_head(eagle, target)
        stats["eagle"] = distill.train_eagle(
            eagle, teacher_data, profile.eagle_train, seeds["eagle_data"], say, precision=precision
        )
        _round_to_storage(eagle, storage)
        save_eagle_head(eagle, root / "eagle", dtype=storage)
        timed("eagle", t0)
    else:
        eagle = load_eagle_head(root / "eagle", target)

    # 7. EAGLE-3 head
    if "eagle3" in pending:
        t0 = time.perf_counter()
        stats["eagle3"] = train_eagle3_stage(target, teacher_data, profile, seeds, root / "eagle3", precision, say)
        timed("eagle3", t0)

    # 8. PARD draft: the distilled draft, its vocabulary grown by a mask token, trained in parallel
    if "pard" in pending:
        t0 = time.perf_counter()
        rows = pard_rows(profile)
        subset = teacher.subset(teacher_data, rows)
        stats["pard"] = train_pard_stage(root / "draft", subset, profile, seeds, root / "pard", precision, say)
        timed("pard", t0)
    teacher_data = None

    # 9. the MTP target (its own model, from the corpus and tokenizer)
    if profile.mtp_target is not None and not reuse(MTP_STAGE):
        t0 = time.perf_counter()
        stats[MTP_STAGE] = mtp_target.train_stage(
            tokenizer, train_stream, profile, seeds, root / MTP_STAGE, precision, say, _save_causal_lm
        )
        timed(MTP_STAGE, t0)

    # 9. quality, measured on the stored weights and held-out prompts
    t0 = time.perf_counter()
    quality = measure_quality(root, profile, heldout_stream, seeds["eval_prompts"], say)
    timed("evaluation", t0)

    models = {
        "tokenizer": {
            "path": "tokenizer",
            "vocab_size": len(tokenizer),
            "type": "byte-level BPE",
            "special_tokens": {
                "unk": [tokenizer.unk_token, tokenizer.unk_token_id],
                "bos": [tokenizer.bos_token, tokenizer.bos_token_id],
                "eos": [tokenizer.eos_token, tokenizer.eos_token_id],
                "pad": [tokenizer.pad_token, tokenizer.pad_token_id],
            },
            "notes": "<s> is prepended by the tokenizer; </s> ends every training document; pad = eos",
        },
        "target": {
            "path": "target",
            "format": "hf LlamaForCausalLM",
            "params": _params(target),
            "shape": profile.target.as_dict(),
            "training": stats["target"],
        },
        "draft": {
            "path": "draft",
            "format": "hf LlamaForCausalLM",
            "params": _params(draft),
            "shape": profile.draft.as_dict(),
            "training": stats["draft"],
            "objective": "KL to the target's next-token distribution on target continuations + corpus",
        },
        "medusa": {
            "path": "medusa",
            "format": "Medusa heads (TensorRT-LLM --medusa_model_dir)",
            "params": _params(heads),
            "num_heads": profile.medusa_heads,
            "num_layers": 1,
            "training": stats["medusa"],
            "objective": "self-distillation: head k matches the target at t+1+k",
        },
        "eagle": {
            "path": "eagle",
            "format": "EAGLE-1 head (TensorRT-LLM --eagle_model_dir)",
            "params": _params(eagle),
            "trainable_params": _params(eagle) - eagle.embed_tokens.weight.numel(),
            "training": stats["eagle"],
            "objective": "SmoothL1 feature regression + 0.1 x soft CE through the target's lm_head",
        },
    }
    if "eagle3" in stats:
        models["eagle3"] = eagle3_model_entry(root / "eagle3", profile, stats["eagle3"])
    if "pard" in stats:
        models["pard"] = pard_model_entry(root / "pard", profile, stats["pard"])
    if MTP_STAGE in stats:
        models[MTP_STAGE] = mtp_target.model_entry(root / MTP_STAGE, profile, stats[MTP_STAGE])
    return {
        "profile": profile.name,
        "builder_version": BUILDER_VERSION,
        "profile_config": profile.as_dict(),
        "stage_versions": STAGE_VERSIONS,
        "stage_keys": {k: stage_key(profile.as_dict(), k) for k in STAGE_VERSIONS},
        "reused_stages": {"stages": reused, "from": str(source.folder)} if reused else None,
        "storage_dtype": profile.storage_dtype,
        "precision": precision,
        "training_precision": precision_mod.DESCRIPTIONS[precision],
        "stage_precision": {k: stage_precision.get(k, precision) for k in stats},
        "threads": threads,
        "deterministic_algorithms": True,
        "seeds": seeds,
        "versions": manifest.versions(),
        "corpus": corpus.summary(),
        "models": models,
        "quality": quality,
        "timings_seconds": timings,
        # a resumed build counts the reused stages' recorded times, so this is a from-scratch figure
        "build_seconds": round(time.perf_counter() - started + sum(timings[s] for s in reused), 1),
        "rebuild": f"PYTHONPATH=pipeline python -m specbuild.zoo build --profile {profile.name} --out <folder>",
    }


def _teacher_data(
    target,
    train_stream,
    profile: Profile,
    seeds: dict,
    say: Progress,
    timings: dict,
    counts: tuple[int, int] | None = None,
):
    """The target's teacher rows; `counts` = (continued rows, corpus rows) keeps only the first ones of each (the
    same rows the whole teacher data starts with: the prompts are drawn in full first)."""
    t0 = time.perf_counter()
    g = torch.Generator().manual_seed(seeds["teacher_prompts"])
    prompts = data.prompts(train_stream, profile.teacher_prompts, profile.teacher_prompt_len, g)
    length = profile.teacher_prompt_len + profile.teacher_new_tokens
    corpus_rows = data.prompts(train_stream, profile.teacher_corpus_blocks, length, g)
    if counts is not None:
        prompts, corpus_rows = prompts[: counts[0]], corpus_rows[: counts[1]]
    result = teacher.build_teacher_data(target, prompts, profile.teacher_new_tokens, corpus_rows)
    timings["teacher_data"] = round(time.perf_counter() - t0, 1)
    say(f"teacher data: {result.tokens.shape[0]} rows x {result.tokens.shape[1]} tokens ({timings['teacher_data']}s)")
    return result


def train_eagle3_stage(
    target, teacher_data, profile: Profile, seeds: dict, folder: Path, precision: str, say: Progress
) -> dict:
    """The EAGLE-3 stage: draft vocabulary from the teacher rows, training-time-test training on the captured target
    layers, weights rounded to the storage dtype and saved in TensorRT-LLM's layout at `folder`."""
    settings = profile.eagle3
    storage = getattr(torch, profile.storage_dtype)
    t0 = time.perf_counter()
    captured = teacher.layer_outputs(target, teacher_data.tokens, settings.layers)
    say(f"eagle3: captured layers {list(settings.layers)} of the teacher rows ({time.perf_counter() - t0:.0f}s)")
    torch.manual_seed(seeds["eagle3_init"])
    head = new_eagle3_head(target.config, layers=settings.layers, draft_vocab_size=settings.draft_vocab)
    counts = distill_eagle3.vocabulary_counts(teacher_data.tokens, target.config.vocab_size)
    head.set_vocabulary(*draft_vocabulary(counts, settings.draft_vocab))
    distill_eagle3.init_from_target(head, target)
    embed = target.get_input_embeddings().weight.detach().float()
    stats = distill_eagle3.train_eagle3(
        head,
        teacher_data,
        captured,
        embed,
        settings.train,
        settings.ttt_steps,
        seeds["eagle3_data"],
        say,
        precision=precision,
    )
    _round_to_storage(head, storage)
    save_eagle3_head(head, folder, dtype=storage)
    return stats


def pard_rows(profile: Profile) -> torch.Tensor:
    """The teacher rows the PARD stage trains on: the first continued rows, then the first corpus rows."""
    settings = profile.pard
    return torch.cat(
        [
            torch.arange(settings.teacher_prompts),
            profile.teacher_prompts + torch.arange(settings.teacher_corpus_blocks),
        ]
    )


def train_pard_stage(
    draft_folder: Path, teacher_data, profile: Profile, seeds: dict, folder: Path, precision: str, say: Progress
) -> dict:
    """The PARD stage: the stored draft with a mask token added, trained on the parallel layout, rounded to the
    storage dtype and saved as a Hugging Face folder whose config names the mask token (`pard_token`)."""
    from transformers import AutoTokenizer

    settings = profile.pard
    storage = getattr(torch, profile.storage_dtype)
    draft = load_causal_lm(draft_folder)
    mask_id = distill_pard.add_mask_token(draft)
    say(f"pard: mask token {mask_id}, depth {settings.depth}, {teacher_data.tokens.shape[0]} teacher rows")
    stats = distill_pard.train_pard(
        draft, teacher_data, settings.depth, settings.train, seeds["pard_data"], say, precision=precision
    )
    _round_to_storage(draft, storage)
    _save_causal_lm(draft, AutoTokenizer.from_pretrained(str(draft_folder)), folder, storage)
    return {**stats, "mask_token_id": mask_id, "teacher_rows": int(teacher_data.tokens.shape[0])}


def pard_model_entry(folder: Path, profile: Profile, stats: dict) -> dict:
    config = json.loads((folder / "config.json").read_text())
    return {
        "path": "pard",
        "format": "hf LlamaForCausalLM + pard_token (TensorRT-LLM speculative_config: decoding_type PARD, "
        "speculative_model)",
        "params": _params(load_causal_lm(folder)),
        "mask_token_id": config["pard_token"],
        "vocab_size": config["vocab_size"],
        "depth": profile.pard.depth,
        "training": stats,
        "objective": (
            f"from draft/: {profile.pard.depth} parallel copies of each teacher row (copy i: i mask tokens after "
            "a real prefix), soft CE to the target's next-token distribution at every copy "
            "(pipeline/specbuild/zoo/distill_pard.py)"
        ),
    }


def eagle3_model_entry(folder: Path, profile: Profile, stats: dict) -> dict:
    head = load_eagle3_head(folder)
    return {
        "path": "eagle3",
        "format": "EAGLE-3 head (TensorRT-LLM speculative_config: decoding_type Eagle3, speculative_model)",
        "params": _params(head),
        "layers_to_capture": list(profile.eagle3.layers),
        "draft_vocab_size": head.draft_vocab_size,
        "ttt_steps": profile.eagle3.ttt_steps,
        "training": stats,
        "objective": (
            f"training-time test over {profile.eagle3.ttt_steps} unrolled steps (step k reads its own "
            "step k-1 output), soft CE to the target's next-token distribution restricted to the draft "
            "vocabulary, weights 0.8^k"
        ),
    }


# ====================================================================== one stage into an existing folder
# stage -> (its profile setting, the folder's stages it is trained from besides the tokenizer: each must be built with
# today's settings, the prefix of its seeds)
ADDABLE = {
    "eagle3": ("eagle3", ("target",), "eagle3"),
    "pard": ("pard", ("target", "draft"), "pard"),
    MTP_STAGE: ("mtp_target", (), "mtp_target"),
}


def add_stage(
    folder: str | Path,
    stage: str = "eagle3",
    progress: Progress | None = None,
    threads: int | None = None,
    precision: str = "auto",
) -> Path:
    """Train `stage` into an existing, intact zoo folder from its own tokenizer and target (`eagle3`; `pard`: and its
    `draft/`) or its tokenizer and the corpus (`mtp-target`); every other stage's files stay byte for byte. The
    manifest records the stage's own precision (`stage_precision`), the command and the versions it ran with
    (`added_stages`); README.md is re-rendered. Only the stages of ADDABLE can be added this way."""
    from transformers import AutoTokenizer
    from transformers.utils import logging as hf_logging

    folder = Path(folder).resolve()
    say = progress or (lambda _m: None)
    if stage not in ADDABLE:
        raise UserError(
            f"add-stage: only {' or '.join(repr(a) for a in ADDABLE)} can be added to an existing zoo folder, not "
            f"{stage!r}; rebuild the folder for other stages"
        )
    setting, upstreams, seed_prefix = ADDABLE[stage]
    recorded = manifest.read(folder)
    if recorded is None:
        raise UserError(f"{folder}/manifest.json: missing or unreadable; add-stage needs a finished zoo folder")
    problems = [
        p
        for p in manifest.mismatches(folder, recorded)
        if not p.startswith((f"missing: {stage}/", f"changed: {stage}/", f"not in manifest: {stage}/"))
    ]
    if problems:
        raise UserError(
            f"{folder}: does not match its manifest ({'; '.join(problems[:3])}); verify or rebuild it first"
        )
    profile = get_profile(recorded["profile"])
    if getattr(profile, setting) is None:
        raise UserError(f"profile {profile.name!r} has no {setting} settings (specbuild/zoo/profiles.py)")
    for upstream in upstreams:
        if recorded.get("stage_keys", {}).get(upstream) != stage_key(profile.as_dict(), upstream):
            raise UserError(
                f"{folder}: its {upstream} was built with other settings than profile {profile.name!r} now "
                "has; rebuild the whole folder"
            )
    precision = precision_mod.resolve(precision)
    hf_logging.disable_progress_bar()
    started = time.perf_counter()
    threads = threads or min(2, os.cpu_count() or 1)
    saved = (torch.get_num_threads(), torch.are_deterministic_algorithms_enabled())
    partial = folder / f".{stage}.partial-{os.getpid()}"
    try:
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(True)
        torch.set_flush_denormal(True)
        corpus = corpus_mod.load_corpus(profile.corpus_max_bytes)
        if corpus.sha256 != recorded["corpus"]["sha256"]:
            raise UserError(
                f"{folder}: the corpus of this Python ({corpus.root}, sha256 {corpus.sha256[:12]}) is not "
                f"the one the folder was built from ({recorded['corpus']['sha256'][:12]}); the teacher "
                "data would differ: add the stage with the recorded Python version, or rebuild"
            )
        tokenizer = AutoTokenizer.from_pretrained(str(folder / "tokenizer"))
        train_stream = data.encode_documents(tokenizer, corpus.train)
        heldout_stream = data.encode_documents(tokenizer, corpus.heldout)
        seeds = _seeds(profile)
        say(
            f"{stage}: training at {precision_mod.DESCRIPTIONS[precision]} ({threads} threads) from "
            + (f"{folder / 'target'}" if upstreams else f"{folder / 'tokenizer'} and the corpus")
        )
        timings: dict[str, float] = {}
        shutil.rmtree(partial, ignore_errors=True)
        if stage == MTP_STAGE:  # its own model: no teacher data
            t0 = time.perf_counter()
            stats = mtp_target.train_stage(
                tokenizer, train_stream, profile, seeds, partial, precision, say, _save_causal_lm
            )
            stage_seconds = round(time.perf_counter() - t0, 1)
        else:
            target = load_causal_lm(folder / "target")
            counts = (profile.pard.teacher_prompts, profile.pard.teacher_corpus_blocks) if stage == "pard" else None
            teacher_data = _teacher_data(target, train_stream, profile, seeds, say, timings, counts)
            t0 = time.perf_counter()
            if stage == "pard":
                stats = train_pard_stage(folder / "draft", teacher_data, profile, seeds, partial, precision, say)
            else:
                stats = train_eagle3_stage(target, teacher_data, profile, seeds, partial, precision, say)
            stage_seconds = round(time.perf_counter() - t0, 1)
            teacher_data = None
        if (folder / stage).exists():
            shutil.rmtree(folder / stage)
        partial.rename(folder / stage)
        t0 = time.perf_counter()
        if stage == MTP_STAGE:
            quality = mtp_target.quality(folder / stage, profile, heldout_stream, seeds["eval_prompts"])
        else:
            sequences = heldout_sequences(target, profile, heldout_stream, seeds["eval_prompts"])
            measure = pard_quality if stage == "pard" else eagle3_quality
            quality = measure(folder, profile, target, sequences)
        say(
            f"{stage}: chain AL {quality['chain']['mean_acceptance_length']:.2f}, top-1 per step "
            f"{quality['top1_per_step']} ({time.perf_counter() - t0:.0f}s)"
        )
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    finally:
        torch.set_num_threads(saved[0])
        torch.use_deterministic_algorithms(saved[1])
        torch.set_flush_denormal(False)

    summary = {k: v for k, v in recorded.items() if k not in ("files", "total_bytes")}
    built_at = precision_mod.of_record(recorded)
    summary["profile_config"] = profile.as_dict()
    summary["stage_versions"] = {**recorded.get("stage_versions", {}), stage: STAGE_VERSIONS[stage]}
    summary["stage_keys"] = {**recorded.get("stage_keys", {}), stage: stage_key(profile.as_dict(), stage)}
    summary["stage_precision"] = {
        **{s: built_at for s in recorded["models"] if s != "tokenizer"},
        **recorded.get("stage_precision", {}),
        stage: precision,
    }
    summary["seeds"] = {**recorded["seeds"], **{k: v for k, v in seeds.items() if k.startswith(seed_prefix)}}
    if stage == MTP_STAGE:
        entry = mtp_target.model_entry(folder / stage, profile, stats)
    else:
        entry = (pard_model_entry if stage == "pard" else eagle3_model_entry)(folder / stage, profile, stats)
    summary["models"] = {**recorded["models"], stage: entry}
    summary["quality"] = {**recorded["quality"], stage: quality}
    summary["timings_seconds"] = {**recorded["timings_seconds"], stage: stage_seconds}
    added = [a for a in recorded.get("added_stages") or [] if a.get("stage") != stage]
    summary["added_stages"] = added + [
        {
            "stage": stage,
            "precision": precision,
            "training_precision": precision_mod.DESCRIPTIONS[precision],
            "threads": threads,
            "cpu_native_bf16": has_native_bf16(),
            "versions": manifest.versions(),
            "teacher_data_seconds": timings.get("teacher_data"),
            "stage_seconds": stage_seconds,
            "total_seconds": round(time.perf_counter() - started, 1),
            "command": f"PYTHONPATH=pipeline python -m specbuild.zoo add-stage {stage} --zoo <folder> --precision {precision}",
            "reused": (
                f"{' and '.join(['tokenizer/'] + [u + '/' for u in upstreams])} of this folder (unchanged); corpus "
                "sha256 checked against the manifest"
            ),
        }
    ]
    manifest.write(folder, summary)
    return folder


def main_progress(message: str) -> None:
    print(f"[zoo] {message}", file=sys.stderr, flush=True)
