"""Training a head from its current weights on the teacher rows: the zoo's AdamW loop (zoo/train.py: linear warm-up,
cosine decay to 10%, gradient clipping at 1, the zoo's epoch-wise row order), with adapt's stopping rules through
its `after_step` hook:

- max_steps: the schedule's length (its cosine decays over it);
- early stopping: every `eval_every` steps the dev rows are replayed as greedy chains (zoo/evaluate.py, the
  head's own drafts from the step it drafts on) and their pooled AL measured; after `patience` measurements
  without a better one the run ends, and the best measured weights (step 0: the head as it came) are the result;
- max_minutes: the run ends at the first step past the budget (said in the result: another machine stops elsewhere).

The same code runs on a CPU or a CUDA device (`device`). On a CPU it is bitwise reproducible for the same rows,
seed, max_steps and thread count: deterministic algorithms, seeded row order and noise, no data-dependent threads;
a run stopped by max_minutes is reproducible only by giving the steps it ran as max_steps."""

from __future__ import annotations

import copy
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch

from specbuild.adapt.heads.base import HeadTrainer
from specbuild.adapt.rows import Rows
from specbuild.errors import UserError
from specbuild.facts.metrics import mean_acceptance_length
from specbuild.zoo import precision as precision_mod
from specbuild.zoo import train as zoo_train
from specbuild.zoo.profiles import Schedule

Progress = Callable[[str], None]
MAX_WARMUP = 20


@dataclass
class TrainingPlan:
    """What a training run may do (from the recipe's adapt section and the command line)."""

    max_steps: int
    max_minutes: float
    learning_rate: float
    batch_size: int
    eval_every: int
    patience: int
    depth: int  # drafts per step of the dev replay
    seed: int
    device: str = "cpu"
    precision: str = "auto"


@dataclass
class Trained:
    module: torch.nn.Module
    steps: int  # optimizer steps run
    best_step: int  # the step whose weights were kept (0: the head as it came)
    stopped_by: str  # max_steps | early_stopping | max_minutes | no_steps
    seconds: float
    device: str
    precision: str
    threads: int
    losses: list[float] = field(default_factory=list)  # training loss of every step
    dev: list[dict] = field(default_factory=list)  # {step, al, accepted, steps}
    prepared: dict | None = None  # what the head kind changed before training (EAGLE-3: its vocabulary)
    folder: Path | None = None  # the head as another trainer wrote it (trainer: modelopt), else None: save `module`
    details: dict | None = None  # what another trainer reports about itself (its versions, its own dev scores)

    def summary(self) -> dict:
        return {
            "steps": self.steps,
            "best_step": self.best_step,
            "stopped_by": self.stopped_by,
            "seconds": round(self.seconds, 1),
            "device": self.device,
            "precision": precision_mod.DESCRIPTIONS.get(self.precision, self.precision),
            "torch_threads": self.threads,
            "dev": self.dev,
            "final_loss": round(sum(self.losses[-10:]) / len(self.losses[-10:]), 4) if self.losses else None,
            **({"prepared": self.prepared} if self.prepared else {}),
            **({"external": self.details} if self.details else {}),
        }


def resolve_device(choice: str) -> str:
    """auto: cuda when torch sees a GPU, else cpu. UserError for a CUDA device torch does not see."""
    if choice == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if choice.startswith("cuda"):
        if not torch.cuda.is_available():
            raise UserError(
                f"adapt.device {choice}: torch sees no CUDA device on this machine (torch {torch.__version__}) — "
                "use device: auto or cpu, or run on the GPU machine"
            )
        index = int(choice.split(":")[1]) if ":" in choice else 0
        if index >= torch.cuda.device_count():
            raise UserError(
                f"adapt.device {choice}: this machine has {torch.cuda.device_count()} CUDA device(s) — use cuda:0.."
                f"{torch.cuda.device_count() - 1}"
            )
    return choice


def resolve_precision(device: str, choice: str = "auto") -> str:
    """bfloat16 autocast on CUDA and on CPUs with native bf16 (zoo/precision.py), float32 elsewhere."""
    if choice == "auto" and device.startswith("cuda"):
        return precision_mod.BFLOAT16
    return precision_mod.resolve(choice)


def dev_acceptance(trainer: HeadTrainer, module, rows: Rows, target, depth: int) -> dict:
    """Pooled AL of greedy chains over the dev rows' answers (bonus token included)."""
    was_training = module.training
    module.eval()
    accepted = steps = 0
    with torch.no_grad():
        for i in range(len(rows)):
            a, s = trainer.replay(module, rows, i, target, depth)
            accepted, steps = accepted + a, steps + s
    module.train(was_training)
    return {"al": round(mean_acceptance_length(accepted, steps), 4), "accepted": accepted, "steps": steps}


def train_head(
    trainer: HeadTrainer,
    module: torch.nn.Module,
    train_rows: Rows,
    dev_rows: Rows,
    target,
    plan: TrainingPlan,
    progress: Progress | None = None,
) -> Trained:
    say = progress or (lambda _m: None)
    saved = torch.are_deterministic_algorithms_enabled()
    device = torch.device(plan.device)
    started = time.monotonic()
    try:
        torch.use_deterministic_algorithms(True)
        torch.manual_seed(plan.seed)
        module.to(device)
        train_rows, dev_rows = train_rows.to(device), dev_rows.to(device)
        prepared = trainer.prepare(module, train_rows, target, plan.seed)
        first = dev_acceptance(trainer, module, dev_rows, target, plan.depth)
        dev = [{"step": 0, **first}]
        say(f"dev AL {first['al']:.3f} before training ({len(dev_rows)} rows)")
        best = {"al": first["al"], "step": 0, "state": copy.deepcopy(module.state_dict())}
        if plan.max_steps == 0:
            return Trained(
                module,
                0,
                0,
                "no_steps",
                time.monotonic() - started,
                str(device),
                plan.precision,
                torch.get_num_threads(),
                [],
                dev,
                prepared,
            )
        losses: list[float] = []
        stop = {"by": "max_steps", "waited": 0}
        deadline = started + plan.max_minutes * 60
        loss = trainer.loss(module, train_rows, target, plan.seed, plan.precision)
        population = len(train_rows)

        def loss_fn(step: int) -> torch.Tensor:
            return loss(zoo_train.batch_indices(step, plan.batch_size, population, plan.seed))

        def after_step(step: int, value: float) -> bool:
            done = step + 1
            losses.append(value)
            if not math.isfinite(value):
                raise UserError(
                    f"adapt: the training loss became {value} at step {done} — lower adapt.learning_rate "
                    f"(now {plan.learning_rate:g})"
                )
            if done % plan.eval_every == 0 or done == plan.max_steps:
                measured = dev_acceptance(trainer, module, dev_rows, target, plan.depth)
                dev.append({"step": done, **measured})
                say(f"step {done}/{plan.max_steps}: loss {value:.3f}, dev AL {measured['al']:.3f}")
                if measured["al"] > best["al"]:
                    best.update(al=measured["al"], step=done, state=copy.deepcopy(module.state_dict()))
                    stop["waited"] = 0
                else:
                    stop["waited"] += 1
                    if stop["waited"] >= plan.patience:
                        stop["by"] = "early_stopping"
                        return True
            if time.monotonic() > deadline and done < plan.max_steps:
                stop["by"] = "max_minutes"
                return True
            return False

        schedule = Schedule(
            steps=plan.max_steps,
            batch=plan.batch_size,
            lr=plan.learning_rate,
            warmup=min(MAX_WARMUP, max(1, plan.max_steps // 10)),
        )
        module.train()
        params = [p for p in module.parameters() if p.requires_grad]
        stats = zoo_train.run(params, loss_fn, schedule, None, "adapt", after_step)
        module.eval()
        if stop["by"] == "max_minutes" and dev[-1]["step"] != stats["steps"]:  # measure where it stopped
            measured = dev_acceptance(trainer, module, dev_rows, target, plan.depth)
            dev.append({"step": stats["steps"], **measured})
            if measured["al"] > best["al"]:
                best.update(al=measured["al"], step=stats["steps"], state=copy.deepcopy(module.state_dict()))
        module.load_state_dict(best["state"])
        return Trained(
            module,
            stats["steps"],
            best["step"],
            stop["by"],
            time.monotonic() - started,
            str(device),
            plan.precision,
            torch.get_num_threads(),
            losses,
            dev,
            prepared,
        )
    finally:
        torch.use_deterministic_algorithms(saved)
        module.to("cpu")
