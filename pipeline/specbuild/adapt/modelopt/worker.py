"""Model-Optimizer's EAGLE-3 training and export, run inside its own virtual environment (adapt/modelopt/environment.py):

    <modelopt venv>/bin/python worker.py REQUEST.json

A script, not a module of specbuild: it imports only the standard library, torch, safetensors, transformers and
modelopt (the environment's transformers is not specbuild's), and talks to specbuild through files and one JSON
object per line on stdout ({"event": "versions" | "step" | "dev" | "stopped" | "exported", ...}).

REQUEST.json (written by adapt/modelopt/trainer.py):
    target        the target's Hugging Face folder
    start         the EAGLE-3 head to start from, in specbuild's layout (config.json + model.safetensors, midlayer.*)
    train, dev    safetensors of teacher rows: tokens [N, T] int64, lengths [N], answer [N, T] (1: an answer token),
                  final [N, T, H] (the target's post-norm states), captured [N, T, n x H] (its captured layers)
    plan          max_steps, max_minutes, learning_rate, batch_size, eval_every, patience, seed, threads, ttt_steps
    export_dtype  the dtype the exported head is stored in (the old head's)
    out           the folder to export into; result.json is written beside it

What runs is Model-Optimizer 0.47.0's own code, as its examples run it (examples/speculative_decoding/main.py
@006937fb117859132a2b8e1549a614fd2e448fb9: load_vlm_or_llm, mtsp.convert(model, [("eagle", eagle_cfg)]);
scripts/export_hf_checkpoint.py@4ce7c470019459088574709b9e93e0297aee5a21: export_speculative_decoding(model,
export_dir=...), both in NVIDIA/Model-Optimizer, the renamed NVIDIA/TensorRT-Model-Optimizer), checked against the
sources pip installs for nvidia-modelopt 0.47.0:
- `load_vlm_or_llm(target, use_offline_training=True, dtype, device_map="cpu")` (modelopt/torch/speculative/utils.py):
  the target with num_hidden_layers=0 (embedding, final norm, lm_head), because the hidden states come from the
  teacher pass (offline training);
- `mtsp.convert(model, [("eagle", cfg)])` with an EagleConfig (modelopt/torch/speculative/config.py) whose
  eagle_architecture_config is the current head's (one llama decoder layer, use_aux_hidden_state, use_last_layernorm,
  the head's capture layers, draft vocabulary and lm_head), eagle_offline True, no torch.compile (a CPU), and
  eagle_export_rope_scaling {} (its default writes a yarn rope_scaling into the exported config, which the served
  head would then apply although it was never trained with it);
- the current head's weights loaded into model.eagle_module (midlayer.* are its layers.0.*; t2d is not a buffer of
  Model-Optimizer's module, TensorRT-LLM rebuilds nothing from it either);
- training through the converted model's forward (modelopt/torch/speculative/plugins/hf_eagle.py HFEagleModel.forward:
  base_model_outputs {base_model_hidden_states, aux_hidden_states}, loss_mask gating the prediction of token i + 1,
  eagle_ttt_steps training-time-test steps, eagle_loss_decay_factor), AdamW with warm-up and cosine decay and gradient
  clipping at 1 (what its examples get from transformers.Trainer), seeded; the dev rows scored every eval_every
  steps by the forward's own accuracy (train_acc of step 0 in eval mode: the draft's top-1 = the target's), the best
  weights kept (step 0: the head as it came), early stopping after `patience` scores without a better one;
- `export_speculative_decoding(model, export_dir=out)` (modelopt/torch/export/unified_export_hf.py, EagleExporter of
  modelopt/torch/export/plugins/hf_spec_export.py): config.json (LlamaForCausalLMEagle3, draft_vocab_size,
  eagle_config) and model.safetensors with layers.0.*, fc, norm, lm_head, d2t: the checkpoint TensorRT-LLM loads as
  speculative_config {decoding_type: Eagle3, speculative_model: out} (its Eagle3 loader renames layers.0.* to
  midlayer.*).
"""

from __future__ import annotations

import copy
import json
import math
import os
import sys
import time
from pathlib import Path

MAX_WARMUP = 20


def emit(event: str, **fields) -> None:
    print(json.dumps({"event": event, **fields}), flush=True)


def eagle_config(head: dict, ttt_steps: int) -> dict:
    """The EagleConfig for the current head (the architecture keys of modelopt's eagle3_default_config it changes)."""
    hidden, heads = int(head["hidden_size"]), int(head["num_attention_heads"])
    theta = float(head.get("rope_theta") or 10000.0)
    layers = [int(i) for i in (head.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids") or []]
    arch = {
        "num_hidden_layers": 1,
        "intermediate_size": int(head["intermediate_size"]),
        "num_attention_heads": heads,
        "num_key_value_heads": int(head.get("num_key_value_heads") or heads),
        "head_dim": hidden // heads,
        "rms_norm_eps": float(head["rms_norm_eps"]),
        "rope_theta": theta,
        "rope_scaling": {"rope_type": "default", "rope_theta": theta},
        "attention_bias": bool(head.get("attention_bias", False)),
        "mlp_bias": bool(head.get("mlp_bias", False)),
        "draft_vocab_size": int(head.get("draft_vocab_size") or head["vocab_size"]),
        "has_lm_head": True,  # the head's own lm_head (its draft vocabulary), not the target's
        "use_aux_hidden_state": True,
        "use_last_layernorm": True,
        "eagle_aux_hidden_state_layer_ids": layers,
        "torch_dtype": "float32",
    }
    return {
        "eagle_offline": True,
        "eagle_decoder_type": "llama",
        "eagle_ttt_steps": int(ttt_steps),
        "eagle_use_torch_compile": False,
        "eagle_export_rope_scaling": {},
        "eagle_freeze_base_model": True,
        "eagle_self_logit_distillation": True,
        "eagle_architecture_config": arch,
    }


def load_start_head(model, folder: Path) -> None:
    """The current head's weights into model.eagle_module (specbuild's midlayer.* are modelopt's layers.0.*)."""
    import torch
    from safetensors.torch import load_file

    state = load_file(str(folder / "model.safetensors"))
    mapped = {}
    for key, value in state.items():
        if key == "t2d":
            continue
        key = key.replace("midlayer.", "layers.0.", 1) if key.startswith("midlayer.") else key
        mapped[key] = value.to(torch.float32) if value.is_floating_point() else value
    missing, unexpected = model.eagle_module.load_state_dict(mapped, strict=False)
    if missing or unexpected:
        raise SystemExit(f"the head's tensors do not fit modelopt's module: missing {missing}, unexpected {unexpected}")


class OfflineRows:
    def __init__(self, path: Path):
        import torch
        from safetensors.torch import load_file

        t = load_file(str(path))
        self.tokens = t["tokens"]
        self.final, self.captured = t["final"], t["captured"]
        n, width = self.tokens.shape
        positions = torch.arange(width)[None, :]
        self.attention = positions < t["lengths"][:, None]
        # the prediction at position q is of token q + 1: counted when that token is an answer token
        loss = torch.zeros(n, width, dtype=torch.bool)
        loss[:, :-1] = t["answer"][:, 1:] > 0
        self.loss = loss

    def __len__(self) -> int:
        return int(self.tokens.shape[0])

    def batch(self, index, device):
        outputs = {
            "base_model_hidden_states": self.final[index].to(device),
            "aux_hidden_states": self.captured[index].to(device),
        }
        return {
            "input_ids": self.tokens[index].to(device),
            "attention_mask": self.attention[index].to(device),
            "loss_mask": self.loss[index].to(device),
            "base_model_outputs": outputs,
        }


def dev_score(model, rows: OfflineRows, batch_size: int, device) -> dict:
    """The dev rows' top-1 agreement with the target (the forward's train_acc in eval mode, pooled over the scored
    positions) and loss."""
    import torch

    model.eval()
    right = total = 0.0
    loss = 0.0
    with torch.no_grad():
        for start in range(0, len(rows), batch_size):
            index = torch.arange(start, min(start + batch_size, len(rows)))
            inputs = rows.batch(index, device)
            out = model(**inputs)
            scored = float(inputs["loss_mask"][:, 1:].sum())
            right += float(out.train_acc[0][0]) * scored
            total += scored
            loss += float(out.loss) * scored
    model.train()
    return {"accuracy": round(right / max(total, 1.0), 5), "loss": round(loss / max(total, 1.0), 5)}


def main(argv: list[str]) -> int:
    request = json.loads(Path(argv[1]).read_text())
    plan = request["plan"]
    import torch
    import transformers
    from importlib.metadata import version

    import modelopt.torch.speculative as mtsp
    from modelopt.torch.export import export_speculative_decoding
    from modelopt.torch.speculative.utils import load_vlm_or_llm

    emit(
        "versions",
        modelopt=version("nvidia-modelopt"),
        transformers=transformers.__version__,
        torch=torch.__version__,
    )
    torch.set_num_threads(int(plan["threads"]))
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(int(plan["seed"]))
    started = time.monotonic()
    start = Path(request["start"])
    head = json.loads((start / "config.json").read_text())
    model = load_vlm_or_llm(request["target"], use_offline_training=True, dtype=torch.float32, device_map="cpu")
    mtsp.convert(model, [("eagle", eagle_config(head, int(plan["ttt_steps"])))])
    load_start_head(model, start)
    device = torch.device(plan.get("device") or "cpu")
    model.to(device)
    train, dev = OfflineRows(Path(request["train"])), OfflineRows(Path(request["dev"]))
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=float(plan["learning_rate"]), weight_decay=0.0)
    steps, batch = int(plan["max_steps"]), int(plan["batch_size"])
    warmup = min(MAX_WARMUP, max(1, steps // 10))

    def rate(step: int) -> float:  # linear warm-up, then cosine decay to 10%
        if step < warmup:
            return (step + 1) / warmup
        progress = (step - warmup) / max(1, steps - warmup)
        return 0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * progress))

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, rate)
    order = torch.Generator().manual_seed(int(plan["seed"]))
    queue: list[int] = []
    first = dev_score(model, dev, batch, device)
    dev_log = [{"step": 0, **first}]
    emit("dev", step=0, **first)
    best = {"step": 0, "accuracy": first["accuracy"], "state": copy.deepcopy(model.eagle_module.state_dict())}
    losses: list[float] = []
    waited, stopped_by, done = 0, "max_steps" if steps else "no_steps", 0
    deadline = started + float(plan["max_minutes"]) * 60
    model.train()
    for step in range(steps):
        if len(queue) < batch:
            queue += torch.randperm(len(train), generator=order).tolist()
        index, queue = torch.tensor(queue[:batch]), queue[batch:]
        out = model(**train.batch(index, device))
        optimizer.zero_grad(set_to_none=True)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        scheduler.step()
        done = step + 1
        value = float(out.loss.detach())
        losses.append(value)
        emit("step", step=done, loss=round(value, 5))
        if not math.isfinite(value):
            stopped_by = "non_finite_loss"
            break
        if done % int(plan["eval_every"]) == 0 or done == steps:
            score = dev_score(model, dev, batch, device)
            dev_log.append({"step": done, **score})
            emit("dev", step=done, **score)
            if score["accuracy"] > best["accuracy"]:
                state = copy.deepcopy(model.eagle_module.state_dict())
                best = {"step": done, "accuracy": score["accuracy"], "state": state}
                waited = 0
            else:
                waited += 1
                if waited >= int(plan["patience"]):
                    stopped_by = "early_stopping"
                    break
        if time.monotonic() > deadline and done < steps:
            stopped_by = "max_minutes"
            break
    model.eagle_module.load_state_dict(best["state"])
    emit("stopped", steps=done, best_step=best["step"], stopped_by=stopped_by)
    out_dir = Path(request["out"])
    model.eval()
    model.to("cpu")
    model.eagle_module.to(getattr(torch, request["export_dtype"]))
    model.eagle_config.torch_dtype = request["export_dtype"]
    with torch.inference_mode():
        export_speculative_decoding(model, export_dir=out_dir)
    emit("exported", folder=str(out_dir))
    result = {
        "steps": done,
        "best_step": best["step"],
        "stopped_by": stopped_by,
        "seconds": round(time.monotonic() - started, 1),
        "losses": losses,
        "dev": dev_log,
        "versions": {"nvidia-modelopt": version("nvidia-modelopt"), "transformers": transformers.__version__},
        "eagle_config": eagle_config(head, int(plan["ttt_steps"])),
    }
    partial = out_dir.with_name("result.json.partial")
    partial.write_text(json.dumps(result) + "\n")
    os.replace(partial, out_dir.with_name("result.json"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
