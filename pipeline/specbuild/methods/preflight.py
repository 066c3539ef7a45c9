"""Head/target preflight: what a draft head (or draft model) records about the target it was trained for, compared
with the target the recipe pairs it with, one fact at a time.

A method module reads its head's files into a `HeadRecord` (where a fact lives is the method's knowledge: an
EAGLE-3 head's feature width is its config's target_hidden_size, a Medusa head's is the width of its weights);
`findings` compares the record with the target and the recipe, and leaves `note:` lines for `specbuild check` saying
which facts were checked, which the head does not record, and which could not be compared.

A mismatch certain to break the pair (a hidden size or vocabulary the head cannot run on, draft-vocabulary maps or an
lm_head that do not fit, a draft shorter than the context) is a refusal. One that only lowers acceptance (another
target's name or architecture, rope, a context past the head's training length, dtype, quantization) is a warning
(`Finding.warning`): `check` prints it and still exits 0. The first refusal ends the preflight: past it the head is
the wrong one, and what else disagrees only repeats that.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from specbuild.checkpoints import hub
from specbuild.findings import Finding
from specbuild.methods.pack import Recipe
from specbuild.checkpoints.checkpoint_files import CONFIG_MAX, checkpoint_root, read_hf_config, same_tokenizer
from specbuild.files.safe_files import UnreadableFile, read_json


FIELD = ("speculation", "checkpoint")

# The facts a head can record about its target, as the notes name them.
ARCHITECTURE = "its target's architecture"
TARGET_NAME = "its target's model id"
HIDDEN = "hidden size"
VOCAB = "vocabulary size"
DRAFT_VOCAB = "draft-vocabulary maps (draft_vocab_size, d2t, t2d)"
LM_HEAD = "lm_head"
TOKENIZER = "tokenizer"
POSITIONS = "position limit"
ROPE = "rope scaling and theta"
DTYPE = "dtype"
QUANTIZATION = "its target's quantization"

SHARED = "shared"  # a head without an lm_head of its own: the runtime gives it the target's
VALIDATE = "measure its acceptance with `specbuild validate` before serving it"
DRAFT_CLASS = ("Eagle", "Speculator", "Medusa")  # names of draft-model classes, not of a target's
WIDE_RANGE = ("bfloat16", "float32")  # exponent range float16 does not have (float16 tops out at 65504)


@dataclass(frozen=True)
class Fact:
    """One thing a head records, and where: `source` names the file and key or tensor, for the messages."""

    value: Any
    source: str


@dataclass(frozen=True)
class Rope:
    """Rotary position embedding as a config records it; None: not written."""

    type: str | None  # "default" when unscaled
    factor: float | None
    theta: float | None

    def __str__(self) -> str:
        parts = (
            []
            if self.type is None
            else ["unscaled"]
            if self.type == "default"
            else [f"{self.type} scaling" + (f" factor {self.factor:g}" if self.factor else "")]
        )
        if self.theta is not None:
            parts.append(f"theta {self.theta:g}")
        return ", ".join(parts)


@dataclass(frozen=True)
class HeadRecord:
    """What a head records about the target it was trained for. A field left None is not recorded (or could not
    be read); `facts` are the facts a head of its kind can record at all (the note lists those it leaves out)."""

    label: str  # "the EAGLE-3 head": how a message names it
    facts: tuple[str, ...]
    architectures: Fact | None = None  # list[str]: its target's architectures
    target_name: Fact | None = None  # str: its target's model id or path
    hidden: tuple[Fact, ...] = ()  # int: the width of the target hidden states it reads
    feature_inputs: Fact | None = None  # int: fc inputs, a whole number of target hidden states
    own_hidden: Fact | None = None  # int: its own width (what a shared lm_head must read)
    vocab: tuple[Fact, ...] = ()  # int: the target vocabulary it was built for
    draft_vocab: Fact | None = None  # int: draft_vocab_size
    d2t: Fact | None = None  # int | None: entries of d2t (None: the weights hold none)
    t2d: Fact | None = None  # int | None: entries of t2d (None: the weights hold none)
    lm_head: Fact | None = None  # (rows, cols) of its own lm_head, or SHARED
    tokenizer: Fact | None = None  # Path: a draft model's folder, whose tokenizer must be the target's
    trained_positions: Fact | None = None  # int: the longest sequence it was trained on
    max_positions: Fact | None = None  # int: positions a draft model holds (it reads the whole sequence)
    rope: Fact | None = None  # Rope
    dtype: Fact | None = None  # str
    quantization: Fact | None = None  # str: "none" or the method


@dataclass(frozen=True)
class Target:
    """What the recipe's target is: its config.json, the model ids it is known by, how the recipe runs it."""

    config: dict
    folder: Path
    names: tuple[str, ...]
    name_source: str
    dtype: str  # model.dtype
    quantization: Fact  # "none" or the method, and where it comes from
    context: int  # build.max_seq_len


@dataclass
class Outcome:
    findings: list[Finding]
    checked: list[str]
    unrecorded: list[str]
    not_compared: list[str]


# --- reading a Hugging Face config ------------------------------------------------------------------------------


def integer(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def config_int(cfg: dict, key: str, file: str = "config.json") -> Fact | None:
    value = integer(cfg.get(key))
    return Fact(value, f"{file} {key}") if value is not None else None


def _number(value) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def rope_of(cfg: dict, *, written_only: bool) -> Rope | None:
    """The rope a config records: transformers' rope_scaling / rope_theta, or (transformers 5) rope_parameters.
    `written_only` (a head): None when it writes none of them; else (a target) an unwritten rope_scaling means
    unscaled, as transformers reads it."""
    params = cfg.get("rope_parameters") if isinstance(cfg.get("rope_parameters"), dict) else {}
    params = params if {"rope_type", "type", "rope_theta"} & set(params) else {}  # not one per attention type
    scaling = cfg.get("rope_scaling") if isinstance(cfg.get("rope_scaling"), dict) else {}
    kind = scaling.get("rope_type") or scaling.get("type") or params.get("rope_type") or params.get("type")
    if not isinstance(kind, str):
        written = "rope_scaling" in cfg or bool(params)
        kind = "default" if written or not written_only else None
    factor = _number(scaling.get("factor", params.get("factor")))
    theta = _number(cfg.get("rope_theta", params.get("rope_theta")))
    if kind is None and theta is None:
        return None
    return Rope(kind, factor if kind != "default" else None, theta)


def dtype_of(cfg: dict, file: str = "config.json") -> Fact | None:
    """torch_dtype (transformers <= 4) or dtype (transformers 5)."""
    for key in ("torch_dtype", "dtype"):
        if isinstance(cfg.get(key), str):
            return Fact(cfg[key], f"{file} {key}")
    return None


def quantization_of(cfg: dict, folder: Path) -> Fact:
    """The quantization a checkpoint records: config.json quantization_config (transformers: quant_method), or
    ModelOpt's hf_quant_config.json (quantization.quant_algo); "none" without either."""
    quant = cfg.get("quantization_config")
    if isinstance(quant, dict) and isinstance(quant.get("quant_method"), str):
        return Fact(quant["quant_method"].lower(), "config.json quantization_config")
    try:
        modelopt = read_json(
            Path(folder) / "hf_quant_config.json",
            what="hf_quant_config.json",
            max_bytes=CONFIG_MAX,
            root=checkpoint_root(folder),
        )
    except UnreadableFile:
        modelopt = {}
    algo = (
        modelopt.get("quantization", {}).get("quant_algo") if isinstance(modelopt.get("quantization"), dict) else None
    )
    if isinstance(algo, str):
        return Fact(algo.lower(), "hf_quant_config.json quant_algo")
    return Fact("none", "no quantization_config in config.json")


def head_config_facts(cfg: dict, folder: Path, file: str = "config.json") -> dict:
    """The facts a head's Hugging Face config records the same way whatever the method: rope, the position limit
    it was trained to, dtype, quantization (keyword arguments of `HeadRecord`)."""
    rope = rope_of(cfg, written_only=True)
    return {
        "rope": Fact(rope, f"{file} rope_scaling / rope_theta") if rope is not None else None,
        "trained_positions": config_int(cfg, "max_position_embeddings", file),
        "dtype": dtype_of(cfg, file),
        "quantization": quantization_of(cfg, folder),
    }


# --- the target -------------------------------------------------------------------------------------------------


def _target_names(recipe: Recipe, cfg: dict) -> tuple[tuple[str, ...], str]:
    """The model ids the target is known by, and where they come from: the recipe's model id, the hub-cache
    repository its folder is a snapshot of, or its config.json _name_or_path when that is a model id."""
    checkpoint = recipe.checkpoint(recipe.model.checkpoint)
    if checkpoint.model_id is not None:
        return (checkpoint.model_id.repo_id,), "model.checkpoint"
    folder = Path(recipe.model_dir)
    if folder.parent.name == "snapshots" and folder.parent.parent.name.startswith("models--"):
        return (folder.parent.parent.name.removeprefix("models--").replace("--", "/"),), "its hub-cache folder"
    written = cfg.get("_name_or_path")
    if isinstance(written, str) and (model := hub.parse_model_id(written)) is not None:
        return (model.repo_id,), "its config.json _name_or_path"
    return (), ""


def target_of(recipe: Recipe) -> Target | None:
    cfg = read_hf_config(recipe.model_dir)
    if cfg is None:
        return None
    quantization = quantization_of(cfg, recipe.model_dir)
    if quantization.value == "none" and recipe.build.quantization != "none":
        quantization = Fact(recipe.build.quantization, "build.quantization")
    names, source = _target_names(recipe, cfg)
    return Target(
        cfg, Path(recipe.model_dir), names, source, recipe.model.dtype, quantization, recipe.build.max_seq_len
    )


# --- the comparisons, one fact each -----------------------------------------------------------------------------


def _refuse(message: str) -> Finding:
    return Finding(FIELD, message)


def _warn(message: str) -> Finding:
    return Finding(FIELD, message, warning=True)


def _other(head: HeadRecord) -> str:
    """The fix of a head paired with the wrong target."""
    if head.tokenizer is not None:
        return "pick a draft trained with the target's tokenizer"
    trained = f" (this one records that it was trained for {head.target_name.value})" if head.target_name else ""
    return f"use a head trained on this target{trained}"


def _architecture(head: HeadRecord, target: Target, out: Outcome) -> None:
    """speculators' early EAGLE-3 converter wrote the EAGLE checkpoint's own class (LlamaForCausalLMEagle3) as the
    verifier's architectures (vllm-project/speculators `src/speculators/convert/eagle/eagle3_converter.py` at
    00823a7; later versions read the verifier's config.json): a draft class names no target."""
    ours = head.architectures.value
    if any(part in name for name in ours for part in DRAFT_CLASS):
        out.not_compared.append(
            f"{ARCHITECTURE}: {head.architectures.source} names a draft-model class "
            f"({'/'.join(ours)}), not its target's"
        )
        return
    theirs = target.config.get("architectures")
    theirs = [a for a in theirs if isinstance(a, str)] if isinstance(theirs, list) else []
    if not theirs:
        out.not_compared.append(f"{ARCHITECTURE}: the target's config.json names no architectures")
        return
    if set(ours) & set(theirs):
        out.checked.append(f"target architecture ({theirs[0]})")
        return
    out.findings.append(
        _warn(
            f"{head.label} was trained for a {'/'.join(ours)} target ({head.architectures.source}) but the target is "
            f"{'/'.join(theirs)}: a head trained on another model accepts almost nothing (if the target is that model "
            f"saved under another class, nothing is lost) — {_other(head)}, or {VALIDATE}"
        )
    )


def _same_model(recorded: str, head_dir: Path, target: Target) -> bool | None:
    """Whether a recorded target name is this target (None: it cannot be told)."""
    model = hub.parse_model_id(recorded)
    if model is None:  # a path: relative to the head's folder, else as written
        for candidate in (head_dir / recorded, Path(recorded)):
            try:
                if candidate.exists() and candidate.resolve() == target.folder.resolve():
                    return True
            except (OSError, RuntimeError, ValueError):  # a name too long, a loop, a NUL byte
                continue
        return None
    if not target.names:
        return None
    return model.repo_id.lower() in {n.lower() for n in target.names}


def _target_name(head: HeadRecord, target: Target, out: Outcome, head_dir: Path) -> None:
    recorded = head.target_name.value
    same = _same_model(recorded, head_dir, target)
    if same is None:
        why = (
            "the target's folder records no model id"
            if hub.parse_model_id(recorded)
            else "it is a local path that is not the target's folder"
        )
        out.not_compared.append(f"{TARGET_NAME} {recorded} ({head.target_name.source}): {why}")
    elif same:
        out.checked.append(f"target model id ({recorded})")
    else:
        out.findings.append(
            _warn(
                f"{head.label} records that it was trained for {recorded} ({head.target_name.source}) but the target "
                f"is {target.names[0]} ({target.name_source}): a head trained on another target (even a fine-tune of "
                f"the same base) accepts fewer tokens, often almost none — use a head trained on {target.names[0]}, "
                f"or {VALIDATE}"
            )
        )


def _target_size(target: Target, key: str, fact: str, out: Outcome) -> int | None:
    """A size the target's config.json must have for `fact` to be compared (None, noted, when it has none)."""
    value = integer(target.config.get(key))
    if value is None:
        out.not_compared.append(f"{fact}: the target's config.json has no {key}")
    return value


def _hidden(head: HeadRecord, target: Target, out: Outcome) -> None:
    width = _target_size(target, "hidden_size", HIDDEN, out)
    if width is None:
        return
    if other := next((f for f in head.hidden if f.value != width), None):
        out.findings.append(
            _refuse(
                f"{head.label} reads {other.value}-wide target hidden states ({other.source}) but the target's "
                f"hidden_size is {width}: it was trained on another model, cannot run on this one, and would accept "
                f"almost nothing if it did — {_other(head)}"
            )
        )
        return
    features = head.feature_inputs
    if features is not None and features.value % width:
        out.findings.append(
            _refuse(
                f"{head.label} fuses {features.value} target features ({features.source}), which is not a whole number "
                f"of the target's {width}-wide hidden states: it was trained on another model and cannot run on this "
                f"one — {_other(head)}"
            )
        )
        return
    out.checked.append(f"hidden size ({width})") if head.hidden or features else out.unrecorded.append(HIDDEN)


def _vocabulary(head: HeadRecord, target: Target, out: Outcome) -> None:
    size = _target_size(target, "vocab_size", VOCAB, out)
    if size is None:
        return
    if other := next((f for f in head.vocab if f.value != size), None):
        out.findings.append(
            _refuse(
                f"{head.label} was built for a vocabulary of {other.value} tokens ({other.source}) but the target's "
                f"vocab_size is {size}: its token ids name other tokens, so it cannot be paired with this target and "
                f"would accept almost nothing if it were — {_other(head)}"
            )
        )
        return
    out.checked.append(f"vocabulary ({size} tokens)") if head.vocab else out.unrecorded.append(VOCAB)


def _draft_vocabulary(head: HeadRecord, target: Target, out: Outcome) -> None:
    """EAGLE-3's own vocabulary: lm_head predicts draft_vocab_size tokens, d2t [V_d] maps draft index i to target
    id i + d2t[i], t2d [V] marks the target ids kept (SafeAILab/EAGLE eagle/traineagle3/cnets.py@cb7e084)."""
    size = _target_size(target, "vocab_size", DRAFT_VOCAB, out)
    draft, d2t, t2d = head.draft_vocab, head.d2t, head.t2d
    if size is None:
        return
    if draft is None and d2t is None and t2d is None:
        out.unrecorded.append(DRAFT_VOCAB)
        return
    if draft is not None and draft.value > size:
        out.findings.append(
            _refuse(
                f"{head.label} drafts in {draft.value} tokens ({draft.source}), more than the target's vocabulary of "
                f"{size}: it was built for another vocabulary — {_other(head)}"
            )
        )
        return
    if t2d is not None and t2d.value is not None and t2d.value != size:
        out.findings.append(
            _refuse(
                f"{head.label}'s t2d covers {t2d.value} target tokens ({t2d.source}) but the target's vocab_size is "
                f"{size}: its draft vocabulary was chosen from another vocabulary and d2t maps its drafts onto other "
                f"tokens, so almost nothing is accepted — {_other(head)}"
            )
        )
        return
    if draft is not None and d2t is not None:
        if d2t.value is None and draft.value != size:
            out.findings.append(
                _refuse(
                    f"{head.label} drafts in its own {draft.value}-token vocabulary ({draft.source}) but holds no d2t "
                    f"map onto the target's {size} ({d2t.source}): draft ids would be read as target ids and almost "
                    "nothing is accepted — use the head's complete files (they include d2t)"
                )
            )
            return
        if d2t.value is not None and d2t.value != draft.value:
            out.findings.append(
                _refuse(
                    f"{head.label}'s d2t has {d2t.value} entries ({d2t.source}) but its draft_vocab_size is "
                    f"{draft.value}: TensorRT-LLM loads d2t into a [{draft.value}] parameter and stops — the head's "
                    "config.json and weights do not belong together; fetch the head again"
                )
            )
            return
    shown = [
        f"draft_vocab_size {draft.value}" if draft else None,
        f"d2t {d2t.value}" if d2t and d2t.value else None,
        f"t2d {t2d.value}" if t2d and t2d.value else None,
    ]
    out.checked.append(f"draft-vocabulary maps ({', '.join(s for s in shown if s)})")


def _lm_head(head: HeadRecord, target: Target, out: Outcome) -> None:
    size, width = integer(target.config.get("vocab_size")), integer(target.config.get("hidden_size"))
    fact = head.lm_head
    draft = head.draft_vocab.value if head.draft_vocab is not None else None
    if fact.value == SHARED:
        if draft is not None and size is not None and draft != size:
            out.findings.append(
                _refuse(
                    f"{head.label} has no lm_head of its own ({fact.source}), so the runtime gives it the target's, "
                    f"whose {size} rows are not its {draft}-token draft vocabulary: it drafts garbage and accepts almost "
                    "nothing (sglang #27908: a head loaded without its lm_head accepted 0.00) — use the head's complete "
                    "files (they include lm_head.weight)"
                )
            )
            return
        own = head.own_hidden.value if head.own_hidden is not None else None
        if own is not None and width is not None and own != width:
            out.findings.append(
                _refuse(
                    f"{head.label} has no lm_head of its own ({fact.source}) and is {own} wide, but the target's "
                    f"lm_head it would share reads {width}-wide states: it cannot run on this target — use the head's "
                    f"complete files (they include lm_head.weight), or {_other(head)}"
                )
            )
            return
        out.checked.append("lm_head (shared with the target)")
        return
    rows, cols = fact.value
    if draft is not None and rows != draft:
        out.findings.append(
            _refuse(
                f"{head.label}'s lm_head predicts {rows} tokens ({fact.source}) but its draft_vocab_size is {draft}: "
                "the runtime builds the lm_head from draft_vocab_size and cannot load these weights — set "
                f"draft_vocab_size: {rows} in the head's config.json if the weights are right, else fetch the head again"
            )
        )
        return
    if draft is None and size is not None and rows != size:
        fix = (
            f"if it drafts in its own vocabulary, its config.json lacks draft_vocab_size: {rows}"
            if rows < size
            else _other(head)
        )
        out.findings.append(
            _refuse(
                f"{head.label}'s lm_head predicts {rows} tokens ({fact.source}) but the target's vocab_size is {size}: "
                f"its predictions name other tokens — {fix}"
            )
        )
        return
    own = head.own_hidden.value if head.own_hidden is not None else width
    if own is not None and cols != own:
        out.findings.append(
            _refuse(
                f"{head.label}'s lm_head reads {cols}-wide states ({fact.source}) but the head is {own} wide: its "
                "files do not belong together — fetch the head again"
            )
        )
        return
    out.checked.append(f"lm_head (its own, {rows} x {cols})")


def _tokenizer(head: HeadRecord, recipe: Recipe, out: Outcome) -> None:
    verdict = same_tokenizer(recipe.tokenizer_dir, head.tokenizer.value)
    if verdict is False:
        out.findings.append(
            _refuse(
                f"the draft's tokenizer in {recipe.speculation.checkpoint} differs from the target's; draft and target "
                "must share one vocabulary — use the target's tokenizer for both"
            )
        )
    elif verdict:
        out.checked.append("tokenizer (the target's)")
    else:
        out.not_compared.append(
            f"{TOKENIZER}: the draft and the target do not both have a tokenizer.json, or "
            "both a SentencePiece tokenizer.model, to compare"
        )


def _positions(head: HeadRecord, target: Target, out: Outcome) -> None:
    context = target.context
    if head.max_positions is not None:  # a draft model reads the whole sequence, as the target does
        fact = head.max_positions
        if context > fact.value:
            out.findings.append(
                _refuse(
                    f"the draft model holds {fact.value} positions ({fact.source}) but build.max_seq_len is {context}: "
                    "it reads the whole sequence and cannot go past its positions — lower build.max_seq_len to at most "
                    f"{fact.value}, or pick a draft with a longer context"
                )
            )
            return
        out.checked.append(f"position limit ({fact.value} >= build.max_seq_len {context})")
        return
    fact = head.trained_positions
    if context > fact.value:
        out.findings.append(
            _warn(
                f"{head.label} was trained on sequences of at most {fact.value} positions ({fact.source}) but "
                f"build.max_seq_len lets a request reach {context}: past position {fact.value} its acceptance falls "
                "until speculating is slower than not (sglang #6783), and a runtime that sizes the head's rotary table "
                f"by it fails outright (vLLM #48894) — keep build.max_seq_len at most {fact.value} or use a head "
                f"trained on longer sequences, or {VALIDATE} on prompts that long"
            )
        )
        return
    out.checked.append(f"position limit ({fact.value} >= build.max_seq_len {context})")


def _rope(head: HeadRecord, target: Target, out: Outcome) -> None:
    ours: Rope = head.rope.value
    theirs = rope_of(target.config, written_only=False)
    scaling = ours.type is not None and (ours.type, ours.factor) != (
        theirs.type,
        theirs.factor if ours.factor else None,
    )
    theta = ours.theta is not None and theirs.theta is not None and ours.theta != theirs.theta
    if scaling or theta:
        out.findings.append(
            _warn(
                f"{head.label} applies {ours} ({head.rope.source}) but the target uses {theirs}: it was trained for "
                "another target or another context length, and its acceptance drops, most on long prompts — "
                f"{_other(head)}, or {VALIDATE}"
            )
        )
        return
    if ours.theta is not None and theirs.theta is None:
        out.not_compared.append("rope theta: the target's config.json does not write rope_theta")
    out.checked.append(f"rope ({ours})")


def _dtype(head: HeadRecord, target: Target, out: Outcome) -> None:
    ours = head.dtype.value
    if ours in WIDE_RANGE and target.dtype == "float16":
        out.findings.append(
            _warn(
                f"{head.label}'s weights are {ours} ({head.dtype.source}) but the recipe runs the pair in float16 "
                "(model.dtype): values past float16's range (65504) overflow to inf, and a head trained in "
                f"{ours} is not made to stay inside it; its drafts, and acceptance, then collapse — set model.dtype: "
                f"bfloat16, or {VALIDATE}"
            )
        )
        return
    out.checked.append(f"dtype ({ours}, run as {target.dtype})")


def _quantization(head: HeadRecord, target: Target, out: Outcome) -> None:
    ours, theirs = head.quantization, target.quantization
    if ours.value == theirs.value:
        out.checked.append(f"quantization ({ours.value}, as the target)")
        return
    trained = (
        "records no quantization: heads are trained on the unquantized target's hidden states"
        if ours.value == "none"
        else f"records {ours.value} ({ours.source})"
    )
    runs = f"runs {theirs.value} ({theirs.source})" if theirs.value != "none" else "runs unquantized"
    out.findings.append(
        _warn(
            f"{head.label} {trained}, but the target {runs}: its hidden states and logits differ from those the head "
            "learned, and acceptance drops (vLLM #9534: an FP8 target under an fp16 head accepted nothing) — use a "
            f"head trained on the target as it runs, or {VALIDATE}"
        )
    )


def _compare(recipe: Recipe, head: HeadRecord, target: Target, head_dir: Path) -> Outcome:
    out = Outcome([], [], [], [])
    steps = (
        (ARCHITECTURE, head.architectures, lambda: _architecture(head, target, out)),
        (TARGET_NAME, head.target_name, lambda: _target_name(head, target, out, head_dir)),
        (HIDDEN, True, lambda: _hidden(head, target, out)),
        (VOCAB, True, lambda: _vocabulary(head, target, out)),
        (DRAFT_VOCAB, True, lambda: _draft_vocabulary(head, target, out)),
        (LM_HEAD, head.lm_head, lambda: _lm_head(head, target, out)),
        (TOKENIZER, head.tokenizer, lambda: _tokenizer(head, recipe, out)),
        (POSITIONS, head.max_positions or head.trained_positions, lambda: _positions(head, target, out)),
        (ROPE, head.rope, lambda: _rope(head, target, out)),
        (DTYPE, head.dtype, lambda: _dtype(head, target, out)),
        (QUANTIZATION, head.quantization, lambda: _quantization(head, target, out)),
    )
    for name, recorded, compare in steps:
        if name not in head.facts:
            continue
        if recorded is None:
            out.unrecorded.append(name)
            continue
        compare()
        if any(not f.warning for f in out.findings):
            break
    return out


def findings(recipe: Recipe, head: HeadRecord) -> Iterator[Finding]:
    """The refusals and warnings of pairing `head` with the recipe's target; `check` notes say what was checked."""
    target = target_of(recipe)
    if target is None:
        return
    out = _compare(recipe, head, target, Path(recipe.checkpoint_dir(recipe.speculation.checkpoint)))
    refusals = [f for f in out.findings if not f.warning]
    if refusals:
        yield refusals[0]
        return
    yield from out.findings
    recipe.notes.extend(notes(head, out))


def notes(head: HeadRecord, out: Outcome) -> list[str]:
    lines = []
    if out.checked:
        lines.append(f"head/target preflight of {head.label}: checked {', '.join(out.checked)}")
    if out.unrecorded:
        lines.append(
            f"head/target preflight: not recorded by {head.label}, so not checked: {', '.join(out.unrecorded)}"
        )
    lines += [f"head/target preflight: not compared: {why}" for why in out.not_compared]
    return lines
