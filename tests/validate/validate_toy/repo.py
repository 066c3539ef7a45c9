"""Write the toy Triton repository: the five models of a specbuild repository, with the ensemble's tensor names
(TensorRT-LLM triton_backend/all_models/inflight_batcher_llm/@2a9abd95), over the deterministic fake model in
models/toy_lm.py.

    write_toy_repo(dest, mode="speculative")                 # Medusa-like: several tokens per step
    write_toy_repo(dest, mode="baseline")                    # the same model, one token per step
    write_toy_repo(dest, mode="speculative", broken="tokens")  # a core that returns a wrong token (position 5)
    write_toy_repo(dest, mode="speculative", broken="tokens,sampling")  # ... and ignores temperature
    write_toy_repo(dest, mode="speculative", weak_on="def ")  # no draft accepted on prompts holding "def "
    write_toy_repo(dest, mode="speculative", stale_on="storm ")  # drafting stays off for prompts holding "storm "
                                                                 # once the draft_len_schedule turned it off for one
"""

from __future__ import annotations

import shutil
from pathlib import Path

from specbuild.standalone import draft_len_schedule

MODELS = Path(__file__).parent / "models"

ENSEMBLE_INPUTS = [  # name, type, dims, optional
    ("text_input", "TYPE_STRING", "[1]", False),
    ("max_tokens", "TYPE_INT32", "[1]", False),
    ("stop_words", "TYPE_STRING", "[-1]", True),
    ("bad_words", "TYPE_STRING", "[-1]", True),
    ("end_id", "TYPE_INT32", "[1]", True),
    ("pad_id", "TYPE_INT32", "[1]", True),
    ("top_k", "TYPE_INT32", "[1]", True),
    ("top_p", "TYPE_FP32", "[1]", True),
    ("temperature", "TYPE_FP32", "[1]", True),
    ("seed", "TYPE_UINT64", "[1]", True),
    ("exclude_input_in_output", "TYPE_BOOL", "[1]", True),
    ("return_perf_metrics", "TYPE_BOOL", "[1]", True),
    ("stream", "TYPE_BOOL", "[1]", True),
]
PERF = [
    ("acceptance_rate", "TYPE_FP32"),
    ("total_accepted_draft_tokens", "TYPE_INT32"),
    ("total_draft_tokens", "TYPE_INT32"),
]
OUTPUTS = [("text_output", "TYPE_STRING", "[-1]"), ("output_ids", "TYPE_INT32", "[-1, -1]")] + [
    (n, t, "[1]") for n, t in PERF
]


def _io(kind: str, items) -> str:
    blocks = []
    for item in items:
        name, dtype, dims = item[:3]
        optional = "\n    optional: true" if len(item) > 3 and item[3] else ""
        blocks.append(f'  {{\n    name: "{name}"\n    data_type: {dtype}\n    dims: {dims}{optional}\n  }}')
    return f"{kind} [\n" + ",\n".join(blocks) + "\n]\n"


def _params(params: dict[str, str]) -> str:
    return "".join(f'parameters {{ key: "{k}" value: {{ string_value: "{v}" }} }}\n' for k, v in params.items())


def _python_model(
    dest: Path, name: str, source: str, body: str, *, decoupled: bool, max_batch_size: int, with_lm: bool = True
) -> None:
    d = dest / name
    (d / "1").mkdir(parents=True)
    shutil.copy(MODELS / source, d / "1" / "model.py")
    if with_lm:
        shutil.copy(MODELS / "toy_lm.py", d / "1" / "toy_lm.py")
    policy = "model_transaction_policy { decoupled: true }\n" if decoupled else ""
    (d / "config.pbtxt").write_text(
        f'name: "{name}"\nbackend: "python"\nmax_batch_size: {max_batch_size}\n'
        f"{policy}{body}instance_group [ {{ count: 1 kind: KIND_CPU }} ]\n"
    )


def _map(kind: str, pairs: dict[str, str]) -> str:
    return "".join(f'      {kind} {{ key: "{k}" value: "{v}" }}\n' for k, v in pairs.items())


def write_toy_repo(
    dest: Path,
    *,
    mode: str = "speculative",
    broken: str = "",
    max_batch_size: int = 8,
    decoding_mode: str = "medusa",
    draft_len: int = 4,
    max_input_len: int = 448,
    max_seq_len: int = 512,
    step_ms: float = 4.0,
    token_ms: float = 0.5,
    core_parameters: dict[str, str] | None = None,
    weak_on: str = "",
    stale_on: str = "",
) -> Path:
    """Write the repository under `dest` (created) and return it. `core_parameters` are added to the
    tensorrt_llm model's parameters (e.g. the recipe method's medusa_choices)."""
    dest = Path(dest)
    dest.mkdir(parents=True)
    core_params = {
        "toy_mode": mode,
        "toy_broken": broken,
        "toy_weak_on": weak_on,
        "toy_stale_on": stale_on,
        "draft_len": str(draft_len),
        "max_input_len": str(max_input_len),
        "max_seq_len": str(max_seq_len),
        "step_ms": str(step_ms),
        "token_ms": str(token_ms),
        "gpt_model_type": "inflight_fused_batching",
    }
    if mode == "speculative":
        core_params["decoding_mode"] = decoding_mode
    core_params.update(core_parameters or {})
    core_in = [
        ("input_ids", "TYPE_INT32", "[-1]"),
        ("input_lengths", "TYPE_INT32", "[1]"),
        ("request_output_len", "TYPE_INT32", "[1]"),
        ("stop_words_list", "TYPE_INT32", "[2, -1]", True),
        ("end_id", "TYPE_INT32", "[1]", True),
        ("pad_id", "TYPE_INT32", "[1]", True),
        ("streaming", "TYPE_BOOL", "[1]", True),
        ("temperature", "TYPE_FP32", "[1]", True),
        ("runtime_top_k", "TYPE_INT32", "[1]", True),
        ("runtime_top_p", "TYPE_FP32", "[1]", True),
        ("seed", "TYPE_UINT64", "[1]", True),
        ("return_perf_metrics", "TYPE_BOOL", "[1]", True),
        ("exclude_input_in_output", "TYPE_BOOL", "[1]", True),
    ]
    core_out = [("output_ids", "TYPE_INT32", "[-1, -1]"), ("sequence_length", "TYPE_INT32", "[-1]")] + [
        (n, t, "[1]") for n, t in PERF
    ]
    _python_model(
        dest,
        "tensorrt_llm",
        "core.py",
        _io("input", core_in) + _io("output", core_out) + _params(core_params),
        decoupled=True,
        max_batch_size=max_batch_size,
    )
    # the schedule's rules beside the core, as the repository writer puts them beside specbuild's BLS
    shutil.copy(draft_len_schedule.__file__, dest / "tensorrt_llm" / "1" / "draft_len_schedule.py")
    pre_in = [
        ("QUERY", "TYPE_STRING", "[1]"),
        ("REQUEST_OUTPUT_LEN", "TYPE_INT32", "[1]"),
        ("STOP_WORDS_DICT", "TYPE_STRING", "[-1]", True),
        ("BAD_WORDS_DICT", "TYPE_STRING", "[-1]", True),
        ("END_ID", "TYPE_INT32", "[1]", True),
        ("PAD_ID", "TYPE_INT32", "[1]", True),
    ]
    pre_out = [
        ("INPUT_ID", "TYPE_INT32", "[-1]"),
        ("REQUEST_INPUT_LEN", "TYPE_INT32", "[1]"),
        ("REQUEST_OUTPUT_LEN", "TYPE_INT32", "[1]"),
        ("STOP_WORDS_IDS", "TYPE_INT32", "[2, -1]"),
        ("OUT_END_ID", "TYPE_INT32", "[1]"),
        ("OUT_PAD_ID", "TYPE_INT32", "[1]"),
    ]
    _python_model(
        dest,
        "preprocessing",
        "preprocessing.py",
        _io("input", pre_in) + _io("output", pre_out) + _params({"tokenizer_dir": ""}),
        decoupled=False,
        max_batch_size=max_batch_size,
    )
    post_in = [("TOKENS_BATCH", "TYPE_INT32", "[-1, -1]"), ("SEQUENCE_LENGTH", "TYPE_INT32", "[-1]")]
    _python_model(
        dest,
        "postprocessing",
        "postprocessing.py",
        _io("input", post_in) + _io("output", [("OUTPUT", "TYPE_STRING", "[-1]")]),
        decoupled=False,
        max_batch_size=max_batch_size,
    )
    _python_model(
        dest,
        "tensorrt_llm_bls",
        "bls.py",
        _io("input", ENSEMBLE_INPUTS) + _io("output", OUTPUTS),
        decoupled=True,
        max_batch_size=max_batch_size,
        with_lm=False,
    )

    steps = (
        '    {\n      model_name: "preprocessing"\n      model_version: -1\n'
        + _map(
            "input_map",
            {
                "QUERY": "text_input",
                "REQUEST_OUTPUT_LEN": "max_tokens",
                "STOP_WORDS_DICT": "stop_words",
                "BAD_WORDS_DICT": "bad_words",
                "END_ID": "end_id",
                "PAD_ID": "pad_id",
            },
        )
        + _map(
            "output_map",
            {
                "INPUT_ID": "_INPUT_ID",
                "REQUEST_INPUT_LEN": "_REQUEST_INPUT_LEN",
                "REQUEST_OUTPUT_LEN": "_REQUEST_OUTPUT_LEN",
                "STOP_WORDS_IDS": "_STOP_WORDS_IDS",
                "OUT_END_ID": "_END_ID",
                "OUT_PAD_ID": "_PAD_ID",
            },
        )
        + '    },\n    {\n      model_name: "tensorrt_llm"\n      model_version: -1\n'
        + _map(
            "input_map",
            {
                "input_ids": "_INPUT_ID",
                "input_lengths": "_REQUEST_INPUT_LEN",
                "request_output_len": "_REQUEST_OUTPUT_LEN",
                "stop_words_list": "_STOP_WORDS_IDS",
                "end_id": "_END_ID",
                "pad_id": "_PAD_ID",
                "streaming": "stream",
                "temperature": "temperature",
                "runtime_top_k": "top_k",
                "runtime_top_p": "top_p",
                "seed": "seed",
                "return_perf_metrics": "return_perf_metrics",
                "exclude_input_in_output": "exclude_input_in_output",
            },
        )
        + _map(
            "output_map", {"output_ids": "output_ids", "sequence_length": "_SEQUENCE_LENGTH", **{n: n for n, _ in PERF}}
        )
        + '    },\n    {\n      model_name: "postprocessing"\n      model_version: -1\n'
        + _map("input_map", {"TOKENS_BATCH": "output_ids", "SEQUENCE_LENGTH": "_SEQUENCE_LENGTH"})
        + _map("output_map", {"OUTPUT": "text_output"})
        + "    }\n"
    )
    d = dest / "ensemble"
    (d / "1").mkdir(parents=True)
    (d / "config.pbtxt").write_text(
        f'name: "ensemble"\nplatform: "ensemble"\nmax_batch_size: {max_batch_size}\n'
        + _io("input", ENSEMBLE_INPUTS)
        + _io("output", OUTPUTS)
        + "ensemble_scheduling {\n  step [\n"
        + steps
        + "  ]\n}\n"
    )
    return dest
