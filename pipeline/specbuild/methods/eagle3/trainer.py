"""EAGLE-3 heads (`speculation.Eagle3Head`): the zoo's training-time-test objective (zoo/distill_eagle3.py
`eagle3_loss`, over the captured target layers), trained from the current head; saved by specbuild.heads.eagle3 in
the layout TensorRT-LLM's speculative_model reads (config.json + model.safetensors with d2t).

The draft vocabulary follows the traffic: target tokens the teacher answers use that the head's vocabulary lacks
take the places of vocabulary tokens the answers never use (the highest ids first: a byte-level BPE gives its later,
rarer merges the higher ids), the new tokens' lm_head rows starting as the target's own rows
(zoo/distill_eagle3.py `init_from_target`'s rule), d2t and t2d rewritten. A head whose vocabulary already covers
the answers keeps it as it is."""

from __future__ import annotations

from pathlib import Path

import torch

from specbuild.adapt.heads.base import LossFn, stored_dtype
from specbuild.adapt.rows import Rows
from specbuild.errors import UserError
from specbuild.heads.eagle3 import _read_weights, load_eagle3_head, save_eagle3_head, trtllm_default_layers
from specbuild.speculation import Speculation
from specbuild.zoo import distill_eagle3, evaluate

TTT_STEPS = 3  # EAGLE-3's training-time test unroll (SafeAILab/EAGLE eagle/traineagle3; the zoo's default)


@torch.no_grad()
def adapt_vocabulary(head, tokens: torch.Tensor, mask: torch.Tensor, target) -> dict:
    """Swap unused draft-vocabulary tokens for the answers' missing ones (module docstring). Returns what changed."""
    vocab = head.vocab_size
    real = tokens[:, 1:][mask[:, 1:] > 0].cpu()
    counts = torch.bincount(real, minlength=vocab)
    t2d = head.t2d.cpu()
    covered = float(counts[t2d].sum() / counts.sum().clamp(min=1))
    missing = sorted((int(t) for t in torch.nonzero((counts > 0) & ~t2d).flatten()), key=lambda t: (-int(counts[t]), t))
    unused = sorted((int(t) for t in torch.nonzero(t2d & (counts == 0)).flatten()), reverse=True)
    swap = min(len(missing), len(unused))
    summary = {"draft_vocab_size": head.draft_vocab_size, "coverage_before": round(covered, 4), "swapped": swap}
    if not swap:
        summary["coverage_after"] = summary["coverage_before"]
        return summary
    old_ids = head.draft_to_target.cpu().tolist()
    rows = dict(zip(old_ids, head.lm_head.weight.detach().cpu().clone()))
    for t in unused[:swap]:
        del rows[t]
    target_rows = target.get_output_embeddings().weight.detach().float().cpu()
    for t in missing[:swap]:
        rows[t] = target_rows[t].clone()
    ids = sorted(rows)
    device = head.lm_head.weight.device
    head.lm_head.weight.copy_(torch.stack([rows[t] for t in ids]).to(device))
    new_t2d = torch.zeros(vocab, dtype=torch.bool)
    new_t2d[ids] = True
    head.set_vocabulary((torch.tensor(ids) - torch.arange(len(ids))).to(device), new_t2d.to(device))
    summary["coverage_after"] = round(float(counts[new_t2d].sum() / counts.sum().clamp(min=1)), 4)
    return summary


class Eagle3Trainer:
    kind = "EAGLE-3 head"
    layout = (
        "TensorRT-LLM speculative_model (Eagle3): config.json + model.safetensors with d2t (specbuild.heads.eagle3)"
    )
    learning_rate = 1e-3
    batch_size = 8

    def captured_layers(self, spec: Speculation, target) -> tuple[int, ...] | None:
        """The layers the served head reads, as the reference runtime picks them (reference/decoder/methods/eagle3.py):
        the recipe's layers_to_capture, else the head's recorded ones, else TensorRT-LLM's default set."""
        if spec.params.layers_to_capture:
            return tuple(sorted(set(spec.params.layers_to_capture)))
        head = load_eagle3_head(spec.params.path, target)
        layers = head.layers or trtllm_default_layers(int(target.config.num_hidden_layers))
        if layers is None:
            raise UserError(
                f"{spec.params.path}: the EAGLE-3 head records no capture layers and the target's "
                f"{target.config.num_hidden_layers} layers have no TensorRT-LLM default — set "
                "speculation.layers_to_capture to the layers the head was trained on"
            )
        return tuple(sorted(set(layers)))

    def load(self, spec: Speculation, target) -> torch.nn.Module:
        return load_eagle3_head(spec.params.path, target, dtype=torch.float32)

    def prepare(self, module, rows: Rows, target, seed: int) -> dict | None:
        return {"vocabulary": adapt_vocabulary(module, rows.data.tokens, rows.data.mask, target)}

    def _embed(self, target, device) -> torch.Tensor:
        return target.get_input_embeddings().weight.detach().float().to(device)

    def loss(self, module, rows: Rows, target, seed: int, precision: str) -> LossFn:
        embed = self._embed(target, rows.data.tokens.device)
        return lambda batch: distill_eagle3.eagle3_loss(
            module, rows.data, rows.captured, embed, batch, TTT_STEPS, precision
        )

    def depth(self, spec: Speculation) -> int:
        return max(1, spec.max_draft_len)

    def replay(self, module, rows: Rows, index: int, target, depth: int) -> tuple[int, int]:
        tokens, _, captured = rows.one(index)
        embed = self._embed(target, tokens.device)
        tally = evaluate.eagle3_run(module, captured, tokens, embed, rows.prompt_lens[index], depth)
        return tally.accepted, tally.steps

    def save(self, module, folder: Path, old: Path) -> None:
        state, _ = _read_weights(Path(old))
        save_eagle3_head(module, folder, dtype=stored_dtype({k: v for k, v in state.items() if k not in ("d2t",)}))


TRAINER = Eagle3Trainer()
