"""Build a zoo profile from nothing but this machine: corpus -> tokenizer -> target -> draft/heads -> eval.

Output folder (written to `.<name>.partial-<pid>` beside it, renamed into place when complete):

    manifest.json   sizes, sha256, training times, params, corpus hash, seeds, versions, quality
    README.md       what the folder holds, how it was built, its quality figures
    tokenizer/      tokenizer.json + tokenizer_config.json  (AutoTokenizer)
    target/         LlamaForCausalLM (config.json, generation_config.json, model.safetensors, tokenizer)
    draft/          LlamaForCausalLM distilled from the target (same files)
    medusa/         Medusa heads (config.json, medusa_lm_head.safetensors)   -> specbuild.heads.medusa
    eagle/          EAGLE-1 head (config.json, pytorch_model.bin)              -> specbuild.heads.eagle
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

from specbuild.zoo import corpus as corpus_mod
from specbuild.zoo import data, distill, evaluate, manifest, target as target_mod, teacher
from specbuild.zoo.profiles import Profile
from specbuild.zoo.tokenizer import save_tokenizer, train_tokenizer

# Bump when anything that changes the built files changes (training code, layouts, defaults).
BUILDER_VERSION = 1

Progress = Callable[[str], None]


def _seeds(profile: Profile) -> dict:
    base = profile.seed
    return {"target_init": base, "target_data": base + 1, "teacher_prompts": base + 2, "draft_init": base + 3,
            "draft_data": base + 4, "medusa_init": base + 5, "medusa_data": base + 6, "eagle_init": base + 7,
            "eagle_data": base + 8, "eval_prompts": base + 9}


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

    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id, do_sample=False)
    model.to(dtype).save_pretrained(str(folder))
    model.float()
    save_tokenizer(tokenizer, folder)
    _portable_hf_config(folder, str(dtype).removeprefix("torch."))


def _params(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def build(profile: Profile, out: str | Path, progress: Progress | None = None, threads: int | None = None) -> Path:
    """Build `profile` into `out` (replacing it). Returns the folder."""
    out = Path(out).resolve()
    partial = out.parent / f".{out.name}.partial-{os.getpid()}"
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    try:
        summary = _build_into(profile, partial, progress or (lambda _m: None), threads)
        manifest.write(partial, summary)
        if out.exists():
            shutil.rmtree(out)
        partial.rename(out)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    return out


def _build_into(profile: Profile, root: Path, say: Progress, threads: int | None) -> dict:
    from specbuild.heads.eagle import EagleHead, save_eagle_head
    from specbuild.heads.medusa import MedusaHeads, save_medusa_heads

    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    started = time.perf_counter()
    threads = threads or min(2, os.cpu_count() or 1)
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(True)
    seeds = _seeds(profile)
    storage = getattr(torch, profile.storage_dtype)
    timings: dict[str, float] = {}

    def timed(label: str, t0: float) -> None:
        timings[label] = round(time.perf_counter() - t0, 1)

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
    target = target_mod.new_model(profile.target, profile, tokenizer, seeds["target_init"])
    target_blocks = data.blocks(train_stream, profile.seq_len + 1)
    target_stats = target_mod.train_target(target, target_blocks, profile, seeds["target_data"], say)
    _round_to_storage(target, storage)
    _save_causal_lm(target, tokenizer, root / "target", storage)
    timed("target", t0)

    # 3. teacher data: the target's greedy continuations + corpus rows, with its features
    t0 = time.perf_counter()
    g = torch.Generator().manual_seed(seeds["teacher_prompts"])
    prompts = data.prompts(train_stream, profile.teacher_prompts, profile.teacher_prompt_len, g)
    length = profile.teacher_prompt_len + profile.teacher_new_tokens
    corpus_rows = data.prompts(train_stream, profile.teacher_corpus_blocks, length, g)
    teacher_data = teacher.build_teacher_data(target, prompts, profile.teacher_new_tokens, corpus_rows)
    timed("teacher_data", t0)
    say(f"teacher data: {teacher_data.tokens.shape[0]} rows x {teacher_data.tokens.shape[1]} tokens "
        f"({timings['teacher_data']}s)")

    # 4. draft model, distilled
    t0 = time.perf_counter()
    draft = target_mod.new_model(profile.draft, profile, tokenizer, seeds["draft_init"])
    draft_stats = distill.train_draft(draft, teacher_data, profile.draft_train, seeds["draft_data"], say)
    _round_to_storage(draft, storage)
    _save_causal_lm(draft, tokenizer, root / "draft", storage)
    timed("draft", t0)

    # 5. Medusa heads, self-distilled
    t0 = time.perf_counter()
    torch.manual_seed(seeds["medusa_init"])
    heads = MedusaHeads(profile.target.hidden, profile.vocab_size, num_heads=profile.medusa_heads, num_layers=1)
    medusa_stats = distill.train_medusa(heads, teacher_data, profile.medusa_train, seeds["medusa_data"], say)
    _round_to_storage(heads, storage)
    save_medusa_heads(heads, root / "medusa", dtype=storage, base_model_name_or_path="../target")
    timed("medusa", t0)

    # 6. EAGLE-1 head
    t0 = time.perf_counter()
    torch.manual_seed(seeds["eagle_init"])
    eagle = EagleHead.for_target(target.config)
    distill.init_eagle_head(eagle, target)
    eagle_stats = distill.train_eagle(eagle, teacher_data, profile.eagle_train, seeds["eagle_data"], say)
    _round_to_storage(eagle, storage)
    save_eagle_head(eagle, root / "eagle", dtype=storage)
    timed("eagle", t0)
    del teacher_data

    # 7. quality, measured on the stored weights and held-out prompts
    t0 = time.perf_counter()
    quality = measure_quality(root, profile, heldout_stream, seeds["eval_prompts"], say)
    timed("evaluation", t0)

    models = {
        "tokenizer": {"path": "tokenizer", "vocab_size": len(tokenizer), "type": "byte-level BPE",
                      "special_tokens": {"unk": [tokenizer.unk_token, tokenizer.unk_token_id],
                                         "bos": [tokenizer.bos_token, tokenizer.bos_token_id],
                                         "eos": [tokenizer.eos_token, tokenizer.eos_token_id],
                                         "pad": [tokenizer.pad_token, tokenizer.pad_token_id]},
                      "notes": "<s> is prepended by the tokenizer; </s> ends every training document; pad = eos"},
        "target": {"path": "target", "format": "hf LlamaForCausalLM", "params": _params(target),
                   "shape": profile.target.as_dict(), "training": target_stats},
        "draft": {"path": "draft", "format": "hf LlamaForCausalLM", "params": _params(draft),
                  "shape": profile.draft.as_dict(), "training": draft_stats,
                  "objective": "KL to the target's next-token distribution on target continuations + corpus"},
        "medusa": {"path": "medusa", "format": "Medusa heads (TensorRT-LLM --medusa_model_dir)",
                   "params": _params(heads), "num_heads": profile.medusa_heads, "num_layers": 1,
                   "training": medusa_stats, "objective": "self-distillation: head k matches the target at t+1+k"},
        "eagle": {"path": "eagle", "format": "EAGLE-1 head (TensorRT-LLM --eagle_model_dir)",
                  "params": _params(eagle), "trainable_params": _params(eagle) - eagle.embed_tokens.weight.numel(),
                  "training": eagle_stats,
                  "objective": "SmoothL1 feature regression + 0.1 x soft CE through the target's lm_head"},
    }
    return {
        "profile": profile.name,
        "builder_version": BUILDER_VERSION,
        "profile_config": profile.as_dict(),
        "storage_dtype": profile.storage_dtype,
        "training_precision": "bfloat16 autocast, float32 master weights (AdamW)",
        "threads": threads,
        "deterministic_algorithms": True,
        "seeds": seeds,
        "versions": manifest.versions(),
        "corpus": corpus.summary(),
        "models": models,
        "quality": quality,
        "timings_seconds": timings,
        "build_seconds": round(time.perf_counter() - started, 1),
        "rebuild": f"PYTHONPATH=pipeline python -m specbuild.zoo build --profile {profile.name} --out <folder>",
    }


def load_causal_lm(folder: Path):
    from transformers import LlamaForCausalLM

    model = LlamaForCausalLM.from_pretrained(str(folder), dtype=torch.float32)
    model.config._attn_implementation = "sdpa"
    return model.eval()


def measure_quality(root: Path, profile: Profile, heldout_stream: torch.Tensor, seed: int, say: Progress) -> dict:
    """Every figure from the stored files: validation loss, greedy acceptance of each drafter."""
    from specbuild.heads.eagle import load_eagle_head
    from specbuild.heads.medusa import load_medusa_heads

    target = load_causal_lm(root / "target")
    draft = load_causal_lm(root / "draft")
    medusa = load_medusa_heads(root / "medusa")
    eagle = load_eagle_head(root / "eagle", target)

    val_blocks = data.blocks(heldout_stream, profile.seq_len + 1, limit=profile.eval_blocks)
    val_loss = target_mod.validation_loss(target, val_blocks)
    g = torch.Generator().manual_seed(seed)
    prompts = data.prompts(heldout_stream, profile.eval_prompts, profile.eval_prompt_len, g)
    sequences = teacher.greedy_continue(target, prompts, profile.eval_new_tokens)
    features = teacher.final_features(target, sequences)
    lm_head = target.lm_head.weight.detach()
    p = profile.eval_prompt_len
    say(f"evaluating on {sequences.shape[0]} held-out prompts x {profile.eval_new_tokens} greedy tokens")

    draft_tally = evaluate.draft_model_run(draft, sequences, p, profile.draft_k)
    medusa_tally, medusa_top1 = evaluate.medusa_run(medusa, features, sequences, p)
    eagle_tally = evaluate.eagle_run(eagle, features, sequences, lm_head, p, profile.eagle_depth)
    quality = {
        "heldout": {"prompts": profile.eval_prompts, "prompt_tokens": p, "greedy_new_tokens": profile.eval_new_tokens,
                    "validation_blocks": int(val_blocks.shape[0]), "validation_block_tokens": profile.seq_len},
        "target": {"validation_loss_nats_per_token": round(val_loss, 4),
                   "validation_perplexity": round(float(torch.tensor(val_loss).exp()), 2)},
        "draft_model": {"k": profile.draft_k, **draft_tally.summary()},
        "medusa": {"top1_per_head": medusa_top1, "chain": medusa_tally.summary()},
        "eagle": {"depth": profile.eagle_depth, "top1_per_step": eagle_tally.summary()["per_step_top1"],
                  "chain": eagle_tally.summary()},
        "method": ("greedy chains (top-1 drafts, no trees) replayed against the target's greedy continuation; "
                   "mean_acceptance_length counts the bonus token; per-step top-1 is conditional on the "
                   "earlier steps matching (EAGLE: steps >= 2 read the head's own features)"),
    }
    say("quality: " + json.dumps({"val_loss": quality["target"]["validation_loss_nats_per_token"],
                                  "draft_acc": quality["draft_model"]["acceptance_rate"],
                                  "medusa_top1": medusa_top1, "eagle_top1": quality["eagle"]["top1_per_step"]}))
    return quality


def main_progress(message: str) -> None:
    print(f"[zoo] {message}", file=sys.stderr, flush=True)
