"""Draft models (`speculation.DraftModel`, draft-target): distillation to the target (zoo/distill.py `draft_loss`:
soft cross-entropy to the target's next-token distribution at every position of the teacher rows), trained from the
current draft; saved as the Hugging Face folder it came from (transformers' save_pretrained at the dtype of the old
weights, the old folder's tokenizer and generation files copied beside it), which every runtime loads as before."""

from __future__ import annotations

import copy
import shutil
from pathlib import Path

import torch

from specbuild.adapt.heads.base import LossFn
from specbuild.adapt.rows import Rows
from specbuild.speculation import Speculation
from specbuild.zoo import distill, evaluate

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".index.json")


class DraftModelTrainer:
    kind = "draft model"
    layout = "a Hugging Face causal-LM folder (config.json + model.safetensors, tokenizer files kept)"
    learning_rate = 3e-4
    batch_size = 8

    def captured_layers(self, spec: Speculation, target) -> tuple[int, ...] | None:
        return None

    def load(self, spec: Speculation, target) -> torch.nn.Module:
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(str(spec.params.path), dtype=torch.float32, local_files_only=True)
        model.config._attn_implementation = "sdpa"
        return model.eval()

    def prepare(self, module, rows: Rows, target, seed: int) -> dict | None:
        return None

    def loss(self, module, rows: Rows, target, seed: int, precision: str) -> LossFn:
        return lambda batch: distill.draft_loss(module, rows.data, batch, precision)

    def depth(self, spec: Speculation) -> int:
        return spec.params.num_draft_tokens

    def replay(self, module, rows: Rows, index: int, target, depth: int) -> tuple[int, int]:
        tokens, _, _ = rows.one(index)
        tally = evaluate.draft_model_run(module, tokens, rows.prompt_lens[index], depth)
        return tally.accepted, tally.steps

    def save(self, module, folder: Path, old: Path) -> None:
        from transformers import AutoConfig

        old = Path(old)
        dtype = getattr(AutoConfig.from_pretrained(str(old), local_files_only=True), "dtype", None) or torch.float16
        dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype
        stored = copy.deepcopy(module).to(dtype)
        stored.save_pretrained(str(folder), safe_serialization=True)
        for path in sorted(old.iterdir()):  # the tokenizer and generation files the folder carried
            if path.is_file() and not (folder / path.name).exists() and not path.name.endswith(WEIGHT_SUFFIXES):
                shutil.copy2(path, folder / path.name)


TRAINER = DraftModelTrainer()
