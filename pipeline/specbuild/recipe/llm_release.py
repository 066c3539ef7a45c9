"""Which TensorRT-LLM release line the llm-api flavour writes model.yaml for: taken from where the repository will run
(issue #40), never guessed. In this order:

1. `deploy.image.tag`: an NGC `<yy.mm>-trtllm-python-py3` tag ships a known TensorRT-LLM (specbuild/facts/ngc.py);
2. `deploy.image.trtllm_version`;
3. the TensorRT-LLM installed here, when the recipe runs on it (runtime tensorrt-llm: compile parses every model.yaml
   with it; `Recipe.with_installed_trtllm`, applied when the recipe is resolved);
4. `llm_api.release`;
5. else the newest stable release an NGC container ships (1.2 today), with a `check` note naming what 1.3 and later
   need.

A recipe that names two of these that disagree is refused, on every runtime (`findings`, run by the llm-api flavour's
checks; the installed release against a written one at compile, specbuild.trtllm.version.require_llmapi). A version
maps to its line by specbuild.facts.ngc.llmapi_line: 1.0-1.2 by major.minor; 1.3.0rc7 and every later version to the
1.3 line (newer than any source read: with a note); 1.3.0rc0-rc6 to none (refused with the reason). `check`, `plan`
and the report's provenance say which release was used and why (`ReleaseChoice.said`).
"""

from __future__ import annotations

from dataclasses import dataclass

from specbuild.facts.ngc import NGC_REPOSITORY, NGC_TRTLLM, TAG_SUFFIX, llmapi_line, release3, tag_for, trtllm_of_tag
from specbuild.findings import Finding

TAG, VERSION, INSTALLED, WRITTEN, DEFAULT = (
    "deploy.image.tag",
    "deploy.image.trtllm_version",
    "installed",
    "llm_api.release",
    "default",
)
NEWEST_STABLE = max((v for v in NGC_TRTLLM.values() if llmapi_line(v)[0] is not None), key=release3)
NEWEST_STABLE_LINE = "{}.{}".format(*release3(NEWEST_STABLE)[:2])
NEWER_LINES_NEED = (
    "TensorRT-LLM 1.3 and later read another model.yaml: Draft_Target (they refuse DraftTarget at model load), "
    "max_draft_len for MTP (num_nextn_predict_layers is deprecated), one-model EAGLE-3 only, and the methods only "
    'they have (suffix_automaton, pard) — set llm_api.release: "1.3", or deploy.image.tag / '
    "deploy.image.trtllm_version, when the repository will run on one"
)


@dataclass(frozen=True)
class ReleaseChoice:
    """The release line model.yaml is written for, where it was taken from, and why."""

    line: str  # "1.0" .. "1.3"
    source: str  # TAG | VERSION | INSTALLED | WRITTEN | DEFAULT
    version: str | None  # the TensorRT-LLM version it was taken from (None: a line only)
    why: str  # where it comes from, in a sentence
    note: str = ""  # what check adds (the default's 1.3 warning; a version newer than any source read)
    problem: Finding | None = None  # a named version no line fits: refused

    @property
    def said(self) -> str:
        """One line for check, plan and the report."""
        return f"{self.line} ({self.why})" + (f"; {self.note}" if self.note else "")


def _named(image, installed: str | None) -> list[tuple[str, str, tuple[str, ...], str]]:
    """(source, TensorRT-LLM version, the recipe field, how to say it) of each place that names one, in order."""
    named: list[tuple[str, str, tuple[str, ...], str]] = []
    shipped = trtllm_of_tag(image.tag) if image.tag and image.repository == NGC_REPOSITORY else None
    if shipped:
        named.append((TAG, shipped, ("deploy", "image", "tag"), f"deploy.image.tag {image.tag} ships TensorRT-LLM"))
    if image.trtllm_version:
        named.append(
            (VERSION, image.trtllm_version, ("deploy", "image", "trtllm_version"), "deploy.image.trtllm_version")
        )
    if installed:
        named.append((INSTALLED, installed, ("llm_api", "release"), "the TensorRT-LLM installed here is"))
    return [n for n in named if _parses(n[1])]  # (not a version: the deployment image's findings say so)


def _parses(version: str) -> bool:
    try:
        llmapi_line(version)
    except ValueError:
        return False
    return True


def choose(image, written: str | None, installed: str | None = None) -> ReleaseChoice:
    """The release line for `deploy.image` (`image`), the recipe's `llm_api.release` (`written`, None when not
    written) and the TensorRT-LLM installed where it runs (`installed`). A written release stays the line (a
    disagreement with the others is refused: `findings`)."""
    for source, version, where, said in _named(image, installed):
        line, note = llmapi_line(version)
        if line is None:
            problem = Finding(
                where,
                f"{note} — name a TensorRT-LLM of the 1.0, 1.1, 1.2 or 1.3 line (1.3.0rc7 or later)",
                also=(("llm_api", "release"),),
            )
            fallback = written or NEWEST_STABLE_LINE
            return ReleaseChoice(fallback, source, version, f"{said} {version}", problem=problem)
        if written is not None and written != line:  # refused (findings)
            return ReleaseChoice(written, WRITTEN, None, "written in the recipe")
        return ReleaseChoice(line, source, version, f"{said} {version}", note)
    if written is not None:
        return ReleaseChoice(written, WRITTEN, None, "written in the recipe")
    shipped_in = tag_for(NEWEST_STABLE)
    return ReleaseChoice(
        NEWEST_STABLE_LINE,
        DEFAULT,
        NEWEST_STABLE,
        f"nothing names where the repository will run (deploy.image, an installed TensorRT-LLM, llm_api.release): "
        f"the newest stable release, TensorRT-LLM {NEWEST_STABLE} ({shipped_in})",
        NEWER_LINES_NEED,
    )


def findings(image, written: str | None, chosen: ReleaseChoice) -> list[Finding]:
    """Why the places that name the release refuse the recipe (every runtime and bundle: the release decides what
    model.yaml says): a named TensorRT-LLM no line fits; deploy.image.tag and deploy.image.trtllm_version naming two
    versions; a written llm_api.release other than the line of the image. (The installed TensorRT-LLM against a
    written release: compile, specbuild.trtllm.version.require_llmapi.)"""
    if chosen.problem is not None:
        return [chosen.problem]
    named = [n for n in _named(image, None)]
    out: list[Finding] = []
    if len(named) == 2 and release3(named[0][1]) != release3(named[1][1]):
        out.append(
            Finding(
                ("deploy", "image", "tag"),
                f"{image.tag} ships TensorRT-LLM {named[0][1]} but deploy.image.trtllm_version is {named[1][1]} — "
                "name the version the image has, or leave deploy.image.trtllm_version out (the tag gives it)",
                also=(("deploy", "image", "trtllm_version"),),
            )
        )
        return out
    if written is None or not named:
        return out
    source, version, where, _ = named[0]
    line = llmapi_line(version)[0]
    if line == written:
        return out
    if source == TAG:
        tags = sorted(y + TAG_SUFFIX for y, v in NGC_TRTLLM.items() if llmapi_line(v)[0] == written)
        message = (
            f"{image.tag} ships TensorRT-LLM {version} but llm_api.release is {written} (model.yaml's spelling "
            f"differs between releases) — pick a {written} container ({', '.join(tags) or 'none yet'}) or set "
            f'llm_api.release: "{line}" (or leave it out: it follows the tag)'
        )
    else:
        message = (
            f"is {version} but llm_api.release is {written}: model.yaml is written in that release's spelling — "
            f'name a version of the {written} line or set llm_api.release: "{line}" (or leave it out: it follows '
            "this version)"
        )
    out.append(Finding(where, message, also=(("llm_api", "release"),)))
    return out


__all__ = [
    "DEFAULT",
    "INSTALLED",
    "NEWEST_STABLE",
    "NEWEST_STABLE_LINE",
    "ReleaseChoice",
    "TAG",
    "VERSION",
    "choose",
    "findings",
]
