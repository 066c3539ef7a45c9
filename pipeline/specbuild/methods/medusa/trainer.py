"""Medusa heads (`speculation.MedusaHeads`): the zoo's self-distillation objective (zoo/distill.py `medusa_loss`:
head k against the target's distribution k + 1 tokens ahead, weighted 0.8^k), trained from the current heads (every
head the weights hold, so the file keeps its shape); saved by specbuild.heads.medusa in the layout TensorRT-LLM's
--medusa_model_dir reads (config.json + medusa_lm_head.safetensors)."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from specbuild.adapt.heads.base import LossFn, stored_dtype
from specbuild.adapt.rows import Rows
from specbuild.heads.medusa import _read_medusa_tensors, load_medusa_heads, save_medusa_heads
from specbuild.speculation import Speculation
from specbuild.zoo import distill, evaluate


class MedusaTrainer:
    kind = "Medusa heads"
    layout = "TensorRT-LLM --medusa_model_dir: config.json + medusa_lm_head.safetensors (specbuild.heads.medusa)"
    learning_rate = 1e-3
    batch_size = 8

    def captured_layers(self, spec: Speculation, target) -> tuple[int, ...] | None:
        return None

    def load(self, spec: Speculation, target) -> torch.nn.Module:
        return load_medusa_heads(spec.params.path, dtype=torch.float32, target_model=target)

    def prepare(self, module, rows: Rows, target, seed: int) -> dict | None:
        return None

    def loss(self, module, rows: Rows, target, seed: int, precision: str) -> LossFn:
        return lambda batch: distill.medusa_loss(module, rows.data, batch, precision)

    def depth(self, spec: Speculation) -> int:
        return spec.params.num_heads

    def replay(self, module, rows: Rows, index: int, target, depth: int) -> tuple[int, int]:
        tokens, features, _ = rows.one(index)
        tally, _ = evaluate.medusa_run(module, features, tokens, rows.prompt_lens[index])
        return tally.accepted, tally.steps

    def save(self, module, folder: Path, old: Path) -> None:
        config = json.loads((Path(old) / "config.json").read_text())
        dtype = stored_dtype(_read_medusa_tensors(Path(old)))
        save_medusa_heads(module, folder, dtype=dtype, base_model_name_or_path=config.get("base_model_name_or_path"))


TRAINER = MedusaTrainer()
