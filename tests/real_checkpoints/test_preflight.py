"""Head/target preflight at `check` (specbuild/methods/preflight.py) on shape-real copies of public checkpoints
(builder.py): each published head with its own target passes, saying which facts it checked and which the head does
not record; with the wrong target, and with copies of its config or weights edited one fact at a time, `check`
refuses (exit 2) what cannot run and warns (exit 0) about what only lowers acceptance, located at
speculation.checkpoint, with what it does and what to do.

Expected values are the real checkpoints' facts: the EAGLE-3 head's draft vocabulary of 32000 over Llama-3.1's
128256 (d2t [32000], t2d [128256], lm_head [32000, 4096]) and its 2048 training positions; vicuna-7b's width 4096 and
vocabulary 32000; FasterDecoding's Medusa config naming lmsys/vicuna-7b-v1.3; Llama-3.2-1B's 131072 positions."""

from __future__ import annotations

import json

import pytest

from real_checkpoints.builder import (
    EAGLE3_CONFIG,
    copy_checkpoint,
    eagle3_tensors,
    speculators_eagle3,
    speculators_eagle3_config,
)
from real_checkpoints.formats import write_torch_zip

from specbuild.cli import main

LLAMA_ID = "meta-llama/Llama-3.1-8B-Instruct"


def check(path, capsys) -> tuple[int, str, str]:
    code = main(["check", str(path)])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out, err


def llmapi(**sections):
    return {"flavour": "llm-api", "triton": {"streaming": True}, **sections}


def pair(real, method: str, head=None, target=None, **sections) -> dict:
    """A recipe's sections pairing a published head with its own target (or the ones given)."""
    if method == "eagle3":
        return llmapi(
            model={"checkpoint": str(target or real.llama31_8b), "dtype": "bfloat16"},
            speculation={"method": "eagle3", "checkpoint": str(head or real.eagle3)},
            **sections,
        )
    if method == "draft_target":
        return {
            "model": {"checkpoint": str(target or real.llama31_8b), "dtype": "bfloat16"},
            "speculation": {"method": "draft_target", "checkpoint": str(head or real.llama32_1b)},
            "build": {"max_input_len": 1024, "max_seq_len": 8192},
            **sections,
        }
    spec = (
        {"method": "medusa", "checkpoint": str(head or real.medusa), "num_heads": 4}
        if method == "medusa"
        else {"method": "eagle", "checkpoint": str(head or real.eagle1)}
    )
    return {
        "model": {"checkpoint": str(target or real.vicuna)},
        "speculation": spec,
        "build": {"max_input_len": 512, "max_seq_len": 1024},
        **sections,
    }


def notes(out: str) -> str:
    return "\n".join(line for line in out.splitlines() if ": note: head/target preflight" in line)


# --- the published pairs ----------------------------------------------------------------------------------------

RIGHT = {  # what each published head is checked on, and what it does not record
    "eagle3": (
        [
            "hidden size (4096)",
            "vocabulary (128256 tokens)",
            "draft-vocabulary maps (draft_vocab_size 32000, d2t 32000, t2d 128256)",
            "lm_head (its own, 32000 x 4096)",
            "position limit (2048 >= build.max_seq_len 1024)",
            "dtype (float16, run as bfloat16)",
            "quantization (none, as the target)",
        ],
        "not recorded by the EAGLE-3 head, so not checked: its target's architecture, its target's model id, "
        "rope scaling and theta",
    ),
    "eagle": (
        [
            "hidden size (4096)",
            "vocabulary (32000 tokens)",
            "lm_head (shared with the target)",
            "position limit (2048 >= build.max_seq_len 1024)",
            "dtype (float16, run as float16)",
        ],
        "not recorded by the EAGLE head, so not checked: its target's architecture, its target's model id, "
        "rope scaling and theta",
    ),
    "medusa": (
        [
            "target model id (lmsys/vicuna-7b-v1.3)",
            "hidden size (4096)",
            "vocabulary (32000 tokens)",
            "lm_head (its own, 32000 x 4096)",
        ],
        "not recorded by each Medusa head, so not checked: its target's architecture, dtype",
    ),
    "draft_target": (
        ["vocabulary (128256 tokens)", "tokenizer (the target's)", "position limit (131072 >= build.max_seq_len 8192)"],
        None,
    ),
}


@pytest.mark.parametrize("method", sorted(RIGHT))
def test_a_published_head_on_its_own_target_passes_saying_what_was_checked(gpu, real, recipe_file, capsys, method):
    code, out, err = check(recipe_file(f"right-{method}", **pair(real, method)), capsys)
    assert code == 0, err
    assert "warning" not in out + err
    checked, unrecorded = RIGHT[method]
    said = notes(out)
    for fact in checked:
        assert fact in said, said
    if unrecorded:
        assert unrecorded in said, said


WRONG = [  # each head with the other targets: (method, head, target, the fact refused)
    (
        "eagle3",
        "eagle3",
        "vicuna",
        "was built for a vocabulary of 128256 tokens (config.json vocab_size) but the target's vocab_size is 32000",
    ),
    (
        "eagle3",
        "eagle3",
        "deepseek_r1",
        "reads 4096-wide target hidden states (config.json hidden_size) but the target's hidden_size is 7168",
    ),
    (
        "medusa",
        "medusa",
        "llama31_8b",
        "was built for a vocabulary of 32000 tokens (0.1.weight [32000, 4096]) but the target's vocab_size is 128256",
    ),
    ("eagle", "eagle1", "llama31_8b", "was built for a vocabulary of 32000 tokens (embed_tokens.weight [32000, 4096])"),
    ("draft_target", "llama32_1b", "vicuna", "the draft model was built for a vocabulary of 128256 tokens"),
]


@pytest.mark.parametrize("method, head, target, refused", WRONG, ids=[f"{h}-on-{t}" for _, h, t, _ in WRONG])
def test_a_published_head_on_another_target_is_refused(gpu, real, recipe_file, capsys, method, head, target, refused):
    sections = pair(real, method, head=getattr(real, head), target=getattr(real, target))
    if target == "deepseek_r1":
        sections["model"]["trust_remote_code"] = True
    path = recipe_file(f"wrong-{head}-{target}", **sections)
    code, out, err = check(path, capsys)
    assert code == 2
    line = next(line for line in err.splitlines() if refused in line)
    assert f"{path}:" in line and ": speculation.checkpoint: " in line and "warning" not in line
    fix = (
        "pick a draft trained with the target's tokenizer"
        if method == "draft_target"
        else "use a head trained on this target"
    )
    assert fix in line
    if method == "medusa":  # FasterDecoding's config.json names its target: the fix says which
        assert "(this one records that it was trained for lmsys/vicuna-7b-v1.3)" in line


# --- one fact at a time -----------------------------------------------------------------------------------------


def edited_head(real, tmp_path, name: str, source: str, config: dict | None = None, tensors=None):
    """A copy of a published head with its config.json replaced, or (EAGLE-3) its weights rewritten."""
    src = getattr(real, source)
    skip = ("config.json",) + (("pytorch_model.bin",) if tensors is not None else ())
    folder = copy_checkpoint(src, tmp_path / name, skip=skip)
    original = json.loads((src / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps(config(original) if callable(config) else config or original))
    if tensors is not None:
        write_torch_zip(folder / "pytorch_model.bin", tensors, archive="archive")
    return folder


def without(name: str):
    return [t for t in eagle3_tensors(EAGLE3_CONFIG) if t.name != name]


def resized(name: str, shape: tuple):
    return [t if t.name != name else type(t)(t.name, t.dtype, shape) for t in eagle3_tensors(EAGLE3_CONFIG)]


def edit(**changes):
    def apply(cfg: dict) -> dict:
        out = {**cfg, **changes}
        return {k: v for k, v in out.items() if v is not ...}

    return apply


REFUSED = {  # case: (method, head fixture, config edit, weights, recipe sections, what the message must say)
    "eagle3-hidden_size": (
        "eagle3",
        "eagle3",
        edit(hidden_size=5120),
        None,
        {},
        "reads 5120-wide target hidden states (config.json hidden_size) but the target's hidden_size is 4096",
    ),
    "eagle3-target_hidden_size": (
        "eagle3",
        "eagle3",
        edit(target_hidden_size=8192),
        None,
        {},
        "reads 8192-wide target hidden states (config.json target_hidden_size)",
    ),
    "eagle3-fc": (
        "eagle3",
        "eagle3",
        None,
        resized("fc.weight", (4096, 3 * 5120)),
        {},
        "fuses 15360 target features (fc.weight [4096, 15360]), which is not a whole number of the "
        "target's 4096-wide hidden states",
    ),
    "eagle3-vocab_size": (
        "eagle3",
        "eagle3",
        edit(vocab_size=128000),
        None,
        {},
        "was built for a vocabulary of 128000 tokens (config.json vocab_size)",
    ),
    "eagle3-draft_vocab_size-too-big": (
        "eagle3",
        "eagle3",
        edit(draft_vocab_size=150000),
        None,
        {},
        "drafts in 150000 tokens (config.json draft_vocab_size), more than the target's vocabulary of 128256",
    ),
    "eagle3-t2d": (
        "eagle3",
        "eagle3",
        None,
        resized("t2d", (32000,)),
        {},
        "t2d covers 32000 target tokens (t2d [32000]) but the target's vocab_size is 128256",
    ),
    "eagle3-d2t-size": (
        "eagle3",
        "eagle3",
        edit(draft_vocab_size=16000),
        None,
        {},
        "d2t has 32000 entries (d2t [32000]) but its draft_vocab_size is 16000",
    ),
    "eagle3-no-d2t": (
        "eagle3",
        "eagle3",
        None,
        without("d2t"),
        {},
        "holds no d2t map onto the target's 128256 (the head's weights hold no d2t)",
    ),
    "eagle3-no-lm_head": (
        "eagle3",
        "eagle3",
        None,
        without("lm_head.weight"),
        {},
        "has no lm_head of its own (the head's weights hold no lm_head.weight), so the runtime "
        "gives it the target's, whose 128256 rows are not its 32000-token draft vocabulary",
    ),
    "eagle3-no-draft_vocab_size": (
        "eagle3",
        "eagle3",
        edit(draft_vocab_size=...),
        None,
        {},
        "lm_head predicts 32000 tokens (lm_head.weight [32000, 4096]) but the target's "
        "vocab_size is 128256: its predictions name other tokens — if it drafts in its "
        "own vocabulary, its config.json lacks draft_vocab_size: 32000",
    ),
    "eagle-hidden_size": (
        "eagle",
        "eagle1",
        edit(hidden_size=5120),
        None,
        {},
        "reads 5120-wide target hidden states (config.json hidden_size)",
    ),
    "eagle-vocab_size": (
        "eagle",
        "eagle1",
        edit(vocab_size=32001),
        None,
        {},
        "was built for a vocabulary of 32001 tokens (config.json vocab_size)",
    ),
    "medusa-hidden_size": (
        "medusa",
        "medusa",
        edit(hidden_size=5120),
        None,
        {},
        "reads 5120-wide target hidden states (config.json hidden_size)",
    ),
    "draft-vocab_size": (
        "draft_target",
        "llama32_1b",
        edit(vocab_size=128000),
        None,
        {},
        "the draft model was built for a vocabulary of 128000 tokens (config.json vocab_size) but "
        "the target's vocab_size is 128256",
    ),
    "draft-positions": (
        "draft_target",
        "llama32_1b",
        edit(max_position_embeddings=4096),
        None,
        {},
        "the draft model holds 4096 positions (config.json max_position_embeddings) but build.max_seq_len is 8192",
    ),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_each_fact_a_head_cannot_run_with_is_refused(gpu, real, recipe_file, capsys, tmp_path, case):
    method, source, config, tensors, sections, said = REFUSED[case]
    head = edited_head(real, tmp_path, case, source, config, tensors)
    path = recipe_file(case.replace("_", "-"), **pair(real, method, head=head, **sections))
    code, out, err = check(path, capsys)
    assert code == 2, out
    lines = [line for line in err.splitlines() if said in line]
    assert len(lines) == 1, err
    assert f"{path}:" in lines[0] and ": speculation.checkpoint: " in lines[0] and " — " in lines[0]
    assert ": warning:" not in err  # the first refusal ends the preflight


WARNED = {  # case: (method, head fixture, config edit, recipe sections, what the warning must say)
    "eagle3-positions": (
        "eagle3",
        "eagle3",
        None,
        {"build": {"max_input_len": 4096, "max_seq_len": 8192}},
        "was trained on sequences of at most 2048 positions (config.json max_position_embeddings) "
        "but build.max_seq_len lets a request reach 8192",
    ),
    "eagle3-rope-scaling": (
        "eagle3",
        "eagle3",
        edit(rope_scaling={"rope_type": "yarn", "factor": 4.0}),
        {},
        "applies yarn scaling factor 4 (config.json rope_scaling) but the target uses llama3 "
        "scaling factor 8, theta 500000",
    ),
    "eagle3-dtype": (
        "eagle3",
        "eagle3",
        edit(torch_dtype="bfloat16"),
        {"model": {"dtype": "float16"}},
        "weights are bfloat16 (config.json torch_dtype) but the recipe runs the pair in float16",
    ),
    "eagle3-quantization": (
        "eagle3",
        "eagle3",
        edit(quantization_config={"quant_method": "fp8"}),
        {},
        "records fp8 (config.json quantization_config), but the target runs unquantized",
    ),
    "eagle-rope": (
        "eagle",
        "eagle1",
        edit(rope_scaling={"type": "linear", "factor": 2.0}),
        {},
        "applies linear scaling factor 2 (config.json rope_scaling / rope_theta) but the target uses unscaled",
    ),
    "eagle-positions": (
        "eagle",
        "eagle1",
        edit(max_position_embeddings=512),
        {},
        "was trained on sequences of at most 512 positions",
    ),
    "eagle-dtype": (
        "eagle",
        "eagle1",
        edit(torch_dtype="float32"),
        {},
        "weights are float32 (config.json torch_dtype) but the recipe runs the pair in float16",
    ),
    "medusa-target": (
        "medusa",
        "medusa",
        edit(base_model_name_or_path="lmsys/vicuna-13b-v1.3"),
        {},
        "records that it was trained for lmsys/vicuna-13b-v1.3 (config.json base_model_name_or_path) "
        "but the target is lmsys/vicuna-7b-v1.3 (its config.json _name_or_path)",
    ),
}


@pytest.mark.parametrize("case", sorted(WARNED))
def test_each_fact_that_only_lowers_acceptance_is_a_warning(gpu, real, recipe_file, capsys, tmp_path, case):
    method, source, config, sections, said = WARNED[case]
    head = edited_head(real, tmp_path, case, source, config) if config else None
    recipe = pair(real, method, head=head)
    for key, values in sections.items():
        recipe[key] = {**recipe.get(key, {}), **values}
    path = recipe_file(case.replace("_", "-"), **recipe)
    code, out, err = check(path, capsys)
    assert code == 0, err
    assert "ok with 1 warning" in out
    [line] = [line for line in err.splitlines() if ": warning: " in line]
    assert line.startswith(f"{path}:") and ": speculation.checkpoint: warning: " in line and said in line
    assert "acceptance" in line and ("specbuild validate" in line or "set model.dtype" in line)


def test_a_quantized_target_under_a_head_trained_unquantized_is_a_warning(gpu, real, recipe_file, capsys, tmp_path):
    """The target's own config.json says FP8 (a quantized export of Llama-3.1-8B-Instruct): the head records no
    quantization (vLLM #9534: an FP8 target under an fp16 head)."""
    target = copy_checkpoint(real.llama31_8b, tmp_path / "llama-fp8", skip=("config.json",))
    cfg = json.loads((real.llama31_8b / "config.json").read_text())
    quant = {"quant_method": "fp8", "activation_scheme": "dynamic"}
    (target / "config.json").write_text(json.dumps({**cfg, "quantization_config": quant}))
    code, out, err = check(recipe_file("fp8-target", **pair(real, "eagle3", target=target)), capsys)
    assert code == 0, err
    assert (
        "records no quantization: heads are trained on the unquantized target's hidden states, but the target "
        "runs fp8 (config.json quantization_config)" in err
    )


# --- a speculators-format head records its target by name and architecture ---------------------------------------


def test_a_speculators_head_is_checked_against_its_verifier(gpu, real, recipe_file, capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_CACHE", str(real.hub))
    head = speculators_eagle3(tmp_path / "speculator.eagle3")
    code, out, err = check(recipe_file("speculators", **pair(real, "eagle3", head=head, target=LLAMA_ID)), capsys)
    assert code == 0, err
    said = notes(out)
    assert f"target architecture (LlamaForCausalLM), target model id ({LLAMA_ID})" in said
    assert "position limit (131072 >= build.max_seq_len 1024)" in said  # the converter raises it to the target's

    other = speculators_eagle3(tmp_path / "other", speculators_eagle3_config("Qwen/Qwen3-8B", ("Qwen3ForCausalLM",)))
    code, out, err = check(
        recipe_file("speculators-other", **pair(real, "eagle3", head=other, target=LLAMA_ID)), capsys
    )
    assert code == 0 and "ok with 2 warnings" in out
    assert (
        "was trained for a Qwen3ForCausalLM target (config.json speculators_config.verifier.architectures) but "
        "the target is LlamaForCausalLM: a head trained on another model accepts almost nothing" in err
    )
    assert (
        "records that it was trained for Qwen/Qwen3-8B (config.json speculators_config.verifier.name_or_path) "
        f"but the target is {LLAMA_ID} (model.checkpoint)" in err
    )


def test_a_verifier_named_by_a_draft_class_is_not_taken_for_the_target(gpu, real, recipe_file, capsys, tmp_path):
    """speculators' early converter wrote the EAGLE head's own class as the verifier's architectures; the target
    folder here records no model id, so the name is not compared either (said in a note)."""
    head = speculators_eagle3(tmp_path / "early", speculators_eagle3_config(LLAMA_ID, ("LlamaForCausalLMEagle3",)))
    code, out, err = check(recipe_file("speculators-early", **pair(real, "eagle3", head=head)), capsys)
    assert code == 0 and "warning" not in out + err
    assert (
        "not compared: its target's architecture: config.json speculators_config.verifier.architectures names a "
        "draft-model class (LlamaForCausalLMEagle3), not its target's" in out
    )
    assert (
        f"not compared: its target's model id {LLAMA_ID} (config.json speculators_config.verifier.name_or_path): "
        "the target's folder records no model id" in out
    )


def test_warnings_are_shown_with_the_problems_when_check_refuses(gpu, real, recipe_file, capsys, tmp_path):
    """A recipe refused for another reason still shows the pairing's warnings, marked as such."""
    sections = pair(real, "eagle3", build={"max_input_len": 4096, "max_seq_len": 8192})
    sections["speculation"]["layers_to_capture"] = [1, 15]
    code, out, err = check(recipe_file("refused-and-warned", **sections), capsys)
    assert code == 2
    assert "speculation.layers_to_capture: the head fuses 3 target layer(s)" in err
    assert "speculation.checkpoint: warning: the EAGLE-3 head was trained on sequences of at most 2048" in err


def test_check_help_says_how_warnings_show():
    from click.testing import CliRunner

    from specbuild.cli import cli

    text = " ".join(CliRunner().invoke(cli, ["check", "--help"]).output.split())
    assert "file:line:col: field: warning: message, refuse nothing and leave the exit code 0" in text


def test_plan_shows_the_warnings_on_stderr_and_keeps_its_json_whole(gpu, real, recipe_file, capsys):
    """plan (and compile) load the recipe as check does: the pairing's warnings reach the user there too, on stderr,
    so that `plan --json` stays one JSON document."""
    recipe = pair(real, "eagle3", build={"max_input_len": 4096, "max_seq_len": 8192})
    code = main(["plan", str(recipe_file("plan-warns", **recipe)), "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    json.loads(out)
    assert "speculation.checkpoint: warning: the EAGLE-3 head was trained on sequences of at most 2048" in err
