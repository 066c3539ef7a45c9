"""Medusa heads (Cai et al., 2024) in the layout FasterDecoding/Medusa writes and TensorRT-LLM reads.

Each of the K heads reads the target's last hidden state (after the final RMSNorm, the same tensor the
target's `lm_head` reads) at position t and predicts the token at t + 1 + k (head k = 0 predicts one
token beyond the target's own next token):

    head_k(h) = W_k · ResBlock^L(h),   ResBlock(x) = x + SiLU(Linear(x))     (Linear has a bias, W_k has none)

On disk (a folder given to TensorRT-LLM as `--medusa_model_dir`):

    config.json                  {"medusa_num_heads": K, "medusa_num_layers": L, ...}  (K may be wrong: the
                                 weights count the heads: checkpoint_tensors.medusa_heads)
    medusa_lm_head.safetensors   "{h}.{l}.linear.weight" [H, H], "{h}.{l}.linear.bias" [H]  for l < L
                                 "{h}.{L}.weight" [V, H]                                     (the projection)

Sources: TensorRT-LLM `tensorrt_llm/models/medusa/weight.py::load_medusa_hf` (reads `medusa_lm_head.pt`,
else `medusa_lm_head.safetensors`; keys `{h}.{l}.linear.weight|bias` and `{h}.{num_medusa_layers}.weight`),
`examples/medusa/convert_checkpoint.py` (reads `medusa_num_heads` and `medusa_num_layers` from the
heads' config.json), `tensorrt_llm/models/medusa/model.py` (`MedusaLayer`: x + act(linear(x));
`MedusaHead.lm_head` without bias). FasterDecoding's `medusa_model.py` stores its heads as an
`nn.ModuleList` of `nn.Sequential(ResBlock * L, Linear(H, V, bias=False))`, hence the key names.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from specbuild.checkpoints.checkpoint_tensors import MEDUSA, medusa_heads
from specbuild.errors import UserError
from specbuild.heads._files import read_config, require_key, write_json

MEDUSA_WEIGHTS_FILE_PT, MEDUSA_WEIGHTS_FILE = MEDUSA.files  # the older name first, as TensorRT-LLM tries them


class ResBlock(nn.Module):
    """x + SiLU(Linear(x)); the Linear has a bias (FasterDecoding initialises its weight to zero)."""

    def __init__(self, hidden_size: int):
        super().__init__()
        self.linear = nn.Linear(hidden_size, hidden_size, bias=True)
        self.act = nn.SiLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.act(self.linear(x))


def _medusa_head(hidden_size: int, vocab_size: int, num_layers: int) -> nn.Sequential:
    blocks = [ResBlock(hidden_size) for _ in range(num_layers)]
    return nn.Sequential(*blocks, nn.Linear(hidden_size, vocab_size, bias=False))


class MedusaHeadsModule(nn.Module):
    """K Medusa heads. `forward(hidden_states[B, T, H]) -> logits[K, B, T, V]`.

    `hidden_states` is the target's final hidden state (after its final norm). Logits of head k at
    position t score the token at position t + 2 + k of the sequence (the target's own logits at t
    score t + 1).
    """

    def __init__(self, hidden_size: int, vocab_size: int, num_heads: int = 4, num_layers: int = 1):
        super().__init__()
        if num_heads < 1 or num_layers < 0:
            raise ValueError(f"need num_heads >= 1 and num_layers >= 0, got {num_heads}, {num_layers}")
        self.hidden_size = hidden_size
        self.vocab_size = vocab_size
        self.num_heads = num_heads
        self.num_layers = num_layers
        self.heads = nn.ModuleList(_medusa_head(hidden_size, vocab_size, num_layers) for _ in range(num_heads))

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return torch.stack([head(hidden_states) for head in self.heads], dim=0)

    @torch.no_grad()
    def init_from_lm_head(self, lm_head_weight: torch.Tensor) -> None:
        """Medusa's initialisation: ResBlocks start as the identity, projections as the target's lm_head."""
        for head in self.heads:
            for block in list(head)[:-1]:
                block.linear.weight.zero_()
                block.linear.bias.zero_()
            head[-1].weight.copy_(lm_head_weight)

    def checkpoint_state_dict(self) -> dict[str, torch.Tensor]:
        """Tensors under their on-disk names: `{h}.{l}.linear.weight|bias`, `{h}.{num_layers}.weight`."""
        return {name: t.detach().contiguous() for name, t in self.heads.state_dict().items()}


def medusa_config(heads: MedusaHeadsModule, dtype: torch.dtype, base_model_name_or_path: str | None) -> dict:
    """The heads' config.json. TensorRT-LLM reads `medusa_num_heads` and `medusa_num_layers`;
    FasterDecoding's MedusaConfig adds `base_model_name_or_path`; the rest documents the shapes."""
    return {
        "medusa_num_heads": heads.num_heads,
        "medusa_num_layers": heads.num_layers,
        "base_model_name_or_path": base_model_name_or_path,
        "hidden_size": heads.hidden_size,
        "vocab_size": heads.vocab_size,
        "hidden_act": "silu",
        "torch_dtype": str(dtype).removeprefix("torch."),
        "architectures": ["MedusaModel"],
    }


def save_medusa_heads(
    heads: MedusaHeadsModule,
    folder: str | Path,
    dtype: torch.dtype = torch.float16,
    base_model_name_or_path: str | None = None,
) -> Path:
    """Write `config.json` + `medusa_lm_head.safetensors` into `folder` (created if needed)."""
    from safetensors.torch import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.to(dtype) for k, v in heads.checkpoint_state_dict().items()}
    save_file(tensors, str(folder / MEDUSA_WEIGHTS_FILE), metadata={"format": "pt"})
    write_json(folder / "config.json", medusa_config(heads, dtype, base_model_name_or_path))
    return folder


def _read_medusa_tensors(folder: Path) -> dict[str, torch.Tensor]:
    pt, st = folder / MEDUSA_WEIGHTS_FILE_PT, folder / MEDUSA_WEIGHTS_FILE
    if pt.is_file():  # same preference order as TensorRT-LLM's load_medusa_hf
        return torch.load(pt, map_location="cpu", weights_only=True)
    if st.is_file():
        from safetensors.torch import load_file

        return load_file(str(st))
    raise UserError(
        f"{folder}: no {MEDUSA_WEIGHTS_FILE} (or {MEDUSA_WEIGHTS_FILE_PT}); "
        "a Medusa heads folder needs one of them next to config.json."
    )


def load_medusa_heads(
    folder: str | Path, dtype: torch.dtype = torch.float32, target_model=None, num_heads: int | None = None
) -> MedusaHeadsModule:
    """Load a Medusa heads folder (the layout above) into a `MedusaHeadsModule` of `dtype`, in eval mode: the first
    `num_heads` heads, or (None) every head the weights hold. When `target_model` (a transformers causal LM) is
    given, the heads' width and vocabulary are checked against it."""
    folder = Path(folder)
    config = read_config(folder, "Medusa heads")
    cfg_path = folder / "config.json"
    num_layers = int(require_key(config, "medusa_num_layers", cfg_path))
    tensors = _read_medusa_tensors(folder)
    held = medusa_heads(tensors)
    if num_heads is None:
        num_heads = held
    elif num_heads > held:
        raise UserError(
            f"{folder}: {num_heads} Medusa heads asked for but the weights hold {held} — ask for at most {held}."
        )
    proj_key = f"0.{num_layers}.weight"
    if proj_key not in tensors:
        raise UserError(
            f"{folder}: tensor '{proj_key}' missing; medusa_num_layers={num_layers} in "
            f"{cfg_path} does not match the weights (keys: {sorted(tensors)[:6]}...)."
        )
    vocab_size, hidden_size = tensors[proj_key].shape
    if target_model is not None:
        theirs = (target_model.config.vocab_size, target_model.config.hidden_size)
        if (vocab_size, hidden_size) != theirs:
            raise UserError(
                f"{folder}: the heads map {hidden_size}-wide hidden states onto {vocab_size} tokens "
                f"({proj_key}) but the target has hidden_size {theirs[1]} and vocab_size {theirs[0]}; "
                "use the Medusa heads trained for this target."
            )
    heads = MedusaHeadsModule(hidden_size, vocab_size, num_heads=num_heads, num_layers=num_layers)
    expected = set(heads.heads.state_dict())
    missing = sorted(expected - set(tensors))
    if missing:
        raise UserError(
            f"{folder}: tensors {missing[:4]} missing for {num_heads} heads of "
            f"medusa_num_layers={num_layers}; fix {cfg_path} or the weights file."
        )
    heads.heads.load_state_dict({k: tensors[k] for k in expected}, strict=True)
    return heads.to(dtype).eval()
