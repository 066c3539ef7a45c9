"""The suite's context: the deployments (with their request contract), prompts (as validation.prompt_format sends
them) and tokenizer (or why there is none) that checks and the request mix (validate/mix.py) run against.

    ctx = make_context(build, Endpoints("127.0.0.1:8000", "127.0.0.1:8001"))
    try: ...
    finally: close_context(ctx)
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Callable

from specbuild.speculation import NO_SPECULATION
from specbuild.validate.checks.base import Deployment, SuiteContext, SuiteOptions
from specbuild.validate.client import contract
from specbuild.recipe.prompts import ignored_note, load_prompts, prepare_prompts, prompt_source
from specbuild.checkpoints.client_tokenizer import ClientTokenizer, TokenizerUnavailable, load_tokenizer

if TYPE_CHECKING:
    from specbuild.recipe.schema import Recipe
    from specbuild.runtimes.build import Build
    from specbuild.validate.endpoints import Endpoints


def _tokenizer(recipe: Recipe, target: Deployment) -> tuple[ClientTokenizer | None, str | None]:
    """The target's tokenizer (the recipe's model.tokenizer / checkpoint folder, else the folder the server's
    preprocessing names, when it is on this machine), or None and why there is none."""
    try:
        return load_tokenizer(recipe.tokenizer_dir), None
    except TokenizerUnavailable as e:
        problem = str(e)
    try:
        value = (target.server.config("preprocessing").get("parameters") or {}).get("tokenizer_dir") or {}
        folder = value.get("string_value") if isinstance(value, dict) else None
    except Exception:  # noqa: BLE001 - no preprocessing model (llm-api), or its config unreadable
        folder = None
    if folder and Path(folder) != recipe.tokenizer_dir:
        try:
            return load_tokenizer(Path(folder)), None
        except TokenizerUnavailable as e:
            problem += f"; the server's preprocessing tokenizer_dir: {e}"
    return None, problem


def make_context(
    build: Build,
    target: Endpoints,
    baseline: Endpoints | None = None,
    options: SuiteOptions | None = None,
    progress: Callable[[str, int, int], None] | None = None,
) -> SuiteContext:
    """The suite's context (deployments, prompts, tokenizer) for running checks or the request mix
    (validate/mix.py) directly. UserError when a server does not answer. Close with `close_context`."""
    options = options or SuiteOptions()
    recipe, spec, runtime = build.recipe, build.spec, build.runtime
    prompts = load_prompts(recipe)
    if options.max_prompts:
        prompts = prompts[: options.max_prompts]
    timeout = recipe.validation.request_timeout_s
    speaks = contract(runtime.contract)
    dep_target = Deployment(
        "target", target, runtime.serving_model(spec), timeout, speculative=spec.speculative, contract=speaks
    )
    dep_base = (
        Deployment("baseline", baseline, runtime.serving_model(NO_SPECULATION), timeout, contract=speaks)
        if baseline is not None
        else None
    )
    try:
        for dep in filter(None, (dep_target, dep_base)):
            dep.server.reachable()
        tokenizer, problem = _tokenizer(recipe, dep_target)
        sent = prepare_prompts(recipe, prompts, tokenizer, problem)  # what `check` runs too
        return SuiteContext(
            recipe,
            spec,
            sent.prompts,
            dep_target,
            dep_base,
            tokenizer,
            options,
            progress or (lambda stage, done, total: None),
            tokenizer_problem=problem,
            prompt_format=sent.prompt_format,
            prompts_left_out=sent.left_out,
            prompt_tokens=sent.lengths,
            runtime=runtime,
            prompts_ignored=ignored_note(prompts, prompt_source(recipe)),
        )
    except BaseException:
        for dep in filter(None, (dep_target, dep_base)):
            dep.close()
        raise


def close_context(ctx: SuiteContext) -> None:
    for dep in ctx.deployments():
        dep.close()
