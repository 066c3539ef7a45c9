"""Check logic against scripted deployments: failures a healthy server cannot be made to show on demand
(answers mixed between requests, a bad request accepted, a dropped connection, a stream that differs)."""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass, field

from specbuild.methods import describe
from specbuild.recipe.schema import Recipe
from specbuild.validate.checks import bad_input, functional, load, lossless
from specbuild.validate.checks.base import SuiteContext, SuiteOptions
from specbuild.validate.client import ENGINE, Chunk, Generation
from specbuild.validate.endpoints import Endpoints
from specbuild.recipe.prompts import Prompt

PROMPTS = [Prompt(i, f"p{i}", "code", f"prompt {i}") for i in range(3)]


def answer(i: int, *, protocol: str = "http", final: bool = True) -> Generation:
    ids = [10 * i + k for k in range(4)]
    g = Generation(protocol, 0.0, end=0.1, text="".join(chr(97 + (x % 26)) for x in ids), ids=ids, final=final)
    g.chunks = [Chunk(0.05, g.text[:1], ids[:1]), Chunk(0.1, g.text[1:], ids[1:])]
    return g


class FakeHttp:
    def __init__(self, owner):
        self.owner = owner

    def is_server_live(self):
        return True

    def generate(self, model, prompt, params, raw_body=None, request_id=None):
        return self.owner.reply(prompt or "", params, "http-raw")


@dataclass
class FakeServer:
    http: object = None

    def model_ready(self, model):
        return True

    def health(self):
        return {"http_live": True, "models": {"ensemble": {"state": "READY", "reason": "", "ready": True}}}

    def repository_index(self):
        return [{"name": "ensemble", "state": "READY"}]


@dataclass
class FakeDeployment:
    """Answers prompt i with answer(i) unless `script(prompt_index, params, protocol, call)` says otherwise."""

    script: object = None
    role: str = "target"
    label: str = "speculative"
    model: str = "ensemble"
    endpoints: Endpoints = field(default_factory=lambda: Endpoints("127.0.0.1:1"))
    streams: bool = True
    calls: int = 0
    contract: object = ENGINE
    timeout_s: float = 5.0

    def __post_init__(self):
        self.server = FakeServer(FakeHttp(self))

    def http(self):
        return self.server.http

    def reply(self, prompt, params, protocol, stop_after=None):
        self.calls += 1
        index = next((p.index for p in PROMPTS if p.text == prompt), None)  # None: not one of the prompts
        if self.script is not None:
            out = self.script(index, params, protocol, self.calls)
            if out is not None:
                return out
        return answer(index or 0, protocol=protocol)

    def generate(self, prompt, params, protocol="http", *, stop_after=None, model=None):
        return self.reply(prompt, params, protocol, stop_after)


def context(target, baseline=None, **validation) -> SuiteContext:
    recipe = Recipe.model_validate(
        {
            "name": "t",
            "model": {"checkpoint": "m"},
            "speculation": {"method": "prompt_lookup"},
            "validation": {"max_tokens": 8, "load_clients": 2, "load_seconds": 0.2, **validation},
        }
    )
    return SuiteContext(
        recipe, describe(recipe), PROMPTS, target, baseline, None, SuiteOptions(), lambda stage, done, total: None
    )


def refuse_bad(index, params, protocol, call):
    """A server that refuses what is not a plain request with one of the prompts."""
    if index is None or protocol == "http-raw" or params.max_tokens <= 0:
        return Generation(protocol, 0.0, end=0.01, error="HTTP 400: bad request", status=400)
    return None


def and_then(first, second):
    return lambda *a: first(*a) or second(*a)


def test_load_passes_when_every_answer_is_its_own():
    result = load.run(context(FakeDeployment(refuse_bad)))
    assert result.status == "passed", result.summary
    good, bad = result.details["good"], result.details["bad"]
    assert good["equal"] == good["sent"] > 0 and result.details["lost"] == 0
    assert bad["sent"] > 0 and bad["accepted"] == 0 and bad["no answer"] == 0
    assert result.details["health"] == {"live": True, "not_ready": [], "follow_up_failed": {}}
    assert result.details["server"] is None  # nothing listens on 127.0.0.1:1


def test_load_runs_against_loopback_only():
    assert Endpoints("127.0.0.1:1").loopback and Endpoints("localhost:1").loopback and Endpoints("[::1]:1").loopback
    assert not Endpoints("10.0.0.5:8000").loopback
    result = load.run(context(FakeDeployment(endpoints=Endpoints("10.0.0.5:8000"))))
    assert result.status == "skipped" and "loopback" in result.summary


def test_load_catches_answers_mixed_between_requests():
    def swap(index, params, protocol, call):  # single-request answers come over plain HTTP; the mix streams too
        return answer((index + 1) % 3, protocol=protocol) if protocol == "http-stream" else None

    result = load.run(context(FakeDeployment(and_then(refuse_bad, swap))))
    assert result.status == "failed" and "another prompt's answer" in result.summary
    assert result.details["good"]["mixed"] > 0
    assert "got the answer of prompt" in result.details["examples"]["mixed"][0]


def test_load_reports_unanswered_and_diverged():
    streams = itertools.count()

    def flaky(index, params, protocol, call):
        if protocol != "http-stream":
            return None
        if next(streams) % 2 == 0:
            return answer(index, protocol=protocol, final=False)
        g = answer(index, protocol=protocol)
        g.ids, g.text = [999, 998], "zz"
        return g

    result = load.run(context(FakeDeployment(and_then(refuse_bad, flaky))))
    good = result.details["good"]
    assert result.status == "failed" and good["no answer"] > 0 and good["diverged"] > 0
    assert "got no answer" in result.summary

    def diverge(index, params, protocol, call):
        if protocol == "http-stream":
            g = answer(index, protocol=protocol)
            g.ids, g.text = [999, 998], "zz"
            return g
        return None

    result = load.run(context(FakeDeployment(and_then(refuse_bad, diverge))))
    assert result.status == "warned" and "differ from the single-request greedy answer" in result.summary


def test_load_fails_when_bad_requests_are_served_or_a_request_never_returns(monkeypatch):
    result = load.run(context(FakeDeployment()))  # answers everything, the bad requests too
    assert result.status == "failed" and "must be refused were answered" in result.summary
    assert result.details["by_case"]["max_tokens negative"]["answered"] >= 1

    from specbuild.validate import mix

    monkeypatch.setattr(mix, "WAIT_MARGIN_S", 0.3)
    release = threading.Event()

    def hang(index, params, protocol, call):
        if protocol == "http-stream" and index == 1 and call > 20:
            release.wait(30)  # a request the server never answers
        return None

    try:
        result = load.run(context(FakeDeployment(and_then(refuse_bad, hang), timeout_s=0.2)))
    finally:
        release.set()
    assert result.status == "failed" and result.details["lost"] >= 1
    assert "lost" in result.summary and result.details["examples"]["lost"]


def test_bad_input_flags_accepted_requests_that_must_be_refused():
    result = bad_input.run(context(FakeDeployment()))  # the fake answers everything
    assert result.status == "failed"
    refused = {p.split(":")[0] for p in result.details["problems"]}
    assert {
        "prompt longer than max_input_len",
        "max_tokens negative",
        "max_tokens of the wrong type",
        "temperature of the wrong type",
    } <= refused
    assert "max_tokens 0" not in refused and "empty prompt" not in refused


def test_bad_input_flags_dropped_connections_and_unhealthy_servers():
    def script(index, params, protocol, call):
        if params.max_tokens == 0:
            return Generation(protocol, 0.0, end=1.0, error="connection error: RemoteDisconnected: closed")
        if params.max_tokens < 0 or protocol == "http-raw":
            return Generation(protocol, 0.0, end=1.0, error="HTTP 400: bad", status=400)
        return None

    dep = FakeDeployment(script)
    readiness = iter([True] * 7 + [False] + [True] * 20)
    dep.server.model_ready = lambda model: next(readiness)
    result = bad_input.run(context(dep))
    problems = result.details["problems"]
    assert any(p.startswith("max_tokens 0: no clean answer") for p in problems)
    assert any(p.startswith("after '") and p.endswith("model ensemble not ready") for p in problems)
    assert sum(1 for r in result.details["cases"] if r.get("healthy_after") is False) == 1


def test_lossless_differences_warn_when_not_required():
    def differ(index, params, protocol, call):
        if index == 1:
            g = answer(1)
            g.ids = g.ids[:2] + [777, 778]
            return g
        return None

    ctx = context(FakeDeployment(differ), FakeDeployment(role="baseline", label="baseline"), require_lossless=False)
    result = lossless.run(ctx)
    assert result.status == "warned" and result.gate is None
    d = result.details["differences"][0]
    assert (d["prompt"], d["position"], d["speculative_tokens"], d["baseline_tokens"]) == (
        "p1",
        2,
        [777, 778],
        [12, 13],
    )
    ctx = context(FakeDeployment(differ), FakeDeployment(role="baseline", label="baseline"))
    assert lossless.run(ctx).status == "failed"


def _ends_at_once(index, params, protocol, call):
    """Prompt p1 answered with nothing (the model's first token is its end id), on every protocol; the prompt
    echoed first when asked (exclude_input_in_output false)."""
    text, ids = ("", []) if index == 1 else (answer(index).text, answer(index).ids)
    if params.exclude_input_in_output is False:
        text, ids = PROMPTS[index].text + text, [999] + ids
    g = Generation(protocol, 0.0, end=0.1, text=text, ids=ids, final=True)
    g.chunks = [Chunk(0.1, text, ids)]
    return g


def test_functional_notes_an_empty_answer_the_baseline_gives_too():
    """Issue #39 item 10: an empty completion equal to the baseline's, token for token, is the model's answer: noted
    with its category, not failed; an empty one where the baseline answers, or without a baseline, still fails."""
    ctx = context(FakeDeployment(_ends_at_once), FakeDeployment(_ends_at_once, role="baseline", label="baseline"))
    result = functional.run(ctx)
    assert result.status == "passed", result.details["problems"]
    assert result.details["empty_as_baseline"] == {"count": 1, "by_category": {"code": 1}, "prompts": ["p1"]}
    assert "; 1 answered with no text, as the baseline does token for token: the model ends at once (code 1)" in (
        result.summary
    ), result.summary

    ctx = context(FakeDeployment(_ends_at_once), FakeDeployment(role="baseline", label="baseline"))
    result = functional.run(ctx)
    assert result.status == "failed"
    assert result.details["problems"] == ["prompt p1: empty text, where the baseline answers 'klmn'"]

    result = functional.run(context(FakeDeployment(_ends_at_once)))
    assert result.status == "failed" and "no baseline deployment" in result.details["problems"][0]


def test_functional_catches_a_stream_that_differs_from_the_plain_answer():
    def bad_stream(index, params, protocol, call):
        if protocol == "http-stream" and index == 2:
            g = answer(2, protocol=protocol)
            g.text = g.text[:-1] + "?"
            return g
        return None

    result = functional.run(context(FakeDeployment(bad_stream)))
    assert result.status == "failed"
    assert any("prompt p2: HTTP generate_stream text differs" in p for p in result.details["problems"])


class HangsUp(FakeDeployment):
    """Hangs up after `stop_after` responses as the HTTP and gRPC clients do (their error says so)."""

    def generate(self, prompt, params, protocol="http", *, stop_after=None, model=None):
        gen = self.reply(prompt, params, protocol, stop_after)
        if stop_after is not None and gen.ok:
            gen.chunks, gen.final, gen.error = gen.chunks[:stop_after], False, "cancelled by the client"
        return gen


def test_a_client_that_hangs_up_mid_stream_is_neither_refused_nor_answered():
    """Issue #39 item 7: the load check said '8/9 bad refused' where the ninth was the client disconnecting
    mid-stream, which the server can neither refuse nor answer."""
    result = load.run(context(HangsUp(refuse_bad)))
    bad = result.details["bad"]
    assert result.status == "passed", result.summary
    ended = {name for name, row in result.details["by_case"].items() if row["ended"]}
    assert (
        ended == {"client disconnects mid-stream (HTTP)"}
        and bad["ended"] == result.details["by_case"]["client disconnects mid-stream (HTTP)"]["sent"]
    )
    assert bad["accepted"] == 0 and bad["refused"] + bad["answered"] + bad["ended"] == bad["sent"]
    assert (
        f"{bad['sent']} bad requests: {bad['refused']} refused, {bad['answered']} answered where the case allows "
        f"it, {bad['ended']} ended by their client mid-stream"
    ) in result.summary
