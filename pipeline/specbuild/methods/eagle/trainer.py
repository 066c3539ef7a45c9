"""EAGLE-1/2 heads (`speculation.EagleHead`): the zoo's objective (zoo/distill.py `eagle_loss`: feature regression
plus soft cross-entropy through the target's lm_head, noise on the input features), trained from the current head;
saved by specbuild.heads.eagle in the layout TensorRT-LLM's --eagle_model_dir reads (config.json +
pytorch_model.bin, the frozen embedding copy included). EAGLE-2 is the same head drafting a dynamic tree."""

from __future__ import annotations

from pathlib import Path

import torch

from specbuild.adapt.heads.base import LossFn, stored_dtype
from specbuild.adapt.rows import Rows
from specbuild.heads.eagle import EAGLE_SAFETENSORS_FILE, EAGLE_WEIGHTS_FILE, load_eagle_head, save_eagle_head
from specbuild.speculation import Speculation
from specbuild.zoo import distill, evaluate


def old_tensors(folder: Path) -> dict:
    folder = Path(folder)
    if (folder / EAGLE_WEIGHTS_FILE).is_file():
        return torch.load(folder / EAGLE_WEIGHTS_FILE, map_location="cpu", weights_only=True)
    from safetensors.torch import load_file

    return load_file(str(folder / EAGLE_SAFETENSORS_FILE))


class EagleTrainer:
    kind = "EAGLE-1/2 head"
    layout = "TensorRT-LLM --eagle_model_dir: config.json + pytorch_model.bin (specbuild.heads.eagle)"
    learning_rate = 1e-3
    batch_size = 8

    def captured_layers(self, spec: Speculation, target) -> tuple[int, ...] | None:
        return None

    def load(self, spec: Speculation, target) -> torch.nn.Module:
        return load_eagle_head(spec.params.path, target, dtype=torch.float32)

    def prepare(self, module, rows: Rows, target, seed: int) -> dict | None:
        return None

    def loss(self, module, rows: Rows, target, seed: int, precision: str) -> LossFn:
        rms = distill.eagle_noise_scale(rows.data)
        noise = torch.Generator().manual_seed(seed + 7)  # as the zoo seeds it (zoo/distill.py train_eagle)
        return lambda batch: distill.eagle_loss(module, rows.data, batch, noise, rms, precision)

    def depth(self, spec: Speculation) -> int:
        return spec.params.num_eagle_layers

    def replay(self, module, rows: Rows, index: int, target, depth: int) -> tuple[int, int]:
        tokens, features, _ = rows.one(index)
        tally = evaluate.eagle_run(module, features, tokens, rows.data.lm_head, rows.prompt_lens[index], depth)
        return tally.accepted, tally.steps

    def save(self, module, folder: Path, old: Path) -> None:
        save_eagle_head(module, folder, dtype=stored_dtype(old_tensors(old)))


TRAINER = EagleTrainer()
