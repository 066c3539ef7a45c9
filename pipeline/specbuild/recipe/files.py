"""Checks that read the files a recipe names. Each problem is located at the field that names the file."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Iterator

from specbuild.facts.bounds import max_seq_len_problem, position_limit
from specbuild.findings import Finding
from specbuild.errors import UserError
from specbuild.checkpoints.checkpoint_tensors import CAUSAL_LM
from specbuild.checkpoints.checkpoint_files import (
    config_problem,
    read_hf_config,
    tokenizer_problem,
    tokenizer_size,
    tokenizer_skipped,
)
from specbuild.recipe.prompt_checks import prompt_set_findings
from specbuild.recipe.prompts import PromptSetError
from specbuild.methods.weights import weights_findings
from specbuild.recipe.prompts import PROMPTS_FIELD, format_problem, load_prompt_file, load_prompts, no_template
from specbuild.checkpoints.client_tokenizer import chat_template_source
from specbuild.recipe.schema import DEFAULT_CATEGORY
from specbuild.methods.draft_target import DraftModel

if TYPE_CHECKING:
    from specbuild.recipe.schema import Recipe
    from specbuild.runtimes.build import Build
    from specbuild.speculation import Speculation

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")


def _folder_findings(recipe: Recipe, value: Path, path: tuple, what: str) -> Iterator[Finding]:
    checkpoint = recipe.checkpoint(
        value
    )  # a folder, or a model id resolved through the hub cache (specbuild.checkpoints.hub)
    if checkpoint.problem is not None:
        yield Finding(path, checkpoint.problem)
        return
    try:
        folder = checkpoint.path
        exists, is_dir = folder.exists(), folder.is_dir()
    except (OSError, RuntimeError) as e:  # a name too long, a symlink loop, a file in the middle of the path
        yield Finding(path, f"{value} cannot be used as a path ({getattr(e, 'strerror', None) or e}) — fix the path")
        return
    if not exists:
        yield Finding(
            path,
            f"{value} does not exist (resolved to {folder}) — fix the path; relative paths are "
            "relative to the recipe file",
        )
    elif not is_dir:
        yield Finding(path, f"{value} is a file, not a folder — point it at the {what} folder")


def file_findings(build: Build) -> Iterator[Finding]:
    """Everything checkable on disk. Stops early per field so one missing folder gives one message."""
    recipe = build.recipe
    missing: set[tuple] = set()
    named = [(recipe.model.checkpoint, ("model", "checkpoint"), "Hugging Face checkpoint")]
    if recipe.model.tokenizer is not None:
        named.append((recipe.model.tokenizer, ("model", "tokenizer"), "tokenizer"))
    spec_dir = getattr(recipe.speculation, "checkpoint", None)
    if spec_dir is not None:
        named.append((spec_dir, ("speculation", "checkpoint"), f"{recipe.speculation.method} checkpoint"))
    for value, path, what in named:
        found = list(_folder_findings(recipe, value, path, what))
        if found:
            missing.add(path)
        yield from found

    if ("model", "checkpoint") not in missing:
        cfg = read_hf_config(recipe.model_dir)
        if cfg is None:
            why = config_problem(recipe.model_dir) or "is not usable"
            yield Finding(
                ("model", "checkpoint"),
                f"{recipe.model.checkpoint}/config.json {why} — point "
                "model.checkpoint at a Hugging Face checkpoint folder (config.json + weights)",
            )
            missing.add(("model", "checkpoint"))
        elif found := list(
            weights_findings(recipe.model_dir, recipe.model.checkpoint, CAUSAL_LM, ("model", "checkpoint"))
        ):
            yield from found
            missing.add(("model", "checkpoint"))
        else:
            yield from _context_findings(build, cfg)
    tok_field = ("model", "tokenizer") if recipe.model.tokenizer is not None else ("model", "checkpoint")
    if tok_field not in missing and ("model", "checkpoint") not in missing:
        if not any((recipe.tokenizer_dir / f).exists() for f in TOKENIZER_FILES):
            yield Finding(
                tok_field,
                f"no tokenizer files ({', '.join(TOKENIZER_FILES)}) in {recipe.tokenizer_dir} — "
                "set model.tokenizer to the tokenizer folder",
            )
        elif (why := tokenizer_problem(recipe.tokenizer_dir)) is not None:
            yield Finding(tok_field, f"{recipe.tokenizer_dir}: {why} — give a working tokenizer (model.tokenizer)")
        else:
            size = tokenizer_size(recipe.tokenizer_dir)
            vocab = (read_hf_config(recipe.model_dir) or {}).get("vocab_size")
            if size is not None and isinstance(vocab, int) and size > vocab:
                yield Finding(
                    tok_field,
                    f"{recipe.tokenizer_dir}: the tokenizer has token ids up to {size - 1} but "
                    f"the model's vocab_size is {vocab} — it is another model's tokenizer; give this "
                    "model's own (model.tokenizer)",
                )
    yield from _prompt_findings(recipe)
    yield from _adapt_findings(recipe)
    if not missing:
        yield from build.method.file_checks(recipe)
        yield from build.runtime.file_checks(recipe, build.spec, build.options)
        recipe.notes.extend(_skipped(recipe, build.spec))


def _tokenizer_usable(recipe: Recipe) -> bool:
    """Whether the target's tokenizer folder is there and passes the checks above (the prompt set is read with it)."""
    checkpoint = recipe.checkpoint(recipe.model.tokenizer or recipe.model.checkpoint)
    if checkpoint.problem is not None:  # a model id not in the hub cache: reported above
        return False
    folder = checkpoint.path
    try:
        usable = folder.is_dir() and any((folder / f).exists() for f in TOKENIZER_FILES)
    except (OSError, RuntimeError):  # a name too long, a symlink loop: reported above
        return False
    return usable and tokenizer_problem(folder) is None


def _prompt_findings(recipe: Recipe) -> Iterator[Finding]:
    """A prompt set that does not load (a file unreadable, empty or malformed), each category of a per-category
    min_acceptance_length that the prompt set does not hold (its gate would never be judged), and with a usable
    tokenizer folder what the suite would refuse or leave out of the set (recipe/prompt_checks.py)."""
    value = recipe.validation.prompts
    if isinstance(value, list) and not value:
        return  # recipe/checks.py refuses an empty list
    try:
        prompts = load_prompts(recipe)
    except PromptSetError as e:
        yield Finding(e.field, e.detail)
        return
    except UserError as e:
        detail = str(e).removeprefix("validation.prompts: ")
        yield Finding(
            ("validation", "prompts"),
            detail + (" (or give an inline list of prompts)" if isinstance(value, Path) else ""),
        )
        return
    if _tokenizer_usable(recipe):
        yield from prompt_set_findings(recipe, prompts)
    gate = recipe.validation.min_acceptance_length
    if not isinstance(gate, dict):
        return
    held = sorted({p.category for p in prompts})
    source = (
        "the bundled prompt set" if value is None else "validation.prompts" if isinstance(value, list) else str(value)
    )
    for category in gate:
        if category != DEFAULT_CATEGORY and category not in held:
            yield Finding(
                ("validation", "min_acceptance_length", category),
                f"gates category {category!r}, which {source} does not hold (its categories: "
                f"{', '.join(held)}), so it would never be judged — name one of those, or add prompts "
                f"of {category!r}",
            )


def _adapt_findings(recipe: Recipe) -> Iterator[Finding]:
    """adapt.traffic that does not load, or that validation.prompt_format and the target's chat template cannot send
    (prompts.format_problem, the suite's rule), before anything runs."""
    if recipe.adapt is None or recipe.adapt.traffic is None:
        return
    try:
        prompts = load_prompt_file(recipe.resolve(recipe.adapt.traffic))
    except UserError as e:
        yield Finding(("adapt", "traffic"), f"{e} — point adapt.traffic at your traffic file")
        return
    template = chat_template_source(recipe.tokenizer_dir)
    problem = format_problem(prompts, recipe.validation.prompt_format, template, no_template(recipe.tokenizer_dir))
    if problem is not None and problem.field == PROMPTS_FIELD:  # a format no prompt can use: validation's finding
        yield Finding(("adapt", "traffic"), f"{recipe.adapt.traffic}: {problem.detail}")


def _skipped(recipe: Recipe, spec: Speculation) -> Iterator[str]:
    """What the file checks could not load on this machine (each folder once)."""
    folders = {recipe.tokenizer_dir}
    if isinstance(draft := spec.params, DraftModel):
        folders.add(draft.path)
    for folder in sorted(folders):
        if (why := tokenizer_skipped(folder)) is not None:
            yield f"{folder}: {why}"


def _context_findings(build: Build, cfg: dict) -> Iterator[Finding]:
    """The longest sequence the target engine holds is build.max_seq_len plus the draft tokens trtllm-build adds
    (the build's target role: + max_draft_len, + num_eagle_layers for EAGLE; tensorrt_llm/builder.py): it must
    fit the model's positions (its rotary table has max_position_embeddings rows). Without an engine (the llm-api
    flavour) the recipe's max_seq_len is the model's context."""
    recipe = build.recipe
    limit = position_limit(cfg)
    if limit is None:
        return
    asked = recipe.build.max_seq_len
    builds_engine = "target" in build.runtime.engine_roles(recipe, build.spec)  # the llm-api flavour builds none
    built = build.roles["target"].limits.max_seq_len if builds_engine else asked
    if built <= limit:
        return
    if built == asked:
        yield Finding(("build", "max_seq_len"), max_seq_len_problem(asked, limit))
        return
    room = limit - (built - asked)
    fix = (
        f"lower max_seq_len to at most {room}"
        if room > recipe.build.max_input_len
        else "lower max_seq_len and max_input_len, or draft fewer tokens"
    )
    yield Finding(
        ("build", "max_seq_len"),
        f"is {asked}, and the target engine adds its {built - asked} draft "
        f"token(s) to it (max_seq_len {built}, as trtllm-build builds it) but the model's "
        f"max_position_embeddings is {limit} — {fix}",
    )
