"""adapt's side of `trainer: modelopt`: hand the teacher rows and the current EAGLE-3 head to Model-Optimizer's
training in its own environment (worker.py, a child process), and take back the head it exports.

    trained = train_with_modelopt(env, trainer, module, train, dev, target, target_dir, plan, base_head, work, log,
                                  shown_log, say)

1. The head's draft vocabulary follows the traffic first, as for specbuild's trainer (methods/eagle3/trainer.py
   `adapt_vocabulary`: Model-Optimizer keeps the d2t it is given), and the dev rows' AL of greedy chains is measured
   (step 0), with the loader and replay the served head runs through.
2. The head (float32, specbuild's layout) and the rows (tokens, answer mask, the target's final and captured states:
   the offline training data Model-Optimizer's forward takes) are written under `work`, with REQUEST.json.
3. worker.py runs in the environment, started with specbuild.processes.children.spawn (dies with specbuild); its
   JSON lines become progress, everything it prints goes to DIR/modelopt.log (kept whatever the verdict).
4. Its export (config.json + model.safetensors, layers.0.*) is read back by specbuild.heads.eagle3's loader, the
   one every runtime and `check` use, and the dev AL of the exported head is measured: the candidate the gate judges
   is that folder as Model-Optimizer wrote it.

A failure of the worker or an export the loader refuses is a UserError naming the log (adapt.json says why)."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import time
from pathlib import Path
from typing import Callable

import torch

from specbuild.adapt.heads.base import stored_dtype
from specbuild.adapt.modelopt.environment import ModelOptEnvironment
from specbuild.adapt.rows import Rows
from specbuild.adapt.train import TrainingPlan, Trained, dev_acceptance
from specbuild.errors import UserError
from specbuild.heads.eagle3 import _read_weights, load_eagle3_head, save_eagle3_head
from specbuild.processes import children

Progress = Callable[[str], None]
WORKER = Path(__file__).with_name("worker.py")
TTT_STEPS = 3  # eagle_ttt_steps: Model-Optimizer's default and the zoo's (methods/eagle3/trainer.py TTT_STEPS)
LOG = "modelopt.log"  # kept in adapt's DIR, whatever the verdict


def write_rows(rows: Rows, path: Path) -> None:
    """Teacher rows as worker.py reads them (safetensors: tokens, lengths, answer, final, captured)."""
    from safetensors.torch import save_file

    if rows.captured is None:
        raise UserError("adapt.trainer modelopt: the teacher rows hold no captured target layers (EAGLE-3 heads only)")
    d = rows.data
    save_file(
        {
            "tokens": d.tokens.cpu().contiguous(),
            "lengths": torch.tensor(rows.lengths, dtype=torch.long),
            "answer": d.mask.cpu().contiguous(),
            "final": d.features.cpu().float().contiguous(),
            "captured": rows.captured.cpu().float().contiguous(),
        },
        str(path),
    )


def run_worker(
    env: ModelOptEnvironment, request: Path, work: Path, log: Path, shown_log: Path, say: Progress, max_steps: int
) -> list[dict]:
    """Run worker.py on `request` (its output into `log`, named `shown_log` in messages: where it will be once the
    run's folder is in place); returns its JSON events. UserError when it fails."""
    argv = [str(env.python), str(WORKER), str(request)]
    events: list[dict] = []
    tail: list[str] = []
    with open(log, "w") as out:
        out.write(f"$ {shlex.join(argv)}\n")
        out.flush()
        tag = children.new_tag()
        proc = children.spawn(
            argv,
            tag=tag,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            bufsize=1,
            cwd=work,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                out.write(line)
                tail = (tail + [line.rstrip()])[-8:]
                if not line.startswith('{"event"'):
                    continue
                try:
                    event = json.loads(line)
                except ValueError:
                    continue
                events.append(event)
                kind = event["event"]
                if kind == "versions":
                    say(f"modelopt: nvidia-modelopt {event['modelopt']}, transformers {event['transformers']}")
                elif kind == "dev":
                    say(
                        f"modelopt: step {event['step']}/{max_steps}: dev top-1 agreement {event['accuracy']:.3f}, "
                        f"dev loss {event['loss']:.3f}"
                    )
                elif kind == "step" and event["step"] % 10 == 0:
                    say(f"modelopt: step {event['step']}/{max_steps}: loss {event['loss']:.3f}")
            code = proc.wait()
        except BaseException:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
            raise
        finally:
            children.stop_leftovers(tag)
    if code != 0:
        last = next((t for t in reversed(tail) if t.strip()), "no output")
        raise UserError(
            f"adapt.trainer modelopt: Model-Optimizer's training ended with exit {code} ({last[:300]}); its log: "
            f"{shown_log} — use trainer: specbuild, or fix the environment ({env.describe()})"
        )
    return events


def train_with_modelopt(
    env: ModelOptEnvironment,
    trainer,
    module: torch.nn.Module,
    train_rows: Rows,
    dev_rows: Rows,
    target,
    target_dir: Path,
    plan: TrainingPlan,
    base_head: Path,
    work: Path,
    log: Path,
    shown_log: Path,
    say: Progress,
) -> Trained:
    started = time.monotonic()
    work.mkdir(parents=True, exist_ok=True)
    module = module.float().cpu()
    if module.fc is None:
        raise UserError(
            f"adapt.trainer modelopt: {base_head} reads one target layer (no fc); Model-Optimizer's EAGLE-3 module "
            "always fuses its captured layers through fc (use_aux_hidden_state) — use trainer: specbuild"
        )
    prepared = trainer.prepare(module, train_rows, target, plan.seed)
    first = dev_acceptance(trainer, module, dev_rows, target, plan.depth)
    say(f"dev AL {first['al']:.3f} before training ({len(dev_rows)} rows)")
    if plan.max_steps == 0:  # nothing to train: Model-Optimizer is not started
        seconds = time.monotonic() - started
        threads = torch.get_num_threads()
        return Trained(module, 0, 0, "no_steps", seconds, plan.device, "float32", threads, [], [{"step": 0, **first}])
    save_eagle3_head(module, work / "start", dtype=torch.float32)
    write_rows(train_rows, work / "train.safetensors")
    write_rows(dev_rows, work / "dev.safetensors")
    state, _ = _read_weights(Path(base_head))
    export_dtype = stored_dtype({k: v for k, v in state.items() if k not in ("d2t", "t2d")})
    request = {
        "target": str(Path(target_dir).absolute()),
        "start": str(work / "start"),
        "train": str(work / "train.safetensors"),
        "dev": str(work / "dev.safetensors"),
        "plan": {
            "max_steps": plan.max_steps,
            "max_minutes": plan.max_minutes,
            "learning_rate": plan.learning_rate,
            "batch_size": plan.batch_size,
            "eval_every": plan.eval_every,
            "patience": plan.patience,
            "seed": plan.seed,
            "threads": torch.get_num_threads(),
            "ttt_steps": TTT_STEPS,
            "device": plan.device,
        },
        "export_dtype": str(export_dtype).removeprefix("torch."),
        "out": str(work / "export" / "head"),
    }
    (work / "request.json").write_text(json.dumps(request, indent=2) + "\n")
    say(f"training with Model-Optimizer ({env.describe()}), at most {plan.max_steps} steps")
    events = run_worker(env, work / "request.json", work, log, shown_log, say, plan.max_steps)
    result = json.loads((work / "export" / "result.json").read_text())
    exported = work / "export" / "head"
    try:
        new = load_eagle3_head(exported, target, dtype=torch.float32)
    except UserError as e:
        raise UserError(f"adapt.trainer modelopt: the head Model-Optimizer exported is refused by the loader: {e}")
    dev = [{"step": 0, **first}]
    if result["best_step"]:
        after = dev_acceptance(trainer, new, dev_rows, target, plan.depth)
        dev.append({"step": result["best_step"], **after})
        say(f"dev AL {after['al']:.3f} with the exported head (step {result['best_step']})")
    versions = next((e for e in events if e["event"] == "versions"), {})
    return Trained(
        new,
        result["steps"],
        result["best_step"],
        result["stopped_by"],
        time.monotonic() - started,
        plan.device,
        "float32",
        torch.get_num_threads(),
        result["losses"],
        dev,
        prepared,
        folder=exported,
        details={
            "trainer": f"nvidia-modelopt {versions.get('modelopt')} (transformers {versions.get('transformers')})",
            "environment": str(env.python.parent.parent),
            "dev_top1_agreement": result["dev"],
            "eagle_config": result["eagle_config"],
            "log": str(shown_log),
        },
    )
