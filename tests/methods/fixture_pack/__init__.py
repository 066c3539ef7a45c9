"""A method that lives only in the tests, to show what a new method touches: this folder, nothing in the package.

`echo` drafts the tokens that followed the previous occurrence of the last token (a one-token lookup over the
prompt and the text so far: no weights), on the llm-api flavour, whose model.yaml spells it `Echo` from release 1.3
on; the reference runtime drafts it inside the target forward (decoder.py). The tests register it
(specbuild.methods.register) and run it through check, plan and the reference runtime (test_fixture_pack.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator, Literal

from specbuild.facts.bounds import PositiveInt32
from specbuild.findings import Finding
from specbuild.methods.llm_args import DecodingBaseConfig
from specbuild.methods.pack import MethodPack, Refusal, Rehearsed
from specbuild.section import Section
from specbuild.speculation import MethodParams, Speculation

MAX_DRAFT_LEN = 8  # the pack's own rule, checked on every runtime
RELEASES = ("1.3",)  # the releases whose LLM API would have it (a fixture's fact: it shows a refusal by release)


class EchoConfig(Section):
    """Draft what followed the last token before."""

    method: Literal["echo"]
    max_draft_len: PositiveInt32 = 3
    """Tokens copied after the previous occurrence of the last token."""


@dataclass(frozen=True)
class EchoDrafts(MethodParams):
    """How many tokens `echo` copies per step."""

    num_draft_tokens: int

    def full_length(self, spec: Speculation) -> int | None:
        return self.num_draft_tokens


class EchoDecodingConfig(DecodingBaseConfig):
    """model.yaml's speculative_config for `echo`, as the CPU rehearsal validates it."""

    decoding_type: Literal["Echo"]


class EchoPack(MethodPack):
    name = "echo"
    summary = "drafts what followed the last token's previous occurrence (a test fixture)"
    Config = EchoConfig
    Params = EchoDrafts
    decoding_types = ("Echo",)
    rehearsal_config = EchoDecodingConfig
    decoder = "decoder:EchoDecoder"

    def describe(self, recipe) -> Speculation:
        k = recipe.speculation.max_draft_len
        return Speculation(method=self.name, mode=None, max_draft_len=k, params=EchoDrafts(k))

    def checks(self, recipe) -> Iterator[Finding]:
        k = recipe.speculation.max_draft_len
        if k > MAX_DRAFT_LEN:
            yield Finding(
                ("speculation", "max_draft_len"), f"is {k} but echo copies at most {MAX_DRAFT_LEN} — lower it"
            )

    def speculative_config(self, spec, release, path) -> dict[str, Any] | Refusal:
        if release.line not in RELEASES:
            return Refusal(f"Echo arrived in {RELEASES[0]}", "llm_api.release: 1.3")
        return {"decoding_type": "Echo", "max_draft_len": spec.max_draft_len}

    def rehearse(self, config: EchoDecodingConfig, k: int) -> Rehearsed:
        return Rehearsed({"max_draft_len": k})


PACK = EchoPack()
