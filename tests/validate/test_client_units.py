"""Client pieces without a server: addresses, request bodies, response parsing (JSON and server-sent events),
prompt sets."""

from __future__ import annotations

import io
import json

import pytest

from specbuild.errors import UserError
from specbuild.validate import Endpoints, parse_hostport
from specbuild.validate.client import ENGINE, GenerateParams, ModelSignature, _sse_events, outputs_from_json
from specbuild.recipe.prompts import BUNDLED, load_prompt_file, load_prompts


@pytest.mark.parametrize(
    "value, want",
    [
        ("127.0.0.1:8000", "127.0.0.1:8000"),
        ("http://localhost:80/", "localhost:80"),
        ("grpc://host-1.example:8001", "host-1.example:8001"),
        ("[::1]:9000", "[::1]:9000"),
    ],
)
def test_hostport(value, want):
    assert parse_hostport(value) == want


@pytest.mark.parametrize("value", ["localhost", "host:", ":80", "host:99999", "http://h:1/v2"])
def test_bad_hostport(value):
    with pytest.raises(UserError, match="--baseline-url"):
        parse_hostport(value, "--baseline-url")


def test_endpoints():
    e = Endpoints.parse("127.0.0.1:8000", "127.0.0.1:8001")
    assert e.describe() == "http 127.0.0.1:8000, grpc 127.0.0.1:8001"

    class Server:
        http_address, grpc_url = "127.0.0.1:1", "127.0.0.1:2"

    assert Endpoints.of(Server()) == Endpoints("127.0.0.1:1", "127.0.0.1:2")


def test_request_inputs():
    greedy = ENGINE.inputs(GenerateParams(max_tokens=8, stop_words=["\n\n"]), "hi", stream=True)
    assert greedy == {
        "text_input": "hi",
        "max_tokens": 8,
        "top_k": 1,
        "stop_words": ["\n\n"],
        "exclude_input_in_output": True,
        "return_perf_metrics": True,
        "stream": True,
    }
    sampled = ENGINE.inputs(
        GenerateParams(max_tokens=2, temperature=0.8, top_k=0, top_p=0.9, seed=7, return_perf_metrics=False),
        "hi",
        stream=False,
    )
    assert sampled == {
        "text_input": "hi",
        "max_tokens": 2,
        "temperature": 0.8,
        "top_k": 0,
        "top_p": 0.9,
        "seed": 7,
        "exclude_input_in_output": True,
        "stream": False,
    }


def test_outputs_from_json_flattened_forms():
    # Triton's generate flattens outputs: one token comes back as a bare int, a BYTES[1] as a string or list
    text, ids, perf = outputs_from_json(
        {
            "text_output": "a",
            "output_ids": 7,
            "acceptance_rate": [0.5],
            "total_draft_tokens": 4,
            "total_accepted_draft_tokens": 2,
        }
    )
    assert (text, ids) == ("a", [7])
    assert perf == {"acceptance_rate": 0.5, "total_draft_tokens": 4.0, "total_accepted_draft_tokens": 2.0}
    text, ids, perf = outputs_from_json({"text_output": ["bc"], "output_ids": [[1, 2]]})
    assert (text, ids, perf) == ("bc", [1, 2], {})
    assert outputs_from_json({})[1] is None


class FakeResponse:
    def __init__(self, body: bytes):
        self._io = io.BytesIO(body)

    def readline(self):
        return self._io.readline()


def test_sse_events():
    body = (
        b'data: {"text_output":"a","output_ids":1}\n\n'
        b'data: {"text_output":"b",\ndata: "output_ids":[2,3]}\r\n\r\n'
        b": a comment\n\n"
        b'data: {"error":"boom"}\n\n'
        b"data: not json\n\n"
    )
    events = list(_sse_events(FakeResponse(body)))
    assert events[0] == {"text_output": "a", "output_ids": 1}
    assert events[1] == {"text_output": "b", "output_ids": [2, 3]}
    assert events[2] == {"error": "boom"}
    assert events[3]["error"].startswith("malformed event")


def test_model_signature_from_config():
    cfg = {
        "max_batch_size": 8,
        "model_transaction_policy": {"decoupled": True},
        "input": [
            {"name": "text_input", "data_type": "TYPE_STRING", "dims": ["1"]},
            {"name": "stop_words", "data_type": "TYPE_STRING", "dims": ["-1"]},
        ],
    }
    sig = ModelSignature.from_config(cfg)
    assert sig.decoupled and sig.max_batch_size == 8 and sig.inputs["stop_words"] == ("TYPE_STRING", (-1,))


def test_grpc_inputs_typed_and_batched():
    from specbuild.validate.client import grpc_inputs

    sig = ModelSignature(
        {
            "text_input": ("TYPE_STRING", (1,)),
            "max_tokens": ("TYPE_INT32", (1,)),
            "seed": ("TYPE_UINT64", (1,)),
            "stop_words": ("TYPE_STRING", (-1,)),
        },
        8,
        True,
    )
    inputs = {
        i.name(): i
        for i in grpc_inputs(
            sig, {"text_input": b"\xff", "max_tokens": 4, "seed": 3, "stop_words": ["a", "b"], "extra": 1}
        )
    }
    assert inputs["text_input"].shape() == [1, 1] and inputs["text_input"].datatype() == "BYTES"
    assert inputs["seed"].datatype() == "UINT64"
    assert inputs["stop_words"].shape() == [1, 2]
    assert inputs["extra"].datatype() == "INT32"  # undeclared: sent as given, the server refuses it


def test_bundled_prompts_cover_the_seven_categories():
    prompts = load_prompt_file(BUNDLED)
    assert {p.category for p in prompts} == {
        "writing",
        "coding",
        "math",
        "extraction",
        "summarising",
        "multi-turn chat",
        "long-context",
    }
    assert all(sum(p.category == c for p in prompts) >= 2 for c in {p.category for p in prompts})
    assert all(len(p.messages) >= 3 for p in prompts if p.category == "multi-turn chat")
    assert min(len(p.text) for p in prompts if p.category == "long-context") > 3000
    assert len({p.id for p in prompts}) == len(prompts)
    assert [p.index for p in prompts] == list(range(len(prompts)))


def test_prompt_files_and_inline(tmp_path):
    from specbuild.recipe.schema import Recipe

    base = {"name": "x", "model": {"checkpoint": "m"}}
    (tmp_path / "p.txt").write_text("first\n\nsecond\n")
    (tmp_path / "p.jsonl").write_text(json.dumps({"prompt": "a", "kind": "code"}) + "\n" + json.dumps({"prompt": "b"}))
    (tmp_path / "bad.jsonl").write_text('{"text": "no prompt"}\n')
    (tmp_path / "p.json").write_text(json.dumps([{"prompt": "c", "id": "x"}]))
    assert [p.text for p in load_prompt_file(tmp_path / "p.txt")] == ["first", "second"]
    assert [(p.text, p.category) for p in load_prompt_file(tmp_path / "p.jsonl")] == [("a", "code"), ("b", "custom")]
    assert [(p.text, p.id) for p in load_prompt_file(tmp_path / "p.json")] == [("c", "x")]
    with pytest.raises(
        UserError, match=r"bad.jsonl:1: the record has neither \"prompt\" and \"messages\" — give one of: text"
    ):
        load_prompt_file(tmp_path / "bad.jsonl")
    with pytest.raises(UserError, match="missing.txt: no such file — check the path of the prompt file"):
        load_prompt_file(tmp_path / "missing.txt")
    r = Recipe.model_validate({**base, "validation": {"prompts": ["x", "y"]}})
    assert [p.text for p in load_prompts(r)] == ["x", "y"]
    r = Recipe.model_validate({**base, "validation": {"prompts": str(tmp_path / "p.txt")}})
    assert len(load_prompts(r)) == 2
    assert len(load_prompts(Recipe.model_validate(base))) == len(load_prompt_file(BUNDLED))


INTERRUPTED_IN_THE_HUB = """
import gevent
from specbuild.processes.signals import Terminated
from specbuild.validate.client.server import ServerClient

client = ServerClient("127.0.0.1:1")
client.http  # creating the client readies gevent for interruptions

def interrupted():
    raise Terminated()

gevent.get_hub().loop.run_callback(interrupted)
try:
    gevent.sleep(0.01)
except Terminated:
    print("raised")
client.close()
"""


def test_an_interruption_inside_the_http_clients_event_loop_is_raised_not_printed():
    """A SIGTERM that lands while tritonclient.http waits in gevent's hub: the waiting code gets Terminated (the
    CLI turns it into one line and exit 143) and gevent prints no traceback of its own (CI saw one once). In a
    fresh interpreter, as the CLI runs."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    pipeline = Path(__file__).resolve().parents[2] / "pipeline"
    run = subprocess.run(
        [sys.executable, "-c", INTERRUPTED_IN_THE_HUB],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ, PYTHONPATH=str(pipeline)),
    )
    assert (run.returncode, run.stdout, run.stderr) == (0, "raised\n", "")
