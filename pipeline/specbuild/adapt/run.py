"""One adapt run: traffic -> split -> teacher pass -> training from the current head -> the gate -> DIR.

    result = run_adapt(build, AdaptOptions(out=Path("adapt/demo"), traffic=Path("traffic.jsonl")), progress)

DIR (replaced whole by each run, built aside and swapped into place: nothing half-written, the old DIR kept when a
run is interrupted or the disk fills):

    adapt.json  report.json  report.md  junit.xml  training_curve.png  before_after.png  provenance.json
    head/          the new head in its upstream layout (only when shipped)
    recipe.yaml    the recipe with speculation.checkpoint = DIR/head (only when shipped)
    candidate/     the trained head the gate refused (only when not shipped, for inspection)

Unusable input (an unreadable or empty traffic file, a draft kind adapt cannot train, a bad setting) is a UserError
before anything is written. Once the traffic is read, DIR/adapt.json is always written: with the verdict, or with
`shipped: false` and the error that ended the run (which is then raised: exit 2 for a UserError)."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from pydantic import ValidationError

from specbuild import __version__
from specbuild.adapt import gate as gate_mod
from specbuild.adapt.heads import trainer_for
from specbuild.adapt.modelopt import check_modelopt
from specbuild.adapt.modelopt.environment import ModelOptEnvironment, ensure_environment
from specbuild.adapt.modelopt.trainer import LOG as MODELOPT_LOG
from specbuild.adapt.modelopt.trainer import train_with_modelopt
from specbuild.adapt.recipe_out import adapted_recipe_text
from specbuild.adapt.report import ADAPT_JSON, write_json, write_report
from specbuild.adapt.rows import pad_rows
from specbuild.adapt.runtimes import adapt_runtime
from specbuild.adapt.runtimes.base import with_head
from specbuild.adapt.sampling import teacher_sampling
from specbuild.adapt.split import split_traffic
from specbuild.adapt.teacher import teacher_pass
from specbuild.adapt.traffic import Traffic, read_traffic
from specbuild.adapt.train import TrainingPlan, resolve_device, resolve_precision, train_head
from specbuild.cache.provenance import checkpoints, make_manifest, read_manifest, write_manifest
from specbuild.cache.step_cache import code_identity, content_digest, reusable, step_key, step_record
from specbuild.cache.step_store import Store
from specbuild.errors import UserError
from specbuild.files.atomic import atomic_folder
from specbuild.recipe.adapt import AdaptSection
from specbuild.runtimes.build import Build

Progress = Callable[[str], None]
HEAD, CANDIDATE, RECIPE = "head", "candidate", "recipe.yaml"
WORK = ".work"  # engine folders and scratch of the run, removed before DIR is swapped into place
KEPT_ON_FAILURE = (MODELOPT_LOG,)  # what a failed run's DIR keeps beside adapt.json (the error names it)


class Clock:
    """Wall and CPU seconds per stage (CPU: this process's threads and the children it waited for, e.g.
    Model-Optimizer's worker), for the report's timings_s and cpu_s."""

    def __init__(self):
        self.wall: dict[str, float] = {}
        self.cpu: dict[str, float] = {}
        self._start = (0.0, 0.0)

    @staticmethod
    def _cpu() -> float:
        t = os.times()
        return t.user + t.system + t.children_user + t.children_system

    def start(self) -> None:
        self._start = (time.monotonic(), self._cpu())

    def stop(self, stage: str) -> None:
        self.wall[stage] = time.monotonic() - self._start[0]
        self.cpu[stage] = self._cpu() - self._start[1]


@dataclass
class AdaptOptions:
    out: Path
    traffic: Path | None = None  # default: adapt.traffic, else validation.prompts
    overrides: dict[str, Any] = field(default_factory=dict)  # adapt section fields set on the command line
    cache_dir: Path | None = None  # the build cache (specbuild.cache.step_store); None: its default place
    reuse: bool = True  # use the build cache for teacher outputs


@dataclass
class AdaptResult:
    out: Path
    shipped: bool
    reason: str
    head: Path  # the head to deploy: DIR/head when shipped, else the recipe's own
    recipe: Path | None  # DIR/recipe.yaml when shipped
    adapt: dict  # adapt.json
    reused: bool = False  # DIR was in place, made from the same inputs (nothing ran)


def settings_of(build: Build, overrides: dict[str, Any]) -> AdaptSection:
    """The recipe's adapt section (its defaults when it has none) with the command line's values over it."""
    base = build.recipe.adapt or AdaptSection()
    given = {k: v for k, v in overrides.items() if v is not None}
    try:
        return AdaptSection.model_validate({**base.model_dump(exclude_unset=True), **given})
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "adapt"
        raise UserError(
            f"adapt.{where}: {err['msg']} (the recipe's adapt section or its command-line option)"
        ) from None


def adapt_key(build: Build, settings: AdaptSection, traffic: Traffic, trainer_versions: dict | None = None) -> str:
    """What a run's DIR is made from: the recipe (but what only serves or deploys), its checkpoints' identities, the
    settings, the traffic as sent, the versions and specbuild's code (specbuild.cache.step_cache). A DIR whose
    provenance records this key and whose files are as written is reused (compile reruns nothing)."""
    data = build.recipe.model_dump(mode="json")
    for section in ("triton", "deploy"):
        data.pop(section, None)
    manifest = make_manifest(build.recipe, "adapt", Path())
    return step_key(
        "adapt",
        recipe=data,
        settings=settings.model_dump(mode="json"),
        traffic=traffic.digest,
        checkpoints=manifest["checkpoints"],
        versions=manifest["versions"],
        trainer=trainer_versions,
    )


def reused_result(out: Path) -> AdaptResult:
    adapt = json.loads((out / ADAPT_JSON).read_text())
    recipe = adapt.get("recipe")
    return AdaptResult(
        out, adapt["shipped"], adapt["reason"], Path(adapt["head"]), Path(recipe) if recipe else None, adapt, True
    )


def run_adapt(
    build: Build, options: AdaptOptions, progress: Progress | None = None, notice: Callable[[str], None] | None = None
) -> AdaptResult:
    say = progress or (lambda _m: None)
    recipe, spec = build.recipe, build.spec
    settings = settings_of(build, options.overrides)
    trainer = trainer_for(spec)  # a kind adapt cannot train: refused before anything runs
    modelopt: ModelOptEnvironment | None = None
    if settings.trainer == "modelopt":  # refused, or its environment made (once), before anything runs
        check_modelopt(spec)
        modelopt = ensure_environment(settings.modelopt_python, say)
    device = resolve_device(settings.device)
    max_tokens = settings.max_tokens or recipe.validation.max_tokens
    out = Path(options.out).absolute()
    timings = Clock()
    timings.start()
    say("reading the traffic")
    traffic = read_traffic(build, options.traffic, max_tokens)
    timings.stop("traffic")
    key = adapt_key(build, settings, traffic, modelopt.versions if modelopt is not None else None)
    if options.reuse and reusable(out, key):
        return reused_result(out)
    failure: BaseException | None = None
    with atomic_folder(out, notice) as tmp:
        try:
            result = _adapt(
                build, settings, trainer, modelopt, traffic, device, max_tokens, out, tmp, options, timings, say, notice
            )
            shutil.rmtree(tmp / WORK, ignore_errors=True)
            manifest = read_manifest(tmp)
            write_manifest(tmp, {**manifest, "step": step_record(key, tmp)})
        except Exception as e:  # noqa: BLE001 - adapt.json says how the run ended, then the error is raised
            if isinstance(e, OSError):  # a full disk, a folder that cannot be written: the user's to fix
                e = UserError(
                    f"adapt: cannot write under {out.parent}: {e.strerror or e}"
                    f"{f' ({e.filename})' if e.filename else ''} — check its free space and permissions"
                )
            failure = e
            for child in tmp.iterdir():
                if child.name in KEPT_ON_FAILURE:
                    continue
                shutil.rmtree(child) if child.is_dir() else child.unlink()
            base_head = getattr(spec.params, "path", None)
            adapt = {
                "format": 1,
                "shipped": False,
                "reason": f"not shipped: the run failed: {e}"
                if isinstance(e, UserError)
                else f"not shipped: internal error {type(e).__name__}: {e}",
                "head": str(Path(base_head).absolute()) if base_head else None,
                "categories": {},
                "overall": {},
            }
            write_json(tmp / ADAPT_JSON, adapt)
            result = AdaptResult(out, False, adapt["reason"], Path(adapt["head"] or "."), None, adapt)
        finally:
            shutil.rmtree(tmp / WORK, ignore_errors=True)
    if failure is not None:
        raise failure
    return result


def _adapt(
    build, settings, trainer, modelopt, traffic: Traffic, device, max_tokens, out, tmp, options, timings, say, notice
):
    recipe = build.recipe
    # acceptance is measured with full-length drafts: a draft_len_schedule only shortens them under load
    spec = dataclasses.replace(build.spec, draft_len_schedule=None)
    base_head = Path(spec.params.path)
    split = split_traffic(traffic.records, settings.seed, settings.held_out, settings.dev)
    counts = {name: len(split.part(name)) for name in ("train", "dev", "held_out")}
    say(
        f"traffic: {len(traffic.records)} records: {counts['train']} train, {counts['dev']} dev, "
        f"{counts['held_out']} held out"
    )
    runtime = adapt_runtime(build, tmp / WORK)
    try:
        target = runtime.target_model()
        layers = trainer.captured_layers(spec, target)
        # --- the teacher pass: every record answered with the current head (train/dev with hidden states)
        timings.start()
        ordered = split.train + split.dev + split.held_out
        with_states = [True] * (counts["train"] + counts["dev"]) + [False] * counts["held_out"]
        identity = {
            "target": checkpoints(recipe).get("model.checkpoint"),
            "head": content_digest(base_head) if base_head.is_dir() else str(base_head),
            "speculation": repr(spec),
            "runtime": runtime.description,
            "code": code_identity(),
        }
        store = Store(options.cache_dir) if options.reuse else None
        # on policy: train and dev prompts as their requests asked them; the held-out part greedy, as the gate judges
        asked = [
            teacher_sampling(r.sampling, r.digest, seed=settings.seed, max_tokens=max_tokens)
            if states
            else (None, max_tokens)
            for r, states in zip(ordered, with_states)
        ]
        sampled = sum(1 for s, _ in asked if s is not None)
        if sampled:
            say(f"teacher pass: {sampled} training prompts answered with their requests' sampling settings")
        teacher = teacher_pass(
            runtime,
            spec,
            ordered,
            with_states,
            max_tokens=max_tokens,
            end_id=traffic.end_id,
            pad_id=traffic.pad_id,
            layers=layers,
            identity=identity,
            store=store,
            recipe_name=recipe.name,
            sampling=[a[0] for a in asked],
            limits=[a[1] for a in asked],
            progress=say,
            notice=notice,
        )
        timings.stop("teacher_pass")
        n_train, n_dev = counts["train"], counts["dev"]
        old_held = teacher.decoded[n_train + n_dev :]
        # --- training from the current head
        timings.start()
        lm_head = target.get_output_embeddings().weight.detach().float()
        pad = traffic.pad_id if traffic.pad_id is not None else 0
        trained = None
        not_trained = None
        if n_train == 0 or n_dev == 0:
            not_trained = (
                f"the traffic leaves {n_train} train and {n_dev} dev records (adapt.held_out {settings.held_out}, "
                f"adapt.dev {settings.dev}): too little to train and stop on — give more traffic"
            )
        else:
            train_rows = pad_rows([r for r in teacher.rows[:n_train]], lm_head, pad)
            dev_rows = pad_rows([r for r in teacher.rows[n_train : n_train + n_dev]], lm_head, pad)
            plan = TrainingPlan(
                max_steps=settings.max_steps,
                max_minutes=settings.max_minutes,
                learning_rate=settings.learning_rate or trainer.learning_rate,
                batch_size=settings.batch_size or trainer.batch_size,
                eval_every=settings.eval_every,
                patience=settings.patience,
                depth=trainer.depth(spec),
                seed=settings.seed,
                device=device,
                precision=resolve_precision(device),
            )
            module = trainer.load(spec, target)
            say(
                f"training the {trainer.kind} from {base_head} ({n_train} rows, at most {plan.max_steps} steps, "
                f"{plan.max_minutes:g} min, on {device})"
            )
            if modelopt is not None:
                trained = train_with_modelopt(
                    modelopt,
                    trainer,
                    module,
                    train_rows,
                    dev_rows,
                    target,
                    recipe.model_dir,
                    plan,
                    base_head,
                    tmp / WORK / "modelopt",
                    tmp / MODELOPT_LOG,
                    out / MODELOPT_LOG,
                    say,
                )
            else:
                trained = train_head(trainer, module, train_rows, dev_rows, target, plan, say)
            if trained.steps == 0:
                not_trained = "adapt.max_steps is 0: no training step ran, so the candidate is the current head"
            elif trained.best_step == 0:
                not_trained = (
                    f"after {trained.steps} steps no weights measured better on the {n_dev} dev records than the "
                    f"current head's (dev AL {trained.dev[0]['al']:.3f}); the candidate is the current head"
                )
        timings.stop("training")
        # --- the gate
        timings.start()
        held = split.held_out
        new_held = old_held
        if not_trained is None:
            candidate = tmp / CANDIDATE
            if trained.folder is not None:  # another trainer's export, as it wrote it
                shutil.copytree(trained.folder, candidate)
            else:
                trainer.save(trained.module, candidate, base_head)
            say(f"gate: decoding the {len(held)} held-out records with the new head")
            new_held = runtime.decode(
                with_head(spec, candidate),
                [list(r.ids) for r in held],
                max_tokens,
                end_id=traffic.end_id,
                pad_id=traffic.pad_id,
            )
        verdict = gate_mod.judge(held, old_held, new_held, split.gated, settings.max_category_drop, not_trained)
        timings.stop("gate")
    finally:
        runtime.close()
    head = base_head.absolute()
    recipe_path = None
    if verdict.shipped:
        (tmp / CANDIDATE).rename(tmp / HEAD)
        head = out / HEAD
        (tmp / RECIPE).write_text(adapted_recipe_text(recipe, head))
        recipe_path = out / RECIPE
    adapt = {
        "format": 1,
        "shipped": verdict.shipped,
        "reason": verdict.reason,
        "head": str(head),
        "categories": verdict.categories,
        "overall": verdict.overall,
        "recipe": str(recipe_path) if recipe_path else None,
        "candidate": str(out / CANDIDATE) if (tmp / CANDIDATE).is_dir() else None,
        "traffic": {"source": traffic.source, "digest": traffic.digest, "records": len(traffic.records), **counts},
        "training": trained.summary() if trained is not None else None,
    }
    report = {
        "recipe": recipe.name,
        "adapt": adapt,
        "base_head": {"path": str(base_head.absolute()), "kind": trainer.kind, "layout": trainer.layout},
        "traffic": {
            "source": traffic.source,
            "digest": traffic.digest,
            "records": len(traffic.records),
            "duplicates": traffic.duplicates,
            "categories": traffic.categories(),
            "prompt_format": traffic.prompt_format.to_dict(),
            "left_out": [vars(x) for x in traffic.left_out],
        },
        "split": split.to_dict(),
        "settings": settings.model_dump(mode="json"),
        "lossless": verdict.lossless,
        "training": (
            {
                **trained.summary(),
                "losses": [round(v, 5) for v in trained.losses],
                "trainer": settings.trainer,
                "learning_rate": settings.learning_rate or trainer.learning_rate,
                "batch_size": settings.batch_size or trainer.batch_size,
                "seed": settings.seed,
                "train_rows": n_train,
                "dev_rows": n_dev,
            }
            if trained is not None
            else None
        ),
        "teacher": {
            "runtime": runtime.description,
            "decoding": (
                f"train and dev: {sampled} of {counts['train'] + counts['dev']} records with their requests' sampling "
                "settings (seeded), the others greedy; held out: greedy (as the gate judges)"
                if sampled
                else "greedy"
            ),
            "sampled_records": sampled,
            "max_tokens": max_tokens,
            "end_id": traffic.end_id,
            "captured_layers": list(layers) if layers else None,
            "chunks_from_cache": teacher.reused_chunks,
            "chunks_computed": teacher.computed_chunks,
        },
        "held_out": [
            {"id": r.id, "category": r.category, "old": o.to_dict(), "new": n.to_dict()}
            for r, o, n in zip(held, old_held, new_held)
        ],
        "timings_s": {k: round(v, 1) for k, v in timings.wall.items()},
        "cpu_s": {k: round(v, 1) for k, v in timings.cpu.items()},
    }
    write_report(tmp, report, notice)
    manifest = make_manifest(recipe, "adapt", out)
    manifest["adapt"] = {
        "traffic": {"source": traffic.source, "digest": traffic.digest, "records": len(traffic.records)},
        "base_head": {"path": str(base_head.absolute()), "content_sha256": identity["head"]},
        "teacher": report["teacher"],
        "training": {
            "trainer": f"specbuild adapt {__version__} ({settings.trainer}"
            + (f": {trained.details['trainer']})" if trained and trained.details else ")"),
            "code": identity["code"],
            "steps": trained.steps if trained else 0,
            "best_step": trained.best_step if trained else 0,
            "seed": settings.seed,
            "max_steps": settings.max_steps,
            "stopped_by": trained.stopped_by if trained else None,
        },
        "head": {"path": str(head), "content_sha256": content_digest(tmp / HEAD) if verdict.shipped else None},
        "shipped": verdict.shipped,
    }
    write_manifest(tmp, manifest)
    say(verdict.reason)
    return AdaptResult(out, verdict.shipped, verdict.reason, head, recipe_path, adapt)
