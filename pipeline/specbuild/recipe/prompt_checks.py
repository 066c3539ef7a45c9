"""What `check` knows about the prompt set before anything is served: the suite's own preparation
(`prompts.prepare_prompts`) run with the target's tokenizer, so that `check` refuses what the suite would refuse
(chat messages while the target has no chat template, chat messages sent raw, prompt_format chat without a
template, a conversation the template refuses, a set none of whose prompts fits the deployment) and notes what the
suite would leave out and list in its report (prompts longer than build.max_input_len, or past build.max_seq_len
with validation.max_tokens; the bundled set's chats without a template), each with its file:line, and the record
keys no format defines (ignored).

Where the tokenizer does not load here (`check` runs with the core dependencies alone), what needs no tokenizer is
still checked (whether its folder has a chat template: chat_template.jinja or tokenizer_config.json), and a note says
what was not."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

from specbuild.checkpoints.client_tokenizer import TokenizerUnavailable, chat_template_source, load_tokenizer
from specbuild.findings import Finding
from specbuild.recipe.prompts import (
    LeftOut,
    Prompt,
    PromptSetError,
    bundled_chats_unsendable,
    format_problem,
    ignored_note,
    no_template,
    prepare_prompts,
    prompt_source,
)

if TYPE_CHECKING:
    from specbuild.recipe.schema import Recipe

SHOWN = 5  # prompts named per note; the report lists every one


def _listed(out: list[LeftOut], where: dict[str, str]) -> str:
    named = "; ".join(f"{where.get(o.id) or o.id} ({o.id}: {o.why})" for o in out[:SHOWN])
    return named + (f"; and {len(out) - SHOWN} more" if len(out) > SHOWN else "")


def _left_out_notes(out: list[LeftOut], prompts: list[Prompt]) -> list[str]:
    where = {p.id: p.where for p in prompts}
    chats = [o for o in out if o.why.startswith("chat messages")]
    long = [o for o in out if o not in chats]
    notes = []
    if long:
        notes.append(
            f"validation.prompts: {len(long)} of {len(prompts)} prompts do not fit the deployment and will be left "
            f"out of validation (the report lists them): {_listed(long, where)} — shorten them, or raise "
            "build.max_input_len / build.max_seq_len to send them"
        )
    if chats:
        notes.append(
            f"validation.prompts: the bundled set's {len(chats)} chat prompts will be left out of validation (the "
            f"report lists them): {_listed(chats, where)} — set model.tokenizer to a folder with the target's chat "
            "template (and prompt_format auto or chat) to send them"
        )
    return notes


def prompt_set_findings(recipe: Recipe, prompts: list[Prompt]) -> Iterator[Finding]:
    """The findings (errors) of the loaded prompt set against the target's tokenizer, and its notes added to
    recipe.notes. Call it only when the tokenizer folder itself passed its checks."""
    note = ignored_note(prompts, prompt_source(recipe))
    if note:
        recipe.notes.append(note)
    folder = recipe.tokenizer_dir
    try:
        tokenizer, problem = load_tokenizer(folder), None
    except TokenizerUnavailable as e:
        tokenizer, problem = None, str(e)
    if tokenizer is None:  # what needs no tokenizer: is there a chat template at all
        template = chat_template_source(folder)
        requested = recipe.validation.prompt_format
        sendable = prompts
        if recipe.validation.prompts is None:
            sendable, left_out = bundled_chats_unsendable(prompts, _TemplateOnly(template), requested)
            recipe.notes.extend(_left_out_notes(left_out, prompts))
        refusal = format_problem(sendable, requested, template, no_template(folder))
        if refusal is not None:
            yield Finding(refusal.field, refusal.detail)
            return
        recipe.notes.append(
            "validation.prompts: the prompts' lengths against build.max_input_len / max_seq_len"
            + (" and their rendering by the chat template" if template else "")
            + f" were not checked here: {problem}"
        )
        return
    try:
        sent = prepare_prompts(recipe, prompts, tokenizer, problem)
    except PromptSetError as e:
        yield Finding(e.field, e.detail)
        return
    except Exception as e:  # noqa: BLE001 - the tokenizer library's own error on a prompt (an odd vocabulary)
        first = str(e).strip().splitlines()[0][:200] if str(e).strip() else ""
        recipe.notes.append(
            f"validation.prompts: not checked against the target's tokenizer ({tokenizer.describe()}): it fails on "
            f"the prompt set ({type(e).__name__}: {first})"
        )
        return
    recipe.notes.extend(_left_out_notes(sent.left_out, prompts))


class _TemplateOnly:
    """A tokenizer known only by whether its folder has a chat template (bundled_chats_unsendable asks no more)."""

    def __init__(self, template: str | None):
        self.chat_template = template
